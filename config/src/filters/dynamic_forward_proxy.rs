//! `envoy.filters.http.dynamic_forward_proxy`: resolves a dynamic forward
//! proxy cluster's host before the router goes on, through the shared DNS
//! cache, and per route rewrites the host first.

use crate::ctx::Ctx;
use crate::dns_cache::{self, DnsCacheConfig};
use crate::path::Path;
use crate::support::{ALL, Support};
use envoy_types::pb::envoy::extensions::filters::http::dynamic_forward_proxy::v3 as pb;

/// The fields courier implements: `save_upstream_address`,
/// `allow_dynamic_host_from_filter_state` and `sub_cluster_config` are
/// refused by their absence.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.extensions.filters.http.dynamic_forward_proxy.v3.FilterConfig",
        &["dns_cache_config"],
    ),
    (
        "envoy.extensions.filters.http.dynamic_forward_proxy.v3.PerRouteConfig",
        ALL,
    ),
];

/// A validated `FilterConfig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicForwardProxy {
    /// The DNS cache hosts are resolved through (the cluster's, by name).
    pub cache: DnsCacheConfig,
}

/// A validated `PerRouteConfig`: the host the request is sent to instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRewrite {
    /// `host_rewrite_literal`.
    Literal(String),
    /// `host_rewrite_header` (lower-cased): the first value of this header,
    /// when present.
    Header(String),
}

/// Translates a `FilterConfig`.
pub fn translate(
    m: &pb::FilterConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<DynamicForwardProxy> {
    use pb::filter_config::ImplementationSpecifier as I;
    let cp = path.field("dns_cache_config");
    match &m.implementation_specifier {
        Some(I::DnsCacheConfig(d)) => Some(DynamicForwardProxy {
            cache: dns_cache::translate(d, &cp, ctx)?,
        }),
        // Refused by the support table.
        Some(I::SubClusterConfig(_)) => None,
        None => {
            ctx.error(&cp, "is required (sub_cluster_config is not supported)");
            None
        }
    }
}

/// Translates a `PerRouteConfig`; one without a rewrite rewrites nothing.
pub fn per_route(
    m: &pb::PerRouteConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Option<HostRewrite>> {
    use pb::per_route_config::HostRewriteSpecifier as H;
    Some(match &m.host_rewrite_specifier {
        None => None,
        // Envoy sets an empty literal as no rewrite.
        Some(H::HostRewriteLiteral(l)) if l.is_empty() => None,
        Some(H::HostRewriteLiteral(l)) => Some(HostRewrite::Literal(l.clone())),
        Some(H::HostRewriteHeader(h)) if h.is_empty() => None,
        Some(H::HostRewriteHeader(h)) if h.bytes().all(super::ext_authz::is_header_name_byte) => {
            Some(HostRewrite::Header(h.to_ascii_lowercase()))
        }
        Some(H::HostRewriteHeader(h)) => {
            ctx.error(
                &path.field("host_rewrite_header"),
                format!("invalid header name {h:?}"),
            );
            return None;
        }
    })
}
