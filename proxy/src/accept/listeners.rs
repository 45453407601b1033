//! The listener registry: every listener in force (static and LDS), by name, as
//! runtime objects ([`ActiveListener`]: config, TLS, HTTP filters, stat slots,
//! drain signal), published to the workers as one [`ListenerSet`] through a
//! `watch` they reconcile on (bind, swap, close). Only the main thread changes
//! it; workers read their own copy of each listener lock-free (worker.rs), so
//! nothing here is on the request path.

use crate::filter_chain::HttpFilters;
use crate::overload::Limit;
use crate::request::conn::Peer;
use crate::stats::{self, WorkerStats};
use crate::tls::ServerConfigs;
use arc_swap::ArcSwap;
use courier_config::core::{Address, SocketAddress};
use courier_config::listener::Listener;
use courier_config::snapshot::Snapshot;
use envoy_types::pb::envoy::config::listener::v3::Listener as ListenerProto;
use envoy_types::pb::google::protobuf::Any;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;
use tokio::sync::watch;

/// Where an LDS listener came from (`/config_dump`).
#[derive(Debug, Clone)]
pub struct Dynamic {
    /// The version it arrived with.
    pub version_info: String,
    /// When it was accepted.
    pub last_updated: SystemTime,
    /// The listener as received (`/config_dump`; which filter chains an
    /// update leaves unchanged).
    pub raw: Any,
}

/// One version of a listener, as the workers serve it. Connections keep the
/// version they were accepted under until they end.
#[derive(Debug)]
pub struct ActiveListener {
    /// Its config.
    pub config: Arc<Listener>,
    /// The bound address (port 0 resolved), or the pipe's path.
    pub address: Peer,
    /// TLS server configs of its filter chains.
    pub tls: Arc<ServerConfigs>,
    /// Its HTTP filter chains: `http_filters.chain(filters_index, chain)`.
    pub http_filters: Arc<HttpFilters>,
    /// Its row in `http_filters` (static listeners share one table).
    pub filters_index: usize,
    /// Its slot in [`WorkerStats::listener`].
    pub listener_stats: usize,
    /// Slot in [`WorkerStats::hcm`] of each filter chain (`chain_at` order).
    pub hcm_stats: Vec<usize>,
    /// The `tcp.<stat_prefix>.*` stats of each TCP proxy chain (`chain_at` order).
    pub tcp_stats: Vec<Option<Arc<crate::l4::TcpStats>>>,
    /// Per chain (in `chain_at` order), its `connection_limit` filters' state.
    pub connection_limits: Vec<Vec<Arc<crate::accept::connection_limit::Limiter>>>,
    /// Per chain (in `chain_at` order), its `rbac` network filters.
    pub network_rbacs: Vec<Vec<Arc<crate::accept::network_rbac::Judge>>>,
    /// The PROXY protocol listener filter's stats, when the listener has it.
    pub proxy_protocol: Option<Arc<crate::accept::proxy_protocol::Stats>>,
    /// A UDP listener's proxy and stats (made with the listener, so they show
    /// in `/stats` before any datagram, as Envoy's).
    pub udp: Option<crate::udp::Served>,
    /// The connection manager's limits of each filter chain (`chain_at`
    /// order), shared by the chain's connections.
    limits: Vec<Arc<crate::codec::serve::Limits>>,
    /// The runtime's `connection_limit` of this listener, if any.
    pub connection_limit: Option<Arc<Limit>>,
    /// Set for LDS listeners.
    pub dynamic: Option<Dynamic>,
    /// Whether it differs from the version in force when built only in its
    /// filter chains (Envoy's in-place filter chain update).
    in_place: bool,
    /// Per filter chain (`chain_at` order): turns true once the chain is gone
    /// (the listener removed, or replaced by a version without an identical
    /// chain). A chain kept unchanged by the next version shares its sender,
    /// so its connections carry on until a later version changes it.
    drain: Vec<Arc<watch::Sender<bool>>>,
    /// Keeps port 0 resolved (and the port held) while some version uses it.
    /// For a pipe, the listening socket itself: bound once by the main thread
    /// (there is no `SO_REUSEPORT` for Unix sockets); each worker accepts on
    /// a copy of it, as Envoy's workers share a pipe listener's socket. For a
    /// UDP listener, its socket, served by one worker ([`Self::udp_socket`]).
    reserved: Arc<socket2::Socket>,
    /// The filters' background work (JWKS refreshes), stopped with the listener.
    background: Vec<tokio::task::AbortHandle>,
}

