//! What one upstream request records in its cluster's histograms when its
//! response ends: `upstream_rq_time` (and `external.`/`internal.`: from the
//! end of the request, as Envoy times it from the downstream request's end,
//! to the end of the response; not recorded when the response ends first,
//! as in Envoy) and, with
//! `track_cluster_stats.request_response_sizes`, the header and body sizes
//! as Envoy's router counts them: headers as Envoy's header map holds them
//! (name and value bytes, pseudo-headers included, the HTTP/1 `host` as
//! `:authority`), bodies as the bytes sent and received. Carried by the
//! response's connection lease; nothing is shared with other requests.

use super::histograms::ClusterHistograms;
use http::HeaderMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::time::Instant;

/// An upstream request in flight, recorded when its response ends.
#[derive(Debug)]
pub struct Completion {
    hist: Arc<ClusterHistograms>,
    started: Instant,
    internal: bool,
    /// What the request body reports as it is sent; none for a request
    /// without a body (it ended when it was dispatched).
    body: Option<Arc<BodySent>>,
    /// Only for clusters that track sizes (boxed: others pay nothing).
    sizes: Option<Box<Sizes>>,
}

#[derive(Debug)]
struct Sizes {
    rq_headers: u64,
    rq_headers_count: u64,
    rs_headers: u64,
    rs_headers_count: u64,
    rs_body: u64,
}

/// A request body's progress upstream, written as it is sent (maybe on an
/// HTTP/2 connection's task, hence atomics; nothing else writes them).
#[derive(Debug)]
pub struct BodySent {
    started: Instant,
    bytes: AtomicU64,
    /// Microseconds from `started` to the body's end; `u64::MAX` until then.
    ended_us: AtomicU64,
}

impl BodySent {
    /// `n` more bytes went.
    pub fn sent(&self, n: usize) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// The body ended (the first end counts).
    pub fn ended(&self) {
        let us = self.started.elapsed().as_micros() as u64;
        let _ = self
            .ended_us
            .compare_exchange(u64::MAX, us, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// A request head's size and entry count in Envoy's header map.
fn request_head_size<B>(req: &http::Request<B>) -> (u64, u64) {
    let uri = req.uri();
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = uri
        .authority()
        .map(|a| a.as_str().len())
        .or_else(|| req.headers().get(http::header::HOST).map(|h| h.len()));
    let scheme = uri.scheme_str().unwrap_or("http");
    let mut size = (":method".len() + req.method().as_str().len()) as u64
        + (":path".len() + path.len()) as u64
        + (":scheme".len() + scheme.len()) as u64;
    let mut count = 3;
    if let Some(a) = authority {
        size += (":authority".len() + a) as u64;
        count += 1;
    }
    let (s, c) = headers_size(req.headers(), true);
    (size + s, count + c)
}

/// The bytes and entries of `headers` (without `host` when it is the
/// `:authority`).
fn headers_size(headers: &HeaderMap, skip_host: bool) -> (u64, u64) {
    let mut size = 0;
    let mut count = 0;
    for (name, value) in headers {
        if skip_host && name == http::header::HOST {
            continue;
        }
        size += (name.as_str().len() + value.len()) as u64;
        count += 1;
    }
    (size, count)
}

impl Completion {
    /// Starts timing `req` for `hist`; with `sizes`, measures its head. A
    /// request with a body gets the [`BodySent`] its body must report to.
    pub fn start<B: http_body::Body>(
        hist: &Arc<ClusterHistograms>,
        req: &http::Request<B>,
        sizes: bool,
    ) -> (Self, Option<Arc<BodySent>>) {
        let internal = req
            .headers()
            .get("x-envoy-internal")
            .is_some_and(|v| v.as_bytes() == b"true");
        let started = Instant::now();
        let body = (!req.body().is_end_stream()).then(|| {
            Arc::new(BodySent {
                started,
                bytes: AtomicU64::new(0),
                ended_us: AtomicU64::new(u64::MAX),
            })
        });
        let sizes = sizes.then(|| {
            let (rq_headers, rq_headers_count) = request_head_size(req);
            Box::new(Sizes {
                rq_headers,
                rq_headers_count,
                rs_headers: 0,
                rs_headers_count: 0,
                rs_body: 0,
            })
        });
        let c = Completion {
            hist: Arc::clone(hist),
            started,
            internal,
            body: body.clone(),
            sizes,
        };
        (c, body)
    }

    /// The response head arrived.
    pub fn response<B>(&mut self, resp: &http::Response<B>) {
        if let Some(s) = &mut self.sizes {
            let (size, count) = headers_size(resp.headers(), false);
            s.rs_headers = (":status".len() + 3) as u64 + size;
            s.rs_headers_count = 1 + count;
        }
    }

    /// `n` response body bytes arrived.
    pub fn received(&mut self, n: usize) {
        if let Some(s) = &mut self.sizes {
            s.rs_body += n as u64;
        }
    }

    /// The response ended: records everything.
    pub fn finish(self) {
        let elapsed = self.started.elapsed().as_micros() as u64;
        let request_end = match &self.body {
            None => Some(0),
            Some(b) => Some(b.ended_us.load(Ordering::Relaxed)).filter(|us| *us != u64::MAX),
        };
        if let Some(end) = request_end {
            let ms = elapsed.saturating_sub(end) / 1000;
            self.hist.rq_time.record(ms);
            if self.internal {
                self.hist.internal_rq_time.record(ms);
            } else {
                self.hist.external_rq_time.record(ms);
            }
        }
        if let Some(s) = self.sizes {
            let sent = self
                .body
                .as_ref()
                .map_or(0, |b| b.bytes.load(Ordering::Relaxed));
            self.hist.rq_headers_size.record(s.rq_headers);
            self.hist.rq_headers_count.record(s.rq_headers_count);
            self.hist.rq_body_size.record(sent);
            self.hist.rs_headers_size.record(s.rs_headers);
            self.hist.rs_headers_count.record(s.rs_headers_count);
            self.hist.rs_body_size.record(s.rs_body);
        }
    }
}
