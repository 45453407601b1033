//! A worker: one OS thread, one current-thread runtime, its own listening
//! sockets, and every connection it accepts, start to end.

use crate::codec_error::CodecErrors;
use crate::conn_idle::{Activity, Tracked};
use crate::conn_manager::{self, ConnInfo};
use crate::filter_chain::{self, Codec};
use crate::http_filters::{self, HttpFilters};
use crate::listener;
use crate::request_limits::ResetStream;
use crate::router::Upstream;
use crate::router::body::Progress;
use crate::stats::{ListenerStats, WorkerStats};
use crate::tls::ServerConfigs;
use crate::upstream::ClusterManager;
use arc_swap::ArcSwap;
use courier_config::listener::hcm::HttpConnectionManager;
use courier_config::snapshot::Snapshot;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

/// How far the server has gone towards stopping; phases only move forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Accepting and serving.
    Serving,
    /// Listeners closed (`/drain_listeners`); open connections carry on.
    ListenersStopped,
    /// Listeners closed and open connections asked to finish
    /// (`/drain_listeners?graceful`): `connection: close` / GOAWAY.
    ConnectionsDraining,
    /// The server is exiting: drain, then the worker stops.
    Shutdown,
}

/// What a worker needs to start.
pub struct WorkerSetup {
    /// Worker number.
    pub index: usize,
    /// Address of each listener, by listener index.
    pub addresses: Vec<SocketAddr>,
    /// The config in force.
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    /// TLS server configs of the filter chains.
    pub tls: Arc<ServerConfigs>,
    /// This worker's stats.
    pub stats: Arc<WorkerStats>,
    /// The HTTP filter chains, shared by every worker.
    pub http_filters: Arc<HttpFilters>,
    /// The upstream clusters (host sets published by the main thread; pools and
    /// balancer cursors are this worker's own, thread-local).
    pub clusters: Arc<ClusterManager>,
    /// The server's phase.
    pub shutdown: watch::Receiver<Phase>,
    /// How long connections get to finish once draining.
    pub drain_time: Duration,
    /// Reports whether this worker bound its sockets.
    pub ready: std::sync::mpsc::Sender<Result<(), String>>,
}

/// Counts open connections so draining can wait for the last one.
#[derive(Default)]
struct Tracker {
    open: AtomicUsize,
    idle: Notify,
}

struct Open(Arc<Tracker>);

impl Drop for Open {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Runs the worker until the server drains.
pub fn run(setup: WorkerSetup) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = setup
                .ready
                .send(Err(format!("worker {}: runtime: {e}", setup.index)));
            return;
        }
    };
    runtime.block_on(serve(setup));
}

async fn serve(setup: WorkerSetup) {
    let mut listeners = Vec::with_capacity(setup.addresses.len());
    for addr in &setup.addresses {
        let bound = listener::bind(*addr, true).and_then(|s| TcpListener::from_std(s.into()));
        match bound {
            Ok(l) => listeners.push(l),
            Err(e) => {
                let _ = setup
                    .ready
                    .send(Err(format!("worker {}: bind {addr}: {e}", setup.index)));
                return;
            }
        }
    }
    let _ = setup.ready.send(Ok(()));

    // Pools of replaced or removed clusters and hosts are drained in the background.
    let sweeper = {
        let clusters = Arc::clone(&setup.clusters);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(crate::upstream::pool::SWEEP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                crate::upstream::pool::sweep(&clusters);
            }
        })
    };
    let tracker = Arc::new(Tracker::default());
    let mut accept_tasks = Vec::with_capacity(listeners.len());
    for (index, l) in listeners.into_iter().enumerate() {
        let ctx = AcceptCtx {
            listener_index: index,
            snapshot: Arc::clone(&setup.snapshot),
            tls: Arc::clone(&setup.tls),
            stats: Arc::clone(&setup.stats),
            http_filters: Arc::clone(&setup.http_filters),
            clusters: Arc::clone(&setup.clusters),
            shutdown: setup.shutdown.clone(),
            tracker: Arc::clone(&tracker),
        };
        accept_tasks.push(tokio::spawn(accept_loop(l, ctx)));
    }

    let mut shutdown = setup.shutdown.clone();
    let _ = shutdown
        .wait_for(|p| *p == Phase::Shutdown)
        .await
        .map(|_| ());
    // Stop accepting: dropping the accept tasks closes this worker's sockets.
    for t in &accept_tasks {
        t.abort();
    }
    sweeper.abort();
    let drained = async {
        loop {
            let idle = tracker.idle.notified();
            if tracker.open.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    };
    let _ = tokio::time::timeout(setup.drain_time, drained).await;
    // Lines of requests that finished while draining.
    crate::access_log::writer::flush();
}

