//! The upstream side: the cluster manager (clusters and their host sets), load
//! balancing and the per-worker connection pools.
//!
//! The main thread builds host sets (static endpoints, DNS answers) and publishes
//! each with one `ArcSwap` store per cluster; workers read them lock-free. Load
//! balancer cursors and connection pools are per worker.

pub mod circuit;
pub mod client;
pub mod dfp;
pub mod dns;
pub mod hashing;
pub mod health_check;
pub mod health_event;
pub mod host;
pub mod host_stats;
pub mod keepalive;
pub mod lazy;
pub mod lb;
pub mod outlier;
mod pending;
pub mod pool;
pub mod proxy_header;
pub mod slow_start;
pub mod socket;
pub mod stream;
pub mod tls;
pub mod unary;
pub mod zone;

use arc_swap::ArcSwap;
use courier_config::cluster::{Cluster, Discovery};
use courier_config::snapshot::Snapshot;
use host::HostSet;
use rustc_hash::{FxBuildHasher, FxHashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// One cluster as the data plane runs it.
#[derive(Debug)]
pub struct UpstreamCluster {
    /// Identifies this cluster's connections in the workers' pools: new for a
    /// cluster added or re-added over CDS, and for an update that changes how
    /// connections are made ([`same_connections`]); an update that does not
    /// (its connect timeout, balancing, outlier detection, health checks,
    /// metadata) keeps it, and its circuit breakers, so pooled connections
    /// carry on. (Envoy drains every pool of an updated cluster: a storm of new
    /// connections on each CDS update.)
    pub index: usize,
    /// Slot of its per-worker load-balancer cursors: kept across CDS updates
    /// of the same name, so the workers' cursor tables grow with the names
    /// added, not with the updates.
    pub lb_slot: usize,
    /// Slot of its per-worker counters (`WorkerStats::clusters`), for clusters
    /// known when the workers started (kept across CDS updates of the same name);
    /// `None` for clusters added later, which count in [`Self::stats`].
    pub stat_slot: Option<usize>,
    /// Counters of a cluster added over CDS (shared by the workers, and by the
    /// versions of the cluster that CDS updates).
    pub stats: Arc<crate::stats::ClusterStats>,
    /// Its config.
    pub config: Arc<Cluster>,
    /// Its current hosts.
    hosts: ArcSwap<HostSet>,
    /// Its transport sockets (its own and its `transport_socket_matches`'):
    /// TLS to each host as the host's socket asks.
    pub sockets: socket::Sockets,
    /// Circuit breakers and retry budget (counts shared by every worker, and
    /// by the versions of the cluster that share [`Self::index`]).
    pub circuit: Arc<circuit::Circuit>,
    /// Outlier detection, when configured (boxed: most clusters have none,
    /// and inline it would make every cluster ≈ 300 bytes larger).
    pub outlier: Option<Box<outlier::Detector>>,
    /// Zone-aware routing, when the bootstrap names a local cluster (and this
    /// is not it: the local cluster itself routes without zones, as in Envoy).
    pub zone: Option<Box<zone::ClusterZone>>,
    /// `cluster.<name>.lb_zone_*` counters (shared by the versions of the
    /// cluster CDS updates).
    pub zone_stats: Arc<zone::ZoneStats>,
    /// Set when CDS removed or replaced it: its background tasks (DNS refresh,
    /// outlier sweeps, health checks) stop at their next tick.
    retired: AtomicBool,
    /// A dynamic forward proxy cluster's hosts (its host set stays empty).
    pub dynamic: Option<Box<dfp::DynamicHosts>>,
    /// Its upstream HTTP filters (`http_filters`), when it has any.
    pub filters: Option<Box<courier_filters::upstream::UpstreamFilters>>,
}

impl UpstreamCluster {
    /// The current host set.
    pub fn hosts(&self) -> arc_swap::Guard<Arc<HostSet>> {
        self.hosts.load()
    }

    /// A host by the cluster's load balancer (with zone-aware routing when
    /// configured); `None` = no healthy upstream.
    pub fn choose(&self) -> Option<Arc<host::Host>> {
        lb::choose_in(self, &self.hosts())
    }

    /// A host by the cluster's load balancer for a request whose hash
    /// policies gave `hash` (consistent-hashing clusters read it).
    pub fn choose_hashed(&self, hash: Option<u64>) -> Option<Arc<host::Host>> {
        lb::choose_hashed(self, &self.hosts(), hash, 0)
    }

    /// Puts `set` in force, its hash tables built first (the main thread's
    /// work, not the requests').
    pub fn store_hosts(&self, set: HostSet) {
        set.prime_hash(&self.config.lb.policy);
        if let Some(slow) = &self.config.lb.slow_start {
            slow_start::refresh(&set, slow, tokio::time::Instant::now(), false);
        }
        self.hosts.store(Arc::new(set));
    }

    /// TLS to `host` (its socket's), `None` for plaintext.
    pub fn tls_for(&self, host: &host::Host) -> Option<&tls::UpstreamTlsContext> {
        self.sockets.tls(host.socket)
    }

    /// The PROXY protocol header new connections to `host` start with (its
    /// socket's `upstream_proxy_protocol`).
    pub fn proxy_protocol_for(
        &self,
        host: &host::Host,
    ) -> Option<courier_config::cluster::ProxyProtocolVersion> {
        self.sockets.proxy_protocol(host.socket)
    }

    /// Whether CDS removed or replaced it.
    pub fn retired(&self) -> bool {
        self.retired.load(Ordering::Relaxed)
    }
}

/// The clusters in force, by name and sorted by name.
#[derive(Debug, Default)]
struct ClusterSet {
    // Looked up by name on every request: SipHash's flooding resistance buys
    // nothing for keys from the configuration, and costs a few hundred
    // instructions per lookup.
    by_name: FxHashMap<String, Arc<UpstreamCluster>>,
    sorted: Vec<Arc<UpstreamCluster>>,
}

impl ClusterSet {
    fn from_map(by_name: FxHashMap<String, Arc<UpstreamCluster>>) -> Self {
        let mut sorted: Vec<_> = by_name.values().cloned().collect();
        sorted.sort_by(|a, b| a.config.name.cmp(&b.config.name));
        Self { by_name, sorted }
    }
}

/// Every cluster in force, by name. The set is published with one `ArcSwap`
/// store (CDS adds, replaces and removes clusters on the main thread); workers
/// read it lock-free at each request.
#[derive(Debug, Default)]
pub struct ClusterManager {
    set: ArcSwap<ClusterSet>,
    /// The next [`UpstreamCluster::index`].
    next_index: AtomicUsize,
    /// How many stat slots the workers have (the clusters known at start).
    stat_slots: usize,
    /// The next [`UpstreamCluster::lb_slot`] for a new cluster name.
    next_lb_slot: AtomicUsize,
    /// The bootstrap's outlier-detection event log.
    outlier_log: Option<Arc<outlier::EventLog>>,
    /// Names of CDS clusters warming (not in force until their endpoints arrive).
    warming: ArcSwap<Vec<String>>,
    /// Zone-aware routing's context, when the bootstrap names a local cluster.
    zone: Option<Arc<zone::ZoneContext>>,
}

impl ClusterManager {
    /// Builds the clusters of `snapshot` (sorted by name, so indexes are stable).
    /// DNS clusters are resolved here, blocking: this runs on the main thread before
    /// the workers start, so the first requests already have hosts (Envoy likewise
    /// waits for a cluster's first resolution before it is ready). TLS client
    /// configs are built here too; an error (a client key that does not match
    /// its certificate, say) names the cluster.
    pub fn new(snapshot: &Snapshot) -> Result<Self, String> {
        Self::with_zone(snapshot, None)
    }

    /// [`Self::new`], with zone-aware routing by `zone`'s local cluster
    /// (`cluster_manager.local_cluster_name`) for every other cluster.
    pub fn with_zone(
        snapshot: &Snapshot,
        zone: Option<Arc<zone::ZoneContext>>,
    ) -> Result<Self, String> {
        let mut names: Vec<&String> = snapshot.clusters.keys().collect();
        names.sort();
        let mut by_name = FxHashMap::with_capacity_and_hasher(names.len(), FxBuildHasher);
        for (index, name) in names.into_iter().enumerate() {
            let Some(config) = snapshot.clusters.get(name) else {
                continue;
            };
            let mut c = build(Arc::clone(config), index, Some(index), None, Arc::default())?;
            c.lb_slot = index;
            c.zone = cluster_zone(zone.as_ref(), name);
            let c = Arc::new(c);
            if let Some(z) = &zone {
                z.set_local(&c);
            }
            by_name.insert(name.clone(), c);
        }
        let n = by_name.len();
        Ok(Self {
            set: ArcSwap::from_pointee(ClusterSet::from_map(by_name)),
            next_index: AtomicUsize::new(n),
            stat_slots: n,
            next_lb_slot: AtomicUsize::new(n),
            outlier_log: None,
            warming: ArcSwap::default(),
            zone,
        })
    }

    /// `cluster_manager.local_cluster_name`, when the bootstrap names one.
    pub fn local_cluster_name(&self) -> Option<&str> {
        self.zone.as_deref().map(|z| z.local_name.as_str())
    }

    /// Records which CDS clusters are warming (main thread).
    pub fn set_warming(&self, names: Vec<String>) {
        self.warming.store(Arc::new(names));
    }

    /// Names of the CDS clusters warming.
    pub fn warming(&self) -> Arc<Vec<String>> {
        self.warming.load_full()
    }

    /// Sets where every cluster's outlier detector (static or added later)
    /// logs its events.
    pub fn set_outlier_event_log(&mut self, log: outlier::EventLog) {
        self.outlier_log = Some(Arc::new(log));
    }

    /// The outlier-detection event log, when the bootstrap names one.
    pub fn outlier_event_log(&self) -> Option<&Arc<outlier::EventLog>> {
        self.outlier_log.as_ref()
    }

    /// The cluster named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<UpstreamCluster>> {
        self.set.load().by_name.get(name).cloned()
    }

    /// Builds the cluster of `config` for [`Self::publish`]: when a cluster of
    /// that name is in force with the same endpoints (the same load assignment,
    /// or the same EDS service), the new one starts with its host objects, so
    /// their health, outlier and request state carry over. DNS clusters are
    /// resolved here, blocking (the main thread).
    pub fn prepare(&self, config: Arc<Cluster>) -> Result<Arc<UpstreamCluster>, String> {
        let previous = self.get(&config.name);
        let stat_slot = previous
            .as_ref()
            .and_then(|p| p.stat_slot)
            .filter(|s| *s < self.stat_slots);
        // The same connections: the pools (and the breakers that count them) go on.
        let same = previous
            .as_ref()
            .filter(|p| same_connections(&p.config, &config));
        let index = same.map_or_else(
            || self.next_index.fetch_add(1, Ordering::Relaxed),
            |p| p.index,
        );
        // A set is laid out by locality only for locality-weighted balancing:
        // switching that on or off lays the hosts out afresh.
        let keep = previous.as_ref().filter(|p| {
            p.config.discovery == config.discovery
                && p.config.load_assignment == config.load_assignment
                && p.config.lb.locality_weighted == config.lb.locality_weighted
                // Hosts carry the socket their metadata chose.
                && p.config.transport_socket_matches.iter().map(|m| &m.criteria).eq(config
                    .transport_socket_matches
                    .iter()
                    .map(|m| &m.criteria))
        });
        let stats = previous
            .as_ref()
            .map(|p| Arc::clone(&p.stats))
            .unwrap_or_default();
        // A set's hash tables belong to the policy they were built for: a
        // new policy gets the same hosts in a new set.
        let hosts = keep.map(|p| {
            if p.config.lb.policy == config.lb.policy {
                p.hosts.load_full()
            } else {
                Arc::new(p.hosts.load().rebuilt())
            }
        });
        // A name keeps its slot across updates; only new names take one.
        let lb_slot = previous.as_ref().map_or_else(
            || self.next_lb_slot.fetch_add(1, Ordering::Relaxed),
            |p| p.lb_slot,
        );
        let zone_stats = previous
            .as_ref()
            .map(|p| Arc::clone(&p.zone_stats))
            .unwrap_or_default();
        let zone = cluster_zone(self.zone.as_ref(), &config.name);
        let mut c = build(config, index, stat_slot, hosts, stats)?;
        c.lb_slot = lb_slot;
        c.zone = zone;
        c.zone_stats = zone_stats;
        if let Some(p) = same {
            c.circuit = Arc::clone(&p.circuit);
        }
        Ok(Arc::new(c))
    }

    /// Puts `publish` in force (replacing the clusters of their names) and
    /// takes `remove` out (routes to them answer 503, NC, as in Envoy), in one store (one new
    /// set for a whole CDS response, however many clusters it has). Replaced
    /// and removed clusters retire. Returns how many clusters were removed.
    pub fn update(&self, publish: Vec<Arc<UpstreamCluster>>, remove: &[String]) -> usize {
        let mut retired = Vec::new();
        self.set.rcu(|set| {
            retired.clear();
            let mut by_name = set.by_name.clone();
            for c in &publish {
                if let Some(old) = by_name.insert(c.config.name.clone(), Arc::clone(c)) {
                    retired.push((old, false));
                }
            }
            for name in remove {
                if let Some(old) = by_name.remove(name) {
                    retired.push((old, true));
                }
            }
            ClusterSet::from_map(by_name)
        });
        if let Some(z) = &self.zone {
            for c in &publish {
                z.set_local(c);
            }
        }
        for c in publish.iter().filter(|c| c.dynamic.is_none()) {
            // No longer a dynamic forward proxy cluster, if it was one.
            dfp::DynamicHosts::unregister(&c.config.name);
        }
        for (old, removed) in &retired {
            old.retired.store(true, Ordering::Relaxed);
            if *removed && old.dynamic.is_some() {
                dfp::DynamicHosts::unregister(&old.config.name);
            }
        }
        retired.iter().filter(|(_, removed)| *removed).count()
    }

    /// Replaces the hosts of EDS cluster `name` with those of an accepted
    /// ClusterLoadAssignment (`None`: the assignment was removed, no hosts).
    /// Hosts whose address, hostname, weight and health status are unchanged
    /// keep their objects (and so outlier, health-check and request state).
    /// Workers see the new set at their next host pick.
    pub fn set_eds_hosts(
        &self,
        name: &str,
        la: Option<&courier_config::cluster::LoadAssignment>,
    ) -> bool {
        let Some(c) = self.get(name) else {
            return false;
        };
        set_eds_hosts(&c, la)
    }

    /// Every cluster in force, sorted by name.
    pub fn clusters(&self) -> Vec<Arc<UpstreamCluster>> {
        self.set.load().sorted.clone()
    }

    /// The counters of clusters added over CDS (the others are per worker).
    pub fn dynamic_samples(&self, out: &mut Vec<crate::stats::Sample>) {
        for c in &self.set.load().sorted {
            if c.stat_slot.is_none() {
                crate::stats::cluster_samples(c.config.stat_name(), &c.stats, out);
            }
        }
    }

    /// Starts re-resolving the DNS clusters every `dns_refresh_rate`, on the current
    /// (main thread's) runtime.
    pub fn spawn_dns_refresh(self: &Arc<Self>) {
        for c in &self.clusters() {
            spawn_dns_refresh(c);
        }
    }
}

