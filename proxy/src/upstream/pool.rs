//! Per-worker connection pools, per (cluster, host): HTTP/1.1 keeps a LIFO of
//! idle keep-alive connections (a connection goes back when its response body has
//! been read to the end); HTTP/2 multiplexes streams over one connection per host,
//! opening another only when `max_concurrent_streams` streams are in flight.
//!
//! The pools live in a thread-local: a worker is one thread running one
//! current-thread runtime, so the pool needs no lock, and no borrow of it is held
//! across an await.

use super::UpstreamCluster;
use super::circuit::Counts;
use super::host::{ActiveRequest, Host, PendingOn};
use super::pending::Pending;
use super::proxy_header::Downstream;
use super::stream::UpstreamStream;
use crate::stats::ClusterStats;
use courier_config::cluster::{SocketIndex, UpstreamProtocol};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tokio::net::TcpStream;

mod auto;

/// The body type of requests sent upstream.
pub type UpstreamBody = crate::request::body::UpstreamBody;

/// (cluster, host, HIGH routing priority, TLS name, transport socket,
/// downstream connection): as in Envoy, each priority has its own pools, whose
/// connections and pending requests count against that priority's
/// circuit-breaker thresholds; each SNI / SAN a request sets
/// (`upstream_http_protocol_options`) its own ([`auto::name_id`], 0 for none);
/// each transport socket the host's metadata chose (`transport_socket_matches`)
/// its own, so that a host whose socket changed never reuses a connection made
/// with the old one; and, for a socket with `upstream_proxy_protocol`, each
/// downstream connection its own (its PROXY header names that connection;
/// [`Downstream::pool_id`], 0 for none).
pub(super) type Key = (usize, SocketAddr, bool, u64, SocketIndex, u64);

/// One worker's pool for one host and priority. It exists while it has a
/// connection (open or opening), as Envoy's pools are deleted once idle; it
/// holds its cluster's `max_connection_pools` slot that long.
struct HostPool {
    /// Idle HTTP/1.1 connections, the requests each has carried and when its
    /// `max_connection_duration` ends.
    idle_h1: Vec<(http1::SendRequest<UpstreamBody>, u32, Deadline)>,
    h2: Vec<H2Conn>,
    /// Connections open or opening ([`PoolConn`]s alive).
    conns: u32,
    /// Its cluster's name: [`sweep`] drains the pool once that name stands for
    /// another cluster (an update) or none, or its host is gone.
    cluster: Arc<str>,
    /// Sweeps in a row that found its host gone from the cluster.
    missed: u8,
    /// Its `max_connection_pools` slot; its counts wake the requests pending
    /// for a connection when one comes back idle.
    slot: super::circuit::Held,
}

/// Sweeps in a row a host must be missing before its pool is drained: an
/// endpoint set that flips back and forth (a control plane moving traffic)
/// keeps its connections instead of opening them again on each flip.
const HOST_GONE_SWEEPS: u8 = 3;

/// One connection of a [`HostPool`], open or opening; the pool goes away with
/// its last one. Its cluster's `upstream_cx_length_ms` records its life, from
/// the connect on, when it goes.
pub(super) struct PoolConn(
    Key,
    Arc<crate::stats::histograms::ClusterHistograms>,
    tokio::time::Instant,
);

impl PoolConn {
    /// Registers a connection about to be opened for `key`, creating the pool if
    /// it has none: `None` when that would pass `max_connection_pools`.
    fn open(cluster: &UpstreamCluster, key: Key, stats: &ClusterStats) -> Option<PoolConn> {
        POOLS.with(|p| {
            let mut p = p.borrow_mut();
            let conn = PoolConn(key, Arc::clone(&stats.hist), tokio::time::Instant::now());
            if let Some(pool) = p.get_mut(&key) {
                pool.conns += 1;
                return Some(conn);
            }
            let Some(slot) = cluster.circuit.try_pool(key.2) else {
                stats.cx_pool_overflow.inc();
                return None;
            };
            p.insert(
                key,
                HostPool {
                    idle_h1: Vec::new(),
                    h2: Vec::new(),
                    conns: 1,
                    cluster: Arc::from(cluster.config.name.as_str()),
                    missed: 0,
                    slot,
                },
            );
            Some(conn)
        })
    }
}

