//! courier's own unary calls over HTTP/2 (a gRPC `Authorization/Check`): one request
//! whose body is known up front, one response read whole. They go on per-thread
//! HTTP/2 connections driven by the `h2` crate directly rather than through hyper's
//! client: the HEADERS and the DATA frame (END_STREAM) are queued together and leave
//! in one write, on the caller's task; no dispatch channel, no body-pipe task, no
//! `content-length` to encode.
//!
//! A call goes to a host chosen by the cluster's load balancer, like every request
//! ([`super::client::ClusterClient::unary`]). Its connections are the calling thread's
//! (a thread-local: no lock, no borrow held across an await), one per host, another
//! opened only when the cluster's `max_concurrent_streams` streams are in flight; each
//! connection holds a `max_connections` slot of the cluster's circuit breakers and
//! counts in the host's `cx_active`, as the routing pool's do.

use super::UpstreamCluster;
use super::circuit::Counts;
use super::host::Host;
use super::pending::Pending;
use super::pool::{self, Key, OpenConn, SendError};
use crate::stats::ClusterStats;
use bytes::{Bytes, BytesMut};
use h2::client::{ResponseFuture, SendRequest};
use http::{HeaderMap, Request};
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll};

/// A whole response to a unary call.
#[derive(Debug)]
pub struct UnaryResponse {
    /// Status and headers.
    pub head: http::response::Parts,
    /// The body, its DATA frames joined (one frame: no copy).
    pub body: Bytes,
    /// The trailers, when the response had any.
    pub trailers: Option<HeaderMap>,
}

/// What every handle of a connection sees of it.
#[derive(Debug)]
struct ConnState {
    /// Streams in flight (counted against the cluster's `max_concurrent_streams`).
    streams: AtomicU32,
    /// Set when the connection's task ended (closed, failed, GOAWAY done).
    closed: AtomicBool,
    /// The counts of the calls that may be pending for a stream.
    counts: Arc<Counts>,
}

struct Conn {
    send: SendRequest<Bytes>,
    state: Arc<ConnState>,
    /// The last finished stream's handle, dropped when the next stream starts: dropping
    /// the last handle of a closed stream wakes the connection's task, which then polls
    /// for nothing; dropped beside `send_request` (which wakes it anyway) it costs no
    /// poll of its own. (A closing connection ends on the peer's close regardless.)
    done: Option<h2::RecvStream>,
}

thread_local! {
    static CONNS: RefCell<HashMap<Key, Vec<Conn>>> = RefCell::new(HashMap::new());
}

/// One stream in flight on a connection; its end wakes the calls pending for
/// a stream.
struct StreamGuard(Arc<ConnState>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
        self.0.counts.wake_local();
    }
}

fn from_h2(e: &h2::Error) -> SendError {
    if e.is_io() || e.is_go_away() {
        SendError::Termination
    } else if e.is_reset() {
        SendError::Reset("remote reset")
    } else {
        SendError::Reset("protocol error")
    }
}

/// Sends `head` with `body` (END_STREAM on its DATA frame, or on the HEADERS when it is
/// empty) to `host` of `cluster`, and reads the whole response. No timeout: the caller
/// bounds the call (dropping it resets the stream).
pub(super) async fn call(
    cluster: &UpstreamCluster,
    host: &Arc<Host>,
    head: Request<()>,
    body: Bytes,
    stats: &ClusterStats,
) -> Result<UnaryResponse, SendError> {
    let _active = host.start_request();
    host.stats.attached();
    // courier's own calls come on no downstream connection.
    let key = (cluster.index, host.address, false, 0, host.socket, 0);
    let max = cluster.config.http.http2.max_concurrent_streams;
    let mut req = Some((head, body));
    let (resp, stream) = match poll_fn(|cx| start_pooled(key, max, &mut req, cx)).await {
        Some(started) => started?,
        None => {
            let Some((head, body)) = req.take() else {
                return Err(SendError::Reset("protocol error"));
            };
            Box::pin(start_new(cluster, host, key, max, head, body, stats)).await?
        }
    };
    let (head, mut rx) = resp.await.map_err(|e| from_h2(&e))?.into_parts();
    // The answer is usually one DATA frame: kept without a copy.
    let mut body = Bytes::new();
    let mut more: Option<BytesMut> = None;
    // Bounded by the response: each round consumes a frame.
    while let Some(data) = rx.data().await {
        let data = data.map_err(|e| from_h2(&e))?;
        let _ = rx.flow_control().release_capacity(data.len());
        if body.is_empty() && more.is_none() {
            body = data;
        } else {
            more.get_or_insert_with(|| BytesMut::from(&body[..]))
                .extend_from_slice(&data);
        }
    }
    let trailers = rx.trailers().await.map_err(|e| from_h2(&e))?;
    park(key, &stream.0, rx);
    if let Some(m) = more {
        body = m.freeze();
    }
    Ok(UnaryResponse {
        head,
        body,
        trailers,
    })
}

type Started = (ResponseFuture, StreamGuard);

