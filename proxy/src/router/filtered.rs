//! The router's side of a cluster's upstream HTTP filters: how a filter's
//! reply answers the request, and an upgrade sent through the filters (plain
//! requests pass them in [`crate::attempt`]).

use super::Out;
use super::body::ResponseBody;
use super::upgrade;
use crate::attempt::Final;
use crate::request::local_reply::{ReplyTo, is_grpc, local_reply};
use crate::stats::ClusterStats;
use crate::upstream::UpstreamCluster;
use crate::upstream::host::Host;
use crate::upstream::pool::{SendError, UpstreamBody};
use courier_filters::LocalReply;
use http::request::Parts;
use http::{Request, Response};

/// How a filter's reply answers the request (gRPC, HEAD): read only for a
/// cluster with upstream filters.
pub(super) fn reply_to(cluster: &UpstreamCluster, parts: &Parts) -> Option<ReplyTo> {
    cluster.filters.is_some().then(|| ReplyTo {
        head: parts.method == http::Method::HEAD,
        grpc: parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|ct| is_grpc(ct.as_bytes())),
    })
}

/// A filter's reply as the attempt's response (Envoy's upstream
/// `sendLocalReply`): gRPC for a gRPC request, no response flag, no upstream
/// service time.
pub(super) fn response<R>(
    out: &Out<'_>,
    r: &LocalReply,
    to: Option<ReplyTo>,
    seen: Option<&Request<R>>,
    host: Option<&str>,
    logging: bool,
) -> Response<ResponseBody> {
    let mut resp = match to {
        Some(to) if to.grpc || to.head => {
            let mut resp = local_reply(to, r.status, r.body.clone());
            out.mutate(&mut resp, seen, host);
            resp.map(ResponseBody::from)
        }
        _ => out.local(seen, r.status, r.body.clone(), "-", host),
    };
    resp.extensions_mut().remove::<super::ResponseFlag>();
    if logging {
        resp.extensions_mut()
            .insert(super::facts::Details(r.details.to_string()));
    }
    resp
}

/// An upgrade through the cluster's upstream filters, under the route's
/// `timeout` and the cluster's `max_stream_duration` (which also ends the
/// upgraded tunnel, counted in `shared_stats`): `Err` is how it ended without
/// the upstream's answer (a filter's reply, a timeout).
pub(super) async fn upgrade(
    cluster: &UpstreamCluster,
    host: &Host,
    mut request: Request<UpstreamBody>,
    stats: &ClusterStats,
    shared_stats: &std::sync::Arc<ClusterStats>,
    timeout: Option<std::time::Duration>,
) -> Result<Result<Response<hyper::body::Incoming>, SendError>, Final> {
    let filtered = match cluster.filters.as_deref() {
        Some(f) => Some(f.decode(request.headers_mut()).map_err(Final::Local)?),
        None => None,
    };
    let now = tokio::time::Instant::now();
    let max_at = cluster
        .config
        .http
        .common
        .max_stream_duration
        .map(|d| now + d);
    let stream_end = max_at.map(|at| (at, std::sync::Arc::clone(shared_stats)));
    let mut sent = std::pin::pin!(upgrade::send(cluster, host, request, stats, stream_end));
    let route_at = timeout.map(|t| now + t);
    let last = match route_at.into_iter().chain(max_at).min() {
        Some(at) => match tokio::time::timeout_at(at, sent.as_mut()).await {
            Ok(r) => r,
            Err(_) if route_at.is_none_or(|r| max_at.is_some_and(|m| m < r)) => {
                stats.rq_max_duration_reached.inc();
                return Err(Final::MaxStreamDuration);
            }
            Err(_) => return Err(Final::Timeout),
        },
        None => sent.await,
    };
    if let (Ok(resp), Some(f), Some(a)) = (&last, cluster.filters.as_deref(), filtered) {
        // The upgraded stream has no trailers to wait for.
        let _ = f.encode(a, resp.status().as_u16(), resp.headers(), false);
    }
    Ok(last)
}
