//! UDP listeners: the `envoy.filters.udp_listener.udp_proxy` listener filter,
//! with Envoy 1.40's semantics (`UdpProxyFilter`).
//!
//! A listener's loop reads datagrams from its socket. The first datagram of
//! a downstream peer to a local address (on a wildcard listener, the
//! datagram's own destination: [`pktinfo`]) makes a session, as Envoy's
//! `createSession`: the route's cluster must be in force (else
//! `downstream_sess_no_route`), the cluster's `max_connections` must allow one
//! more session (else `upstream_cx_overflow` and a `UO` line), its balancer
//! must give a host (else `upstream_cx_none_healthy`); a refused datagram is
//! dropped. The session keeps its host for its life — unless the host turns
//! unhealthy and the balancer offers a healthy other one, or the host leaves
//! the cluster, or the cluster is replaced: the peer's next datagram then
//! makes a new session, as Envoy's would — and ends after `idle_timeout`
//! without a datagram either way ([`session`]). With per-packet load
//! balancing every datagram picks a host, and a peer has a session per host.
//!
//! Nothing is queued: a datagram is sent (or dropped) as it is read (a send
//! waits only while the kernel's socket buffer is full), and a session holds
//! one receive buffer. The channel on which sessions report their end holds
//! at most one message per session, and sessions are bounded by the
//! cluster's `max_connections`.

mod log;
mod pktinfo;
mod session;
pub mod stats;

pub use stats::{UdpListenerStats, UdpStats};

use crate::router::facts::Upstreamed;
use crate::stats::WorkerStats;
use crate::upstream::ClusterManager;
use courier_config::listener::UdpListener;
use session::Handle;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};

/// What counts a session as its worker's open work until dropped.
pub type OpenGuard = Box<dyn std::any::Any + Send + Sync>;

/// One version of a UDP listener, as its loop serves it.
#[derive(Debug, Clone)]
pub struct Served {
    /// The listener's UDP side.
    pub config: UdpListener,
    /// `udp.<stat_prefix>.*`.
    pub stats: Arc<UdpStats>,
    /// `listener.<address>.udp.*`.
    pub listener_stats: Arc<UdpListenerStats>,
}

/// What a listener's loop needs from its worker.
#[derive(Clone)]
pub struct Env {
    /// The clusters.
    pub clusters: Arc<ClusterManager>,
    /// This worker's stats (the clusters' `upstream_cx_*` counters).
    pub worker_stats: Arc<WorkerStats>,
    /// Makes the guard a session holds so its worker waits for it to end
    /// (and write its log line) when stopping.
    pub open: Arc<dyn Fn() -> OpenGuard + Send + Sync>,
}

/// Serves a UDP listener's socket until the task is dropped (listener
/// removed, worker stopping), which ends every session. A new version from
/// `served` whose UDP config differs ends the sessions too (Envoy replaces
/// the listener, and its filter's sessions with it); one that does not keeps them.
pub async fn serve(socket: UdpSocket, mut served: watch::Receiver<Served>, env: Env) {
    let socket = Arc::new(socket);
    let local = match socket.local_addr() {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, "udp proxy: the listener's socket has no address");
            return;
        }
    };
    // A wildcard listener reads each datagram's destination (see `pktinfo`).
    let mut wildcard = local.ip().is_unspecified();
    if wildcard && let Err(e) = pktinfo::enable(&socket, local.is_ipv6()) {
        tracing::warn!(%local, error = %e, "udp proxy: no destination addresses; the bound address stands in");
        wildcard = false;
    }
    let mut cur = served.borrow_and_update().clone();
    let (ended_tx, mut ended_rx) = mpsc::unbounded_channel();
    let mut sessions: HashMap<Key, Handle> = HashMap::new();
    // One byte more than the largest datagram taken: a longer one is seen as
    // truncated and dropped.
    let mut buf = vec![0u8; cur.config.max_rx_datagram_size + 1];
    let lp = Loop {
        wildcard,
        socket: Arc::clone(&socket),
        env,
        ended: ended_tx,
    };
    let mut proxy_log = lp.proxy_record(&cur);
    loop {
        tokio::select! {
            r = recv(&socket, &mut buf, wildcard, local) => match r {
                Ok((n, ..)) if n > cur.config.max_rx_datagram_size => {
                    cur.listener_stats.rx_datagram_dropped.inc();
                }
                Ok((n, peer, to)) => {
                    if let Some(p) = &mut proxy_log {
                        p.rx_bytes += n as u64;
                    }
                    let tx = proxy_log.as_ref().map(|p| &p.tx_bytes);
                    lp.datagram(&buf[..n], (peer, to), &cur, &mut sessions, tx).await;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "udp proxy: receive failed");
                    cur.stats.rx_errors.inc();
                }
            },
            Some((key, id)) = ended_rx.recv() => {
                if sessions.get(&key).is_some_and(|h| h.id == id) {
                    sessions.remove(&key);
                }
            }
            changed = served.changed() => {
                if changed.is_err() {
                    // The worker let the listener go.
                    return;
                }
                let next = served.borrow_and_update().clone();
                if next.config != cur.config {
                    // Envoy replaces the filter: its sessions end, then its
                    // own line is written, and the new one starts afresh.
                    sessions.clear();
                    drop(proxy_log.take());
                    buf.resize(next.config.max_rx_datagram_size + 1, 0);
                    proxy_log = lp.proxy_record(&next);
                }
                cur = next;
            }
        }
    }
}