/// The zone-aware routing of cluster `name`: every cluster but the local one
/// routes by zone when there is a local cluster.
fn cluster_zone(
    ctx: Option<&Arc<zone::ZoneContext>>,
    name: &str,
) -> Option<Box<zone::ClusterZone>> {
    let ctx = ctx.filter(|z| z.local_name != name)?;
    Some(Box::new(zone::ClusterZone::new(Arc::clone(ctx))))
}

/// [`ClusterManager::set_eds_hosts`] on one cluster.
pub fn set_eds_hosts(
    c: &UpstreamCluster,
    la: Option<&courier_config::cluster::LoadAssignment>,
) -> bool {
    if !matches!(c.config.discovery, Discovery::Eds { .. }) {
        return false;
    }
    let previous = c.hosts.load_full();
    let mut set = match la {
        Some(la) => host::static_hosts_reusing(
            la,
            Some(&previous),
            c.config.lb.locality_weighted,
            &socket::HostSockets::new(&c.config, &c.sockets),
        ),
        None => HostSet::default(),
    };
    // Envoy keeps a host that left the assignment while active health checks
    // pass it (not one they fail, nor one EDS itself marked unhealthy), unless
    // the cluster says `ignore_health_on_host_removal`.
    if !c.config.ignore_health_on_host_removal && !c.config.health_checks.is_empty() {
        set = set.keeping_removed(&previous, |h| h.healthy && !h.health.failed());
    }
    c.store_hosts(set);
    true
}