impl Drop for PoolConn {
    fn drop(&mut self) {
        self.1
            .cx_length_ms
            .record(self.2.elapsed().as_millis() as u64);
        // try_with: a connection task may end while the worker's thread-locals
        // are being torn down.
        let _ = POOLS.try_with(|p| {
            let Ok(mut p) = p.try_borrow_mut() else {
                return;
            };
            let empty = p.get_mut(&self.0).is_some_and(|pool| {
                pool.conns = pool.conns.saturating_sub(1);
                pool.conns == 0
            });
            if empty {
                p.remove(&self.0);
            }
        });
    }
}

struct H2Conn {
    send: http2::SendRequest<UpstreamBody>,
    streams: Arc<H2Streams>,
    /// When its `max_connection_duration` ends: it then takes no new stream and
    /// goes once its last one ends.
    deadline: Deadline,
}

/// When a connection's `max_connection_duration` (the cluster's
/// `common_http_protocol_options`) ends; `None`: never. Envoy drains such a
/// connection: no new request goes on it, and it closes once idle.
type Deadline = Option<tokio::time::Instant>;

/// The deadline of a connection opened now.
fn deadline(cluster: &UpstreamCluster) -> Deadline {
    cluster
        .config
        .http
        .common
        .max_connection_duration
        .map(|d| tokio::time::Instant::now() + d)
}

/// Whether `d` has passed.
fn expired(d: Deadline) -> bool {
    d.is_some_and(|d| tokio::time::Instant::now() >= d)
}

/// An HTTP/2 connection's streams in flight, and the counts of the requests
/// that may be pending for one of them.
struct H2Streams {
    open: AtomicU32,
    /// Streams ever opened: at `max_requests_per_connection` the connection
    /// takes no more and goes once its last stream ends.
    created: AtomicU32,
    counts: Arc<Counts>,
}

thread_local! {
    // Looked up twice per request (checkout and release) by keys courier makes:
    // Fx instead of SipHash, which cost ~400 instructions a lookup here.
    static POOLS: RefCell<FxHashMap<Key, HostPool>> = RefCell::new(FxHashMap::default());
}

/// Drains this worker's pools whose cluster was replaced or removed, or whose
/// host left its cluster (as Envoy drains a cluster's pools on an update): the
/// idle connections close now, the busy ones once their requests end (their
/// handles go with the pool). Without this, every cluster update would leave its
/// predecessor's idle connections open for good.
pub fn sweep(clusters: &super::ClusterManager) {
    POOLS.with(|p| {
        let Ok(mut p) = p.try_borrow_mut() else {
            return;
        };
        // Each cluster's live index and host addresses, looked up once per sweep:
        // a scan of the host set per pool would cost pools x hosts each second.
        type Live = Option<(usize, std::collections::HashSet<(SocketAddr, SocketIndex)>)>;
        let mut live: HashMap<Arc<str>, Live> = HashMap::new();
        p.retain(|&(index, addr, _, _, socket, _), pool| {
            let cluster = live.entry(Arc::clone(&pool.cluster)).or_insert_with(|| {
                clusters.get(&pool.cluster).map(|c| {
                    let hosts = c.hosts().hosts().map(|h| (h.address, h.socket)).collect();
                    (c.index, hosts)
                })
            });
            // Connections past their `max_connection_duration` close once
            // idle: an idle HTTP/1.1 one now (its sender dropped), an HTTP/2
            // one when its last stream has ended.
            pool.idle_h1.retain(|(_, _, d)| !expired(*d));
            pool.h2
                .retain(|c| !expired(c.deadline) || c.streams.open.load(Ordering::Relaxed) > 0);
            // A replaced or removed cluster's pools go at once; a missing
            // host's after a few sweeps.
            match cluster {
                Some((i, hosts)) if *i == index => {
                    if hosts.contains(&(addr, socket)) {
                        pool.missed = 0;
                    } else {
                        pool.missed = pool.missed.saturating_add(1);
                    }
                    pool.missed < HOST_GONE_SWEEPS
                }
                _ => false,
            }
        });
    });
}

