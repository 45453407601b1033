//! Route configurations: virtual hosts, routes, matches and actions, compiled for matching.
//!
//! A [`RouteConfig`] picks a [`VirtualHost`] by host through a domain index
//! ([`RouteConfig::select_virtual_host`]), and a virtual host picks a [`Route`]
//! through a route index ([`VirtualHost::select_route`]); both keep Envoy's
//! order and neither tests every entry's strings.

pub mod action;
mod back_off;
pub mod entry;
pub mod hash_policy;
pub mod headers;
pub mod mirror;
pub mod redirect;
pub mod retry;
pub mod rewrite;
pub mod route_match;
mod table;
pub mod vhost;

pub use action::{
    BodyFormat, BodyTemplate, ClusterSpecifier, ClusterWeight, DirectResponse, HostRewrite,
    MaxStreamDuration, PathRewrite, RouteAction, RouteUpgrade, RoutingPriority, WeightedClusters,
};
pub use entry::{Action, Route};
pub use headers::{AppendAction, HeaderMutations, HeaderToAdd};
pub use redirect::{RedirectAction, RedirectPath};
pub use retry::{
    HedgePolicy, RateLimitedBackOff, ResetFormat, ResetHeader, RetryBackOff, RetryHostPredicate,
    RetryOn, RetryPolicy,
};
pub use rewrite::RegexRewrite;
pub use route_match::{
    PathMatch, QueryParameterMatcher, QueryTest, RouteMatch, RouteRequest, query_parameter_matcher,
};
pub use vhost::VirtualHost;

use crate::ctx::Ctx;
use crate::filters::{self, PerRouteConfig};
use crate::path::Path;
use crate::support::{ALL, Support};
use envoy_types::pb::envoy::config::route::v3 as pb;
use envoy_types::pb::google::protobuf::Any;
use std::collections::{BTreeMap, HashMap};
use vhost::{DomainIndex, Duplicate};