/// Starts re-resolving `c` every `dns_refresh_rate` (DNS clusters only) until it
/// retires.
pub fn spawn_dns_refresh(c: &Arc<UpstreamCluster>) {
    let Some((dns, logical)) = dns::dns_kind(&c.config.discovery) else {
        return;
    };
    let Some(la) = c.config.load_assignment.clone() else {
        return;
    };
    let (family, every) = (dns.lookup_family, dns.refresh_rate);
    let locality = c.config.lb.locality_weighted;
    let cluster = Arc::clone(c);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick fires at once; startup already resolved.
        tick.tick().await;
        loop {
            tick.tick().await;
            if cluster.retired() {
                return;
            }
            if let Some(answers) = dns::resolve(&la, family).await {
                let previous = cluster.hosts.load_full();
                let sockets = socket::HostSockets::new(&cluster.config, &cluster.sockets);
                let set =
                    dns::host_set(&la, &answers, logical, Some(&previous), locality, &sockets);
                cluster.store_hosts(set);
            }
        }
    });
}

/// Whether connections made for `old` serve `new` as they are: the same
/// protocol and options, buffer limit and breakers, and no TLS (TLS contexts
/// are not compared: a TLS cluster's update always starts new pools; nor are
/// transport socket matches).
fn same_connections(old: &Cluster, new: &Cluster) -> bool {
    old.tls.is_none()
        && new.tls.is_none()
        && old.transport_socket_matches.is_empty()
        && new.transport_socket_matches.is_empty()
        && old.http == new.http
        && old.per_connection_buffer_limit_bytes == new.per_connection_buffer_limit_bytes
        && old.circuit_breakers == new.circuit_breakers
}