/// How often a worker runs [`sweep`].
pub const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Why no response headers came back.
#[derive(Debug)]
pub enum SendError {
    /// The TCP connect failed; the OS's reason (`Connection refused`).
    ConnectFailure(String),
    /// The TCP connect took longer than `connect_timeout`.
    ConnectTimeout,
    /// The connection closed before response headers.
    Termination,
    /// The peer reset the stream (HTTP/2) or sent something unparsable.
    Reset(&'static str),
    /// A circuit breaker refused it (`max_pending_requests` waiting already).
    Overflow,
    /// A new connection pool would pass `max_connection_pools` (Envoy answers
    /// as if no host were healthy).
    PoolOverflow,
}

impl SendError {
    /// Envoy's reset reason for the local reply body.
    pub fn reason(&self) -> &'static str {
        match self {
            SendError::ConnectFailure(_) => "remote connection failure",
            SendError::ConnectTimeout => "connection timeout",
            SendError::Termination => "connection termination",
            SendError::Reset(r) => r,
            SendError::Overflow | SendError::PoolOverflow => "overflow",
        }
    }

    /// Whether a stream was attached to a connection (so `upstream_rq_total` counts it).
    pub fn attached(&self) -> bool {
        !matches!(
            self,
            SendError::ConnectFailure(_)
                | SendError::ConnectTimeout
                | SendError::Overflow
                | SendError::PoolOverflow
        )
    }

    /// The status of the local reply when no response came: 502 for a
    /// protocol error (Envoy 1.40's `return_502_for_upstream_protocol_errors`),
    /// else 503.
    pub fn status(&self) -> u16 {
        match self {
            SendError::Reset(PROTOCOL_ERROR) => 502,
            _ => 503,
        }
    }

    /// Envoy's `%RESPONSE_CODE_DETAILS%`:
    /// `upstream_reset_before_response_started{<reason>[|<transport failure>]}`,
    /// spaces as underscores.
    pub fn details(&self) -> String {
        let mut d = format!("upstream_reset_before_response_started{{{}", self.reason());
        if let SendError::ConnectFailure(why) = self {
            d.push_str("|delayed connect error: ");
            d.push_str(why);
        }
        d.push('}');
        d.replace(' ', "_")
    }

    /// Envoy's response flag.
    pub fn flag(&self) -> &'static str {
        match self {
            SendError::ConnectFailure(_) | SendError::ConnectTimeout => "UF",
            SendError::Termination => "UC",
            SendError::Reset(PROTOCOL_ERROR) => "UPE",
            SendError::Reset(_) => "UR",
            SendError::Overflow => "UO",
            SendError::PoolOverflow => "UH",
        }
    }
}

/// The reset reason of a response courier could not take: an HTTP/1.1
/// response it could not parse, or an HTTP/2 one it reset as malformed.
pub const PROTOCOL_ERROR: &str = "protocol error";

fn from_hyper(e: &hyper::Error) -> SendError {
    // h2 resets the stream of a malformed response itself (a stream error;
    // a connection error ends the connection, seen as its termination).
    let malformed = || {
        std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<h2::Error>())
            .is_some_and(|h| {
                h.is_reset() && h.is_library() && h.reason() == Some(h2::Reason::PROTOCOL_ERROR)
            })
    };
    if e.is_parse() || malformed() {
        SendError::Reset(PROTOCOL_ERROR)
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
    /// An HTTP/1.1 connection, the requests it has carried (this one
    /// included), its cluster's `max_requests_per_connection` and the end of
    /// its `max_connection_duration`.
    sender: Option<(http1::SendRequest<UpstreamBody>, u32, u32, Deadline)>,
    _stream: Option<StreamGuard>,
    _active: ActiveRequest,
    /// The circuit-breaker request slot, held until the response ends.
    _held: Option<super::circuit::Held>,
    /// The histograms the response records when it ends.
    completion: Option<crate::stats::upstream_rq::Completion>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("key", &self.key).finish()
    }
}

impl Lease {
    /// Keeps `held` (a circuit-breaker slot) until the response ends.
    pub fn hold(&mut self, held: super::circuit::Held) {
        self._held = Some(held);
    }

    /// `n` bytes of the response body arrived.
    pub fn received(&mut self, n: usize) {
        if let Some(c) = &mut self.completion {
            c.received(n);
        }
    }

