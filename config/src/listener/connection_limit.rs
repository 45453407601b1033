//! The connection limit network filter (`envoy.filters.network.connection_limit`):
//! at most `max_connections` connections at once on the chain, the others
//! closed (after `delay`). `runtime_enabled` names a runtime key, which
//! courier has no layer behind: refused by the support table.

use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::extensions::filters::network::connection_limit::v3 as pb;
use std::time::Duration;

/// Fields of `ConnectionLimit` courier implements.
pub(crate) const SUPPORT: &[Support] = &[(
    "envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit",
    &["stat_prefix", "max_connections", "delay"],
)];

/// A validated `ConnectionLimit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimit {
    /// Stats under `connection_limit.<stat_prefix>.`.
    pub stat_prefix: String,
    /// The most connections open at once.
    pub max_connections: u64,
    /// How long a refused connection is held before it is closed (none: at once).
    pub delay: Option<Duration>,
}

/// Translates a `ConnectionLimit` with Envoy's checks.
pub fn translate(
    m: &pb::ConnectionLimit,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<ConnectionLimit> {
    let mut ok = true;
    if m.stat_prefix.is_empty() {
        ctx.error(
            &path.field("stat_prefix"),
            "value length must be at least 1 characters",
        );
        ok = false;
    }
    let max_connections = match m.max_connections.as_ref().map(|v| v.value) {
        Some(n) if n >= 1 => n,
        Some(_) => {
            ctx.error(
                &path.field("max_connections"),
                "value must be greater than or equal to 1",
            );
            ok = false;
            0
        }
        None => {
            ctx.error(&path.field("max_connections"), "is required");
            ok = false;
            0
        }
    };
    let delay = core::optional_timeout(m.delay.as_ref(), None, &path.field("delay"), ctx);
    ok.then(|| ConnectionLimit {
        stat_prefix: m.stat_prefix.clone(),
        max_connections,
        delay,
    })
}
