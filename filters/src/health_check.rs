//! The health check HTTP filter (`envoy.filters.http.health_check`), as Envoy's
//! `HealthCheckFilter`: a request whose headers all match is a health check.
//! Without `pass_through_mode` the filter answers it — `200` (`health_check_ok`),
//! or `503` with flag `LH` (`health_check_failed`) while the server fails its
//! health checks (admin `/healthcheck/fail`); in pass-through mode it goes on to
//! the upstream unless the server is failing. A health check's response names
//! the local cluster (`x-envoy-upstream-healthchecked-cluster`); while failing,
//! every response carries `x-envoy-immediate-health-check-fail: true`.
//! Synchronous: never builds a future. No stats (Envoy's filter has none).

use crate::chain::{Decision, HttpFilter, LocalReply};
use crate::request::RequestState;
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::health_check::HealthCheck;
use http::{HeaderMap, HeaderValue, StatusCode};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the server fails its health checks (Envoy's server-wide
/// `healthCheckFailed`, set by admin `/healthcheck/fail`, cleared by `/healthcheck/ok`).
static FAILING: AtomicBool = AtomicBool::new(false);

/// The local cluster's name (Envoy's `local_info.clusterName()`: the node's
/// `cluster`, or `--service-cluster`), set once at start.
static LOCAL_CLUSTER: OnceLock<HeaderValue> = OnceLock::new();

/// Sets whether the server fails its health checks.
pub fn set_failing(failing: bool) {
    FAILING.store(failing, Ordering::Relaxed);
}

/// Whether the server fails its health checks.
pub fn failing() -> bool {
    FAILING.load(Ordering::Relaxed)
}

/// Sets the local cluster name health-check responses carry (the first call wins:
/// the node is fixed for the process's life).
pub fn set_local_cluster(name: &str) {
    let value = HeaderValue::from_str(name).unwrap_or(HeaderValue::from_static(""));
    let _ = LOCAL_CLUSTER.set(value);
}

/// Marks a request as a health check in its filter state (read by the response
/// hook, and by access logs' `not_health_check_filter`).
#[derive(Debug, Clone, Copy)]
pub struct HealthCheckRequest;

/// The health check filter.
#[derive(Debug)]
pub struct HealthCheckFilter {
    config: HealthCheck,
}

impl HealthCheckFilter {
    /// A filter with `config`.
    pub fn new(config: HealthCheck) -> Self {
        Self { config }
    }
}

const HEALTHCHECKED_CLUSTER: &str = "x-envoy-upstream-healthchecked-cluster";
const IMMEDIATE_FAIL: &str = "x-envoy-immediate-health-check-fail";

impl HttpFilter for HealthCheckFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        _per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        let matched = self
            .config
            .headers
            .iter()
            .all(|h| h.matches(req.header(&h.name).as_deref()));
        if !matched {
            return Decision::Continue;
        }
        req.filter_state.insert(HealthCheckRequest);
        let failing = failing();
        if self.config.pass_through_mode && !failing {
            return Decision::Continue;
        }
        // Envoy answers once the request has ended; its body (if any) is not
        // needed for the answer, which the connection manager sends after the
        // request as Envoy does.
        Decision::Respond(if failing {
            LocalReply {
                response_flag: Some("LH"),
                ..LocalReply::new(StatusCode::SERVICE_UNAVAILABLE, "", "health_check_failed")
            }
        } else {
            LocalReply::new(StatusCode::OK, "", "health_check_ok")
        })
    }

    fn encode_headers(&self, req: &RequestState<'_>, headers: &mut HeaderMap) {
        if req.filter_state.get::<HealthCheckRequest>().is_some() {
            let cluster = LOCAL_CLUSTER
                .get()
                .cloned()
                .unwrap_or(HeaderValue::from_static(""));
            headers.insert(HEALTHCHECKED_CLUSTER, cluster);
        }
        // Envoy 1.40 marks every response while failing, the health check's
        // own `503` included (observed against it: health_check_filter_differential).
        if failing() {
            headers.insert(IMMEDIATE_FAIL, HeaderValue::from_static("true"));
        }
    }
}

#[cfg(test)]
#[path = "health_check_tests.rs"]
mod tests;
