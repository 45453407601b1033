//! The gRPC-Web filter's body transforms: a text request's base64 decoded on its way
//! upstream, and the response's frames (base64-encoded for a text client) with the
//! trailers as the last frame.

use super::counters::MethodCounters;
use crate::chain::{BodyEncoder, EncodeError, LocalReply};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use std::sync::Arc;

/// The flag of gRPC-Web's trailers frame.
const TRAILER_FLAG: u8 = 0x80;

/// How much of a non-gRPC response's body becomes its `grpc-message` (Envoy's
/// `MAX_BUFFERED_PLAINTEXT_LENGTH`); the rest is read and dropped.
const MAX_MESSAGE: usize = 16384;

/// The largest gRPC message a text response holds back while it arrives (each frame is
/// encoded whole, so it is buffered until complete): beyond it the stream is reset
/// rather than buffered without end. gRPC's own default limit is 4 MiB.
const MAX_TEXT_FRAME: usize = 16 << 20;

/// A `grpc-web-text` request body, base64-decoded in blocks of four characters as Envoy's
/// `decodeData` does: fewer than four wait for the next chunk; a body whose length is not
/// a multiple of four, or that is not base64 (padding only at its very end), fails.
#[derive(Debug, Default)]
pub struct TextRequest {
    /// Characters of an incomplete block (fewer than four).
    held: BytesMut,
    /// Why decoding failed (the reply's details), once it has.
    failed: Option<&'static str>,
}

/// Why a text request failed (Envoy's `%RESPONSE_CODE_DETAILS%` for its 400).
pub const BAD_SIZE: &str = "grpc_base_64_decode_failed_bad_size";
/// The data was not base64.
pub const BAD_DATA: &str = "grpc_base_64_decode_failed";

impl BodyEncoder for TextRequest {
    fn encode_data(&mut self, data: Bytes, end_stream: bool) -> Result<Bytes, EncodeError> {
        let available = self.held.len() + data.len();
        if end_stream {
            if available == 0 {
                return Ok(Bytes::new());
            }
            if !available.is_multiple_of(4) {
                self.failed = Some(BAD_SIZE);
                return Err(EncodeError(BAD_SIZE.into()));
            }
        } else if available < 4 {
            self.held.extend_from_slice(&data);
            return Ok(Bytes::new());
        }
        let whole = available / 4 * 4;
        let mut block = std::mem::take(&mut self.held);
        let take = whole - block.len();
        block.extend_from_slice(&data[..take]);
        self.held.extend_from_slice(&data[take..]);
        match STANDARD.decode(&block) {
            Ok(d) if !d.is_empty() => Ok(Bytes::from(d)),
            _ => {
                self.failed = Some(BAD_DATA);
                Err(EncodeError(BAD_DATA.into()))
            }
        }
    }

    fn failure_reply(&self) -> Option<LocalReply> {
        self.failed.map(|details| {
            LocalReply::new(
                http::StatusCode::BAD_REQUEST,
                "Bad gRPC-web request, invalid base64 data.",
                details,
            )
        })
    }

    fn encode_trailers(&mut self, _trailers: &mut HeaderMap) -> Result<Bytes, EncodeError> {
        // Envoy decodes only what ends a whole block; characters held are dropped.
        Ok(Bytes::new())
    }
}

/// What the response's body becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseMode {
    /// Frames as they are.
    Binary,
    /// Each frame base64-encoded on its own (`application/grpc-web-text+proto`).
    Text,
    /// A response that was not gRPC: its body went into `grpc-message`, nothing is sent.
    Drop,
}

/// A gRPC-Web response body.
#[derive(Debug)]
pub struct WebResponse {
    mode: ResponseMode,
    /// A text response's incomplete frame.
    pending: BytesMut,
    /// A frame with an unknown flag was seen: nothing more is decoded (Envoy's decoder
    /// stops there).
    failed: bool,
    counters: Option<Arc<MethodCounters>>,
    /// [`ResponseMode::Drop`] for a body that streams: the headers wait for it, and its
    /// first [`MAX_MESSAGE`] bytes (in `pending`) become `grpc-message`.
    hold: bool,
}

impl WebResponse {
    /// A body in `mode`, charging `counters` with the trailers' `grpc-status`.
    pub fn new(mode: ResponseMode, counters: Option<Arc<MethodCounters>>) -> Self {
        Self {
            mode,
            pending: BytesMut::new(),
            failed: false,
            counters,
            hold: false,
        }
    }

    /// A non-gRPC response whose body streams: the headers wait for it to become their
    /// `grpc-message`.
    pub fn holding(counters: Option<Arc<MethodCounters>>) -> Self {
        Self {
            hold: true,
            ..Self::new(ResponseMode::Drop, counters)
        }
    }

    /// The whole frames of `pending`, each encoded.
    fn text_frames(&mut self) -> Result<Bytes, EncodeError> {
        let mut out = String::new();
        while !self.failed && self.pending.len() >= 5 {
            // Envoy's decoder takes data frames only (flag 0, or 1: compressed).
            if self.pending[0] & !1 != 0 {
                self.failed = true;
                self.pending.clear();
                break;
            }
            let len = u32::from_be_bytes([
                self.pending[1],
                self.pending[2],
                self.pending[3],
                self.pending[4],
            ]) as usize;
            if len > MAX_TEXT_FRAME {
                return Err(EncodeError(format!(
                    "gRPC message of {len} bytes is over the {MAX_TEXT_FRAME}-byte limit of a grpc-web-text response"
                )));
            }
            if self.pending.len() < 5 + len {
                break;
            }
            let frame = self.pending.split_to(5 + len);
            STANDARD.encode_string(&frame, &mut out);
        }
        Ok(Bytes::from(out))
    }
}