fn build(
    config: Arc<Cluster>,
    index: usize,
    stat_slot: Option<usize>,
    hosts: Option<Arc<HostSet>>,
    stats: Arc<crate::stats::ClusterStats>,
) -> Result<UpstreamCluster, String> {
    let sockets =
        socket::Sockets::new(&config).map_err(|e| format!("cluster {}: TLS: {e}", config.name))?;
    let hosts = hosts.unwrap_or_else(|| {
        Arc::new(initial_hosts(
            &config,
            &socket::HostSockets::new(&config, &sockets),
        ))
    });
    hosts.prime_hash(&config.lb.policy);
    if let Some(slow) = &config.lb.slow_start {
        slow_start::refresh(&hosts, slow, tokio::time::Instant::now(), true);
    }
    let dynamic = match &config.discovery {
        Discovery::DynamicForwardProxy(d) => Some(Box::new(dfp::DynamicHosts::new(
            &config.name,
            d,
            sockets
                .tls(courier_config::cluster::DEFAULT_SOCKET)
                .is_some(),
        ))),
        _ => None,
    };
    let filters = Some(courier_filters::upstream::UpstreamFilters::new(
        &config.http.http_filters,
    ))
    .filter(|f| !f.is_empty())
    .map(Box::new);
    Ok(UpstreamCluster {
        index,
        lb_slot: index,
        stat_slot,
        stats,
        hosts: ArcSwap::new(hosts),
        sockets,
        circuit: Arc::new(circuit::Circuit::new(config.circuit_breakers.clone())),
        outlier: config
            .outlier_detection
            .clone()
            .map(|o| Box::new(outlier::Detector::new(*o))),
        config,
        zone: None,
        zone_stats: Arc::default(),
        retired: AtomicBool::new(false),
        dynamic,
        filters,
    })
}

