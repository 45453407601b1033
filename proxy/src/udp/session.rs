//! One session: a downstream peer bound to a host of the cluster through an
//! upstream socket of its own (Envoy's `ActiveSession`). The listener's loop
//! sends the peer's datagrams up ([`Handle::forward`]); the session's task
//! reads the host's replies and sends them to the peer, and ends the session
//! when no datagram went either way for the idle timeout, or when the loop
//! drops its [`Handle`] (listener removed or changed, host replaced, worker
//! stopping). The line of the session's access log is written as it ends.

use super::OpenGuard;
use super::log::{Counts, Record};
use super::stats::{UdpClusterStats, UdpStats};
use crate::router::facts::Upstreamed;
use crate::upstream::UpstreamCluster;
use crate::upstream::circuit::Held;
use crate::upstream::host::{Host, HostSet};
use courier_config::listener::UdpProxy;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// The largest UDP payload, and the size of a session's receive buffer.
const MAX_UDP_DATAGRAM: usize = 65536;

/// What a session's task and the loop's handle share.
#[derive(Debug, Default)]
struct Shared {
    /// Milliseconds from the session's start to its last datagram either way.
    last_ms: AtomicU64,
    /// Set when the session's task has ended: the loop makes a new session.
    closed: AtomicBool,
    rx_bytes: AtomicU64,
    rx_datagrams: AtomicU64,
    tx_bytes: AtomicU64,
    tx_datagrams: AtomicU64,
    tx_errors: AtomicU64,
}

impl Shared {
    fn counts(&self) -> Counts {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counts {
            rx_bytes: get(&self.rx_bytes),
            rx_datagrams: get(&self.rx_datagrams),
            tx_bytes: get(&self.tx_bytes),
            tx_datagrams: get(&self.tx_datagrams),
            tx_errors: get(&self.tx_errors),
        }
    }
}

/// The listener loop's side of a session. Dropping it ends the session.
#[derive(Debug)]
pub struct Handle {
    /// The session's id.
    pub id: u64,
    /// Its host.
    pub host: Arc<Host>,
    /// The version of the cluster it was made with.
    pub cluster: Arc<courier_config::cluster::Cluster>,
    /// The cluster's host set its host was last seen in.
    hosts: Arc<HostSet>,
    upstream: Arc<UdpSocket>,
    shared: Arc<Shared>,
    started: Instant,
    cluster_stats: Arc<UdpClusterStats>,
    _stop: oneshot::Sender<()>,
}

impl Handle {
    /// Whether the session's task has ended (idle timeout): its datagrams
    /// go to a new session.
    pub fn closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Whether its host has left `cluster`'s hosts. Looked for only when the
    /// host set changed since the last look (a pointer compare otherwise).
    pub fn host_removed(&mut self, cluster: &UpstreamCluster) -> bool {
        let set = cluster.hosts();
        if Arc::ptr_eq(&set, &self.hosts) {
            return false;
        }
        if !set.hosts().any(|h| h.address == self.host.address) {
            return true;
        }
        self.hosts = Arc::clone(&set);
        false
    }

    /// Sends a datagram of the peer to the host, as Envoy's
    /// `ActiveSession::write` counts it.
    pub async fn forward(&self, data: &[u8], stats: &UdpStats) {
        let n = data.len() as u64;
        stats.rx_bytes.add(n);
        stats.rx_datagrams.inc();
        self.shared.rx_bytes.fetch_add(n, Ordering::Relaxed);
        self.shared.rx_datagrams.fetch_add(1, Ordering::Relaxed);
        touch(&self.shared, self.started);
        match self.upstream.send(data).await {
            Ok(_) => self.cluster_stats.tx_datagrams.inc(),
            Err(e) => {
                tracing::debug!(host = %self.host.address, error = %e, "udp proxy: send to upstream failed");
                self.cluster_stats.tx_errors.inc();
            }
        }
    }
}

fn touch(shared: &Shared, started: Instant) {
    let ms = started.elapsed().as_millis() as u64;
    shared.last_ms.fetch_max(ms, Ordering::Relaxed);
}