impl Drop for ActiveListener {
    fn drop(&mut self) {
        for h in &self.background {
            h.abort();
        }
    }
}

impl ActiveListener {
    /// The listener's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// A copy of a pipe listener's listening socket, for a worker to accept
    /// on; `None` for a TCP listener (each worker binds its own).
    pub fn pipe_socket(&self) -> Option<std::io::Result<std::os::unix::net::UnixListener>> {
        match self.address {
            Peer::Pipe(_) => Some(self.reserved.try_clone().map(Into::into)),
            Peer::Ip(_) => None,
        }
    }

    /// A copy of a UDP listener's socket, for the worker that serves it;
    /// `None` for other listeners.
    ///
    /// One worker serves a UDP listener (the first): a bound UDP socket in a
    /// `SO_REUSEPORT` group takes its share of the datagrams, so the main
    /// thread's socket that holds the port (port 0 resolved once, kept across
    /// updates) could not sit beside per-worker ones; and one owner keeps
    /// each peer's session on one worker across listener updates, which the
    /// kernel's group hashing would not when the group changes.
    pub fn udp_socket(&self) -> Option<std::io::Result<std::net::UdpSocket>> {
        self.udp.as_ref()?;
        Some(self.reserved.try_clone().map(Into::into))
    }

    /// The stat slot of filter chain `chain`.
    pub fn hcm_slot(&self, chain: usize) -> usize {
        self.hcm_stats.get(chain).copied().unwrap_or(usize::MAX)
    }

    /// The connection manager's limits of filter chain `chain` (Envoy's
    /// defaults if it has none).
    pub(crate) fn limits(&self, chain: usize) -> Arc<crate::codec::serve::Limits> {
        match self.limits.get(chain) {
            Some(l) => Arc::clone(l),
            None => Arc::new(crate::codec::serve::Limits::of(None)),
        }
    }

    /// What a connection of this version on filter chain `chain` waits on
    /// to drain.
    pub fn drain_signal(&self, chain: usize) -> watch::Receiver<bool> {
        match self.drain.get(chain) {
            Some(d) => d.subscribe(),
            // No such chain (not expected): drained with the listener's first.
            None => watch::channel(true).1,
        }
    }

    /// Tells this version's connections to drain: all of them, or (`next`
    /// given) those on chains the next version does not keep.
    fn start_drain(&self, next: Option<&ActiveListener>) {
        for d in &self.drain {
            let kept = next.is_some_and(|n| n.drain.iter().any(|k| Arc::ptr_eq(k, d)));
            if !kept {
                d.send_replace(true);
            }
        }
    }
}

/// For each filter chain (`chain_at` order) of listener version `new`, the
/// index of an identical chain in version `old`; `None` when something besides
/// the filter chains changed. As Envoy's in-place filter chain update:
/// connections on chains the new version keeps carry on, the others drain; any
/// other change drains every connection.
pub(crate) fn kept_chains(old: &Any, new: &Any) -> Option<Vec<Option<usize>>> {
    use prost::Message;
    let old = ListenerProto::decode(old.value.as_slice()).ok()?;
    let new = ListenerProto::decode(new.value.as_slice()).ok()?;
    let rest = |l: &ListenerProto| ListenerProto {
        filter_chains: Vec::new(),
        default_filter_chain: None,
        ..l.clone()
    };
    if rest(&old) != rest(&new) {
        return None;
    }
    let chains = |l: &ListenerProto| {
        l.filter_chains
            .iter()
            .chain(l.default_filter_chain.as_ref())
            .cloned()
            .collect::<Vec<_>>()
    };
    let before = chains(&old);
    Some(
        chains(&new)
            .iter()
            .map(|c| before.iter().position(|b| b == c))
            .collect(),
    )
}

/// What the workers serve: every listener in force.
#[derive(Debug, Default)]
pub struct ListenerSet {
    /// Static listeners in config order, then LDS ones in arrival order.
    pub listeners: Vec<Arc<ActiveListener>>,
}

