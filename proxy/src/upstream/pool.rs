//! Per-worker connection pools, per (cluster, host): HTTP/1.1 keeps a LIFO of
//! idle keep-alive connections (a connection goes back when its response body has
//! been read to the end); HTTP/2 multiplexes streams over one connection per host,
//! opening another only when `max_concurrent_streams` streams are in flight.
//!
//! The pools live in a thread-local: a worker is one thread running one
//! current-thread runtime, so the pool needs no lock, and no borrow of it is held
//! across an await.

use super::UpstreamCluster;
use super::host::{ActiveRequest, Host};
use crate::stats::ClusterStats;
use courier_config::cluster::UpstreamProtocol;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tokio::net::TcpStream;

/// The body type of requests sent upstream.
pub type UpstreamBody = crate::router::body::RequestBody;

type Key = (usize, SocketAddr);

#[derive(Default)]
struct HostPool {
    idle_h1: Vec<http1::SendRequest<UpstreamBody>>,
    h2: Vec<H2Conn>,
}

struct H2Conn {
    send: http2::SendRequest<UpstreamBody>,
    streams: Arc<AtomicU32>,
}

thread_local! {
    static POOLS: RefCell<HashMap<Key, HostPool>> = RefCell::new(HashMap::new());
}

/// Why no response headers came back.
#[derive(Debug)]
pub enum SendError {
    /// The TCP connect failed.
    ConnectFailure,
    /// The TCP connect took longer than `connect_timeout`.
    ConnectTimeout,
    /// The connection closed before response headers.
    Termination,
    /// The peer reset the stream (HTTP/2) or sent something unparsable.
    Reset(&'static str),
}

impl SendError {
    /// Envoy's reset reason for the local reply body.
    pub fn reason(&self) -> &'static str {
        match self {
            SendError::ConnectFailure => "remote connection failure",
            SendError::ConnectTimeout => "connection timeout",
            SendError::Termination => "connection termination",
            SendError::Reset(r) => r,
        }
    }

    /// Whether a stream was attached to a connection (so `upstream_rq_total` counts it).
    pub fn attached(&self) -> bool {
        !matches!(self, SendError::ConnectFailure | SendError::ConnectTimeout)
    }

    /// Envoy's response flag.
    pub fn flag(&self) -> &'static str {
        match self {
            SendError::ConnectFailure | SendError::ConnectTimeout => "UF",
            SendError::Termination => "UC",
            SendError::Reset(_) => "UR",
        }
    }
}

fn from_hyper(e: &hyper::Error) -> SendError {
    if e.is_parse() {
        SendError::Reset("protocol error")
    } else if e.is_incomplete_message() || e.is_closed() || e.is_canceled() {
        SendError::Termination
    } else {
        SendError::Reset("remote reset")
    }
}

/// A connection (or stream) in use by one request, and the host's active request
/// count; released when the response body has been read to the end, dropped
/// (closing an HTTP/1.1 connection mid-body) otherwise.
pub struct Lease {
    key: Key,
    sender: Option<http1::SendRequest<UpstreamBody>>,
    _stream: Option<StreamGuard>,
    _active: ActiveRequest,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("key", &self.key).finish()
    }
}

impl Lease {
    /// The response is complete: an HTTP/1.1 connection goes back to the pool.
    pub fn release(mut self) {
        if let Some(s) = self.sender.take()
            && !s.is_closed()
        {
            POOLS.with(|p| {
                p.borrow_mut().entry(self.key).or_default().idle_h1.push(s);
            });
        }
    }
}