/// Fields of the route messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.config.route.v3.RouteConfiguration",
        &[
            "name",
            "virtual_hosts",
            "internal_only_headers",
            "response_headers_to_add",
            "response_headers_to_remove",
            "request_headers_to_add",
            "request_headers_to_remove",
            "most_specific_header_mutations_wins",
            "validate_clusters",
            "max_direct_response_body_size_bytes",
            "ignore_port_in_host_matching",
            "typed_per_filter_config",
        ],
    ),
    (
        "envoy.config.route.v3.VirtualHost",
        &[
            "name",
            "domains",
            "routes",
            "request_headers_to_add",
            "request_headers_to_remove",
            "response_headers_to_add",
            "response_headers_to_remove",
            "typed_per_filter_config",
            "include_request_attempt_count",
            "include_attempt_count_in_response",
            "retry_policy",
            "hedge_policy",
            "per_request_buffer_limit_bytes",
            "request_body_buffer_limit",
            "metadata",
            "rate_limits",
            "virtual_clusters",
        ],
    ),
    ("envoy.config.route.v3.VirtualCluster", &["name", "headers"]),
    (
        "envoy.config.route.v3.Route",
        &[
            "name",
            "match",
            "route",
            "redirect",
            "direct_response",
            "metadata",
            "typed_per_filter_config",
            "request_headers_to_add",
            "request_headers_to_remove",
            "response_headers_to_add",
            "response_headers_to_remove",
            "per_request_buffer_limit_bytes",
            "request_body_buffer_limit",
            "tracing",
            "stat_prefix",
        ],
    ),
    (
        "envoy.config.route.v3.RouteMatch",
        &[
            "prefix",
            "path",
            "safe_regex",
            "path_separated_prefix",
            "case_sensitive",
            "headers",
            "query_parameters",
            "grpc",
            "dynamic_metadata",
        ],
    ),
    (
        "envoy.config.route.v3.RouteMatch.GrpcRouteMatchOptions",
        ALL,
    ),
    ("envoy.config.route.v3.QueryParameterMatcher", ALL),
    (
        "envoy.config.route.v3.RouteAction",
        &[
            "cluster",
            "cluster_header",
            "weighted_clusters",
            "cluster_not_found_response_code",
            "prefix_rewrite",
            "regex_rewrite",
            "host_rewrite_literal",
            "auto_host_rewrite",
            "host_rewrite_header",
            "host_rewrite_path_regex",
            "append_x_forwarded_host",
            "timeout",
            "idle_timeout",
            "retry_policy",
            "hedge_policy",
            "priority",
            "max_stream_duration",
            "upgrade_configs",
            "request_mirror_policies",
            "rate_limits",
            "include_vh_rate_limits",
            "hash_policy",
        ],
    ),
    ("envoy.config.route.v3.RouteAction.HashPolicy", ALL),
    ("envoy.config.route.v3.RouteAction.HashPolicy.Header", ALL),
    ("envoy.config.route.v3.RouteAction.HashPolicy.Cookie", ALL),
    (
        "envoy.config.route.v3.RouteAction.HashPolicy.CookieAttribute",
        ALL,
    ),
    (
        "envoy.config.route.v3.RouteAction.HashPolicy.ConnectionProperties",
        ALL,
    ),
    (
        "envoy.config.route.v3.RouteAction.HashPolicy.QueryParameter",
        ALL,
    ),
    (
        "envoy.config.route.v3.RouteAction.HashPolicy.FilterState",
        ALL,
    ),
    (
        "envoy.config.route.v3.RouteAction.RequestMirrorPolicy",
        &[
            "cluster",
            "runtime_fraction",
            "disable_shadow_host_suffix_append",
        ],
    ),
    (
        // `connect_config` (CONNECT termination) is refused by its absence.
        "envoy.config.route.v3.RouteAction.UpgradeConfig",
        &["upgrade_type", "enabled"],
    ),
    (
        "envoy.config.route.v3.RouteAction.MaxStreamDuration",
        &[
            "max_stream_duration",
            "grpc_timeout_header_max",
            "grpc_timeout_header_offset",
        ],
    ),
    (
        "envoy.config.route.v3.WeightedCluster",
        &["clusters", "total_weight", "use_hash_policy"],
    ),
    (
        "envoy.config.route.v3.WeightedCluster.ClusterWeight",
        &[
            "name",
            "weight",
            "request_headers_to_add",
            "request_headers_to_remove",
            "response_headers_to_add",
            "response_headers_to_remove",
            "host_rewrite_literal",
            "typed_per_filter_config",
        ],
    ),
    (
        "envoy.config.route.v3.RedirectAction",
        &[
            "https_redirect",
            "scheme_redirect",
            "host_redirect",
            "port_redirect",
            "path_redirect",
            "prefix_rewrite",
            "regex_rewrite",
            "response_code",
            "strip_query",
        ],
    ),
    (
        "envoy.config.route.v3.DirectResponseAction",
        &["status", "body", "body_format"],
    ),
    (
        "envoy.config.route.v3.RetryPolicy",
        &[
            "retry_on",
            "num_retries",
            "per_try_timeout",
            "per_try_idle_timeout",
            "retry_host_predicate",
            "retry_priority",
            "host_selection_retry_max_attempts",
            "retriable_status_codes",
            "retry_back_off",
            "rate_limited_retry_back_off",
            "retriable_headers",
            "retriable_request_headers",
        ],
    ),
    (
        "envoy.config.route.v3.RetryPolicy.RetryHostPredicate",
        &["name", "typed_config"],
    ),
    (
        "envoy.config.route.v3.RetryPolicy.RetryPriority",
        &["name", "typed_config"],
    ),
    (
        "envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig",
        ALL,
    ),
    ("envoy.config.route.v3.RetryPolicy.RetryBackOff", ALL),
    (
        "envoy.config.route.v3.RetryPolicy.RateLimitedRetryBackOff",
        ALL,
    ),
    ("envoy.config.route.v3.RetryPolicy.ResetHeader", ALL),
    (
        "envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate",
        ALL,
    ),
    ("envoy.config.route.v3.HedgePolicy", ALL),
    (
        "envoy.config.core.v3.HeaderValueOption",
        &["header", "append", "append_action", "keep_empty_value"],
    ),
    (
        "envoy.config.core.v3.HeaderValue",
        &["key", "value", "raw_value"],
    ),
];

/// Per-filter configs of one level, keyed by HTTP filter name.
pub type PerFilterConfigs = BTreeMap<String, PerRouteConfig>;

/// A validated route configuration.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// Name (RDS resource name).
    pub name: String,
    /// Virtual hosts, in config order.
    pub virtual_hosts: Vec<VirtualHost>,
    /// Boxed: the index is large and a route config travels inside enums.
    domains: Box<DomainIndex>,
    /// Headers removed from requests that are not internal (lower-cased).
    pub internal_only_headers: Vec<String>,
    /// Request header mutations at route-config level.
    pub request_headers: HeaderMutations,
    /// Response header mutations at route-config level.
    pub response_headers: HeaderMutations,
    /// Whether routes' clusters were checked against the known clusters
    /// (default: true inline in a connection manager, false over RDS).
    pub validate_clusters: bool,
    /// Largest direct-response body (default 4096).
    pub max_direct_response_body_size_bytes: u32,
    /// Drop the port of the host before picking a virtual host.
    pub ignore_port_in_host_matching: bool,
    /// Apply header mutations from the most specific level last (so it wins).
    pub most_specific_header_mutations_wins: bool,
    /// Per-filter configs at route-config level.
    pub typed_per_filter_config: PerFilterConfigs,
}

