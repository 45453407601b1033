//! Route configurations: virtual hosts, routes, matches and actions, compiled for matching.

use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::route::v3 as pb;

/// Fields of the route messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[("envoy.config.route.v3.RouteConfiguration", &["name"])];

/// A validated route configuration.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// Name (RDS resource name).
    pub name: String,
}

/// Translates a `RouteConfiguration`.
pub fn translate(
    rc: &pb::RouteConfiguration,
    _path: &Path<'_>,
    _ctx: &mut Ctx,
) -> Option<RouteConfig> {
    Some(RouteConfig {
        name: rc.name.clone(),
    })
}
