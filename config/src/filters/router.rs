//! The router filter's own config (`envoy.extensions.filters.http.router.v3.Router`).
//!
//! Accepted: `dynamic_stats`, `suppress_envoy_headers` (the connection manager
//! keeps it: the router then adds none of its own `x-envoy-*` headers). Refused (left out of the support
//! table, so reported at their path): `start_child_span` (tracing), `upstream_log` and
//! `upstream_log_options` (upstream access logs), `strict_check_headers`,
//! `respect_expected_rq_timeout` (x-envoy-expected-rq-timeout-ms), and
//! `suppress_grpc_request_failure_code_stats`, `upstream_http_filters`,
//! `reject_connect_request_early_data`, none of which an issue implements.

use crate::core;
use envoy_types::pb::envoy::extensions::filters::http::router::v3 as pb;

/// A validated router filter config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Router {
    /// Per-request stats by upstream response code class and the like (default true).
    pub dynamic_stats: bool,
    /// Do not add `x-envoy-*` headers to upstream requests or client responses (default false).
    pub suppress_envoy_headers: bool,
}

impl Default for Router {
    fn default() -> Self {
        Self {
            dynamic_stats: true,
            suppress_envoy_headers: false,
        }
    }
}

/// Translates a `Router`.
pub fn translate(r: &pb::Router) -> Router {
    Router {
        dynamic_stats: core::bool_or(r.dynamic_stats.as_ref(), true),
        suppress_envoy_headers: r.suppress_envoy_headers,
    }
}
