//! A worker: one OS thread, one current-thread runtime, its own listening
//! sockets, and every connection it accepts, start to end.

use crate::accept::chain;
use crate::accept::listeners::{ActiveListener, ListenerSet};
use crate::request::conn::{ConnInfo, Peer};
use crate::request::snapshot::WorkerSnapshot;
use crate::stats::{ListenerStats, WorkerStats};
use crate::upstream::ClusterManager;
use arc_swap::ArcSwap;
use courier_config::snapshot::Snapshot;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{Notify, watch};

/// The address filters see for a pipe connection's ends.
const UNSPECIFIED: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

/// What a worker needs to start.
pub struct WorkerSetup {
    /// Worker number.
    pub index: usize,
    /// The listeners in force (the registry's publications).
    pub listeners: watch::Receiver<Arc<ListenerSet>>,
    /// The config in force.
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    /// This worker's stats.
    pub stats: Arc<WorkerStats>,
    /// The upstream clusters (host sets published by the main thread; pools and
    /// balancer cursors are this worker's own, thread-local).
    pub clusters: Arc<ClusterManager>,
    /// The server's phase.
    pub shutdown: watch::Receiver<crate::request::phase::Phase>,
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

/// A listener this worker accepts on: its socket's accept task and the
/// version new connections are accepted under (swapped in place on update).
struct Running {
    address: Peer,
    current: Arc<ArcSwap<ActiveListener>>,
    task: tokio::task::JoinHandle<()>,
    /// A UDP listener's loop: its versions go to it here.
    udp: Option<watch::Sender<crate::udp::Served>>,
}

/// Brings this worker's sockets in line with `set`: binds added listeners,
/// closes removed ones (and ones whose address changed, which are bound
/// anew), and swaps changed versions in on the socket they already have.
/// Returns the binds that failed.
fn reconcile(
    set: &ListenerSet,
    running: &mut HashMap<String, Running>,
    ctx: &AcceptCtx,
) -> Vec<String> {
    running.retain(|name, r| {
        let keep = set.listeners.iter().any(|l| {
            l.name() == name && l.address == r.address && l.udp.is_some() == r.udp.is_some()
        });
        if !keep {
            // Dropping the task closes this worker's socket.
            r.task.abort();
        }
        keep
    });
    let mut failed = Vec::new();
    for l in &set.listeners {
        if let Some(r) = running.get(l.name()) {
            if !Arc::ptr_eq(&r.current.load(), l) {
                r.current.store(Arc::clone(l));
                if let (Some(tx), Some(served)) = (&r.udp, &l.udp) {
                    tx.send_replace(served.clone());
                }
            }
            continue;
        }
        let addr = l.address.clone();
        if let Some(served) = &l.udp {
            // The first worker serves UDP listeners (see `udp_socket`).
            if ctx.worker != 0 {
                continue;
            }
            let socket = l
                .udp_socket()
                .unwrap_or_else(|| Err(std::io::ErrorKind::InvalidInput.into()))
                .and_then(tokio::net::UdpSocket::from_std);
            match socket {
                Ok(socket) => {
                    let (tx, rx) = watch::channel(served.clone());
                    let task = tokio::spawn(crate::udp::serve(socket, rx, udp_env(ctx)));
                    running.insert(
                        l.name().to_string(),
                        Running {
                            address: addr,
                            current: Arc::new(ArcSwap::new(Arc::clone(l))),
                            task,
                            udp: Some(tx),
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(listener = %l.name(), %addr, error = %e, "bind failed");
                    failed.push(format!("bind {addr}: {e}"));
                }
            }
            continue;
        }
        let bound = match (l.pipe_socket(), &addr) {
            // A pipe: this worker's copy of the one listening socket.
            (Some(unix), _) => unix.and_then(UnixListener::from_std).map(Listening::Unix),
            (None, Peer::Ip(ip)) => {
                crate::accept::socket::bind(*ip, true, l.config.freebind, &l.config.socket_options)
                    .and_then(|s| TcpListener::from_std(s.into()))
                    .map(Listening::Tcp)
            }
            (None, Peer::Pipe(_)) => Err(std::io::ErrorKind::InvalidInput.into()),
        };
        match bound {
            Ok(socket) => {
                let current = Arc::new(ArcSwap::new(Arc::clone(l)));
                let task = tokio::spawn(accept_loop(socket, Arc::clone(&current), ctx.clone()));
                running.insert(
                    l.name().to_string(),
                    Running {
                        address: addr,
                        current,
                        task,
                        udp: None,
                    },
                );
            }
            Err(e) => {
                tracing::warn!(listener = %l.name(), %addr, error = %e, "bind failed");
                failed.push(format!("bind {addr}: {e}"));
            }
        }
    }
    failed
}

/// What a UDP listener's loop takes from its worker: its sessions count as
/// open work, so a stopping worker waits for their log lines.
fn udp_env(ctx: &AcceptCtx) -> crate::udp::Env {
    let tracker = Arc::clone(&ctx.tracker);
    crate::udp::Env {
        clusters: Arc::clone(&ctx.clusters),
        worker_stats: Arc::clone(&ctx.stats),
        open: Arc::new(move || {
            tracker.open.fetch_add(1, Ordering::AcqRel);
            Box::new(Open(Arc::clone(&tracker)))
        }),
    }
}

async fn serve(setup: WorkerSetup) {
    let tracker = Arc::new(Tracker::default());
    let ctx = AcceptCtx {
        snapshot: Arc::new(WorkerSnapshot::new(Arc::clone(&setup.snapshot))),
        stats: Arc::clone(&setup.stats),
        clusters: Arc::clone(&setup.clusters),
        shutdown: setup.shutdown.clone(),
        tracker: Arc::clone(&tracker),
        drain_time: setup.drain_time,
        worker: setup.index,
    };
    let mut set = setup.listeners.clone();
    let mut running = HashMap::new();
    let initial = Arc::clone(&set.borrow_and_update());
    let failed = reconcile(&initial, &mut running, &ctx);
    if let Some(e) = failed.first() {
        let _ = setup
            .ready
            .send(Err(format!("worker {}: {e}", setup.index)));
        return;
    }
    let _ = setup.ready.send(Ok(()));

    // This worker's OpenTelemetry exporter and Zipkin reporter (spans go out
    // through its own pools).
    let client = crate::upstream::client::ClusterClient::new(Arc::clone(&setup.clusters));
    crate::trace::export::start(client.clone());
    crate::access_log::otel::start(client.clone());
    crate::access_log::grpc_als::start(Arc::clone(&setup.clusters), |clusters, cluster| {
        Box::pin(async move {
            crate::xds::grpc_channel(&clusters, &cluster)
                .await
                .map_err(|e| e.to_string())
        })
    });
    crate::trace::zipkin_export::start(client.clone());
    crate::trace::datadog_export::start(client);

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

    let mut shutdown = setup.shutdown.clone();
    loop {
        let changed = async {
            if set.changed().await.is_err() {
                // The registry is gone: the server is stopping.
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = shutdown.wait_for(|p| *p == crate::request::phase::Phase::Shutdown) => break,
            () = changed => {
                let next = Arc::clone(&set.borrow_and_update());
                reconcile(&next, &mut running, &ctx);
            }
        }
    }
    // Stop accepting: dropping the accept tasks closes this worker's sockets.
    for r in running.values() {
        r.task.abort();
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
    crate::access_log::writer::flush_at_exit();
    // Spans too: their export calls get a moment before the runtime stops.
    let logs =
        crate::access_log::otel::flush_at_exit() | crate::access_log::grpc_als::flush_at_exit();
    let otel = crate::trace::export::flush_at_exit() || logs;
    let datadog = crate::trace::datadog_export::flush_at_exit();
    if crate::trace::zipkin_export::flush_at_exit() || otel || datadog {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[derive(Clone)]
struct AcceptCtx {
    /// The config in force, through this worker's own handle.
    snapshot: Arc<WorkerSnapshot>,
    stats: Arc<WorkerStats>,
    clusters: Arc<ClusterManager>,
    shutdown: watch::Receiver<crate::request::phase::Phase>,
    tracker: Arc<Tracker>,
    drain_time: Duration,
    /// The worker's number (its copy of the filters' per-worker counters).
    worker: usize,
}

/// A connection counted in its listener's `downstream_cx_active` until
/// dropped, when its `downstream_cx_length_ms` records how long it lived.
struct ActiveCx(Arc<ListenerStats>, tokio::time::Instant);

impl Drop for ActiveCx {
    fn drop(&mut self) {
        self.0.cx_active.dec();
        self.0
            .cx_length_ms
            .record(self.1.elapsed().as_millis() as u64);
    }
}

/// What a connection's task holds until the connection ends.
struct Guards {
    _slots: (Option<crate::overload::Slot>, Option<crate::overload::Slot>),
    _open: Open,
    _active: ActiveCx,
    /// The listener's line for the connection, written when it ends.
    _log: Option<crate::access_log::conn::ConnLog>,
    /// The chain's `connection_limit` counts (empty, unallocated, for most).
    _limits: Vec<crate::accept::connection_limit::Held>,
}

/// A connection's task: accepting (boxed), then serving in its place, so the
/// task's cell is the size of the serving future (a few pointers), not of
/// the accept state.
// Serving is the task's whole life and Accepting only its start: boxing the
// serving state would allocate once more per connection for nothing.
#[allow(clippy::large_enum_variant)]
enum ConnTask<A, T> {
    Accepting(Pin<Box<A>>),
    Serving { serving: T, _guards: Guards },
    Done,
}

impl<A, T> Future for ConnTask<A, T>
where
    A: Future<Output = Option<(T, Guards)>>,
    T: Future<Output = ()> + Unpin,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        match this {
            ConnTask::Accepting(a) => {
                let Some((serving, guards)) = ready!(a.as_mut().poll(cx)) else {
                    *this = ConnTask::Done;
                    return Poll::Ready(());
                };
                *this = ConnTask::Serving {
                    serving,
                    _guards: guards,
                };
                // Yields once before the connection reads: the connections
                // accepted together allocate their long-lived state
                // (`ConnInfo`, the serving box) side by side, before any
                // codec's buffers (freed when it parks) come between them, so
                // parked connections sit densely on few pages instead of one
                // island per freed codec.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            ConnTask::Serving { serving, .. } => {
                ready!(Pin::new(serving).poll(cx));
                *this = ConnTask::Done;
                Poll::Ready(())
            }
            ConnTask::Done => Poll::Ready(()),
        }
    }
}

/// A worker's listening socket: its own TCP socket, or its copy of a pipe
/// listener's socket.
enum Listening {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// A connection as accepted.
enum Incoming {
    Tcp(TcpStream, SocketAddr),
    Unix(UnixStream),
}

async fn accept_loop(listener: Listening, current: Arc<ArcSwap<ActiveListener>>, ctx: AcceptCtx) {
    let overload = crate::overload::get();
    let mut phase = ctx.shutdown.clone();
    let mut batch = crate::accept::batch::AcceptBatch::default();
    loop {
        let max = current.load().config.max_accepts_per_event;
        let accepted = tokio::select! {
            a = batch.accept_with(max, |cx| match &listener {
                Listening::Tcp(l) => l.poll_accept(cx).map_ok(|(s, peer)| Incoming::Tcp(s, peer)),
                Listening::Unix(l) => l.poll_accept(cx).map_ok(|(s, _)| Incoming::Unix(s)),
            }) => a,
            // Returning drops (closes) this worker's socket: new connections
            // are refused once every worker has closed its own.
            _ = phase.wait_for(|p| *p >= crate::request::phase::Phase::ListenersStopped) => return,
        };
        let incoming = match accepted {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        // The version in force now serves this connection to its end.
        let active = current.load_full();
        let listener_stats = ctx.stats.listener(active.listener_stats);
        // Over a connection limit or overloaded: closed at once, and counted.
        let slots = match overload.admit(
            active.connection_limit.as_ref(),
            active.config.ignore_global_conn_limit,
            active.config.bypass_overload_manager,
        ) {
            Ok(slots) => slots,
            Err(refused) => {
                use crate::overload::Refused;
                match refused {
                    Refused::Global => listener_stats.global_cx_overflow.inc(),
                    Refused::Listener => listener_stats.cx_overflow.inc(),
                    Refused::Overloaded => listener_stats.cx_overload_reject.inc(),
                }
                drop(incoming);
                continue;
            }
        };
        // Envoy names both ends of a pipe connection by the listener's path.
        let (peer, local) = match &incoming {
            Incoming::Tcp(stream, peer) => {
                let _ = stream.set_nodelay(true);
                let local = stream.local_addr().unwrap_or(*peer);
                (Peer::Ip(*peer), Peer::Ip(local))
            }
            Incoming::Unix(_) => (active.address.clone(), active.address.clone()),
        };
        listener_stats.cx_total.inc();
        listener_stats.cx_active.inc();
        let active_cx = ActiveCx(Arc::clone(&listener_stats), tokio::time::Instant::now());
        ctx.tracker.open.fetch_add(1, Ordering::AcqRel);
        let open = Open(Arc::clone(&ctx.tracker));
        let clusters = Arc::clone(&ctx.clusters);
        let snapshot = Arc::clone(&ctx.snapshot);
        let worker_stats = Arc::clone(&ctx.stats);
        let shutdown = ctx.shutdown.clone();
        let drain_time = ctx.drain_time;
        let worker = ctx.worker;
        // The accept phase's state is large (the listener, addresses, the
        // filter chain's box): boxed, and gone once the connection serves.
        let accepting = Box::pin(async move {
            let mut guards = Guards {
                _slots: slots,
                _open: open,
                _active: active_cx,
                _log: None,
                _limits: Vec::new(),
            };
            let l = &active.config;
            let (mut peer, mut local, mut incoming) = (peer, local, incoming);
            // The socket's own peer: network RBAC's `direct_remote_ip`.
            let direct_peer = peer.socket().unwrap_or(UNSPECIFIED);
            // The PROXY protocol header first: its addresses stand for the
            // socket's from here on (chain matching, logs, XFF).
            if let (Some(pp), Some(stats), Incoming::Tcp(stream, _)) =
                (&l.proxy_protocol, &active.proxy_protocol, &mut incoming)
            {
                let read = crate::accept::proxy_protocol::read(stream, pp, stats);
                match tokio::time::timeout(chain::ACCEPT_TIMEOUT, read).await {
                    Ok(Ok(crate::accept::proxy_protocol::Addresses::Proxied {
                        source,
                        destination,
                    })) => (peer, local) = (Peer::Ip(source), Peer::Ip(destination)),
                    Ok(Ok(crate::accept::proxy_protocol::Addresses::Own)) => {}
                    Ok(Err(_)) | Err(_) => {
                        tracing::debug!("connection closed: no valid PROXY protocol header");
                        return None;
                    }
                }
            }
            let connection_id = crate::request::conn::next_connection_id();
            let mut facts =
                crate::access_log::conn::ConnFacts::now(peer.clone(), local.clone(), connection_id);
            // The filter chain (and TLS) first; a connection no chain takes is closed.
            // Boxed: the TLS handshake's state is large, and the task's own
            // future is what an idle connection holds.
            let accepted = match incoming {
                Incoming::Tcp(stream, _) => Box::pin(chain::accept(stream, l, &active.tls)).await,
                Incoming::Unix(stream) => chain::accept_unix(stream, l),
            };
            let chain::Accepted {
                stream,
                filter_chain_index,
                alpn,
                server_name,
                fingerprints,
            } = match accepted {
                Ok(a) => a,
                Err(e @ chain::Refused::Config(_)) => {
                    tracing::warn!(error = %e, "connection closed before HTTP");
                    return None;
                }
                Err(chain::Refused::NoFilterChainMatch(sni)) => {
                    if !l.access_log.is_empty() {
                        facts.server_name = sni;
                        facts.no_filter_chain(l);
                    }
                    tracing::debug!("connection closed before HTTP: no filter chain matches");
                    return None;
                }
                Err(e @ chain::Refused::TransportSocketConnectTimeout) => {
                    guards._active.0.cx_transport_socket_connect_timeout.inc();
                    tracing::debug!(error = %e, "connection closed before HTTP");
                    return None;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "connection closed before HTTP");
                    return None;
                }
            };
            facts.server_name.clone_from(&server_name);
            let chain = crate::request::conn::chain_at(l, filter_chain_index);
            // The chain's connection limits, before its terminal filter.
            for limiter in active
                .connection_limits
                .get(filter_chain_index)
                .map_or(&[][..], Vec::as_slice)
            {
                let (held, admitted) = limiter.admit();
                guards._limits.push(held);
                if let Err(delay) = admitted {
                    // Envoy holds the connection (reading nothing) for the
                    // delay, then closes it.
                    if let Some(d) = delay.filter(|d| !d.is_zero()) {
                        tokio::time::sleep(d).await;
                    }
                    // Its listener line, as Envoy writes it at the close:
                    // nothing read, no flag.
                    if !l.access_log.is_empty() {
                        let nothing = crate::access_log::ResponseSide::default();
                        facts.write(l, None, (0, 0), nothing);
                    }
                    return None;
                }
            }
            // The chain's network RBAC filters judge the first read.
            let judges = active
                .network_rbacs
                .get(filter_chain_index)
                .cloned()
                .unwrap_or_default();
            let rbac_facts = (!judges.is_empty()).then(|| courier_filters::ConnFacts {
                worker,
                source: peer.socket().unwrap_or(UNSPECIFIED),
                ..crate::filter_chain::conn_facts(
                    direct_peer,
                    local.socket().unwrap_or(UNSPECIFIED),
                    Some(&stream),
                    server_name.as_deref(),
                )
            });
            if let Some(tcp) = chain.and_then(|fc| fc.tcp_proxy()) {
                // Envoy's SNI filter sets the port only for a client with an SNI.
                let dynamic_port = chain
                    .and_then(|fc| fc.sni_dfp.as_ref())
                    .filter(|_| server_name.as_deref().is_some_and(|n| !n.is_empty()))
                    .map(|d| d.port)
                    // Envoy's balancer ignores a port of 0 (the default's then).
                    .filter(|p| *p != 0);
                // Raw bytes to a cluster, on a task that holds the guards.
                let mut session = crate::l4::Session {
                    dynamic_port,
                    config: Arc::clone(tcp),
                    stats: active
                        .tcp_stats
                        .get(filter_chain_index)
                        .cloned()
                        .flatten()
                        .unwrap_or_default(),
                    peer,
                    local,
                    server_name,
                    fingerprints: fingerprints.clone(),
                    buffer_limit: l.per_connection_buffer_limit_bytes,
                    clusters,
                    worker_stats,
                    drain: Some((active.drain_signal(filter_chain_index), drain_time)),
                    listener_log: (!l.access_log.is_empty()).then(|| Arc::clone(l)),
                    connection_id,
                    accepted: (facts.start, facts.started),
                    rbac: None,
                };
                match rbac_facts {
                    Some(conn) => {
                        let (gated, verdict) =
                            crate::accept::network_rbac::Gate::new(stream, Some((judges, conn)));
                        session.rbac = Some(verdict);
                        crate::l4::spawn(gated, session, guards);
                    }
                    None => crate::l4::spawn(stream, session, guards),
                }
                return None;
            }
            let codec = chain
                .and_then(|fc| fc.hcm())
                .map_or(crate::codec::Codec::Auto, |h| {
                    crate::codec::codec(h.codec_type, alpn.as_deref())
                });
            let limits = active.limits(filter_chain_index);
            let filters = active
                .http_filters
                .chain(active.filters_index, filter_chain_index);
            // The filters that match on addresses are refused on pipe
            // listeners: the unspecified address stands in.
            guards._log = crate::access_log::conn::ConnLog::new(l, facts);
            let wire = guards
                ._log
                .as_ref()
                .map(crate::access_log::conn::ConnLog::wire);
            let (peer_ip, local_ip) = (
                peer.socket().unwrap_or(UNSPECIFIED),
                local.socket().unwrap_or(UNSPECIFIED),
            );
            let info = Arc::new(ConnInfo {
                listener: Arc::clone(l),
                filter_chain_index,
                peer,
                local,
                tls: stream.is_tls(),
                mtls: crate::tls::presented_cert(&stream),
                client_cert: client_cert_details(chain, &stream),
                facts: courier_filters::ConnFacts {
                    worker,
                    ..crate::filter_chain::conn_facts(
                        peer_ip,
                        local_ip,
                        filters.as_ref().map(|_| &stream),
                        server_name.as_deref(),
                    )
                },
                http_filters: filters,
                buffer_limit: u64::from(l.per_connection_buffer_limit_bytes),
                server_name,
                fingerprints,
                id: connection_id,
                wire: wire.clone(),
            });
            let conn = crate::codec::serve::Conn {
                info,
                codec,
                limits,
                snapshot,
                hcm_stats: worker_stats.hcm(active.hcm_slot(filter_chain_index)),
                worker_stats,
                clusters,
                shutdown,
                listener_drain: Some(crate::codec::serve::ListenerDrain {
                    signal: active.drain_signal(filter_chain_index),
                    drain_time,
                }),
            };
            // The version's `Arc` is not held by the connection: a retired
            // version's TLS and filters go once its last handshake is done.
            drop(active);
            // The connection's state is boxed here (see `crate::codec::serve::serve`).
            // The chain's network RBAC filters judge the first read (no
            // filters: a pass-through).
            let (stream, termination) =
                crate::accept::network_rbac::Gate::new(stream, rbac_facts.map(|c| (judges, c)));
            if let Some(log) = guards._log.as_mut() {
                log.set_termination(termination);
            }
            let stream = crate::request::wire::Counted::new(stream, wire);
            Some((crate::codec::serve::serve(stream, conn), guards))
        });
        tokio::spawn(ConnTask::Accepting(accepting));
    }
}

/// The client certificate's details a chain's connection manager writes into
/// `x-forwarded-client-cert` (`APPEND_FORWARD`, `SANITIZE_SET`), made once per
/// connection; `By` names our certificate (the chain's first: `serve_check`
/// refuses the modes where the chain's certificates name different URIs).
fn client_cert_details(
    chain: Option<&courier_config::listener::FilterChain>,
    stream: &crate::tls::DownstreamStream,
) -> Option<Box<str>> {
    use courier_config::listener::hcm::ForwardClientCert as F;
    let chain = chain?;
    let hcm = chain.hcm()?;
    if !matches!(hcm.forward_client_cert, F::AppendForward | F::SanitizeSet) {
        return None;
    }
    let local = chain
        .tls
        .as_ref()
        .and_then(|t| t.certificates.first())
        .and_then(|c| c.certificate_chain.first());
    crate::tls::xfcc::details(stream, local, hcm.client_cert_details).map(String::into_boxed_str)
}