    /// The response is complete: its histograms are recorded, and an
    /// HTTP/1.1 connection goes back to the pool.
    pub fn release(mut self) {
        if let Some(c) = self.completion.take() {
            c.finish();
        }
        if let Some((s, used, max, deadline)) = self.sender.take()
            && !s.is_closed()
            // At `max_requests_per_connection`, or past its
            // `max_connection_duration`, the connection closes (its sender
            // dropped) rather than going back.
            && used < max
            && !expired(deadline)
        {
            // No pool: the connection closed meanwhile; the sender is dropped.
            POOLS.with(|p| {
                if let Some(pool) = p.borrow_mut().get_mut(&self.key) {
                    pool.idle_h1.push((s, used, deadline));
                    pool.slot.counts().wake_local();
                }
            });
        }
    }
}

/// One HTTP/2 stream in flight on a pooled connection; its end wakes the
/// requests pending for a stream.
struct StreamGuard(Arc<H2Streams>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        self.0.counts.wake_local();
    }
}

/// Sends `req` to `host` over this worker's pool for `cluster`.
pub async fn send(
    cluster: &UpstreamCluster,
    host: &Arc<Host>,
    req: Request<UpstreamBody>,
    stats: &ClusterStats,
) -> Result<(Response<Incoming>, Lease), SendError> {
    send_attempt(cluster, host, req, stats)
        .await
        .map_err(|(e, _)| e)
}

/// A failed send: the error, and the request back when it was never handed to a
/// connection (the connect failed), so its body can still be sent elsewhere.
pub type Failed = (SendError, Option<Request<UpstreamBody>>);

/// [`send`], giving the request back when the connect failed.
pub async fn send_attempt(
    cluster: &UpstreamCluster,
    host: &Arc<Host>,
    req: Request<UpstreamBody>,
    stats: &ClusterStats,
) -> Result<(Response<Incoming>, Lease), Failed> {
    send_attempt_at(cluster, host, req, stats, false).await
}

/// [`send_attempt`] at a routing priority (`high`: HIGH): its own pools and
/// connection and pending-request thresholds.
pub async fn send_attempt_at(
    cluster: &UpstreamCluster,
    host: &Arc<Host>,
    mut req: Request<UpstreamBody>,
    stats: &ClusterStats,
    high: bool,
) -> Result<(Response<Incoming>, Lease), Failed> {
    let active = host.start_request();
    let downstream = downstream_of(cluster, host, &req);
    let (completion, sent) = crate::stats::upstream_rq::Completion::start(
        &stats.hist,
        &req,
        cluster.config.request_response_sizes,
    );
    if let Some(sent) = sent {
        req.body_mut().count_sent(sent);
    }
    if let Some(name) = auto::request_name(cluster, host, &req) {
        // Boxed: rare, and its state would otherwise sit in every request's future.
        return completed(
            Box::pin(auto::send_named(
                cluster, host, req, stats, high, active, name,
            ))
            .await,
            completion,
        );
    }
    let key = (
        cluster.index,
        host.address,
        high,
        0,
        host.socket,
        Downstream::pool_id(downstream.as_ref()),
    );
    let result = match cluster.config.http.protocol {
        UpstreamProtocol::Http2 => send_h2(cluster, host, key, req, stats, active).await,
        // Boxed: ALPN picks the protocol of each new connection.
        UpstreamProtocol::Auto => {
            Box::pin(auto::send(cluster, host, key, req, stats, active)).await
        }
        // use_downstream_protocol_config: the router put the request in the
        // protocol it goes in (serve_check refuses it over TLS).
        UpstreamProtocol::UseDownstream if req.version() == http::Version::HTTP_2 => {
            send_h2(cluster, host, key, req, stats, active).await
        }
        _ => {
            chunk_unknown_length(&mut req);
            send_h1(cluster, host, key, req, stats, active).await
        }
    };
    completed(result, completion)
}

/// A sent request's result, its response carrying `completion` to its end.
#[allow(clippy::result_large_err)]
fn completed(
    r: Result<(Response<Incoming>, Lease), Failed>,
    mut completion: crate::stats::upstream_rq::Completion,
) -> Result<(Response<Incoming>, Lease), Failed> {
    r.map(|(resp, mut lease)| {
        completion.response(&resp);
        lease.completion = Some(completion);
        (resp, lease)
    })
}

/// The downstream connection a request's PROXY header names, when the host's
/// socket writes one (the router puts it in the request's extensions).
fn downstream_of(
    cluster: &UpstreamCluster,
    host: &Host,
    req: &Request<UpstreamBody>,
) -> Option<Downstream> {
    cluster.proxy_protocol_for(host)?;
    req.extensions().get::<Downstream>().copied()
}

