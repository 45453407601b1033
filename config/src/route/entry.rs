//! One `Route`: its match, its action and its per-route extras.

use super::action::{self, DirectResponse, RouteAction};
use super::headers::{self, HeaderMutations};
use super::redirect::{self, RedirectAction};
use super::route_match::{self, RouteMatch};
use super::{PerFilterConfigs, Settings, per_filter_configs};
use crate::core::{self, MetadataMap};
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::route::v3 as pb;
use envoy_types::pb::google::protobuf::{UInt32Value, UInt64Value};

/// What a matched route does.
#[derive(Debug, Clone)]
pub enum Action {
    /// Forward upstream (boxed: it is much larger than the other actions).
    Route(Box<RouteAction>),
    /// Answer with a redirect.
    Redirect(RedirectAction),
    /// Answer directly.
    DirectResponse(DirectResponse),
}

/// A validated route.
#[derive(Debug, Clone)]
pub struct Route {
    /// Name (`%ROUTE_NAME%`), possibly empty.
    pub name: String,
    /// When the route applies.
    pub route_match: RouteMatch,
    /// What it does.
    pub action: Action,
    /// Request header mutations at route level.
    pub request_headers: HeaderMutations,
    /// Response header mutations at route level.
    pub response_headers: HeaderMutations,
    /// Per-filter configs at route level.
    pub typed_per_filter_config: PerFilterConfigs,
    /// Route metadata (`filter_metadata`).
    pub metadata: MetadataMap,
    /// Request body buffer limit for this route (retries, filters), overriding the
    /// virtual host's and the listener's.
    pub request_body_buffer_limit: Option<u64>,
    /// `tracing`: the route's sampling and tags, used when the connection manager traces.
    pub tracing: Option<std::sync::Arc<crate::tracing::RouteTracing>>,
    /// `stat_prefix`: the route's own upstream stats
    /// (`vhost.<virtual host>.route.<stat_prefix>.*`), when set.
    pub stat_prefix: Option<String>,
}

impl Route {
    /// The route action, when the route forwards upstream.
    pub fn route_action(&self) -> Option<&RouteAction> {
        match &self.action {
            Action::Route(ra) => Some(ra),
            _ => None,
        }
    }
}

/// The body buffer limit: the newer `request_body_buffer_limit` wins over the
/// deprecated `per_request_buffer_limit_bytes`, as in Envoy.
pub(crate) fn buffer_limit(old: Option<&UInt32Value>, new: Option<&UInt64Value>) -> Option<u64> {
    new.map(|v| v.value).or(old.map(|v| u64::from(v.value)))
}

/// Translates a `Route`. `None` when it cannot be built (errors reported, or a
/// refused action the support walker reports).
pub(crate) fn route(
    r: &pb::Route,
    path: &Path<'_>,
    settings: &Settings,
    ctx: &mut Ctx,
) -> Option<Route> {
    use pb::route::Action as A;
    let mp = path.field("match");
    let route_match = match r.r#match.as_ref() {
        Some(m) => route_match::route_match(m, &mp, ctx),
        None => {
            ctx.error(&mp, "is required");
            None
        }
    };
    let action = match &r.action {
        Some(A::Route(ra)) => action::route_action(ra, &path.field("route"), settings, ctx)
            .map(|ra| Action::Route(Box::new(ra))),
        Some(A::Redirect(rd)) => {
            redirect::redirect(rd, &path.field("redirect"), ctx).map(Action::Redirect)
        }
        Some(A::DirectResponse(dr)) => {
            action::direct_response(dr, &path.field("direct_response"), settings, ctx)
                .map(Action::DirectResponse)
        }
        // Refused by the support walker.
        Some(A::FilterAction(_) | A::NonForwardingAction(_)) => None,
        None => {
            ctx.error(
                path,
                "one of route, redirect or direct_response is required",
            );
            None
        }
    };
    let (request_headers, response_headers) = headers::both(
        path,
        (&r.request_headers_to_add, &r.request_headers_to_remove),
        (&r.response_headers_to_add, &r.response_headers_to_remove),
        ctx,
    );
    let typed_per_filter_config = per_filter_configs(&r.typed_per_filter_config, path, ctx);
    Some(Route {
        name: r.name.clone(),
        route_match: route_match?,
        action: action?,
        request_headers,
        response_headers,
        typed_per_filter_config,
        metadata: core::metadata(r.metadata.as_ref()),
        request_body_buffer_limit: buffer_limit(
            r.per_request_buffer_limit_bytes.as_ref(),
            r.request_body_buffer_limit.as_ref(),
        ),
        tracing: r
            .tracing
            .as_ref()
            .map(|t| std::sync::Arc::new(crate::tracing::route(t, &path.field("tracing"), ctx))),
        stat_prefix: (!r.stat_prefix.is_empty()).then(|| r.stat_prefix.clone()),
    })
}
