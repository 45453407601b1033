//! HTTP filter configs (jwt_authn, ext_authz, rbac, router) and their per-route configs.

use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use envoy_types::pb::google::protobuf::Any;

/// Fields of the HTTP filter messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[];

/// A validated HTTP filter.
#[derive(Debug, Clone)]
pub struct HttpFilter {
    /// The filter's name (the key of per-route configs).
    pub name: String,
}

/// A validated per-route filter config.
#[derive(Debug, Clone)]
pub struct PerRouteConfig {}

/// Translates one `HttpFilter`.
pub fn http_filter(f: &hcm::HttpFilter, path: &Path<'_>, ctx: &mut Ctx) -> Option<HttpFilter> {
    ctx.unsupported(path, format!("HTTP filter {}", f.name));
    None
}

/// Translates one `typed_per_filter_config` entry.
pub fn per_route_config(
    name: &str,
    _any: &Any,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<PerRouteConfig> {
    ctx.unsupported(path, format!("per-route config for {name}"));
    None
}