/// Keeps `rx`, a finished stream of the connection `state` is, until the next stream on
/// that connection starts (see [`Conn::done`]).
fn park(key: Key, state: &Arc<ConnState>, rx: h2::RecvStream) {
    CONNS.with(|conns| {
        if let Some(conn) = conns
            .borrow_mut()
            .get_mut(&key)
            .and_then(|c| c.iter_mut().find(|c| Arc::ptr_eq(&c.state, state)))
        {
            conn.done = Some(rx);
        }
    });
}

/// Opens the stream on one of this thread's connections to the host that has a stream
/// to spare: `Ready(None)` when there is none, `Pending` while h2 holds every candidate
/// at the server's SETTINGS_MAX_CONCURRENT_STREAMS.
fn start_pooled(
    key: Key,
    max: u32,
    req: &mut Option<(Request<()>, Bytes)>,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Started, SendError>>> {
    CONNS.with(|conns| {
        let mut conns = conns.borrow_mut();
        let Some(conns) = conns.get_mut(&key) else {
            return Poll::Ready(None);
        };
        conns.retain(|c| !c.state.closed.load(Ordering::Relaxed));
        let mut waiting = false;
        for conn in conns.iter_mut() {
            if conn.state.streams.load(Ordering::Relaxed) >= max {
                continue;
            }
            match conn.send.poll_ready(cx) {
                Poll::Ready(Ok(())) => {
                    let Some((head, body)) = req.take() else {
                        return Poll::Ready(Some(Err(SendError::Reset("protocol error"))));
                    };
                    drop(conn.done.take());
                    return Poll::Ready(Some(send(&mut conn.send, &conn.state, head, body)));
                }
                // The connection is going away: not for new streams.
                Poll::Ready(Err(_)) => conn.state.closed.store(true, Ordering::Relaxed),
                Poll::Pending => waiting = true,
            }
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(None)
        }
    })
}

/// Queues the HEADERS and the DATA frame before the connection's task runs, so they go
/// out in one write.
fn send(
    send: &mut SendRequest<Bytes>,
    state: &Arc<ConnState>,
    head: Request<()>,
    body: Bytes,
) -> Result<Started, SendError> {
    state.streams.fetch_add(1, Ordering::Relaxed);
    let guard = StreamGuard(Arc::clone(state));
    let end = body.is_empty();
    let (resp, mut tx) = send.send_request(head, end).map_err(|e| from_h2(&e))?;
    if !end {
        tx.send_data(body, true).map_err(|e| from_h2(&e))?;
    }
    Ok((resp, guard))
}

/// No pooled connection has a stream to spare: opens one (within `max_connections`,
/// else waiting as a pending request, as the routing pool does) and sends on it.
async fn start_new(
    cluster: &UpstreamCluster,
    host: &Arc<Host>,
    key: Key,
    max: u32,
    head: Request<()>,
    body: Bytes,
    stats: &ClusterStats,
) -> Result<Started, SendError> {
    let mut req = Some((head, body));
    let slot = match cluster.circuit.try_connection(key.2) {
        Some(slot) => slot,
        None => {
            let pending = Pending::start(&cluster.circuit, key.2, stats)?;
            loop {
                let armed = pending.arm();
                if let Some(started) = poll_fn(|cx| start_pooled(key, max, &mut req, cx)).await {
                    return started;
                }
                if let Some(slot) = cluster.circuit.try_connection(key.2) {
                    break slot;
                }
                pending.wait(armed).await?;
            }
        }
    };
    let stream = pool::connect(cluster, host, stats, None).await?;
    let h2c = &cluster.config.http.http2;
    let (mut tx, mut conn) = h2::client::Builder::new()
        .initial_window_size(h2c.initial_stream_window_size)
        .initial_connection_window_size(h2c.initial_connection_window_size)
        // hyper's client defaults, which the routing pool runs with.
        .initial_max_send_streams(100)
        .enable_push(false)
        .handshake::<_, Bytes>(stream)
        .await
        .map_err(|e| from_h2(&e))?;
    let state = Arc::new(ConnState {
        streams: AtomicU32::new(0),
        closed: AtomicBool::new(false),
        counts: Arc::clone(cluster.circuit.counts(key.2)),
    });
    let open = OpenConn::new(host, slot, None);
    let watched = Arc::clone(&state);
    let pings = h2c.keepalive.and_then(|k| Some((conn.ping_pong()?, k)));
    tokio::spawn(async move {
        match pings {
            // A missed ACK ends the loop, and dropping `conn` closes it.
            Some((pings, k)) => {
                tokio::select! {
                    _ = &mut conn => {}
                    () = super::keepalive::ping_loop(pings, k) => {}
                }
            }
            None => {
                let _ = conn.await;
            }
        }
        watched.closed.store(true, Ordering::Relaxed);
        drop(open);
    });
    CONNS.with(|c| {
        c.borrow_mut().entry(key).or_default().push(Conn {
            send: tx.clone(),
            state: Arc::clone(&state),
            done: None,
        });
    });
    poll_fn(|cx| tx.poll_ready(cx))
        .await
        .map_err(|e| from_h2(&e))?;
    let Some((head, body)) = req.take() else {
        return Err(SendError::Reset("protocol error"));
    };
    send(&mut tx, &state, head, body)
}

#[cfg(test)]
#[path = "unary_tests.rs"]
mod tests;
