//! The gRPC statistics filter (`envoy.filters.http.grpc_stats`), as Envoy 1.40's
//! `GrpcStatsFilter` for gRPC requests (`content-type: application/grpc[+...]`): in the
//! route cluster's scope, `grpc.<service>.<method>.{<status>,success,failure,total}`
//! from the response's `grpc-status` (headers of a trailers-only response, else
//! trailers), and `request_message_count` / `response_message_count` as the messages
//! pass. Methods are named as `stats_for_all_methods` (service dots replaced with
//! `replace_dots_in_grpc_service_name`) or `individual_method_stats_allowlist` say;
//! others are counted as `cluster.<c>.grpc.*`. With `emit_filter_state` the request's
//! message counts are kept in its filter state ([`GrpcStatsObject`], Envoy's
//! `envoy.filters.http.grpc_stats` object).
//!
//! Not built: Envoy 1.40 also counts Connect protocol requests
//! (`connect-protocol-version`); courier counts gRPC only.

use super::counters::{GrpcCounters, MethodCounters};
use super::{FrameCounter, is_grpc_content_type, is_grpc_response, service_and_method};
use crate::chain::{BodyEncoder, Decision, EncodeError, HttpFilter, ResponseHead};
use crate::request::RequestState;
use bytes::Bytes;
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::grpc::{GrpcStats, MethodStats};
use http::HeaderMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The request's message counts (Envoy's `GrpcStatsObject`, filter state
/// `envoy.filters.http.grpc_stats`), kept up to date as messages pass.
#[derive(Debug, Default)]
pub struct GrpcStatsObject {
    /// Messages the client sent.
    pub request_message_count: AtomicU64,
    /// Messages the upstream sent.
    pub response_message_count: AtomicU64,
}

/// What the filter noted about a gRPC request, for its response.
#[derive(Debug, Clone)]
struct StatsRequest {
    counters: Option<Arc<MethodCounters>>,
    object: Option<Arc<GrpcStatsObject>>,
}

/// The gRPC statistics filter.
#[derive(Debug)]
pub struct GrpcStatsFilter {
    config: Arc<GrpcStats>,
    counters: Arc<GrpcCounters>,
}

impl GrpcStatsFilter {
    /// A filter with `config`.
    pub fn new(config: Arc<GrpcStats>) -> Self {
        Self {
            config,
            counters: Arc::default(),
        }
    }

    /// The `cluster.<c>.grpc.*` counters.
    pub fn counters(&self) -> &Arc<GrpcCounters> {
        &self.counters
    }

    /// The counters of this request's method, as the config names it (none: not
    /// counted, the path names no method).
    fn method_counters(&self, cluster: &str, path: &str) -> Option<Arc<MethodCounters>> {
        let (service, method) = service_and_method(path)?;
        match &self.config.methods {
            MethodStats::All { replace_dots: true } => {
                let service = service.replace('.', "_");
                self.counters.get(cluster, "grpc", Some((&service, method)))
            }
            MethodStats::All {
                replace_dots: false,
            } => self.counters.get(cluster, "grpc", Some((service, method))),
            MethodStats::Allowlist(list) => {
                let named = list.iter().any(|(s, m)| s == service && m == method);
                self.counters
                    .get(cluster, "grpc", named.then_some((service, method)))
            }
        }
    }
}

impl HttpFilter for GrpcStatsFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        _per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        let grpc = req
            .head
            .headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|ct| is_grpc_content_type(ct.as_bytes()));
        if !grpc {
            return Decision::Continue;
        }
        let counters = req
            .route
            .and_then(|r| r.cluster)
            .and_then(|c| self.method_counters(c, req.head.uri.path()));
        let object = self
            .config
            .emit_filter_state
            .then(|| Arc::new(GrpcStatsObject::default()));
        if let Some(o) = &object {
            req.filter_state.insert(Arc::clone(o));
        }
        if !req.end_stream {
            req.request_encoders.push(Box::new(Messages {
                frames: FrameCounter::default(),
                counters: counters.clone(),
                object: object.clone(),
                request: true,
            }));
        }
        req.filter_state.insert(StatsRequest { counters, object });
        Decision::Continue
    }

    fn encodes_body(&self) -> bool {
        true
    }

    fn encode_response(
        &self,
        req: &mut RequestState<'_>,
        _per_route: Option<&PerRouteFilterConfig>,
        head: &mut ResponseHead<'_>,
    ) -> Option<Box<dyn BodyEncoder>> {
        let r = req.filter_state.get::<StatsRequest>()?;
        if let Some(c) = &r.counters {
            c.charge(head.headers.get("grpc-status"));
        }
        if head.end_stream {
            return None;
        }
        let grpc_response = is_grpc_response(head.status, head.headers, false);
        Some(
            Box::new(Messages {
                frames: FrameCounter::response(),
                counters: r.counters.clone(),
                object: r.object.clone(),
                request: false,
            })
            .counting(grpc_response),
        )
    }
}

/// Counts the messages of one direction as they pass, unchanged; the response's also
/// charges the trailers' `grpc-status`.
#[derive(Debug)]
struct Messages {
    frames: FrameCounter,
    counters: Option<Arc<MethodCounters>>,
    object: Option<Arc<GrpcStatsObject>>,
    request: bool,
}

impl Messages {
    /// Envoy counts response messages only of a gRPC response: otherwise the counter
    /// starts failed and sees nothing.
    fn counting(mut self: Box<Self>, on: bool) -> Box<Self> {
        if !on {
            self.frames = FrameCounter::off();
        }
        self
    }
}

impl BodyEncoder for Messages {
    fn encode_data(&mut self, data: Bytes, _end_stream: bool) -> Result<Bytes, EncodeError> {
        let delta = self.frames.inspect(&data);
        if delta > 0 {
            let (counter, seen) = match self.request {
                true => (
                    self.counters.as_ref().map(|c| &c.request_message_count),
                    self.object.as_ref().map(|o| &o.request_message_count),
                ),
                false => (
                    self.counters.as_ref().map(|c| &c.response_message_count),
                    self.object.as_ref().map(|o| &o.response_message_count),
                ),
            };
            if let Some(c) = counter {
                c.fetch_add(delta, Ordering::Relaxed);
            }
            if let Some(o) = seen {
                o.store(self.frames.count(), Ordering::Relaxed);
            }
        }
        Ok(data)
    }

    fn encode_trailers(&mut self, trailers: &mut HeaderMap) -> Result<Bytes, EncodeError> {
        if !self.request
            && let Some(c) = &self.counters
        {
            c.charge(trailers.get("grpc-status"));
        }
        Ok(Bytes::new())
    }
}