struct AcceptCtx {
    listener_index: usize,
    snapshot: Arc<ArcSwap<Snapshot>>,
    tls: Arc<ServerConfigs>,
    stats: Arc<WorkerStats>,
    http_filters: Arc<HttpFilters>,
    clusters: Arc<ClusterManager>,
    shutdown: watch::Receiver<Phase>,
    tracker: Arc<Tracker>,
}

/// The connection manager's limits and timeouts that hyper enforces, per connection.
#[derive(Debug, Clone)]
struct Limits {
    max_headers_bytes: usize,
    max_headers_count: usize,
    idle_timeout: Option<Duration>,
    request_headers_timeout: Option<Duration>,
    stream_idle_timeout: Option<Duration>,
    h2_max_streams: u32,
    h2_stream_window: u32,
    h2_connection_window: u32,
    server_name: String,
}

/// hyper's smallest HTTP/1.1 read buffer.
const MIN_H1_BUFFER: usize = 8192;

impl Limits {
    fn of(hcm: Option<&HttpConnectionManager>) -> Self {
        let Some(h) = hcm else {
            // No connection manager (the chain vanished): Envoy's defaults.
            use courier_config::listener::http_options::{CommonHttpOptions, Http2Options};
            let (common, h2) = (CommonHttpOptions::default(), Http2Options::default());
            return Limits {
                max_headers_bytes: courier_config::listener::hcm::DEFAULT_MAX_REQUEST_HEADERS_KB
                    as usize
                    * 1024,
                max_headers_count: common.max_headers_count as usize,
                idle_timeout: common.idle_timeout,
                request_headers_timeout: None,
                stream_idle_timeout: Some(
                    courier_config::listener::hcm::DEFAULT_STREAM_IDLE_TIMEOUT,
                ),
                h2_max_streams: h2.max_concurrent_streams,
                h2_stream_window: h2.initial_stream_window_size,
                h2_connection_window: h2.initial_connection_window_size,
                server_name: "envoy".to_string(),
            };
        };
        Limits {
            max_headers_bytes: h.max_request_headers_kb as usize * 1024,
            max_headers_count: h.common_http_protocol_options.max_headers_count as usize,
            idle_timeout: h.common_http_protocol_options.idle_timeout,
            request_headers_timeout: h.request_headers_timeout,
            stream_idle_timeout: h.stream_idle_timeout,
            h2_max_streams: h.http2_protocol_options.max_concurrent_streams,
            h2_stream_window: h.http2_protocol_options.initial_stream_window_size,
            h2_connection_window: h.http2_protocol_options.initial_connection_window_size,
            server_name: h.server_name.clone(),
        }
    }

    /// The head (request line and headers) must fit hyper's read buffer: room
    /// for the limit plus the request line; the exact limit is the connection
    /// manager's (hyper's buffer cannot be smaller than 8 KiB).
    fn h1_buffer(&self) -> usize {
        (self.max_headers_bytes + MIN_H1_BUFFER).max(MIN_H1_BUFFER)
    }

    /// Envoy resets an HTTP/2 stream over the limit, as the connection manager
    /// does; h2 itself answers 431 past its list size, so that is set well
    /// above the limit (still bounding what a peer can make us hold).
    fn h2_header_list(&self) -> u32 {
        u32::try_from(self.max_headers_bytes * 2 + 16 * 1024).unwrap_or(u32::MAX)
    }

    /// hyper parses at most 100 headers (Envoy's default count too) on the
    /// stack; a configured count makes it allocate and fill that many slots per
    /// request (a third of the throughput of a direct response), so it is set
    /// only above 100. Below, the connection manager enforces the count.
    fn hyper_max_headers(&self) -> Option<usize> {
        (self.max_headers_count > 100).then_some(self.max_headers_count)
    }

    fn h1(&self, b: &mut hyper::server::conn::http1::Builder) {
        b.max_buf_size(self.h1_buffer())
            .timer(TokioTimer::new())
            // hyper's default is 30 s once a timer is set; Envoy's is none, and
            // the socket wrapper keeps `request_headers_timeout` Envoy's way.
            .header_read_timeout(None);
        if let Some(n) = self.hyper_max_headers() {
            b.max_headers(n);
        }
    }