/// hyper's HTTP/1.1 client sends a GET or HEAD body of unknown length
/// as no body at all (`content-length: 0` framing): the upstream would see a
/// complete request while the downstream is still sending one (an h2 GET
/// without END_STREAM, a chunked GET). Saying `chunked` makes hyper frame it,
/// as Envoy does.
fn chunk_unknown_length(req: &mut Request<UpstreamBody>) {
    use http_body::Body as _;
    if !req.body().is_end_stream()
        && req.body().size_hint().exact().is_none()
        && !req.headers().contains_key(http::header::TRANSFER_ENCODING)
        // CONNECT bodies are tunnels (the upgrade path), not framed.
        && matches!(*req.method(), http::Method::GET | http::Method::HEAD)
    {
        req.headers_mut().insert(
            http::header::TRANSFER_ENCODING,
            http::HeaderValue::from_static("chunked"),
        );
    }
}

async fn send_h1(
    cluster: &UpstreamCluster,
    host: &Arc<Host>,
    key: Key,
    mut req: Request<UpstreamBody>,
    stats: &ClusterStats,
    active: ActiveRequest,
) -> Result<(Response<Incoming>, Lease), Failed> {
    req.body_mut()
        .keep_trailers(cluster.config.http.enable_trailers);
    let max = cluster
        .config
        .http
        .common
        .max_requests_per_connection
        .unwrap_or(u32::MAX);
    let lease = |sender: Option<(http1::SendRequest<UpstreamBody>, u32, Deadline)>| Lease {
        key,
        sender: sender.map(|(s, used, d)| (s, used, max, d)),
        _stream: None,
        _active: active,
        _held: None,
        completion: None,
    };
    // Set once the request waits for a connection (see `pending`).
    let mut pending: Option<Pending<'_>> = None;
    // Set once no idle connection served it: pending on the host (its
    // `rq_pending_active`) until connected, as in Envoy's pool.
    let mut on_host: Option<PendingOn<'_>> = None;
    // The idle connections are looked at inline, not in a function of their own:
    // each async layer moves the request and its future once more per request.
    let slot = loop {
        // A waiting request arms before it looks, so a connection freed after
        // the look still wakes it.
        let armed = pending.as_ref().map(Pending::arm);
        // Reuse the most recently returned connection first (LIFO: warm, least
        // likely to have been closed by the upstream's idle timeout).
        while let Some((mut s, used, d)) =
            POOLS.with(|p| p.borrow_mut().get_mut(&key)?.idle_h1.pop())
        {
            // Past `max_connection_duration`: it closes (dropped) unused.
            if expired(d) || s.is_closed() || (!s.is_ready() && s.ready().await.is_err()) {
                continue;
            }
            match s.try_send_request(req).await {
                Ok(resp) => return Ok((resp, lease(Some((s, used + 1, d))))),
                Err(mut e) => match e.take_message() {
                    // Never written: the connection died while idle; try another.
                    Some(r) => req = r,
                    None => return Err((from_hyper(e.error()), None)),
                },
            }
        }
        on_host.get_or_insert_with(|| PendingOn::start(host));
        if let Some(slot) = cluster.circuit.try_connection(key.2) {
            break slot;
        }
        // At max_connections: the request waits for a connection to free up
        // (arming, then looking again, on its first round).
        match (armed, &pending) {
            (Some(armed), Some(p)) => p.wait(armed).await.map_err(|e| (e, None))?,
            _ => {
                let p = Pending::start(&cluster.circuit, key.2, stats).map_err(|e| (e, None))?;
                pending = Some(p);
            }
        }
    };
    // No longer pending: connecting.
    drop(pending);
    let Some(member) = PoolConn::open(cluster, key, stats) else {
        return Err((SendError::PoolOverflow, Some(req)));
    };
    // Boxed: a new connection is rare next to a pooled one, and its connect and
    // TLS state would otherwise sit in every request's future.
    let downstream = downstream_of(cluster, host, &req);
    let stream = match Box::pin(connect(cluster, host, stats, downstream)).await {
        Ok(s) => s,
        Err(e) => return Err((e, Some(req))),
    };
    drop(on_host);
    // auto_config: the server chose HTTP/2 by ALPN.
    if auto::speaks_h2(cluster, &stream) {
        return Box::pin(auto::adopt_h2(
            cluster,
            host,
            key,
            (slot, member),
            stream,
            req,
            lease(None),
        ))
        .await;
    }
    let (mut s, conn) = http1::Builder::new()
        .writev(false)
        // `preserve_case`: the response's header names keep their case.
        .preserve_header_case(matches!(
            cluster.config.http.header_case,
            courier_config::listener::http_options::HeaderCase::Preserve { .. }
        ))
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|e| (from_hyper(&e), None))?;
    OpenConn::new(host, slot, Some(member)).drive(conn);
    let d = deadline(cluster);
    match s.send_request(req).await {
        Ok(resp) => Ok((resp, lease(Some((s, 1, d))))),
        Err(e) => Err((from_hyper(&e), None)),
    }
}

