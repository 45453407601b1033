//! `envoy.filters.network.sni_dynamic_forward_proxy`: resolves the TLS SNI of
//! a connection through the shared DNS cache before the TCP proxy connects to
//! its dynamic forward proxy cluster.

use crate::ctx::Ctx;
use crate::dns_cache::{self, DnsCacheConfig};
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::extensions::filters::network::sni_dynamic_forward_proxy::v3 as pb;

/// The fields courier implements (`save_upstream_address` is refused by its absence).
pub(crate) const SUPPORT: &[Support] = &[(
    "envoy.extensions.filters.network.sni_dynamic_forward_proxy.v3.FilterConfig",
    &["dns_cache_config", "port_value"],
)];

/// A validated SNI dynamic forward proxy filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SniDynamicForwardProxy {
    /// The DNS cache the SNI is resolved through (the cluster's, by name).
    pub cache: DnsCacheConfig,
    /// `port_value`: the upstream port.
    pub port: u16,
}

/// Translates a `FilterConfig`.
pub fn translate(
    m: &pb::FilterConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<SniDynamicForwardProxy> {
    let cp = path.field("dns_cache_config");
    let Some(d) = m.dns_cache_config.as_ref() else {
        ctx.error(&cp, "is required");
        return None;
    };
    let cache = dns_cache::translate(d, &cp, ctx);
    let pb::filter_config::PortSpecifier::PortValue(p) = m
        .port_specifier
        .unwrap_or(pb::filter_config::PortSpecifier::PortValue(0));
    // PGV: `lte: 65535`.
    let Ok(port) = u16::try_from(p) else {
        ctx.error(&path.field("port_value"), "must be at most 65535");
        return None;
    };
    Some(SniDynamicForwardProxy {
        cache: cache?,
        port,
    })
}
