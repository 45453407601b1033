//! The global rate limit filter (`envoy.filters.http.ratelimit`): the request's descriptors
//! go to a rate limit service (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`)
//! which says OK or OVER_LIMIT.
//!
//! Per request: a request of the wrong `request_type` (by `x-envoy-internal`) is left
//! alone; the descriptors come from the route's `RateLimitPerRoute.rate_limits`, else the
//! filter's `rate_limits`, else the route's (and virtual host's) of the filter's `stage`; none, or a route without a target cluster, means no call. The
//! call is bounded by `timeout` (20 ms). OK: the request goes on, the service's
//! `request_headers_to_add` set upstream and its `response_headers_to_add` (and, when
//! enabled, `x-ratelimit-*`) added to the response. OVER_LIMIT: a local reply with
//! `rate_limited_status` (429), the service's `raw_body`, those headers,
//! `x-envoy-ratelimited: true` (unless disabled) and the `RL` flag. A failed call (transport,
//! timeout, a non-OK gRPC status, an UNKNOWN code): with `failure_mode_deny` a 500 with the
//! `RLSE` flag, else the request goes on (`failure_mode_allowed`). The outcomes are counted
//! under `cluster.<route's target cluster>.ratelimit.{ok,over_limit,error,failure_mode_allowed}`,
//! as Envoy counts them, each created on first use. A descriptor carries its
//! `hits_addend`; `apply_on_stream_done` descriptors go out when the stream is done
//! ([`stream_done`]).

pub mod headers;
pub mod stream_done;

use crate::chain::{BodyEncoder, Decision, HttpFilter, LocalReply, ResponseHead, Verdict};
use crate::ext_authz::cluster_stats::{ClusterAuthzStats, PerCluster};
use crate::local_ratelimit::descriptors;
use crate::request::RequestState;
use courier_config::config_source::GrpcService;
use courier_config::filters::local_ratelimit::VhRateLimits;
use courier_config::filters::rate_limit_actions::RateLimitPolicy;
use courier_config::filters::ratelimit::RequestType;
use courier_config::filters::{PerRouteFilterConfig, RateLimitFilter};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use http::{HeaderMap, HeaderValue, StatusCode};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use stream_done::{Armed, ArmedCall, OnStreamDone};

/// A call's answer (`Err`: the call failed).
pub type RlsFuture<'a> =
    Pin<Box<dyn Future<Output = Result<RateLimitResponse, String>> + Send + 'a>>;

/// How calls reach the rate limit service; implemented by the proxy over its clusters.
pub trait RateLimitTransport: Send + Sync {
    /// Calls `ShouldRateLimit` on `service`; `timeout` goes to the server as
    /// `grpc-timeout` (the filter bounds the call itself). A non-OK gRPC status is an `Err`.
    fn should_rate_limit<'a>(
        &'a self,
        service: &'a GrpcService,
        timeout: Option<Duration>,
        request: RateLimitRequest,
    ) -> RlsFuture<'a>;
}

/// The filter.
pub struct RateLimitHttpFilter {
    config: Arc<RateLimitFilter>,
    transport: Arc<dyn RateLimitTransport>,
    clusters: Arc<PerCluster>,
    /// Names this instance's stream-done calls in a request's filter state.
    id: u64,
}

/// Ids of filter instances.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// The outcomes per route cluster: `ok`, `denied` (rendered `over_limit`), `error`,
/// `failure_mode_allowed`.
pub type RateLimitClusterStats = PerCluster;