async fn send_h2(
    cluster: &UpstreamCluster,
    host: &Arc<Host>,
    key: Key,
    req: Request<UpstreamBody>,
    stats: &ClusterStats,
    active: ActiveRequest,
) -> Result<(Response<Incoming>, Lease), Failed> {
    let conn = match h2_find(cluster, key) {
        Some(c) => c,
        // Boxed: a new connection (or a wait for one) is rare next to a pooled
        // stream, and its state would otherwise sit in every request's future.
        None => match Box::pin(h2_open(
            cluster,
            host,
            key,
            stats,
            downstream_of(cluster, host, &req),
        ))
        .await
        {
            Ok(c) => c,
            Err((e, gives_back)) => return Err((e, gives_back.then_some(req))),
        },
    };
    // Awaited at one place: each await of it would take its own room in this
    // future.
    send_h2_on(key, conn, req, active).await
}

/// A pooled HTTP/2 connection to `key` with a stream to spare.
fn h2_find(cluster: &UpstreamCluster, key: Key) -> Option<H2Stream> {
    let max = cluster.config.http.http2.max_concurrent_streams;
    let lifetime = cluster
        .config
        .http
        .common
        .max_requests_per_connection
        .unwrap_or(u32::MAX);
    POOLS.with(|p| {
        let mut p = p.borrow_mut();
        let pool = p.get_mut(&key)?;
        // A connection that has carried `max_requests_per_connection` streams
        // leaves the pool once idle (its last sender dropped, it closes).
        // So does one past its `max_connection_duration`.
        pool.h2.retain(|c| {
            !c.send.is_closed()
                && ((c.streams.created.load(Ordering::Relaxed) < lifetime && !expired(c.deadline))
                    || c.streams.open.load(Ordering::Relaxed) > 0)
        });
        pool.h2
            .iter()
            .find(|c| {
                c.streams.open.load(Ordering::Relaxed) < max
                    && c.streams.created.load(Ordering::Relaxed) < lifetime
                    && !expired(c.deadline)
            })
            .map(|c| (c.send.clone(), Arc::clone(&c.streams)))
    })
}

/// A pooled HTTP/2 connection's sender and its count of open streams.
type H2Stream = (http2::SendRequest<UpstreamBody>, Arc<H2Streams>);

/// A stream for a request no pooled connection had room for: a new connection,
/// or, at `max_connections`, a stream or connection that frees up while the
/// request waits. The error says whether the request may be given back (it
/// was refused before any connection was tried).
async fn h2_open(
    cluster: &UpstreamCluster,
    host: &Arc<Host>,
    key: Key,
    stats: &ClusterStats,
    downstream: Option<Downstream>,
) -> Result<H2Stream, (SendError, bool)> {
    // Pending on the host until connected (or joined to another's connection).
    let _on_host = PendingOn::start(host);
    let slot = match cluster.circuit.try_connection(key.2) {
        Some(slot) => slot,
        None => {
            // At max_connections: wait for a stream or a connection.
            let pending = Pending::start(&cluster.circuit, key.2, stats).map_err(|e| (e, false))?;
            loop {
                let armed = pending.arm();
                if let Some(c) = h2_find(cluster, key) {
                    return Ok(c);
                }
                if let Some(slot) = cluster.circuit.try_connection(key.2) {
                    break slot;
                }
                pending.wait(armed).await.map_err(|e| (e, false))?;
            }
        }
    };
    let Some(member) = PoolConn::open(cluster, key, stats) else {
        return Err((SendError::PoolOverflow, true));
    };
    let stream = match connect(cluster, host, stats, downstream).await {
        Ok(s) => s,
        Err(e) => return Err((e, true)),
    };
    h2_join(cluster, host, key, (slot, member), stream)
        .await
        .map_err(|e| (from_hyper(&e), false))
}