/// How a listener is built: its config plus what was built from it.
pub struct Parts {
    /// The config.
    pub config: Arc<Listener>,
    /// TLS server configs.
    pub tls: Arc<ServerConfigs>,
    /// HTTP filter chains and the listener's row in them.
    pub http_filters: (Arc<HttpFilters>, usize),
    /// The filters' background tasks.
    pub background: Vec<tokio::task::AbortHandle>,
    /// Set for LDS listeners.
    pub dynamic: Option<Dynamic>,
}

/// The main thread's registry.
pub struct Registry {
    set: watch::Sender<Arc<ListenerSet>>,
    stats: Vec<Arc<WorkerStats>>,
    snapshot: Arc<ArcSwap<Snapshot>>,
    added: AtomicU64,
    modified: AtomicU64,
    in_place_updated: AtomicU64,
    removed: AtomicU64,
    /// LDS listeners warming (`total_listeners_warming`, `/config_dump`).
    warming: ArcSwap<Vec<Arc<ActiveListener>>>,
    /// Woken when the warming set changes.
    warming_changed: tokio::sync::Notify,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

/// Resolves a listener address (a host name once, at build).
pub fn resolve(addr: &SocketAddress) -> Result<SocketAddr, String> {
    if let Some(ip) = addr.ip {
        return Ok(SocketAddr::new(ip, addr.port));
    }
    (addr.host.as_str(), addr.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr} resolves to no address"))
}

impl Registry {
    /// An empty registry publishing to workers with `stats`.
    pub fn new(stats: Vec<Arc<WorkerStats>>, snapshot: Arc<ArcSwap<Snapshot>>) -> Self {
        let (set, _) = watch::channel(Arc::new(ListenerSet::default()));
        Self {
            set,
            stats,
            snapshot,
            added: AtomicU64::new(0),
            modified: AtomicU64::new(0),
            in_place_updated: AtomicU64::new(0),
            removed: AtomicU64::new(0),
            warming: ArcSwap::default(),
            warming_changed: tokio::sync::Notify::new(),
        }
    }

    /// The LDS listeners warming.
    pub fn warming(&self) -> Arc<Vec<Arc<ActiveListener>>> {
        self.warming.load_full()
    }

    /// Replaces the set of warming listeners (the LDS side keeps it).
    pub fn set_warming(&self, warming: Vec<Arc<ActiveListener>>) {
        self.warming.store(Arc::new(warming));
        self.warming_changed.notify_waiters();
    }

    /// Resolves once no listener warms (`/ready` waits for it at start, as
    /// Envoy's server init waits for its listeners).
    pub async fn warmed(&self) {
        loop {
            let changed = self.warming_changed.notified();
            if self.warming.load().is_empty() {
                return;
            }
            changed.await;
        }
    }

    /// What workers watch.
    pub fn subscribe(&self) -> watch::Receiver<Arc<ListenerSet>> {
        self.set.subscribe()
    }

    /// The set in force.
    pub fn current(&self) -> Arc<ListenerSet> {
        Arc::clone(&self.set.borrow())
    }

    /// The listener named `name` in force.
    pub fn get(&self, name: &str) -> Option<Arc<ActiveListener>> {
        self.set
            .borrow()
            .listeners
            .iter()
            .find(|l| l.name() == name)
            .cloned()
    }

