//! The buffer HTTP filter: the connection manager reads the whole request body
//! (up to the route's or the filter's `max_request_bytes`, else 413) before the
//! request goes on, and a request that came without `content-length` gets one
//! for the bytes read, as Envoy's filter sets it.

use crate::chain::{BodyWanted, Decision, HttpFilter};
use crate::request::RequestState;
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::buffer::{Buffer, BufferPerRoute};

/// The filter over its config.
pub struct BufferFilter {
    config: Buffer,
}

impl BufferFilter {
    /// A filter buffering up to `config.max_request_bytes`.
    pub fn new(config: Buffer) -> Self {
        Self { config }
    }
}

impl HttpFilter for BufferFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        _per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        if !req.end_stream
            && let Some(body) = &req.body
            && !req.head.headers.contains_key(http::header::CONTENT_LENGTH)
        {
            req.head.headers.insert(
                http::header::CONTENT_LENGTH,
                http::HeaderValue::from(body.len()),
            );
        }
        Decision::Continue
    }

    fn wants_body(&self) -> Option<BodyWanted> {
        Some(BodyWanted {
            max_bytes: self.config.max_request_bytes,
            allow_partial: false,
        })
    }

    fn wants_body_on(&self, per_route: Option<&PerRouteFilterConfig>) -> Option<BodyWanted> {
        match per_route {
            Some(PerRouteFilterConfig::Buffer(BufferPerRoute::Disabled)) => None,
            Some(PerRouteFilterConfig::Buffer(BufferPerRoute::Buffer(b))) => Some(BodyWanted {
                max_bytes: b.max_request_bytes,
                allow_partial: false,
            }),
            _ => self.wants_body(),
        }
    }
}