/// The HTTP/2 handshake on a new connection to `key`'s host, which then joins
/// the pool: its codec runs on a task of its own, counted in `slot` (its
/// `max_connections` slot) and `member` (its pool membership).
async fn h2_join(
    cluster: &UpstreamCluster,
    host: &Arc<Host>,
    key: Key,
    (slot, member): (super::circuit::Held, PoolConn),
    stream: UpstreamStream,
) -> Result<H2Stream, hyper::Error> {
    let h2 = &cluster.config.http.http2;
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .initial_stream_window_size(h2.initial_stream_window_size)
        .initial_connection_window_size(h2.initial_connection_window_size);
    super::keepalive::apply(&mut builder, h2.keepalive.as_ref());
    let (send, conn) = builder.handshake(TokioIo::new(stream)).await?;
    OpenConn::new(host, slot, Some(member)).drive(conn);
    let streams = Arc::new(H2Streams {
        open: AtomicU32::new(0),
        created: AtomicU32::new(0),
        counts: Arc::clone(cluster.circuit.counts(key.2)),
    });
    POOLS.with(|p| {
        if let Some(pool) = p.borrow_mut().get_mut(&key) {
            pool.h2.push(H2Conn {
                send: send.clone(),
                streams: Arc::clone(&streams),
                deadline: deadline(cluster),
            });
        }
    });
    Ok((send, streams))
}

/// Sends one stream on a pooled HTTP/2 connection.
async fn send_h2_on(
    key: Key,
    (mut send, streams): H2Stream,
    mut req: Request<UpstreamBody>,
    active: ActiveRequest,
) -> Result<(Response<Incoming>, Lease), Failed> {
    // The connection's HPACK encoder keeps the values it indexes: not as slices
    // that pin the downstream connection's read buffer.
    crate::request::headers::compact(req.headers_mut());
    streams.open.fetch_add(1, Ordering::Relaxed);
    streams.created.fetch_add(1, Ordering::Relaxed);
    let guard = StreamGuard(streams);
    match send.send_request(req).await {
        Ok(resp) => Ok((
            resp,
            Lease {
                key,
                sender: None,
                _stream: Some(guard),
                _active: active,
                _held: None,
                completion: None,
            },
        )),
        Err(e) => Err((from_hyper(&e), None)),
    }
}

/// An open upstream connection, counted in its host's `cx_active`, holding its
/// cluster's `max_connections` slot and, for a pooled one, keeping its pool.
pub(crate) struct OpenConn(
    Arc<Host>,
    #[allow(dead_code)] super::circuit::Held,
    #[allow(dead_code)] Option<PoolConn>,
);

impl OpenConn {
    /// A connection of no pool (the TCP proxy's), holding its `max_connections` slot.
    pub(crate) fn unpooled(host: &Arc<Host>, slot: super::circuit::Held) -> Self {
        Self::new(host, slot, None)
    }

    pub(super) fn new(
        host: &Arc<Host>,
        slot: super::circuit::Held,
        member: Option<PoolConn>,
    ) -> Self {
        host.stats.cx_active.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(host), slot, member)
    }

    /// Runs the connection's codec `conn` on a task of its own, counted as
    /// this open connection until it ends.
    fn drive<F>(self, conn: F)
    where
        F: Future + Send + 'static,
    {
        tokio::spawn(async move {
            let _ = conn.await;
            drop(self);
        });
    }
}

