//! The codec stage: HTTP/1.1 and HTTP/2 over an accepted connection (hyper's
//! server), the codec's own limits and flood checks, idle connections parked off
//! their task, and how a connection ends (drain, idle, lifetime).

use courier_config::listener::hcm::CodecType;

pub mod ends;
pub mod error;
pub mod h1;
pub mod h1_check;
pub mod h2_flood;
pub mod idle;
pub mod park;
pub mod serve;
pub mod wake_gate;

/// Which HTTP versions to serve on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// HTTP/1.1 or HTTP/2 by the client's preface.
    Auto,
    /// HTTP/1.1 only.
    Http1,
    /// HTTP/2 only.
    Http2,
}

/// The codec for a connection: `codec_type` when fixed; with AUTO, what ALPN
/// negotiated (h2 or http/1.1), else the preface decides (Envoy's rule).
pub fn codec(codec_type: CodecType, alpn: Option<&[u8]>) -> Codec {
    match (codec_type, alpn) {
        (CodecType::Http1, _) => Codec::Http1,
        (CodecType::Http2, _) => Codec::Http2,
        (CodecType::Auto, Some(b"h2")) => Codec::Http2,
        (CodecType::Auto, Some(b"http/1.1" | b"http/1.0")) => Codec::Http1,
        (CodecType::Auto, _) => Codec::Auto,
    }
}