/// The sessions' ids (`%CONNECTION_ID%`), from 0 as Envoy's.
fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What a new session needs.
pub struct Start {
    /// The proxy's config.
    pub config: Arc<UdpProxy>,
    /// `udp.<prefix>.*`.
    pub stats: Arc<UdpStats>,
    /// `cluster.<name>.udp.*`.
    pub cluster_stats: Arc<UdpClusterStats>,
    /// The cluster and the host picked.
    pub upstream: Upstreamed,
    /// The host (also in `upstream`).
    pub host: Arc<Host>,
    /// The cluster's host set the host was picked from.
    pub hosts: Arc<HostSet>,
    /// The cluster's `max_connections` slot, held for the session's life.
    pub slot: Held,
    /// The listener's socket (replies go out through it).
    pub downstream: Arc<UdpSocket>,
    /// The local address the peer sent to.
    pub local: SocketAddr,
    /// On a wildcard listener, the address replies leave from.
    pub reply_from: Option<IpAddr>,
    /// The peer.
    pub peer: SocketAddr,
    /// Its key in the listener loop's map.
    pub key: super::Key,
    /// The proxy's own count of bytes sent back, when it logs.
    pub proxy_tx: Option<Arc<AtomicU64>>,
    /// Where the session says it ended (its key, its id).
    pub ended: mpsc::UnboundedSender<(super::Key, u64)>,
    /// Counts the session as the worker's open work.
    pub open: OpenGuard,
}

/// A session the cluster's `max_connections` refused: counted and logged
/// (`UO`) at once, as Envoy does.
pub fn overflowed(
    config: &Arc<UdpProxy>,
    stats: &UdpStats,
    cluster: &Arc<courier_config::cluster::Cluster>,
    local: SocketAddr,
    peer: SocketAddr,
) {
    stats.sess_total.inc();
    let record = Record {
        start: SystemTime::now(),
        started: Instant::now(),
        peer,
        local,
        id: next_id(),
        upstream: Upstreamed {
            host: None,
            cluster: Arc::clone(cluster),
        },
        upstream_local: None,
        flag: Some("UO"),
    };
    record.write(config, Counts::default());
}

/// Opens the session's upstream socket (connected to the host, so only its
/// datagrams come back) and starts its task. `Err`: no socket could be made.
pub fn start(s: Start) -> std::io::Result<Handle> {
    if s.host.pipe_path().is_some() {
        // A pipe endpoint's `address` is a stand-in key, not a place to
        // send datagrams to.
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a pipe endpoint cannot take UDP datagrams",
        ));
    }
    let host_addr = s.host.address;
    let bind: SocketAddr = if host_addr.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let std_socket = std::net::UdpSocket::bind(bind)?;
    std_socket.connect(host_addr)?;
    std_socket.set_nonblocking(true)?;
    let upstream = Arc::new(UdpSocket::from_std(std_socket)?);
    let id = next_id();
    let started = Instant::now();
    let shared = Arc::new(Shared::default());
    let (stop_tx, stop_rx) = oneshot::channel();
    s.stats.sess_total.inc();
    s.stats.sess_active.inc();
    tracing::debug!(downstream = %s.peer, local = %s.local, upstream = %host_addr, "udp proxy: creating new session");
    let end = End {
        record: Record {
            start: SystemTime::now(),
            started,
            peer: s.peer,
            local: s.local,
            id,
            upstream: s.upstream,
            upstream_local: upstream.local_addr().ok(),
            flag: None,
        },
        config: Arc::clone(&s.config),
        stats: Arc::clone(&s.stats),
        shared: Arc::clone(&shared),
        _slot: s.slot,
        _open: s.open,
    };
    let handle = Handle {
        id,
        host: s.host,
        cluster: Arc::clone(&end.record.upstream.cluster),
        hosts: s.hosts,
        upstream: Arc::clone(&upstream),
        shared: Arc::clone(&shared),
        started,
        cluster_stats: Arc::clone(&s.cluster_stats),
        _stop: stop_tx,
    };
    let task = Task {
        upstream,
        downstream: s.downstream,
        reply_from: s.reply_from,
        proxy_tx: s.proxy_tx,
        peer: s.peer,
        idle: s.config.idle_timeout,
        stats: s.stats,
        cluster_stats: s.cluster_stats,
        shared,
        started,
    };
    let ended = s.ended;
    let key = s.key;
    tokio::spawn(async move {
        let idle = task.run(stop_rx, &end).await;
        end.shared.closed.store(true, Ordering::Release);
        if idle {
            end.stats.idle_timeout.inc();
        }
        // The loop drops the handle (a send fails only once the loop is gone).
        let _ = ended.send((key, end.record.id));
        drop(end);
    });
    Ok(handle)
}

