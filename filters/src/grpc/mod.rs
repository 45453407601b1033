//! The gRPC filters Envoy Gateway puts on every GRPCRoute listener: `grpc_web`
//! ([`web`]: gRPC-Web clients to gRPC upstreams) and `grpc_stats` ([`stats`]: per-method
//! counters and message counts), with what both share as Envoy's `Grpc::Common` and
//! `Grpc::Context` do: the service and method of a path, the gRPC content type and
//! response checks, the frame counter and the counters under the route cluster's scope
//! ([`counters`]).

pub mod counters;
pub mod stats;
pub mod web;
mod web_body;

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

/// Envoy's `Grpc::FrameInspector`: counts the length-prefixed messages of a gRPC stream
/// as its bytes pass, a message when its first byte is seen, whatever its flags, without
/// holding any of it. A response's counter (Envoy's `ResponseFrameCounter`) does not
/// count a frame flagged as Connect's end of stream (`0x02`), nor anything after it.
#[derive(Debug, Default)]
pub struct FrameCounter {
    /// Bytes of the current frame's 5-byte prefix seen (0: the next byte starts a frame).
    prefix_seen: u8,
    /// The current frame's length, as its prefix is read.
    length: u32,
    /// Payload bytes still to skip.
    remaining: u64,
    /// Nothing more is counted (a response's end-of-stream frame, or not gRPC).
    failed: bool,
    /// A response's counter: an end-of-stream flag stops it.
    response: bool,
    /// Frames seen.
    count: u64,
}

impl FrameCounter {
    /// A response's counter.
    pub fn response() -> Self {
        Self {
            response: true,
            ..Self::default()
        }
    }

    /// A counter that counts nothing (the body is not gRPC).
    pub fn off() -> Self {
        Self {
            failed: true,
            ..Self::default()
        }
    }

    /// Reads `data`; returns how many frames started in it.
    pub fn inspect(&mut self, mut data: &[u8]) -> u64 {
        let mut delta = 0;
        while !data.is_empty() && !self.failed {
            if self.remaining > 0 {
                let n = usize::try_from(self.remaining)
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                self.remaining -= n as u64;
                data = &data[n..];
                continue;
            }
            let b = data[0];
            data = &data[1..];
            match self.prefix_seen {
                0 => {
                    if self.response && b & 0x02 != 0 {
                        self.failed = true;
                        break;
                    }
                    self.count += 1;
                    delta += 1;
                    self.prefix_seen = 1;
                    self.length = 0;
                }
                1..=3 => {
                    self.length = (self.length << 8) | u32::from(b);
                    self.prefix_seen += 1;
                }
                _ => {
                    self.length = (self.length << 8) | u32::from(b);
                    self.remaining = u64::from(self.length);
                    self.prefix_seen = 0;
                }
            }
        }
        delta
    }

    /// Frames seen so far.
    pub fn count(&self) -> u64 {
        self.count
    }
}

#[cfg(test)]
mod tests;
