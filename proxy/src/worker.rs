//! A worker: one OS thread, one current-thread runtime, its own listening
//! sockets, and every connection it accepts, start to end.

use crate::conn_manager::{self, ConnInfo};
use crate::filter_chain::{self, Codec};
use crate::http_filters::{self, HttpFilters};
use crate::listener;
use crate::serve_conn;
use crate::stats::{ListenerStats, WorkerStats};
use crate::tls::ServerConfigs;
use crate::upstream::ClusterManager;
use arc_swap::ArcSwap;
use courier_config::snapshot::Snapshot;
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
        let shutdown = ctx.shutdown.clone();
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
                let limits = serve_conn::Limits::of(chain.map(|fc| &*fc.http_connection_manager));
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
                    buffer_limit: u64::from(l.per_connection_buffer_limit_bytes),
                    server_name: accepted.server_name,
                    id: conn_manager::next_connection_id(),
                });
                (accepted.stream, info, codec, limits)
            };
            let conn = serve_conn::Conn {
                info,
                codec,
                limits,
                snapshot,
                worker_stats,
                clusters,
                shutdown,
            };
            serve_conn::serve(stream, conn).await;
        });
    }
}