impl BodyEncoder for WebResponse {
    fn encode_data(&mut self, data: Bytes, _end_stream: bool) -> Result<Bytes, EncodeError> {
        match self.mode {
            ResponseMode::Binary => Ok(data),
            ResponseMode::Drop => {
                if self.hold {
                    let room = MAX_MESSAGE.saturating_sub(self.pending.len());
                    self.pending
                        .extend_from_slice(&data[..room.min(data.len())]);
                }
                Ok(Bytes::new())
            }
            ResponseMode::Text => {
                if self.failed {
                    return Ok(Bytes::new());
                }
                self.pending.extend_from_slice(&data);
                self.text_frames()
            }
        }
    }

    fn holds_headers(&self) -> bool {
        self.hold
    }

    fn release_headers(&mut self, headers: &mut HeaderMap) {
        if self.hold
            && let Ok(m) = http::HeaderValue::from_str(&super::percent_encode(&self.pending))
        {
            headers.insert("grpc-message", m);
        }
    }

    fn encode_trailers(&mut self, trailers: &mut HeaderMap) -> Result<Bytes, EncodeError> {
        if let Some(c) = &self.counters {
            c.charge(trailers.get("grpc-status"));
        }
        if self.mode == ResponseMode::Drop {
            return Ok(Bytes::new());
        }
        let mut lines = Vec::new();
        for (name, value) in trailers.iter() {
            lines.extend_from_slice(name.as_str().as_bytes());
            lines.push(b':');
            lines.extend_from_slice(value.as_bytes());
            lines.extend_from_slice(b"\r\n");
        }
        trailers.clear();
        let len = u32::try_from(lines.len())
            .map_err(|_| EncodeError("trailers too large for a gRPC-Web frame".into()))?;
        let mut frame = BytesMut::with_capacity(5 + lines.len());
        frame.extend_from_slice(&[TRAILER_FLAG]);
        frame.extend_from_slice(&len.to_be_bytes());
        frame.extend_from_slice(&lines);
        Ok(match self.mode {
            ResponseMode::Text => Bytes::from(STANDARD.encode(&frame)),
            _ => frame.freeze(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(flag: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![flag];
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn text_request_decodes_in_blocks_of_four() {
        let body = STANDARD.encode(frame(0, b"hello"));
        let mut t = TextRequest::default();
        let mut out = Vec::new();
        for c in body.as_bytes().chunks(3) {
            out.extend_from_slice(&t.encode_data(Bytes::copy_from_slice(c), false).unwrap());
        }
        out.extend_from_slice(&t.encode_data(Bytes::new(), true).unwrap());
        assert_eq!(out, frame(0, b"hello"));
        let mut t = TextRequest::default();
        assert_eq!(
            t.encode_data(Bytes::from_static(b"AAAAA"), true)
                .unwrap_err()
                .0,
            BAD_SIZE
        );
        let mut t = TextRequest::default();
        assert_eq!(
            t.encode_data(Bytes::from_static(b"A!AA"), false)
                .unwrap_err()
                .0,
            BAD_DATA
        );
    }

    #[test]
    fn binary_response_gets_the_trailer_frame() {
        let mut r = WebResponse::new(ResponseMode::Binary, None);
        let data = Bytes::from(frame(0, b"x"));
        assert_eq!(r.encode_data(data.clone(), false).unwrap(), data);
        let mut t = HeaderMap::new();
        t.insert("grpc-status", "0".parse().unwrap());
        t.insert("grpc-message", "ok".parse().unwrap());
        let last = r.encode_trailers(&mut t).unwrap();
        assert!(t.is_empty());
        assert_eq!(
            last.as_ref(),
            frame(0x80, b"grpc-status:0\r\ngrpc-message:ok\r\n")
        );
    }

    #[test]
    fn text_response_encodes_each_frame() {
        let counters = Arc::new(MethodCounters::default());
        let mut r = WebResponse::new(ResponseMode::Text, Some(Arc::clone(&counters)));
        let mut both = frame(0, b"ab");
        both.extend(frame(0, b"cde"));
        let (a, b) = both.split_at(9);
        let first = r.encode_data(Bytes::copy_from_slice(a), false).unwrap();
        assert_eq!(first, STANDARD.encode(frame(0, b"ab")));
        let second = r.encode_data(Bytes::copy_from_slice(b), false).unwrap();
        assert_eq!(second, STANDARD.encode(frame(0, b"cde")));
        let mut t = HeaderMap::new();
        t.insert("grpc-status", "5".parse().unwrap());
        let last = r.encode_trailers(&mut t).unwrap();
        assert_eq!(last, STANDARD.encode(frame(0x80, b"grpc-status:5\r\n")));
        assert_eq!(
            counters.failure.load(std::sync::atomic::Ordering::Relaxed),
            1
        );
    }
}