/// Every cluster's upstream HTTP filter counters
/// (`cluster.<name>.credential_injector.*`, `cluster.<name>.admission_control.*`).
pub fn filter_samples(clusters: &ClusterManager, out: &mut Vec<(String, u64)>) {
    for c in clusters.clusters() {
        if let Some(f) = &c.filters {
            let name = c.config.stat_name();
            f.samples(&mut |stat, v| out.push((format!("cluster.{name}.{stat}"), v)));
        }
    }
}

fn initial_hosts(c: &Cluster, sockets: &socket::HostSockets<'_>) -> HostSet {
    let Some(la) = &c.load_assignment else {
        return HostSet::default();
    };
    let locality = c.lb.locality_weighted;
    match &c.discovery {
        Discovery::Static => host::static_hosts(la, locality, sockets),
        Discovery::StrictDns(d) => {
            let answers = dns::resolve_blocking(la, d.lookup_family);
            dns::host_set(la, &answers, false, None, locality, sockets)
        }
        Discovery::LogicalDns(d) => {
            let answers = dns::resolve_blocking(la, d.lookup_family);
            dns::host_set(la, &answers, true, None, locality, sockets)
        }
        // Hosts arrive with the first ClusterLoadAssignment (crate::xds).
        Discovery::Eds { .. } => HostSet::default(),
        // Hosts are requests' names (`dfp`), never in the set.
        Discovery::DynamicForwardProxy(_) => HostSet::default(),
    }
}

#[cfg(test)]
#[path = "removal_tests.rs"]
mod removal_tests;