impl RouteConfig {
    /// The virtual host for `host` (the request's `:authority`), in Envoy's order:
    /// exact, longest suffix wildcard, longest prefix wildcard, `*`.
    pub fn select_virtual_host(&self, host: &str) -> Option<&VirtualHost> {
        self.domains
            .select(host, self.ignore_port_in_host_matching)
            .and_then(|i| self.virtual_hosts.get(i))
    }
}

/// Settings of the route config that its parts need while translating.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) validate_clusters: bool,
    pub(crate) max_direct_response_body_size: u32,
}

/// Translates a `RouteConfiguration` received over RDS (`validate_clusters`
/// defaults to false).
pub fn translate(
    rc: &pb::RouteConfiguration,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<RouteConfig> {
    translate_with(rc, path, false, ctx)
}

/// Translates a `RouteConfiguration` written inline in a connection manager
/// (`validate_clusters` defaults to true).
pub fn translate_inline(
    rc: &pb::RouteConfiguration,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<RouteConfig> {
    translate_with(rc, path, true, ctx)
}

fn translate_with(
    rc: &pb::RouteConfiguration,
    path: &Path<'_>,
    validate_default: bool,
    ctx: &mut Ctx,
) -> Option<RouteConfig> {
    let settings = Settings {
        validate_clusters: rc
            .validate_clusters
            .as_ref()
            .map_or(validate_default, |b| b.value),
        max_direct_response_body_size: crate::core::u32_or(
            rc.max_direct_response_body_size_bytes.as_ref(),
            4096,
        ),
    };
    let vp = path.field("virtual_hosts");
    let mut virtual_hosts = Vec::with_capacity(rc.virtual_hosts.len());
    let mut domains = DomainIndex::default();
    for (i, vh) in rc.virtual_hosts.iter().enumerate() {
        let p = vp.index(i);
        let host = vhost::virtual_host(vh, &p, &settings, ctx);
        let dp = p.field("domains");
        for (j, d) in host.domains.iter().enumerate() {
            match domains.insert(d, i) {
                Ok(()) => {}
                Err(Duplicate::Wildcard) => ctx.error(
                    &dp.index(j),
                    format!(
                        "Only a single wildcard domain is permitted in route {}",
                        rc.name
                    ),
                ),
                Err(Duplicate::Domain) => ctx.error(
                    &dp.index(j),
                    format!(
                        "Only unique values for domains are permitted. Duplicate entry of domain {d} in route {}",
                        rc.name
                    ),
                ),
            }
        }
        virtual_hosts.push(host);
    }
    let ip = path.field("internal_only_headers");
    let mut internal_only_headers = Vec::with_capacity(rc.internal_only_headers.len());
    for (i, h) in rc.internal_only_headers.iter().enumerate() {
        if headers::valid_name_chars(h) {
            internal_only_headers.push(h.to_ascii_lowercase());
        } else {
            ctx.error(&ip.index(i), "must not contain NUL, CR or LF");
        }
    }
    let (request_headers, response_headers) = headers::both(
        path,
        (&rc.request_headers_to_add, &rc.request_headers_to_remove),
        (&rc.response_headers_to_add, &rc.response_headers_to_remove),
        ctx,
    );
    Some(RouteConfig {
        name: rc.name.clone(),
        virtual_hosts,
        domains: Box::new(domains),
        internal_only_headers,
        request_headers,
        response_headers,
        validate_clusters: settings.validate_clusters,
        max_direct_response_body_size_bytes: settings.max_direct_response_body_size,
        ignore_port_in_host_matching: rc.ignore_port_in_host_matching,
        most_specific_header_mutations_wins: rc.most_specific_header_mutations_wins,
        typed_per_filter_config: per_filter_configs(&rc.typed_per_filter_config, path, ctx),
    })
}

/// Translates a `typed_per_filter_config` map found at `path` (the message that
/// holds it), in name order so errors come out in a stable order.
pub(crate) fn per_filter_configs(
    map: &HashMap<String, Any>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> PerFilterConfigs {
    if map.is_empty() {
        return PerFilterConfigs::new();
    }
    let fp = path.field("typed_per_filter_config");
    let mut names: Vec<&String> = map.keys().collect();
    names.sort();
    let mut out = PerFilterConfigs::new();
    for name in names {
        let Some(any) = map.get(name) else { continue };
        if let Some(c) = filters::per_route_config(name, any, &fp.key(name), ctx) {
            out.insert(name.clone(), c);
        }
    }
    out
}

#[cfg(test)]
mod tests;
