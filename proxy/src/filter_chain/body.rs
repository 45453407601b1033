//! Buffering a request body for a filter that reads it (ext_authz `with_request_body`)
//! before the chain runs (Envoy's decoder buffer with the filter's limit).

use crate::request::body::UpstreamBody;
use bytes::{Bytes, BytesMut};
use courier_filters::BodyWanted;
use http::HeaderMap;
use http_body_util::BodyExt;

/// Why no body was buffered.
#[derive(Debug)]
pub enum BufferError {
    /// The body is larger than the limit and partial bodies are not allowed: 413.
    TooLarge,
    /// The downstream failed midway.
    Read,
}

/// What was read of the body.
#[derive(Debug, Default)]
pub struct Buffered {
    /// The bytes read: the whole body, or (partial) its first `max_bytes` or a little more.
    pub bytes: Bytes,
    /// The trailers, when the body ended with them.
    pub trailers: Option<HeaderMap>,
    /// The body goes on past `bytes` (partial): the rest is still in the stream.
    pub more: bool,
}

/// Reads `body` to its end. Without `allow_partial`, more than `max_bytes` is
/// [`BufferError::TooLarge`]; with it, reading stops once `max_bytes` are held (Envoy's
/// `isBufferFull`), so a large body is never held whole: the filter sends at most
/// `max_bytes` to its service and the upstream gets the bytes read, then the rest.
pub async fn buffer(body: &mut UpstreamBody, wanted: BodyWanted) -> Result<Buffered, BufferError> {
    let mut out = BytesMut::new();
    let max = wanted.max_bytes as usize;
    let mut trailers = None;
    // Bounded by the body itself: each round consumes one frame.
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| BufferError::Read)?;
        match frame.into_data() {
            Ok(data) => {
                out.extend_from_slice(&data);
                if !wanted.allow_partial && out.len() > max {
                    return Err(BufferError::TooLarge);
                }
                if wanted.allow_partial && out.len() >= max {
                    return Ok(Buffered {
                        bytes: out.freeze(),
                        trailers: None,
                        more: !http_body::Body::is_end_stream(body),
                    });
                }
            }
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    Ok(Buffered {
        bytes: out.freeze(),
        trailers,
        more: false,
    })
}
