//! HTTP/2 `connection_keepalive` (`KeepaliveSettings`) on upstream connections.

use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::core::v3 as cpb;
use std::time::Duration;

/// Envoy's default `interval_jitter` (percent).
pub const DEFAULT_JITTER_PERCENT: f64 = 15.0;

/// `KeepaliveSettings`: a PING every `interval` (plus jitter); the connection
/// is closed when its ACK does not come within `timeout`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Http2Keepalive {
    /// Time between PINGs; `None`: no periodic PINGs (Envoy then pings only
    /// for `connection_idle_interval`, which courier refuses).
    pub interval: Option<Duration>,
    /// How long an ACK may take.
    pub timeout: Duration,
    /// Up to this percentage of `interval` added at random (default 15).
    pub interval_jitter_percent: f64,
}

/// Translates `connection_keepalive` (PGV: `interval` and `timeout` at least
/// 1 ms, `timeout` required; `interval_jitter` a percentage).
pub(super) fn translate(
    k: &cpb::KeepaliveSettings,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Http2Keepalive> {
    let at_least_1ms =
        |d: Option<&envoy_types::pb::google::protobuf::Duration>, field: &str, ctx: &mut Ctx| {
            let p = path.field(field);
            let d = core::duration(d?, &p, ctx)?;
            if d < Duration::from_millis(1) {
                ctx.error(&p, "must be at least 1ms");
                return None;
            }
            Some(d)
        };
    let interval = at_least_1ms(k.interval.as_ref(), "interval", ctx);
    if k.timeout.is_none() {
        ctx.error(&path.field("timeout"), "is required");
    }
    let timeout = at_least_1ms(k.timeout.as_ref(), "timeout", ctx)?;
    let interval_jitter_percent = match &k.interval_jitter {
        None => DEFAULT_JITTER_PERCENT,
        Some(p) if (0.0..=100.0).contains(&p.value) => p.value,
        Some(p) => {
            ctx.error(
                &path.field("interval_jitter"),
                format!("{} is not a percentage (0 to 100)", p.value),
            );
            DEFAULT_JITTER_PERCENT
        }
    };
    Some(Http2Keepalive {
        interval,
        timeout,
        interval_jitter_percent,
    })
}