/// A session's key: the peer, the local address it sent to (Envoy's
/// `LocalPeerAddresses`), and with per-packet load balancing the host.
pub type Key = (SocketAddr, SocketAddr, Option<SocketAddr>);

/// Reads a datagram: its length, the peer and the local address it was sent
/// to (the bound one, or on a wildcard listener the datagram's destination).
async fn recv(
    socket: &UdpSocket,
    buf: &mut [u8],
    wildcard: bool,
    bound: SocketAddr,
) -> std::io::Result<(usize, SocketAddr, SocketAddr)> {
    if wildcard {
        let (n, peer, to) = pktinfo::recv(socket, buf).await?;
        Ok((
            n,
            peer,
            SocketAddr::new(to.unwrap_or(bound.ip()), bound.port()),
        ))
    } else {
        let (n, peer) = socket.recv_from(buf).await?;
        Ok((n, peer, bound))
    }
}

/// The listener loop's fixed parts.
struct Loop {
    wildcard: bool,
    socket: Arc<UdpSocket>,
    env: Env,
    ended: mpsc::UnboundedSender<(Key, u64)>,
}

impl Loop {
    /// The filter's own log record, if it has a `proxy_access_log`.
    fn proxy_record(&self, cur: &Served) -> Option<log::ProxyRecord> {
        if cur.config.proxy.proxy_access_log.is_empty() {
            return None;
        }
        Some(log::ProxyRecord {
            config: Arc::clone(&cur.config.proxy),
            stats: Arc::clone(&cur.stats),
            start: std::time::SystemTime::now(),
            started: tokio::time::Instant::now(),
            rx_bytes: 0,
            tx_bytes: Arc::default(),
            _open: (self.env.open)(),
        })
    }