    /// Builds a listener version: resolves its address (the one in force keeps
    /// its port when the config address is unchanged; otherwise a bound,
    /// non-listening socket resolves port 0 and checks the address can be
    /// bound) and takes its stat slots.
    pub fn build(&self, parts: Parts) -> Result<Arc<ActiveListener>, String> {
        let l = &parts.config;
        let (address, reserved) = match self.get(&l.name) {
            Some(old)
                if old.config.address == l.address
                    && old.config.udp.is_some() == l.udp.is_some() =>
            {
                (old.address.clone(), Arc::clone(&old.reserved))
            }
            _ => match &l.address {
                Address::Socket(sa) if l.udp.is_some() => {
                    let addr = resolve(sa)?;
                    let socket = crate::accept::socket::bind_udp(addr, l.freebind)
                        .map_err(|e| format!("bind {addr}: {e}"))?;
                    let local = socket
                        .local_addr()
                        .ok()
                        .and_then(|a| a.as_socket())
                        .ok_or_else(|| format!("bind {addr}: no local address"))?;
                    (Peer::Ip(local), Arc::new(socket))
                }
                Address::Socket(sa) => {
                    let addr = resolve(sa)?;
                    let socket =
                        crate::accept::socket::bind(addr, false, l.freebind, &l.socket_options)
                            .map_err(|e| format!("bind {addr}: {e}"))?;
                    let local = socket
                        .local_addr()
                        .ok()
                        .and_then(|a| a.as_socket())
                        .ok_or_else(|| format!("bind {addr}: no local address"))?;
                    (Peer::Ip(local), Arc::new(socket))
                }
                Address::Pipe(pipe) => {
                    let socket = crate::accept::socket::bind_unix(pipe)
                        .map_err(|e| format!("bind {}: {e}", pipe.path))?;
                    (
                        Peer::Pipe(Arc::from(pipe.path.as_str())),
                        Arc::new(socket2::Socket::from(socket)),
                    )
                }
            },
        };
        let listener_stat_name = stats::listener_stat_name(&l.address);
        let listener_stats = self.slot(|w| &w.listener_cx, &listener_stat_name);
        let udp = l.udp.as_ref().map(|u| crate::udp::Served {
            config: u.clone(),
            stats: crate::udp::stats::register(&u.proxy.stat_prefix),
            listener_stats: crate::udp::stats::listener(&listener_stat_name),
        });
        let hcm_stats = l
            .all_filter_chains()
            .map(|fc| {
                fc.hcm()
                    .map_or(usize::MAX, |h| self.slot(|w| &w.listeners, &h.stat_prefix))
            })
            .collect();
        let tcp_stats = l
            .all_filter_chains()
            .map(|fc| {
                fc.tcp_proxy()
                    .map(|t| crate::l4::stats::register(&t.stat_prefix))
            })
            .collect();
        let connection_limits = l
            .all_filter_chains()
            .map(|fc| {
                fc.connection_limits
                    .iter()
                    .map(|c| crate::accept::connection_limit::Limiter::new(Arc::clone(c)))
                    .collect()
            })
            .collect();
        let network_rbacs = l
            .all_filter_chains()
            .map(|fc| {
                fc.network_rbacs
                    .iter()
                    .map(|c| crate::accept::network_rbac::Judge::new(Arc::clone(c)))
                    .collect()
            })
            .collect();
        let proxy_protocol = l
            .proxy_protocol
            .as_ref()
            .map(|p| crate::accept::proxy_protocol::register(&p.stat_prefix));
        let limits = l
            .all_filter_chains()
            .map(|fc| Arc::new(crate::codec::serve::Limits::of(fc.hcm().map(|h| &**h))))
            .collect();
        // Chains identical to one of the version in force keep its drain
        // signal (and so its connections).
        let kept = match (self.get(&l.name), &parts.dynamic) {
            (Some(old), Some(new)) => old
                .dynamic
                .as_ref()
                .and_then(|o| kept_chains(&o.raw, &new.raw))
                .map(|k| (old, k)),
            _ => None,
        };
        let drain = l
            .all_filter_chains()
            .enumerate()
            .map(|(j, _)| {
                kept.as_ref()
                    .and_then(|(old, k)| old.drain.get((*k.get(j)?)?))
                    .cloned()
                    .unwrap_or_else(|| Arc::new(watch::channel(false).0))
            })
            .collect();
        Ok(Arc::new(ActiveListener {
            connection_limit: crate::overload::get().listener_limit(&l.name),
            config: parts.config,
            address,
            tls: parts.tls,
            http_filters: parts.http_filters.0,
            filters_index: parts.http_filters.1,
            listener_stats,
            hcm_stats,
            tcp_stats,
            connection_limits,
            network_rbacs,
            proxy_protocol,
            udp,
            limits,
            in_place: kept.is_some(),
            dynamic: parts.dynamic,
            drain,
            reserved,
            background: parts.background,
        }))
    }

