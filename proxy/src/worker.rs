//! A worker: one OS thread, one current-thread runtime, its own listening
//! sockets, and every connection it accepts, start to end.

use crate::conn_manager::{self, ConnInfo};
use crate::listener;
use crate::router::Upstream;
use crate::stats::WorkerStats;
use crate::upstream::ClusterManager;
use arc_swap::ArcSwap;
use courier_config::snapshot::Snapshot;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

/// What a worker needs to start.
pub struct WorkerSetup {
    /// Worker number.
    pub index: usize,
    /// Address of each listener, by listener index.
    pub addresses: Vec<SocketAddr>,
    /// The config in force.
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    /// This worker's stats.
    pub stats: Arc<WorkerStats>,
    /// The upstream clusters (host sets published by the main thread; pools and
    /// balancer cursors are this worker's own, thread-local).
    pub clusters: Arc<ClusterManager>,
    /// Becomes `true` when the server drains.
    pub shutdown: watch::Receiver<bool>,
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

    let tracker = Arc::new(Tracker::default());
    let mut accept_tasks = Vec::with_capacity(listeners.len());
    for (index, l) in listeners.into_iter().enumerate() {
        let ctx = AcceptCtx {
            listener_index: index,
            snapshot: Arc::clone(&setup.snapshot),
            stats: Arc::clone(&setup.stats),
            clusters: Arc::clone(&setup.clusters),
            shutdown: setup.shutdown.clone(),
            tracker: Arc::clone(&tracker),
        };
        accept_tasks.push(tokio::spawn(accept_loop(l, ctx)));
    }

    let mut shutdown = setup.shutdown.clone();
    let _ = shutdown.wait_for(|draining| *draining).await.map(|_| ());
    // Stop accepting: dropping the accept tasks closes this worker's sockets.
    for t in &accept_tasks {
        t.abort();
    }
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
}

struct AcceptCtx {
    listener_index: usize,
    snapshot: Arc<ArcSwap<Snapshot>>,
    stats: Arc<WorkerStats>,
    clusters: Arc<ClusterManager>,
    shutdown: watch::Receiver<bool>,
    tracker: Arc<Tracker>,
}

async fn accept_loop(listener: TcpListener, ctx: AcceptCtx) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        ctx.tracker.open.fetch_add(1, Ordering::AcqRel);
        let open = Open(Arc::clone(&ctx.tracker));
        let info = Arc::new(ConnInfo {
            listener_index: ctx.listener_index,
            peer,
            local: stream.local_addr().unwrap_or(peer),
            tls: false,
        });
        let worker_stats = Arc::clone(&ctx.stats);
        let clusters = Arc::clone(&ctx.clusters);
        let snapshot = Arc::clone(&ctx.snapshot);
        let stats = ctx
            .stats
            .listeners
            .get(ctx.listener_index)
            .map(|(_, s)| Arc::clone(s))
            .unwrap_or_default();
        let mut shutdown = ctx.shutdown.clone();
        tokio::spawn(async move {
            let _open = open;
            stats.cx_total.inc();
            stats.cx_active.inc();
            let service = {
                let stats = Arc::clone(&stats);
                service_fn(move |req| {
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
                        Ok::<_, std::convert::Infallible>(
                            conn_manager::handle(req, &snapshot, &info, &stats, &up).await,
                        )
                    }
                })
            };
            let builder = auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            tokio::pin!(conn);
            let drain = async {
                // The watch guard must not live across the await below.
                let _ = shutdown.wait_for(|draining| *draining).await;
            };
            tokio::select! {
                _ = conn.as_mut() => {}
                () = drain => {
                    // Connection: close on HTTP/1.1, GOAWAY on HTTP/2; in-flight requests finish.
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            stats.cx_active.dec();
        });
    }
}
