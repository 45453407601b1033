//! Buffering a request body for a filter that reads it (ext_authz `with_request_body`)
//! before the chain runs (Envoy's decoder buffer with the filter's limit).

use crate::access_log::body::RequestBody;
use bytes::{Bytes, BytesMut};
use courier_filters::BodyWanted;
use http_body_util::BodyExt;

/// Why no body was buffered.
#[derive(Debug)]
pub enum BufferError {
    /// The body is larger than the limit and partial bodies are not allowed: 413.
    TooLarge,
    /// The downstream failed midway.
    Read,
}

/// Reads `body` to its end. Without `allow_partial`, more than `max_bytes` is
/// [`BufferError::TooLarge`]; with it, the whole body is kept (the filter sends only
/// `max_bytes` of it to its service; the upstream gets all of it).
pub async fn buffer(body: &mut RequestBody, wanted: BodyWanted) -> Result<Bytes, BufferError> {
    let mut out = BytesMut::new();
    let max = wanted.max_bytes as usize;
    // Bounded by the body itself: each round consumes one frame.
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| BufferError::Read)?;
        if let Ok(data) = frame.into_data() {
            out.extend_from_slice(&data);
            if !wanted.allow_partial && out.len() > max {
                return Err(BufferError::TooLarge);
            }
        }
    }
    Ok(out.freeze())
}
