//! The gRPC-Web filter (`envoy.filters.http.grpc_web`), as Envoy 1.40's `GrpcWebFilter`.
//!
//! A request whose `content-type` is exactly `application/grpc-web[+proto]` or
//! `application/grpc-web-text[+proto]` goes upstream as gRPC: `content-type:
//! application/grpc`, no `content-length`, `te: trailers`, `grpc-accept-encoding:
//! identity` unless the client sent one; a text request's body is
//! base64-decoded on its way ([`super::web_body::TextRequest`]). Its response gets
//! `content-type: application/grpc-web+proto` (`application/grpc-web-text+proto` when the
//! request's `accept` asked for text), no `content-length`, the trailers as the body's
//! last frame (flag `0x80`, `name:value\r\n` lines) and, for text, every frame
//! base64-encoded. A response that is not gRPC (nor proto gRPC-Web) and has a body becomes
//! one without it: `grpc-status` mapped from the HTTP status, `grpc-message` the body
//! percent-encoded, `content-length: 0`. A trailers-only response keeps its `grpc-status`
//! in the headers, as Envoy leaves it.
//!
//! Counters `cluster.<route cluster>.grpc-web.<service>.<method>.{<status>,success,failure,total}`
//! from the `grpc-status` of the response headers or trailers.
//!
//! A local reply's body (`no healthy upstream`, ...) is known whole and becomes the
//! message at once; an upstream's non-gRPC body streams, so its response headers wait
//! ([`BodyEncoder::holds_headers`]) until it has been read, its first 16 KiB kept for
//! the message and the rest dropped, as Envoy's filter holds them.

use super::counters::{GrpcCounters, MethodCounters};
use super::web_body::{ResponseMode, TextRequest, WebResponse};
use super::{http_to_grpc_status, is_grpc_response, percent_encode, service_and_method};
use crate::chain::{BodyEncoder, Decision, HttpFilter, ResponseHead};
use crate::request::RequestState;
use courier_config::filters::PerRouteFilterConfig;
use http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, TE};
use http::{HeaderValue, StatusCode};
use std::sync::Arc;

const GRPC_WEB: &str = "application/grpc-web";
const GRPC_WEB_PROTO: &str = "application/grpc-web+proto";
const GRPC_WEB_TEXT: &str = "application/grpc-web-text";
const GRPC_WEB_TEXT_PROTO: &str = "application/grpc-web-text+proto";

/// What the filter noted about a gRPC-Web request, for its response.
#[derive(Debug, Clone)]
struct WebRequest {
    /// The client asked for base64 (`accept: application/grpc-web-text[+proto]`).
    text_response: bool,
    /// The counters of the request's cluster and method (none without a route cluster or
    /// a `/<service>/<method>` path).
    counters: Option<Arc<MethodCounters>>,
}

/// The gRPC-Web filter.
#[derive(Debug, Default)]
pub struct GrpcWebFilter {
    counters: Arc<GrpcCounters>,
}

impl GrpcWebFilter {
    /// A filter (`GrpcWeb` has no settings).
    pub fn new() -> Self {
        Self::default()
    }

    /// The `cluster.<c>.grpc-web.*` counters.
    pub fn counters(&self) -> &Arc<GrpcCounters> {
        &self.counters
    }
}

/// Envoy's `hasProtoEncodedGrpcWebContentType`: `application/grpc-web[+proto]` (any
/// case), parameters ignored.
fn proto_grpc_web(headers: &http::HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let t = v.split(';').next().unwrap_or("").trim_end();
            t.eq_ignore_ascii_case(GRPC_WEB_PROTO) || t.eq_ignore_ascii_case(GRPC_WEB)
        })
}

impl HttpFilter for GrpcWebFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        _per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        let h = &mut req.head.headers;
        let Some(ct) = h.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
            return Decision::Continue;
        };
        let text_request = match ct {
            GRPC_WEB | GRPC_WEB_PROTO => false,
            GRPC_WEB_TEXT | GRPC_WEB_TEXT_PROTO => true,
            _ => return Decision::Continue,
        };
        // Its length is the HTTP/1.1 body's, not what goes upstream.
        h.remove(CONTENT_LENGTH);
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        let text_response = h
            .get(ACCEPT)
            .is_some_and(|a| a == GRPC_WEB_TEXT || a == GRPC_WEB_TEXT_PROTO);
        h.insert(TE, HeaderValue::from_static("trailers"));
        if !h.contains_key("grpc-accept-encoding") {
            h.insert("grpc-accept-encoding", HeaderValue::from_static("identity"));
        }
        let counters = req.route.and_then(|r| r.cluster).and_then(|cluster| {
            let method = service_and_method(req.head.uri.path())?;
            self.counters.get(cluster, "grpc-web", Some(method))
        });
        if text_request && !req.end_stream {
            req.request_encoders.push(Box::new(TextRequest::default()));
        }
        req.filter_state.insert(WebRequest {
            text_response,
            counters,
        });
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
        let web = req.filter_state.get::<WebRequest>()?;
        let h = &mut *head.headers;
        if let Some(c) = &web.counters {
            c.charge(h.get("grpc-status"));
        }
        // Already gRPC, or proto gRPC-Web: only the content type changes.
        let grpc = is_grpc_response(head.status, h, head.end_stream)
            || (head.status == StatusCode::OK && proto_grpc_web(h));
        let transform = !grpc;
        h.remove(CONTENT_LENGTH);
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static(if web.text_response {
                GRPC_WEB_TEXT_PROTO
            } else {
                GRPC_WEB_PROTO
            }),
        );
        if head.end_stream {
            return None;
        }
        let mode = if transform {
            // Not a gRPC response: its body becomes the status's message.
            h.insert(
                "grpc-status",
                HeaderValue::from(http_to_grpc_status(head.status)),
            );
            h.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
            let Some(body) = &head.local_body else {
                // An upstream's body streams: the headers wait for it.
                return Some(Box::new(WebResponse::holding(web.counters.clone())));
            };
            if let Ok(m) = HeaderValue::from_str(&percent_encode(body)) {
                h.insert("grpc-message", m);
            }
            ResponseMode::Drop
        } else if web.text_response {
            ResponseMode::Text
        } else {
            ResponseMode::Binary
        };
        Some(Box::new(WebResponse::new(mode, web.counters.clone())))
    }
}