/// One HTTP/2 stream in flight on a pooled connection.
struct StreamGuard(Arc<AtomicU32>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Sends `req` to `host` over this worker's pool for `cluster`.
pub async fn send(
    cluster: &UpstreamCluster,
    host: &Arc<Host>,
    req: Request<UpstreamBody>,
    stats: &ClusterStats,
) -> Result<(Response<Incoming>, Lease), SendError> {
    let active = host.start_request();
    let key = (cluster.index, host.address);
    match cluster.config.http.protocol {
        UpstreamProtocol::Http2 => send_h2(cluster, key, req, stats, active).await,
        // serve_check refuses USE_DOWNSTREAM and AUTO (ALPN needs upstream TLS).
        _ => send_h1(cluster, key, req, stats, active).await,
    }
}

async fn send_h1(
    cluster: &UpstreamCluster,
    key: Key,
    mut req: Request<UpstreamBody>,
    stats: &ClusterStats,
    active: ActiveRequest,
) -> Result<(Response<Incoming>, Lease), SendError> {
    let lease = |sender| Lease {
        key,
        sender: Some(sender),
        _stream: None,
        _active: active,
    };
    // Reuse the most recently returned connection first (LIFO: warm, least likely
    // to have been closed by the upstream's idle timeout).
    while let Some(mut s) = POOLS.with(|p| p.borrow_mut().get_mut(&key)?.idle_h1.pop()) {
        if s.is_closed() || (!s.is_ready() && s.ready().await.is_err()) {
            continue;
        }
        match s.try_send_request(req).await {
            Ok(resp) => return Ok((resp, lease(s))),
            Err(mut e) => match e.take_message() {
                // Never written: the connection died while idle; try another.
                Some(r) => req = r,
                None => return Err(from_hyper(e.error())),
            },
        }
    }
    let stream = connect(cluster, key.1, stats).await?;
    let (mut s, conn) = http1::Builder::new()
        .writev(false)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|e| from_hyper(&e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    match s.send_request(req).await {
        Ok(resp) => Ok((resp, lease(s))),
        Err(e) => Err(from_hyper(&e)),
    }
}

async fn send_h2(
    cluster: &UpstreamCluster,
    key: Key,
    req: Request<UpstreamBody>,
    stats: &ClusterStats,
    active: ActiveRequest,
) -> Result<(Response<Incoming>, Lease), SendError> {
    let max = cluster.config.http.http2.max_concurrent_streams;
    let found = POOLS.with(|p| {
        let mut p = p.borrow_mut();
        let pool = p.get_mut(&key)?;
        pool.h2.retain(|c| !c.send.is_closed());
        pool.h2
            .iter()
            .find(|c| c.streams.load(Ordering::Relaxed) < max)
            .map(|c| (c.send.clone(), Arc::clone(&c.streams)))
    });
    let (mut send, streams) = match found {
        Some(c) => c,
        None => {
            let stream = connect(cluster, key.1, stats).await?;
            let h2 = &cluster.config.http.http2;
            let (send, conn) = http2::Builder::new(TokioExecutor::new())
                .initial_stream_window_size(h2.initial_stream_window_size)
                .initial_connection_window_size(h2.initial_connection_window_size)
                .handshake(TokioIo::new(stream))
                .await
                .map_err(|e| from_hyper(&e))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            let streams = Arc::new(AtomicU32::new(0));
            POOLS.with(|p| {
                p.borrow_mut().entry(key).or_default().h2.push(H2Conn {
                    send: send.clone(),
                    streams: Arc::clone(&streams),
                });
            });
            (send, streams)
        }
    };
    streams.fetch_add(1, Ordering::Relaxed);
    let guard = StreamGuard(streams);
    match send.send_request(req).await {
        Ok(resp) => Ok((
            resp,
            Lease {
                key,
                sender: None,
                _stream: Some(guard),
                _active: active,
            },
        )),
        Err(e) => Err(from_hyper(&e)),
    }
}

async fn connect(
    cluster: &UpstreamCluster,
    addr: SocketAddr,
    stats: &ClusterStats,
) -> Result<TcpStream, SendError> {
    stats.cx_total.inc();
    match tokio::time::timeout(cluster.config.connect_timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) => {
            tracing::debug!(%addr, error = %e, "upstream connect failed");
            stats.cx_connect_fail.inc();
            Err(SendError::ConnectFailure)
        }
        Err(_) => {
            stats.cx_connect_fail.inc();
            stats.cx_connect_timeout.inc();
            Err(SendError::ConnectTimeout)
        }
    }
}
