//! `request_mirror_policies`: a copy of the request, as it goes upstream, sent
//! to each mirror cluster whose `runtime_fraction` picks it, fire and forget
//! (Envoy's shadowing). The copy's response is read and dropped; its failure,
//! its time and the mirror cluster's state never touch the main response.
//!
//! A request with a body is copied as the main attempt sends it (the
//! retry's [`Tee`], up to the same buffer limit) and mirrored once it has
//! ended, as Envoy's buffered shadows; a body past the limit is not mirrored
//! (Envoy's `retry_or_shadow_abandoned`).

use super::Upstream;
use crate::request::body::{RequestBody, UpstreamBody};
use crate::request::tee::Tee;
use crate::upstream::{UpstreamCluster, pool};
use courier_config::route::mirror::{MirrorPolicy, shadow_host};
use http::{HeaderValue, Request};
use std::sync::Arc;
use std::time::Duration;

/// One copy to send.
struct Copy {
    cluster: Arc<UpstreamCluster>,
    stats: Arc<crate::stats::ClusterStats>,
    head: Request<()>,
}

/// Starts the mirrors of a request whose head (as sent upstream) is `parts`
/// and whose body is `body`; returns the body for the main request (a copying
/// one when a mirror waits for it). `timeout`: the route's, which bounds each
/// copy as Envoy's shadow requests.
pub(super) fn start(
    policies: &[MirrorPolicy],
    parts: &http::request::Parts,
    body: UpstreamBody,
    up: &Upstream<'_>,
    buffer_limit: u64,
    timeout: Option<Duration>,
) -> UpstreamBody {
    let copies: Vec<Copy> = policies
        .iter()
        .filter(|p| p.fraction.is_none_or(|f| fastrand::f64() < f))
        .filter_map(|p| copy(p, parts, up))
        .collect();
    if copies.is_empty() {
        return body;
    }
    use http_body::Body as _;
    if body.is_end_stream() {
        for c in copies {
            tokio::spawn(send(c, RequestBody::full(bytes::Bytes::new()), timeout));
        }
        return body;
    }
    let (tee, whole) = Tee::new(buffer_limit);
    tokio::spawn(async move {
        // Dropped unsent when the body failed or passed the limit.
        let Ok((data, trailers)) = whole.await else {
            return;
        };
        for c in copies {
            let body = RequestBody::replay(data.clone(), trailers.clone(), None);
            tokio::spawn(send(c, body, timeout));
        }
    });
    UpstreamBody::new(RequestBody::teed(body, tee), None)
}

/// The copy of `parts` for `policy`'s cluster (none when that cluster does
/// not exist, as Envoy then skips the shadow).
fn copy(policy: &MirrorPolicy, parts: &http::request::Parts, up: &Upstream<'_>) -> Option<Copy> {
    let cluster = up.clusters.get(&policy.cluster)?;
    let stats = match cluster.stat_slot.and_then(|i| up.stats.clusters.get(i)) {
        Some((_, s)) => Arc::clone(s),
        None => Arc::clone(&cluster.stats),
    };
    let mut head = Request::new(());
    *head.method_mut() = parts.method.clone();
    *head.uri_mut() = parts.uri.clone();
    *head.version_mut() = parts.version;
    *head.headers_mut() = parts.headers.clone();
    if policy.shadow_suffix {
        let host = parts
            .uri
            .authority()
            .map(|a| a.as_str().to_string())
            .or_else(|| {
                parts
                    .headers
                    .get(http::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .map(str::to_string)
            });
        if let Some(shadow) = host.and_then(|h| HeaderValue::from_str(&shadow_host(&h)).ok()) {
            if parts.uri.authority().is_some() {
                let mut u = parts.uri.clone().into_parts();
                u.authority = shadow.to_str().ok().and_then(|s| s.parse().ok());
                if let Ok(uri) = http::Uri::from_parts(u) {
                    *head.uri_mut() = uri;
                }
            }
            if head.headers().contains_key(http::header::HOST) {
                head.headers_mut().insert(http::header::HOST, shadow);
            }
        }
    }
    Some(Copy {
        cluster,
        stats,
        head,
    })
}

/// Sends one copy and reads its response to the end, within `timeout`.
async fn send(c: Copy, body: RequestBody, timeout: Option<Duration>) {
    let Some(host) = c.cluster.choose() else {
        c.stats.cx_none_healthy.inc();
        return;
    };
    let (parts, ()) = c.head.into_parts();
    let req = Request::from_parts(parts, UpstreamBody::new(body, None));
    let run = async {
        match pool::send(&c.cluster, &host, req, &c.stats).await {
            Ok((resp, lease)) => {
                c.stats.rq_total.inc();
                c.stats.response(resp.status().as_u16());
                host.stats.attached();
                host.stats.charge(resp.status().as_u16());
                use http_body_util::BodyExt as _;
                let _ = resp.into_body().collect().await;
                lease.release();
            }
            Err(e) => {
                if e.attached() {
                    c.stats.rq_total.inc();
                    host.stats.attached();
                }
                c.stats.response(503);
                host.stats.charge(503);
            }
        }
    };
    match timeout {
        Some(t) => {
            let _ = tokio::time::timeout(t, run).await;
        }
        None => run.await,
    }
}