    fn h2(&self, b: &mut hyper::server::conn::http2::Builder<TokioExecutor>) {
        b.max_header_list_size(self.h2_header_list())
            .max_concurrent_streams(self.h2_max_streams)
            .initial_stream_window_size(self.h2_stream_window)
            .initial_connection_window_size(self.h2_connection_window)
            .timer(TokioTimer::new());
    }

    fn auto(&self) -> auto::Builder<TokioExecutor> {
        let mut b = auto::Builder::new(TokioExecutor::new());
        let mut h1 = b.http1();
        h1.max_buf_size(self.h1_buffer())
            .timer(TokioTimer::new())
            .header_read_timeout(None);
        if let Some(n) = self.hyper_max_headers() {
            h1.max_headers(n);
        }
        b.http2()
            .max_header_list_size(self.h2_header_list())
            .max_concurrent_streams(self.h2_max_streams)
            .initial_stream_window_size(self.h2_stream_window)
            .initial_connection_window_size(self.h2_connection_window)
            .timer(TokioTimer::new());
        b
    }
}

/// Drives a hyper connection (`$conn`, any of hyper's connection types) to its
/// end; once the server drains, or the connection has been idle for
/// `$idle_timeout`, shuts it down gracefully and lets it finish.
macro_rules! serve_until_drained {
    ($conn:expr, $shutdown:ident, $activity:ident, $idle_timeout:expr) => {{
        let conn = $conn;
        tokio::pin!(conn);
        let drain = async {
            // The watch guard must not live across the await below.
            let _ = $shutdown
                .wait_for(|p| *p >= Phase::ConnectionsDraining)
                .await;
        };
        let idle = async {
            match $idle_timeout {
                Some(t) => $activity.idle_for(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = conn.as_mut() => {}
            () = idle => {
                // Connection: close on an idle HTTP/1.1 connection, GOAWAY on HTTP/2.
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            }
            () = drain => {
                // Connection: close on HTTP/1.1, GOAWAY on HTTP/2; in-flight requests finish.
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            }
        }
    }};
}

/// Whether `disable_http_keepalive` applies to a response of an HTTP/1 stream.
fn keepalive_off(h1: bool) -> bool {
    h1 && crate::overload::get().keepalive_disabled()
}

/// A connection counted in its listener's `downstream_cx_active` until dropped.
struct ActiveCx(Arc<ListenerStats>);

impl Drop for ActiveCx {
    fn drop(&mut self) {
        self.0.cx_active.dec();
    }
}

async fn accept_loop(listener: TcpListener, ctx: AcceptCtx) {
    let listener_stats = ctx.stats.listener(ctx.listener_index);
    let overload = crate::overload::get();
    // The runtime's `envoy.resource_limits.listener.<name>.connection_limit`.
    let connection_limit = ctx
        .snapshot
        .load()
        .listeners
        .get(ctx.listener_index)
        .and_then(|l| overload.listener_limit(&l.name));
    let mut phase = ctx.shutdown.clone();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            // Returning drops (closes) this worker's socket: new connections
            // are refused once every worker has closed its own.
            _ = phase.wait_for(|p| *p >= Phase::ListenersStopped) => return,
        };
        let (stream, peer) = match accepted {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        // Over a connection limit or overloaded: closed at once, and counted.
        let slots = match overload.admit(connection_limit.as_ref()) {
            Ok(slots) => slots,
            Err(refused) => {
                use crate::overload::Refused;
                match refused {
                    Refused::Global => listener_stats.global_cx_overflow.inc(),
                    Refused::Listener => listener_stats.cx_overflow.inc(),
                    Refused::Overloaded => listener_stats.cx_overload_reject.inc(),
                }
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        listener_stats.cx_total.inc();
        listener_stats.cx_active.inc();
        let active = ActiveCx(Arc::clone(&listener_stats));
        ctx.tracker.open.fetch_add(1, Ordering::AcqRel);
        let open = Open(Arc::clone(&ctx.tracker));
        let listener_index = ctx.listener_index;
        let local = stream.local_addr().unwrap_or(peer);
        let clusters = Arc::clone(&ctx.clusters);
        let snapshot = Arc::clone(&ctx.snapshot);
        let tls = Arc::clone(&ctx.tls);
        let worker_stats = Arc::clone(&ctx.stats);
        let http_filters = Arc::clone(&ctx.http_filters);
        let mut shutdown = ctx.shutdown.clone();
        tokio::spawn(async move {
            let _slots = slots;
            let _open = open;
            let _active = active;
            // The filter chain (and TLS) first; a connection no chain takes is closed.
            let (stream, info, codec, limits) = {
                // An owned snapshot: a guard must not be held across the handshake.
                let current = snapshot.load_full();
                let Some(l) = current.listeners.get(listener_index) else {
                    return;
                };
                let accepted = match filter_chain::accept(stream, l, &tls).await {
                    Ok(a) => a,
                    Err(e @ filter_chain::Refused::Config(_)) => {
                        tracing::warn!(error = %e, "connection closed before HTTP");
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "connection closed before HTTP");
                        return;
                    }
                };
                let chain = filter_chain::chain_at(l, accepted.filter_chain_index);
                let codec = chain.map_or(Codec::Auto, |fc| {
                    let codec_type = fc.http_connection_manager.codec_type;
                    filter_chain::codec(codec_type, accepted.alpn.as_deref())
                });
                let limits = Limits::of(chain.map(|fc| &*fc.http_connection_manager));
                let filters = http_filters.chain(listener_index, accepted.filter_chain_index);
                let info = Arc::new(ConnInfo {
                    listener_index,
                    filter_chain_index: accepted.filter_chain_index,
                    peer,
                    local,
                    tls: accepted.stream.is_tls(),
                    facts: http_filters::conn_facts(
                        peer,
                        local,
                        filters.as_ref().map(|_| &accepted.stream),
                        accepted.server_name.as_deref(),
                    ),
                    http_filters: filters,
                    server_name: accepted.server_name,
                    id: conn_manager::next_connection_id(),
                });
                (accepted.stream, info, codec, limits)
            };
            let activity = Activity::new();
            let stats = worker_stats.hcm(listener_index, info.filter_chain_index);
            stats.cx_total.inc();
            stats.cx_active.inc();
            let service = {
                let stats = Arc::clone(&stats);
                let activity = Arc::clone(&activity);
                let stream_idle = limits.stream_idle_timeout;
                service_fn(move |req| {
                    let h1 = req.version() != http::Version::HTTP_2;
                    let stream = activity.stream();
                    let snapshot = snapshot.load_full();
                    let info = Arc::clone(&info);
                    let stats = Arc::clone(&stats);
                    let worker_stats = Arc::clone(&worker_stats);
                    let clusters = Arc::clone(&clusters);
                    async move {
                        let up = Upstream {
                            clusters: &clusters,
                            stats: &worker_stats,
                        };
                        let mut resp =
                            conn_manager::handle(req, &snapshot, &info, &stats, &up).await;
                        // An HTTP/2 stream the connection manager refuses is reset:
                        // hyper resets the stream of a service error.
                        if resp.extensions().get::<ResetStream>().is_some() {
                            return Err(ResetStream);
                        }
                        // `disable_http_keepalive`: hyper closes an HTTP/1.1
                        // connection after a response saying so.
                        if keepalive_off(h1) {
                            resp.headers_mut().insert(
                                http::header::CONNECTION,
                                http::HeaderValue::from_static("close"),
                            );
                        }
                        let progress = resp.extensions_mut().remove::<Arc<Progress>>();
                        Ok(resp.map(|b| Tracked::new(b, stream, stream_idle, progress)))
                    }
                })
            };
            let io = TokioIo::new(CodecErrors::new(
                stream,
                &limits.server_name,
                &activity,
                limits.request_headers_timeout,
            ));
            // The fixed codecs use hyper's own builders: hyper-util's `auto`
            // ignores `http1_only`/`http2_only` when serving with upgrades.
            match codec {
                Codec::Auto => {
                    let builder = limits.auto();
                    serve_until_drained!(
                        builder.serve_connection_with_upgrades(io, service),
                        shutdown,
                        activity,
                        limits.idle_timeout
                    );
                }
                Codec::Http1 => {
                    let mut builder = hyper::server::conn::http1::Builder::new();
                    limits.h1(&mut builder);
                    serve_until_drained!(
                        builder.serve_connection(io, service).with_upgrades(),
                        shutdown,
                        activity,
                        limits.idle_timeout
                    );
                }
                Codec::Http2 => {
                    let mut builder =
                        hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                    limits.h2(&mut builder);
                    serve_until_drained!(
                        builder.serve_connection(io, service),
                        shutdown,
                        activity,
                        limits.idle_timeout
                    );
                }
            }
            stats.cx_active.dec();
        });
    }
}
