//! The compressor filter (`envoy.filters.http.compressor`): compresses response bodies
//! with gzip, brotli or zstd as they stream, when the client accepts the encoding and the
//! response qualifies (Envoy's `CompressorFilter`).
//!
//! On the request it notes `accept-encoding` (and removes it with
//! `remove_accept_encoding_header`) and registers in the request's compressor registry; on
//! the response it decides with the other compressor filters of the chain which encoding
//! wins ([`negotiate`]), and the winner replaces `content-length` by `content-encoding` and
//! returns the body's [`engine`]. With `request_direction_config` the filter compresses
//! request bodies on their way upstream too.

mod engine;
mod headers;
mod negotiate;

use crate::chain::{BodyEncoder, Decision, HttpFilter, ResponseHead};
use crate::per_worker::PerWorker;
use crate::request::RequestState;
use courier_config::filters::{Compressor, CompressorPerRoute, PerRouteFilterConfig};
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, ETAG};
use negotiate::{HeaderStat, Registry};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The filter's counters, one set per worker. The names are Envoy's; the first five are
/// the direction's (under `response.` when `response_direction_config` is set).
#[derive(Debug, Default)]
pub struct CompressorStats {
    /// Responses compressed.
    pub compressed: AtomicU64,
    /// Responses left alone.
    pub not_compressed: AtomicU64,
    /// Bytes before compression.
    pub total_uncompressed_bytes: AtomicU64,
    /// Bytes after compression.
    pub total_compressed_bytes: AtomicU64,
    /// Responses whose `content-length` was below `min_content_length`.
    pub content_length_too_small: AtomicU64,
    /// Requests without `accept-encoding`.
    pub no_accept_header: AtomicU64,
    /// The client asked for `identity`.
    pub header_identity: AtomicU64,
    /// This filter's encoding was chosen by name.
    pub header_compressor_used: AtomicU64,
    /// Another filter's encoding was chosen by name.
    pub header_compressor_overshadowed: AtomicU64,
    /// `*` chose the encoding.
    pub header_wildcard: AtomicU64,
    /// `accept-encoding` named nothing acceptable.
    pub header_not_valid: AtomicU64,
    /// Left alone for its `etag` (`disable_on_etag_header`).
    pub not_compressed_etag: AtomicU64,
    /// Requests compressed (`request.compressed`).
    pub request_compressed: AtomicU64,
    /// Requests left alone (`request.not_compressed`).
    pub request_not_compressed: AtomicU64,
    /// Request bytes before compression.
    pub request_total_uncompressed_bytes: AtomicU64,
    /// Request bytes after compression.
    pub request_total_compressed_bytes: AtomicU64,
    /// Requests whose `content-length` was below the direction's minimum.
    pub request_content_length_too_small: AtomicU64,
}

fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A compressor filter instance.
#[derive(Debug)]
pub struct CompressorFilter {
    config: Arc<Compressor>,
    stats: Arc<PerWorker<CompressorStats>>,
}

