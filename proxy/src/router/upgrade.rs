//! Upgrades (`upgrade_configs`: WebSocket and the like) forwarded upstream: the
//! request goes over a connection of its own (an upgraded connection never
//! returns to the pool), always HTTP/1.1; when the upstream accepts with 101,
//! the 101 goes downstream and bytes are copied both ways until either side
//! closes. Any other answer is an ordinary response.

use super::body::ResponseBody;
use crate::stats::ClusterStats;
use crate::upstream::UpstreamCluster;
use crate::upstream::host::Host;
use crate::upstream::pool::SendError;
use crate::upstream::pool::UpstreamBody;
use crate::upstream::pool::connect_unix;
use crate::upstream::stream::UpstreamStream;
use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The headers an upgrade carries hop to hop, which the router strips from
/// other requests: put back after the rewrite.
pub fn restore_headers(headers: &mut http::HeaderMap, upgrade: HeaderValue) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, upgrade);
}

/// Sends the upgrade request `req` to `host`; on 101, joins the two upgraded
/// connections in a task of their own, until `stream_end` (the cluster's
/// `max_stream_duration`, counted in its stats) when there is one.
pub async fn send(
    cluster: &UpstreamCluster,
    host: &Host,
    mut req: Request<UpstreamBody>,
    stats: &ClusterStats,
    stream_end: Option<(tokio::time::Instant, std::sync::Arc<ClusterStats>)>,
) -> Result<Response<Incoming>, SendError> {
    let downstream = hyper::upgrade::on(&mut req);
    stats.cx_total.inc();
    let connect = async {
        match host.pipe_path() {
            Some(path) => connect_unix(path).await.map(UpstreamStream::Unix),
            None => TcpStream::connect(host.address).await.map(|s| {
                let _ = s.set_nodelay(true);
                UpstreamStream::Plain(s)
            }),
        }
    };
    let stream = match tokio::time::timeout(cluster.config.connect_timeout, connect).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            stats.cx_connect_fail.inc();
            // "Connection refused (os error 111)" -> Envoy's strerror text.
            let text = e.to_string();
            let why = text.split(" (os error").next().unwrap_or(&text).to_string();
            return Err(SendError::ConnectFailure(why));
        }
        Err(_) => {
            stats.cx_connect_fail.inc();
            stats.cx_connect_timeout.inc();
            return Err(SendError::ConnectTimeout);
        }
    };
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| SendError::ConnectFailure(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let mut resp = send
        .send_request(req)
        .await
        .map_err(|_| SendError::Termination)?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let upstream = hyper::upgrade::on(&mut resp);
        tokio::spawn(async move {
            let (Ok(down), Ok(up)) = tokio::join!(downstream, upstream) else {
                return;
            };
            let (mut down, mut up) = (TokioIo::new(down), TokioIo::new(up));
            let copy = tokio::io::copy_bidirectional(&mut down, &mut up);
            match stream_end {
                // Both connections close when it passes, as Envoy resets the
                // stream of an upgraded request too.
                Some((at, stats)) => {
                    if tokio::time::timeout_at(at, copy).await.is_err() {
                        stats.rq_max_duration_reached.inc();
                    }
                }
                None => {
                    let _ = copy.await;
                }
            }
        });
    }
    Ok(resp)
}

/// A response that came over an upgrade connection: not pooled, so no lease.
pub fn body(b: Incoming) -> ResponseBody {
    ResponseBody::Upstream {
        body: b,
        lease: None,
        idle: None,
        end: None,
        keep_trailers: true,
    }
}