impl Drop for OpenConn {
    fn drop(&mut self) {
        self.0.stats.cx_active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Opens a connection to `addr`: TCP, then the PROXY protocol header naming
/// `downstream` when the host's socket writes one, then TLS when the cluster
/// has it. All fit in `connect_timeout`, as in Envoy (whose connect timer stops
/// at the "connected" event, raised after the TLS handshake).
pub(crate) async fn connect(
    cluster: &UpstreamCluster,
    host: &Host,
    stats: &ClusterStats,
    downstream: Option<Downstream>,
) -> Result<UpstreamStream, SendError> {
    let addr = host.address;
    let began = tokio::time::Instant::now();
    stats.cx_total.inc();
    host.stats.cx_total.fetch_add(1, Ordering::Relaxed);
    let open = async {
        if let Some(path) = host.pipe_path() {
            // A pipe host: plaintext over its Unix domain socket (the data
            // plane refuses TLS to pipe hosts; one from EDS fails here).
            if cluster.tls_for(host).is_some() {
                return Err("TLS to a pipe host is not served".to_string());
            }
            if cluster.proxy_protocol_for(host).is_some() {
                return Err("a PROXY protocol header to a pipe host is not served".to_string());
            }
            return connect_unix(path)
                .await
                .map(UpstreamStream::Unix)
                .map_err(|e| {
                    tracing::debug!(path, error = %e, "upstream connect failed");
                    let text = e.to_string();
                    text.split(" (os error").next().unwrap_or(&text).to_string()
                });
        }
        let tcp = TcpStream::connect(addr).await.map_err(|e| {
            tracing::debug!(%addr, error = %e, "upstream connect failed");
            // "Connection refused (os error 111)" -> Envoy's strerror text.
            let text = e.to_string();
            text.split(" (os error").next().unwrap_or(&text).to_string()
        })?;
        let _ = tcp.set_nodelay(true);
        if let Some(k) = &cluster.config.tcp_keepalive {
            keepalive(&tcp, k);
        }
        let mut tcp = tcp;
        if let Some(version) = cluster.proxy_protocol_for(host) {
            write_proxy_header(&mut tcp, version, downstream)
                .await
                .map_err(|e| {
                    tracing::debug!(%addr, error = %e, "upstream PROXY header not written");
                    e.to_string()
                })?;
        }
        match cluster.tls_for(host) {
            None => Ok(UpstreamStream::Plain(tcp)),
            Some(tls) => match tls
                .handshake(tcp, addr, auto::current().as_ref(), host.hostname())
                .await
            {
                Ok(s) => Ok(UpstreamStream::Tls(Box::new(s))),
                Err(e) => {
                    // Envoy's local reply says only "remote connection failure"
                    // for a failed handshake; the reason goes to the debug log.
                    tracing::debug!(%addr, error = %e, "upstream TLS handshake failed");
                    Err("TLS error".to_string())
                }
            },
        }
    };
    match tokio::time::timeout(cluster.config.connect_timeout, open).await {
        Ok(Ok(s)) => {
            stats
                .hist
                .cx_connect_ms
                .record(began.elapsed().as_millis() as u64);
            Ok(s)
        }
        Ok(Err(why)) => {
            stats.cx_connect_fail.inc();
            host.stats.cx_connect_fail.fetch_add(1, Ordering::Relaxed);
            Err(SendError::ConnectFailure(why))
        }
        Err(_) => {
            stats.cx_connect_fail.inc();
            host.stats.cx_connect_fail.fetch_add(1, Ordering::Relaxed);
            stats.cx_connect_timeout.inc();
            Err(SendError::ConnectTimeout)
        }
    }
}

/// Connects to the Unix domain socket `path` (Envoy's `@name`: abstract).
/// Writes the PROXY protocol header a new connection starts with.
pub(crate) async fn write_proxy_header(
    tcp: &mut TcpStream,
    version: courier_config::cluster::ProxyProtocolVersion,
    downstream: Option<Downstream>,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let own = Downstream {
        source: tcp.local_addr()?,
        destination: tcp.peer_addr()?,
        connection: 0,
    };
    tcp.write_all(&super::proxy_header::encode(version, downstream, own))
        .await
}

pub(crate) async fn connect_unix(path: &str) -> std::io::Result<tokio::net::UnixStream> {
    tokio::net::UnixStream::connect(&*crate::maybe_tls::unix_path(path)).await
}

/// `upstream_connection_options.tcp_keepalive` on a new connection: keepalive
/// on, with the settings given (the kernel's defaults for the others). A
/// setting the kernel refuses leaves the connection as it is, as Envoy logs
/// and goes on.
fn keepalive(tcp: &TcpStream, k: &courier_config::cluster::TcpKeepalive) {
    let mut ka = socket2::TcpKeepalive::new();
    if let Some(t) = k.time {
        ka = ka.with_time(t);
    }
    if let Some(i) = k.interval {
        ka = ka.with_interval(i);
    }
    if let Some(p) = k.probes {
        ka = ka.with_retries(p);
    }
    if let Err(e) = socket2::SockRef::from(tcp).set_tcp_keepalive(&ka) {
        tracing::debug!(error = %e, "upstream TCP keepalive not set");
    }
}
