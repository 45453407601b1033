//! The gRPC filters Envoy Gateway puts on every GRPCRoute listener: `grpc_web`
//! ([`web`]: gRPC-Web clients to gRPC upstreams) and `grpc_stats` ([`stats`]: per-method
//! counters and message counts), with what both share as Envoy's `Grpc::Common` and
//! `Grpc::Context` do: the service and method of a path, the gRPC content type and
//! response checks, the frame counter and the counters under the route cluster's scope
//! ([`counters`]).

pub mod counters;
mod frames;
pub mod stats;
pub mod web;
mod web_body;

pub use frames::FrameCounter;
use http::{HeaderMap, StatusCode};

/// Envoy's `Grpc::Common::resolveServiceAndMethod`: the two non-empty segments of the
/// path before its query (`/pkg.Service/Method`), else none.
pub fn service_and_method(path: &str) -> Option<(&str, &str)> {
    let path = path.split('?').next().unwrap_or("");
    let mut parts = path.split('/').filter(|p| !p.is_empty());
    let (service, method) = (parts.next()?, parts.next()?);
    parts.next().is_none().then_some((service, method))
}

/// Envoy's `hasGrpcContentType`: `application/grpc` (any case), alone or followed by
/// `+...` or `;...`.
pub fn is_grpc_content_type(ct: &[u8]) -> bool {
    let prefix = b"application/grpc";
    ct.len() >= prefix.len()
        && ct[..prefix.len()].eq_ignore_ascii_case(prefix)
        && matches!(ct.get(prefix.len()), None | Some(b'+' | b';'))
}

/// Envoy's `isGrpcResponseHeaders`: a trailers-only response (headers that end the
/// stream) needs only `grpc-status`; any other a 200 with a gRPC content type.
pub fn is_grpc_response(status: StatusCode, headers: &HeaderMap, end_stream: bool) -> bool {
    if end_stream {
        return headers.contains_key("grpc-status");
    }
    status == StatusCode::OK
        && headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|ct| is_grpc_content_type(ct.as_bytes()))
}

/// Envoy's `Grpc::Utility::httpToGrpcStatus`.
pub fn http_to_grpc_status(status: StatusCode) -> u16 {
    match status.as_u16() {
        400 => 13,
        401 => 16,
        403 => 7,
        404 => 12,
        429 | 502 | 503 | 504 => 14,
        _ => 2,
    }
}

/// Envoy's `PercentEncoding::encode` for `grpc-message`: bytes outside printable ASCII,
/// and `%`, become `%XX`.
pub fn percent_encode(body: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(body.len());
    for &b in body {
        if !(b' '..b'~').contains(&b) || b == b'%' {
            let _ = write!(out, "%{b:02X}");
        } else {
            out.push(char::from(b));
        }
    }
    out
}

#[cfg(test)]
mod tests;
