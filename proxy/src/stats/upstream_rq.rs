//! What one upstream request records in its cluster's histograms when its
//! response ends: `upstream_rq_time` (and `external.`/`internal.`) and, with
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
    /// Only for clusters that track sizes (boxed: others pay nothing).
    sizes: Option<Box<Sizes>>,
}

#[derive(Debug)]
struct Sizes {
    rq_headers: u64,
    rq_headers_count: u64,
    /// Counted by the request body as it is sent (maybe on another task).
    rq_body: Arc<AtomicU64>,
    rs_headers: u64,
    rs_headers_count: u64,
    rs_body: u64,
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
    /// Starts timing `req` for `hist`; with `sizes`, measures its head and
    /// gives the counter its body must add the bytes it sends to.
    pub fn start<B>(
        hist: &Arc<ClusterHistograms>,
        req: &http::Request<B>,
        sizes: bool,
    ) -> (Self, Option<Arc<AtomicU64>>) {
        let internal = req
            .headers()
            .get("x-envoy-internal")
            .is_some_and(|v| v.as_bytes() == b"true");
        let (sizes, sent) = if sizes {
            let (rq_headers, rq_headers_count) = request_head_size(req);
            let sent = Arc::new(AtomicU64::new(0));
            let s = Sizes {
                rq_headers,
                rq_headers_count,
                rq_body: Arc::clone(&sent),
                rs_headers: 0,
                rs_headers_count: 0,
                rs_body: 0,
            };
            (Some(Box::new(s)), Some(sent))
        } else {
            (None, None)
        };
        let c = Completion {
            hist: Arc::clone(hist),
            started: Instant::now(),
            internal,
            sizes,
        };
        (c, sent)
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
        let ms = self.started.elapsed().as_millis() as u64;
        self.hist.rq_time.record(ms);
        if self.internal {
            self.hist.internal_rq_time.record(ms);
        } else {
            self.hist.external_rq_time.record(ms);
        }
        if let Some(s) = self.sizes {
            self.hist.rq_headers_size.record(s.rq_headers);
            self.hist.rq_headers_count.record(s.rq_headers_count);
            self.hist
                .rq_body_size
                .record(s.rq_body.load(Ordering::Relaxed));
            self.hist.rs_headers_size.record(s.rs_headers);
            self.hist.rs_headers_count.record(s.rs_headers_count);
            self.hist.rs_body_size.record(s.rs_body);
        }
    }
}
