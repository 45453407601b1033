//! The gRPC statistics filter (`envoy.filters.http.grpc_stats`), as Envoy 1.40's
//! `GrpcStatsFilter`, for gRPC requests (`content-type: application/grpc[+...]`) and
//! Connect ones (a `connect-protocol-version` header: unary; `content-type:
//! application/connect+...`: streaming): in the route cluster's scope,
//! `grpc.<service>.<method>.{<status>,success,failure,total}` from the response's
//! `grpc-status` (headers of a trailers-only response, else trailers; a Connect unary
//! response's HTTP status, a streaming one's end-of-stream frame), and
//! `request_message_count` / `response_message_count` as the messages pass. Methods are
//! named as `stats_for_all_methods` (service dots replaced with
//! `replace_dots_in_grpc_service_name`) or `individual_method_stats_allowlist` say;
//! others are counted as `cluster.<c>.grpc.*`. With `emit_filter_state` the request's
//! message counts are kept in its filter state ([`GrpcStatsObject`], Envoy's
//! `envoy.filters.http.grpc_stats` object).

use super::counters::{GrpcCounters, MethodCounters};
use super::{FrameCounter, is_grpc_content_type, is_grpc_response, service_and_method};
use crate::chain::{BodyEncoder, Decision, EncodeError, HttpFilter, ResponseHead};
use crate::request::RequestState;
use bytes::Bytes;
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::grpc::{GrpcStats, MethodStats};
use http::HeaderMap;
use http::header::CONTENT_TYPE;
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

/// Which protocol a request speaks (Envoy keeps these three apart; a request may be
/// more than one).
#[derive(Debug, Clone, Copy, Default)]
struct Kind {
    /// `application/grpc[+...]`.
    grpc: bool,
    /// A `connect-protocol-version` header.
    connect_unary: bool,
    /// `application/connect+...`.
    connect_streaming: bool,
}

/// What the filter noted about a request, for its response.
#[derive(Debug, Clone)]
struct StatsRequest {
    kind: Kind,
    /// Envoy's `do_stat_tracking_`: the gRPC outcome is counted.
    tracking: bool,
    /// The counters charged: the method's, or the cluster's unnamed ones.
    counters: Arc<MethodCounters>,
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

    /// The counters this request charges, and whether its outcome is counted (a path
    /// that names a method, allowed or not; with `stats_for_all_methods`, any).
    fn method_counters(&self, cluster: &str, path: &str) -> Option<(Arc<MethodCounters>, bool)> {
        let method = service_and_method(path);
        let (named, tracking) = match (&self.config.methods, method) {
            (_, None) => (None, false),
            (MethodStats::All { replace_dots: true }, Some((s, m))) => {
                let s = s.replace('.', "_");
                return Some((self.counters.get(cluster, "grpc", Some((&s, m)))?, true));
            }
            (
                MethodStats::All {
                    replace_dots: false,
                },
                Some(m),
            ) => (Some(m), true),
            (MethodStats::Allowlist(list), Some((s, m))) => (
                list.iter()
                    .any(|(ls, lm)| ls == s && lm == m)
                    .then_some((s, m)),
                true,
            ),
        };
        Some((self.counters.get(cluster, "grpc", named)?, tracking))
    }
}

impl HttpFilter for GrpcStatsFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        _per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        let h = &req.head.headers;
        let ct = h
            .get(CONTENT_TYPE)
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        let kind = Kind {
            grpc: is_grpc_content_type(ct),
            connect_unary: h.contains_key("connect-protocol-version"),
            connect_streaming: ct.starts_with(b"application/connect+"),
        };
        if !(kind.grpc || kind.connect_unary || kind.connect_streaming) {
            return Decision::Continue;
        }
        // Without a route cluster nothing is counted (Envoy has no scope to count in).
        let Some((counters, tracking)) = req
            .route
            .and_then(|r| r.cluster)
            .and_then(|c| self.method_counters(c, req.head.uri.path()))
        else {
            return Decision::Continue;
        };
        let object = self
            .config
            .emit_filter_state
            .then(|| Arc::new(GrpcStatsObject::default()));
        if let Some(o) = &object {
            req.filter_state.insert(Arc::clone(o));
        }
        let r = StatsRequest {
            kind,
            tracking,
            counters,
            object,
        };
        if !req.end_stream {
            req.request_encoders
                .push(Box::new(Messages::new(&r, true, FrameCounter::default())));
        }
        req.filter_state.insert(r);
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
        let connect_streaming_response = head.status == http::StatusCode::OK
            && head
                .headers
                .get(CONTENT_TYPE)
                .is_some_and(|v| v.as_bytes().starts_with(b"application/connect+"));
        if r.tracking {
            if r.kind.connect_unary {
                r.counters
                    .charge_success(head.status == http::StatusCode::OK);
            } else if !connect_streaming_response {
                r.counters.charge(head.headers.get("grpc-status"));
            }
        }
        if head.end_stream {
            return None;
        }
        let grpc_response = is_grpc_response(head.status, head.headers, false);
        let frames = if grpc_response || r.kind.connect_streaming {
            FrameCounter::response()
        } else {
            FrameCounter::off()
        };
        let mut m = Messages::new(r, false, frames);
        m.grpc_response = grpc_response;
        Some(Box::new(m))
    }
}

/// Counts the messages of one direction as they pass, unchanged; the response's also
/// charges the outcome (trailers' `grpc-status`, a Connect stream's end).
#[derive(Debug)]
struct Messages {
    r: StatsRequest,
    frames: FrameCounter,
    request: bool,
    /// A gRPC response (its messages are counted as gRPC).
    grpc_response: bool,
}

impl Messages {
    fn new(r: &StatsRequest, request: bool, frames: FrameCounter) -> Self {
        Self {
            r: r.clone(),
            frames,
            request,
            grpc_response: false,
        }
    }

    /// `n` more messages (`seen` in all, for the filter state); `charged`: the
    /// counters count them too.
    fn add(&self, n: u64, seen: u64, charged: bool) {
        let (counter, object) = match self.request {
            true => (
                &self.r.counters.request_message_count,
                self.r.object.as_ref().map(|o| &o.request_message_count),
            ),
            false => (
                &self.r.counters.response_message_count,
                self.r.object.as_ref().map(|o| &o.response_message_count),
            ),
        };
        if let Some(o) = object {
            o.store(seen, Ordering::Relaxed);
        }
        if charged {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }
}

impl BodyEncoder for Messages {
    fn encode_data(&mut self, data: Bytes, end_stream: bool) -> Result<Bytes, EncodeError> {
        let k = self.r.kind;
        // The branches of Envoy's decodeData / encodeData, in its order.
        let grpc = if self.request {
            k.grpc
        } else {
            self.grpc_response
        };
        if grpc || k.connect_streaming {
            let delta = self.frames.inspect(&data);
            if delta > 0 {
                // gRPC's are counted when tracked; Connect's always (as Envoy).
                self.add(delta, self.frames.count(), !grpc || self.r.tracking);
            }
            if !grpc && !self.request && end_stream {
                self.r
                    .counters
                    .charge_success(self.frames.connect_success());
            }
        } else if k.connect_unary && end_stream {
            self.add(1, 1, true);
        }
        Ok(data)
    }

    fn encode_trailers(&mut self, trailers: &mut HeaderMap) -> Result<Bytes, EncodeError> {
        if !self.request && self.r.kind.grpc && self.r.tracking {
            self.r.counters.charge(trailers.get("grpc-status"));
        }
        Ok(Bytes::new())
    }
}