impl RateLimitHttpFilter {
    /// A filter for `config` calling through `transport`.
    pub fn new(config: Arc<RateLimitFilter>, transport: Arc<dyn RateLimitTransport>) -> Self {
        Self {
            config,
            transport,
            clusters: Arc::default(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The counters per route cluster.
    pub fn cluster_stats(&self) -> &Arc<PerCluster> {
        &self.clusters
    }
}

fn count(p: &PerCluster, cluster: &str, which: fn(&ClusterAuthzStats) -> &AtomicU64) {
    p.count(cluster, which);
}

impl HttpFilter for RateLimitHttpFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        let cfg = &*self.config;
        let internal = req.first_header("x-envoy-internal") == Some("true");
        match cfg.request_type {
            RequestType::Internal if !internal => return Decision::Continue,
            RequestType::External if internal => return Decision::Continue,
            _ => {}
        }
        let per_route = match per_route {
            Some(PerRouteFilterConfig::RateLimit(p)) => Some(p),
            _ => None,
        };
        // Envoy calls only for a route with a target cluster, whose scope counts the call.
        let Some(cluster) = req.route.and_then(|r| r.cluster) else {
            return Decision::Continue;
        };
        let domain = per_route
            .and_then(|p| p.domain.clone())
            .unwrap_or_else(|| cfg.domain.clone());
        let descriptors = match per_route {
            Some(p) if !p.rate_limits.is_empty() => {
                self.arm_stream_done(&p.rate_limits, &domain, req);
                request_descriptors(&p.rate_limits, req)
            }
            _ if !cfg.rate_limits.is_empty() => request_descriptors(&cfg.rate_limits, req),
            // Per-route `vh_rate_limits` is refused: its default, OVERRIDE. Route and
            // virtual host policies have neither `hits_addend` nor `apply_on_stream_done`
            // (refused).
            _ => descriptors::from_route(req, cfg.stage, VhRateLimits::Override, false)
                .into_iter()
                .map(|e| stream_done::descriptor(e, None))
                .collect(),
        };
        if descriptors.is_empty() {
            return Decision::Continue;
        }
        let request = RateLimitRequest {
            domain,
            descriptors,
            hits_addend: 0,
        };
        Decision::Pending(Box::pin(async move {
            let call = self
                .transport
                .should_rate_limit(&cfg.service, cfg.timeout, request);
            let answer = match cfg.timeout {
                Some(t) => tokio::time::timeout(t, call)
                    .await
                    .unwrap_or_else(|_| Err("timeout".into())),
                None => call.await,
            };
            self.complete(req, cluster, answer)
        }))
    }

    // The stream-done call rides on the response body: it goes out when the body is
    // done with.
    fn encodes_body(&self) -> bool {
        true
    }

    fn encode_response(
        &self,
        req: &mut RequestState<'_>,
        _per_route: Option<&PerRouteFilterConfig>,
        _head: &mut ResponseHead<'_>,
    ) -> Option<Box<dyn BodyEncoder>> {
        let armed = req.filter_state.get_mut::<Armed>()?;
        let at = armed.0.iter().position(|c| c.filter == self.id)?;
        let call = armed.0.swap_remove(at);
        let descriptors: Vec<_> = call
            .descriptors
            .into_iter()
            .filter_map(|(entries, h)| {
                let hits = match &h {
                    Some(h) => Some(stream_done::hits(h, &req.metadata)?),
                    None => None,
                };
                Some(stream_done::descriptor(entries, hits))
            })
            .collect();
        if descriptors.is_empty() {
            return None;
        }
        let request = RateLimitRequest {
            domain: call.domain,
            descriptors,
            hits_addend: 0,
        };
        Some(Box::new(OnStreamDone {
            call: Some((
                Arc::clone(&self.transport),
                Arc::clone(&self.config),
                request,
            )),
        }))
    }
}

/// The request-time descriptors of `policies` (those without `apply_on_stream_done`).
fn request_descriptors(
    policies: &[RateLimitPolicy],
    req: &RequestState<'_>,
) -> Vec<RateLimitDescriptor> {
    policies
        .iter()
        .filter(|p| !p.apply_on_stream_done)
        .filter_map(|p| {
            let entries = descriptors::entries(p, req)?;
            let hits = match &p.hits_addend {
                Some(h) => Some(stream_done::hits(h, &req.metadata)?),
                None => None,
            };
            Some(stream_done::descriptor(entries, hits))
        })
        .collect()
}

impl RateLimitHttpFilter {
    /// Takes the entries of the `apply_on_stream_done` policies for the call when the
    /// stream is done.
    fn arm_stream_done(
        &self,
        policies: &[RateLimitPolicy],
        domain: &str,
        req: &mut RequestState<'_>,
    ) {
        let descriptors: Vec<_> = policies
            .iter()
            .filter(|p| p.apply_on_stream_done)
            .filter_map(|p| Some((descriptors::entries(p, req)?, p.hits_addend.clone())))
            .collect();
        if descriptors.is_empty() {
            return;
        }
        let call = ArmedCall {
            filter: self.id,
            domain: domain.to_string(),
            descriptors,
        };
        match req.filter_state.get_mut::<Armed>() {
            Some(armed) => armed.0.push(call),
            None => {
                req.filter_state.insert(Armed(vec![call]));
            }
        }
    }

    fn complete(
        &self,
        req: &mut RequestState<'_>,
        cluster: &str,
        answer: Result<RateLimitResponse, String>,
    ) -> Verdict {
        let cfg = &*self.config;
        let resp = match answer {
            Ok(r)
                if r.overall_code == Code::Ok as i32
                    || r.overall_code == Code::OverLimit as i32 =>
            {
                r
            }
            _ => {
                count(&self.clusters, cluster, |s| &s.error);
                if cfg.failure_mode_deny {
                    let mut reply = LocalReply::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "",
                        "rate_limiter_error",
                    );
                    reply.response_flag = Some("RLSE");
                    return Verdict::Respond(reply);
                }
                count(&self.clusters, cluster, |s| &s.failure_mode_allowed);
                return Verdict::Continue;
            }
        };
        let mut response_headers = HeaderMap::new();
        if cfg.x_ratelimit_headers {
            headers::x_ratelimit(&resp.statuses, &mut response_headers);
        }
        headers::from_service(&resp.response_headers_to_add, &mut response_headers);
        if resp.overall_code == Code::Ok as i32 {
            count(&self.clusters, cluster, |s| &s.ok);
            let mut upstream = HeaderMap::new();
            headers::from_service(&resp.request_headers_to_add, &mut upstream);
            for (name, value) in &upstream {
                req.head.headers.insert(name, value.clone());
            }
            req.response_headers.extend(response_headers);
            return Verdict::Continue;
        }
        count(&self.clusters, cluster, |s| &s.denied);
        let status =
            StatusCode::from_u16(cfg.rate_limited_status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        let mut reply = LocalReply::new(status, resp.raw_body, "request_rate_limited");
        reply.headers = response_headers;
        if !cfg.disable_x_envoy_ratelimited_header {
            reply
                .headers
                .insert("x-envoy-ratelimited", HeaderValue::from_static("true"));
        }
        reply.response_flag = Some("RL");
        if cfg.rate_limited_as_resource_exhausted {
            reply.grpc_status = Some(8);
        }
        Verdict::Respond(reply)
    }
}

#[cfg(test)]
mod tests;