/// Ends a session however its task ends (even dropped with its runtime):
/// the gauge, the `max_connections` slot, the worker's count, the log line.
struct End {
    record: Record,
    config: Arc<UdpProxy>,
    stats: Arc<UdpStats>,
    shared: Arc<Shared>,
    _slot: Held,
    _open: OpenGuard,
}

impl End {
    /// A line while the session lasts (`access_log_flush_interval`).
    fn flush(&self) {
        self.record.write(&self.config, self.shared.counts());
    }
}

impl Drop for End {
    fn drop(&mut self) {
        tracing::debug!(downstream = %self.record.peer, local = %self.record.local, "udp proxy: deleting the session");
        self.shared.closed.store(true, Ordering::Release);
        self.stats.sess_active.dec();
        self.record.write(&self.config, self.shared.counts());
    }
}

struct Task {
    upstream: Arc<UdpSocket>,
    downstream: Arc<UdpSocket>,
    reply_from: Option<IpAddr>,
    proxy_tx: Option<Arc<AtomicU64>>,
    peer: SocketAddr,
    idle: Duration,
    stats: Arc<UdpStats>,
    cluster_stats: Arc<UdpClusterStats>,
    shared: Arc<Shared>,
    started: Instant,
}

impl Task {
    /// Relays the host's datagrams to the peer until the session ends;
    /// `true` when its idle timeout ended it.
    async fn run(&self, mut stop: oneshot::Receiver<()>, end: &End) -> bool {
        // Lines every `access_log_flush_interval` while the session lasts.
        let every = end.config.access_log_flush_interval;
        let mut flush_at = every.map(|d| self.started + d);
        // Envoy reads a session's socket with GRO by default (its
        // `prefer_gro` for upstream sockets), in 64 KiB buffers whatever
        // `max_rx_datagram_size` says: every datagram comes through whole.
        let mut buf = vec![0u8; MAX_UDP_DATAGRAM];
        loop {
            let last = Duration::from_millis(self.shared.last_ms.load(Ordering::Relaxed));
            let idle_at = self.started + last + self.idle;
            tokio::select! {
                _ = &mut stop => return false,
                () = async {
                    match flush_at {
                        Some(t) => tokio::time::sleep_until(t).await,
                        None => std::future::pending().await,
                    }
                } => {
                    end.flush();
                    flush_at = every.map(|d| Instant::now() + d);
                }
                () = tokio::time::sleep_until(idle_at) => {
                    let last = Duration::from_millis(self.shared.last_ms.load(Ordering::Relaxed));
                    // A datagram since the timer was set moves it on.
                    if Instant::now() >= self.started + last + self.idle {
                        return true;
                    }
                }
                r = self.upstream.recv(&mut buf) => {
                    // Any read resets the idle timer, as Envoy's `onReadReady`.
                    touch(&self.shared, self.started);
                    match r {
                        Ok(n) => self.reply(&buf[..n]).await,
                        Err(e) => {
                            tracing::debug!(peer = %self.peer, error = %e, "udp proxy: upstream read failed");
                            self.cluster_stats.rx_errors.inc();
                        }
                    }
                }
            }
        }
    }

    /// Sends a host's datagram to the peer, as Envoy's `processPacket` counts it.
    async fn reply(&self, data: &[u8]) {
        self.cluster_stats.rx_datagrams.inc();
        if let Some(tx) = &self.proxy_tx {
            // Envoy counts it before the send, whatever its outcome.
            tx.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        let sent = match self.reply_from {
            Some(from) => super::pktinfo::send(&self.downstream, data, self.peer, from).await,
            None => self.downstream.send_to(data, self.peer).await,
        };
        match sent {
            Ok(_) => {
                let n = data.len() as u64;
                self.stats.tx_bytes.add(n);
                self.stats.tx_datagrams.inc();
                self.shared.tx_bytes.fetch_add(n, Ordering::Relaxed);
                self.shared.tx_datagrams.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::debug!(peer = %self.peer, error = %e, "udp proxy: send to downstream failed");
                self.stats.tx_errors.inc();
                self.shared.tx_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