impl CompressorFilter {
    /// A filter with `config`.
    pub fn new(config: Arc<Compressor>) -> Self {
        Self {
            config,
            stats: Arc::new(PerWorker::default()),
        }
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<PerWorker<CompressorStats>> {
        &self.stats
    }

    fn per_route(p: Option<&PerRouteFilterConfig>) -> Option<&CompressorPerRoute> {
        match p {
            Some(PerRouteFilterConfig::Compressor(c)) => Some(c),
            _ => None,
        }
    }

    /// Response compression is on for this route.
    fn enabled(&self, p: Option<&CompressorPerRoute>) -> bool {
        p.and_then(|p| p.response_enabled)
            .unwrap_or(self.config.enabled)
    }
}

impl HttpFilter for CompressorFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        let accept = headers::joined(&req.head.headers, &ACCEPT_ENCODING);
        let p = Self::per_route(per_route);
        let remove = p
            .and_then(|p| p.remove_accept_encoding_header)
            .unwrap_or(self.config.remove_accept_encoding_header);
        if self.enabled(p) && remove {
            req.head.headers.remove(ACCEPT_ENCODING);
        }
        self.decode_body(req);
        let state = &mut req.filter_state;
        if state.get::<Registry>().is_none() {
            state.insert(Registry::default());
        }
        if let Some(r) = state.get_mut::<Registry>() {
            r.filters.push(Arc::clone(&self.config));
            r.accepts.push(accept);
        }
        Decision::Continue
    }

    fn encodes_body(&self) -> bool {
        true
    }

    fn encode_response(
        &self,
        req: &mut RequestState<'_>,
        per_route: Option<&PerRouteFilterConfig>,
        head: &mut ResponseHead<'_>,
    ) -> Option<Box<dyn BodyEncoder>> {
        let s = self.stats.get(req.conn.worker);
        let c = &self.config;
        let p = Self::per_route(per_route);
        let enabled = self.enabled(p);
        let big_enough = enabled && {
            let ok = headers::long_enough(head.headers, c.min_content_length);
            if !ok {
                inc(&s.content_length_too_small);
            }
            ok
        };
        let compressible = big_enough
            && !c
                .uncompressible_response_codes
                .contains(&head.status.as_u16())
            // A switched protocol is not a body to compress, whatever headers the codec
            // left on the 101.
            && head.status != http::StatusCode::SWITCHING_PROTOCOLS
            && !headers::is_upgrade(head.headers)
            && {
                let ct = headers::content_type(head.headers);
                ct.is_empty() || c.content_types.contains(&ct)
            }
            && !headers::no_transform(head.headers)
            && {
                let ok = !(c.disable_on_etag_header
                    && !c.weaken_etag_on_compress
                    && head.headers.contains_key(ETAG));
                if !ok {
                    inc(&s.not_compressed_etag);
                }
                ok
            }
            && !head.headers.contains_key(CONTENT_ENCODING);
        let accepted = !head.end_stream && big_enough && {
            let seen = req
                .filter_state
                .get::<Registry>()
                .and_then(|r| r.accept_encoding(c))
                .map(str::to_string);
            match seen {
                None => {
                    inc(&s.no_accept_header);
                    false
                }
                Some(accept) => self.decide(req, &accept, head.headers, s),
            }
        };
        let mut encoder = None;
        if accepted
            && compressible
            && headers::transfer_encoding_allowed(head.headers, c.library.encoding())
        {
            match engine::Compression::new(
                &c.library,
                Arc::clone(&self.stats),
                req.conn.worker,
                engine::Direction::Response,
            ) {
                Ok(e) => {
                    headers::sanitize_etag(head.headers, c.weaken_etag_on_compress);
                    head.headers.remove(CONTENT_LENGTH);
                    head.headers.insert(
                        CONTENT_ENCODING,
                        http::HeaderValue::from_static(c.library.encoding()),
                    );
                    inc(&s.compressed);
                    encoder = Some(Box::new(e) as Box<dyn BodyEncoder>);
                }
                // The library could not start (its options): the body goes as it is.
                Err(_) => inc(&s.not_compressed),
            }
        } else {
            inc(&s.not_compressed);
        }
        // Vary even when this client did not get compression: a cache in front must know
        // another client may.
        if compressible {
            headers::insert_vary(head.headers);
        }
        encoder
    }
}

impl CompressorFilter {
    /// The request direction (Envoy's `decodeHeaders`): compresses the request body when
    /// the direction is on and the request qualifies.
    fn decode_body(&self, req: &mut RequestState<'_>) {
        let s = self.stats.get(req.conn.worker);
        let h = &req.head.headers;
        let ok = !req.end_stream
            && self.config.request.as_ref().is_some_and(|r| {
                r.enabled
                    && !headers::is_upgrade(h)
                    && {
                        let ok = headers::long_enough(h, r.min_content_length);
                        if !ok {
                            inc(&s.request_content_length_too_small);
                        }
                        ok
                    }
                    && {
                        let ct = headers::content_type(h);
                        ct.is_empty() || r.content_types.contains(&ct)
                    }
            })
            && !h.contains_key(CONTENT_ENCODING)
            && headers::transfer_encoding_allowed(h, self.config.library.encoding());
        let encoder = ok
            .then(|| {
                engine::Compression::new(
                    &self.config.library,
                    Arc::clone(&self.stats),
                    req.conn.worker,
                    engine::Direction::Request,
                )
                .ok()
            })
            .flatten();
        match encoder {
            Some(e) => {
                let h = &mut req.head.headers;
                h.remove(CONTENT_LENGTH);
                h.insert(
                    CONTENT_ENCODING,
                    http::HeaderValue::from_static(self.config.library.encoding()),
                );
                inc(&s.request_compressed);
                req.request_encoders.push(Box::new(e));
            }
            None => inc(&s.request_not_compressed),
        }
    }

    /// The chain's decision (made now if no filter made it yet) and whether it is ours,
    /// counting the `header_*` counters.
    fn decide(
        &self,
        req: &mut RequestState<'_>,
        accept: &str,
        resp: &http::HeaderMap,
        s: &CompressorStats,
    ) -> bool {
        let Some(registry) = req.filter_state.get_mut::<Registry>() else {
            return false;
        };
        let decision = match &registry.decision {
            Some(d) => d.clone(),
            None => {
                let ct = headers::content_type(resp);
                let d = negotiate::choose(&registry.filters, accept, &ct);
                registry.decision = Some(d.clone());
                d
            }
        };
        let ours = decision
            .encoding
            .eq_ignore_ascii_case(self.config.library.encoding());
        inc(match decision.stat {
            HeaderStat::ValidCompressor if ours => &s.header_compressor_used,
            HeaderStat::ValidCompressor => &s.header_compressor_overshadowed,
            HeaderStat::Identity => &s.header_identity,
            HeaderStat::Wildcard => &s.header_wildcard,
            HeaderStat::NotValid => &s.header_not_valid,
        });
        ours
    }
}

#[cfg(test)]
mod tests;