    /// A datagram from `peer`: to its session, made first if it has none.
    /// `proxy_tx` counts the bytes sent back for the proxy's own line.
    async fn datagram(
        &self,
        data: &[u8],
        (peer, local): (SocketAddr, SocketAddr),
        cur: &Served,
        sessions: &mut HashMap<Key, Handle>,
        proxy_tx: Option<&Arc<std::sync::atomic::AtomicU64>>,
    ) {
        let proxy = &cur.config.proxy;
        // The route, as Envoy's: the cluster must be in force (its
        // `cluster_infos_`), else the datagram has no route.
        let Some(cluster) = proxy
            .cluster
            .as_deref()
            .and_then(|name| self.env.clusters.get(name))
        else {
            cur.stats.no_route.inc();
            return;
        };
        // The hash policy's hash, for a consistent-hashing cluster's picks
        // (Envoy's UDP balancer context: the peer's IP, or the fixed key).
        let hash = proxy.hash.as_ref().map(|h| match h {
            courier_config::listener::UdpHash::SourceIp => {
                crate::upstream::hashing::xxhash64(peer.ip().to_string().as_bytes(), 0)
            }
            courier_config::listener::UdpHash::Key(k) => {
                crate::upstream::hashing::xxhash64(k.as_bytes(), 0)
            }
        });
        // Per-packet load balancing: the host first, then its session
        // (Envoy's `PerPacketLoadBalancingClusterInfo`).
        let mut replace = None;
        let key = if proxy.per_packet_load_balancing {
            let Some(host) = cluster.choose_hashed(hash) else {
                self.cluster_stats(&cluster).cx_none_healthy.inc();
                return;
            };
            let key = (peer, local, Some(host.address));
            replace = Some(host);
            key
        } else {
            (peer, local, None)
        };
        if let Some(h) = sessions.get_mut(&key)
            && (h.closed() || !Arc::ptr_eq(&h.cluster, &cluster.config) || h.host_removed(&cluster))
        {
            // Ended by its idle timeout, its cluster was replaced (CDS), or
            // its host left the cluster (EDS): Envoy's filter drops a
            // replaced cluster's sessions, and a removed host's, with them.
            sessions.remove(&key);
        }
        if let Some(h) = sessions.get(&key) {
            // Envoy: an unhealthy host's session moves to a healthy other
            // host if the balancer offers one; else it carries on (a
            // per-packet session has the host just picked).
            let better =
                if proxy.per_packet_load_balancing || crate::upstream::host::usable(&h.host) {
                    None
                } else {
                    cluster
                        .choose_hashed(hash)
                        .filter(|n| crate::upstream::host::usable(n) && !Arc::ptr_eq(n, &h.host))
                };
            if better.is_none() {
                h.forward(data, &cur.stats).await;
                return;
            }
            sessions.remove(&key);
            replace = better;
        }
        let stats = self.cluster_stats(&cluster);
        // Made when the cluster first meets the filter, as Envoy's.
        let cluster_stats = stats::cluster(&cluster.config.name);
        // Checked before a host is picked, as Envoy's `createSession`.
        let Some(slot) = cluster.circuit.try_connection(false) else {
            stats.cx_overflow.inc();
            // Envoy 1.40 makes the session before it finds the cluster full:
            // it counts in `downstream_sess_total` and logs one line, `UO`,
            // with no host and nothing moved.
            session::overflowed(proxy, &cur.stats, &cluster.config, local, peer);
            return;
        };
        let host = match replace {
            Some(h) => h,
            None => match cluster.choose_hashed(hash) {
                Some(h) => h,
                None => {
                    stats.cx_none_healthy.inc();
                    return;
                }
            },
        };
        let start = session::Start {
            config: Arc::clone(proxy),
            stats: Arc::clone(&cur.stats),
            cluster_stats,
            upstream: Upstreamed {
                host: Some(Arc::clone(&host)),
                cluster: Arc::clone(&cluster.config),
            },
            host,
            hosts: Arc::clone(&cluster.hosts()),
            slot,
            downstream: Arc::clone(&self.socket),
            local,
            reply_from: self.wildcard.then_some(local.ip()),
            peer,
            key,
            proxy_tx: proxy_tx.cloned(),
            ended: self.ended.clone(),
            open: (self.env.open)(),
        };
        match session::start(start) {
            Ok(h) => {
                h.forward(data, &cur.stats).await;
                sessions.insert(key, h);
            }
            Err(e) => {
                // Out of sockets or memory: the datagram is dropped.
                tracing::warn!(%peer, error = %e, "udp proxy: cannot open an upstream socket");
            }
        }
    }

    /// The cluster's counters on this worker (clusters added over CDS count
    /// in shared ones), as the TCP proxy finds them.
    fn cluster_stats<'a>(
        &'a self,
        c: &'a crate::upstream::UpstreamCluster,
    ) -> &'a crate::stats::ClusterStats {
        match c
            .stat_slot
            .and_then(|i| self.env.worker_stats.clusters.get(i))
        {
            Some((_, stats)) => stats,
            None => &c.stats,
        }
    }
}