    /// The slot named `name` in every worker's table `table`, appended when new
    /// (only this thread appends, so every worker's table has the same slots).
    fn slot<T: Default>(
        &self,
        table: impl Fn(&WorkerStats) -> &ArcSwap<Vec<(String, Arc<T>)>>,
        name: &str,
    ) -> usize {
        let Some(first) = self.stats.first() else {
            return usize::MAX;
        };
        if let Some(i) = table(first).load().iter().position(|(n, _)| n == name) {
            return i;
        }
        let mut slot = usize::MAX;
        for w in &self.stats {
            let t = table(w);
            let mut next = Vec::clone(&t.load());
            slot = next.len();
            next.push((name.to_string(), Arc::default()));
            t.store(Arc::new(next));
        }
        slot
    }

    /// Puts `upserts` in force (replacing listeners of the same name in place)
    /// and takes `removed` out, in one publication; connections of the
    /// replaced and removed versions are then told to drain.
    pub fn publish(&self, upserts: Vec<Arc<ActiveListener>>, removed: &[String]) {
        if upserts.is_empty() && removed.is_empty() {
            return;
        }
        let current = self.current();
        let mut next: Vec<Arc<ActiveListener>> = Vec::with_capacity(current.listeners.len());
        let mut retired = Vec::new();
        for l in &current.listeners {
            if removed.iter().any(|r| r == l.name()) {
                self.removed.fetch_add(1, Ordering::Relaxed);
                retired.push((Arc::clone(l), None));
            } else if let Some(new) = upserts.iter().find(|u| u.name() == l.name()) {
                self.modified.fetch_add(1, Ordering::Relaxed);
                if new.in_place {
                    self.in_place_updated.fetch_add(1, Ordering::Relaxed);
                }
                retired.push((Arc::clone(l), Some(Arc::clone(new))));
                next.push(Arc::clone(new));
            } else {
                next.push(Arc::clone(l));
            }
        }
        for u in upserts {
            if !current.listeners.iter().any(|l| l.name() == u.name()) {
                self.added.fetch_add(1, Ordering::Relaxed);
                next.push(u);
            }
        }
        // Connections of the retired versions are told first: once a worker
        // accepts under a new version, the old one's connections already drain
        // (one accepted in between drains at once; its request is answered).
        for (l, next) in retired {
            tracing::info!(listener = %l.name(), "listener version retired; draining the connections of its changed filter chains");
            l.start_drain(next.as_deref());
        }
        // The snapshot's listeners follow what is served.
        let snap = self.snapshot.load_full();
        let mut s = Snapshot::clone(&snap);
        s.listeners = next.iter().map(|l| Arc::clone(&l.config)).collect();
        s.version = snap.version + 1;
        self.snapshot.store(Arc::new(s));
        self.set
            .send_replace(Arc::new(ListenerSet { listeners: next }));
    }

    /// `listener_manager.*` stats (Envoy's names).
    pub fn samples(&self, out: &mut Vec<stats::Sample>) {
        let set = self.current();
        let p = "listener_manager";
        out.push((
            format!("{p}.listener_added"),
            self.added.load(Ordering::Relaxed),
        ));
        out.push((
            format!("{p}.listener_modified"),
            self.modified.load(Ordering::Relaxed),
        ));
        out.push((
            format!("{p}.listener_in_place_updated"),
            self.in_place_updated.load(Ordering::Relaxed),
        ));
        out.push((
            format!("{p}.listener_removed"),
            self.removed.load(Ordering::Relaxed),
        ));
        out.push((
            format!("{p}.total_listeners_active"),
            set.listeners.len() as u64,
        ));
        out.push((
            format!("{p}.total_listeners_warming"),
            self.warming.load().len() as u64,
        ));
        // Filters of LDS listeners (static ones are in the shared table).
        for l in &set.listeners {
            if l.dynamic.is_some() {
                l.http_filters.samples(out);
            }
        }
    }

    /// Zeroes the filter counters of LDS listeners (`/reset_counters`).
    pub fn reset_counters(&self) {
        for l in &self.current().listeners {
            if l.dynamic.is_some() {
                l.http_filters.reset_counters();
            }
        }
    }
}

#[cfg(test)]
#[path = "listeners_tests.rs"]
mod tests;
