//! Hosts and host sets: what a cluster's load balancer picks from. Built on the
//! main thread (from the config, or from DNS answers) and published whole, so a
//! worker always sees one consistent set.

use super::lazy::Lazy;
use super::socket::HostSockets;
use courier_config::cluster::{
    Endpoint, LbPolicy, LoadAssignment, Locality, Priority, SocketIndex,
};
use courier_config::core::Address;
use once_cell::race::OnceBox;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One upstream host. Shared by every worker (LEAST_REQUEST compares the active
/// request counts all workers keep).
#[derive(Debug)]
pub struct Host {
    /// Where to connect; for a pipe host, a stand-in key (see [`pipe_key`])
    /// that the pools, host sets and retry predicates compare as they compare
    /// IP hosts, while [`Self::pipe`] is where it connects.
    pub address: SocketAddr,
    /// The Unix domain socket's path for a pipe endpoint (`@name`: abstract).
    /// A thin pointer, as `hostname`: most hosts have none.
    #[allow(clippy::box_collection)]
    pipe: Option<Box<String>>,
    /// `address` as text (`%UPSTREAM_HOST%`), built at its first use.
    address_text: OnceBox<String>,
    /// The host name ([`Self::hostname`]); none (not an empty string, which
    /// would take as much room as a name) when there is none. A thin pointer
    /// on purpose: half a `String`'s room in every host, and most have none.
    #[allow(clippy::box_collection)]
    hostname: Option<Box<String>>,
    /// Load-balancing weight (at least 1).
    pub weight: u32,
    /// Whether the control plane's `health_status` lets the balancer pick it.
    pub healthy: bool,
    /// Its cluster's transport socket for it (`transport_socket_matches`,
    /// chosen by its metadata when it was built; 0: the cluster's own).
    pub socket: SocketIndex,
    /// Its endpoint group's `locality` (shared by the group's hosts; none is
    /// Envoy's empty locality): zone-aware routing groups hosts by it.
    pub locality: Option<Arc<Locality>>,
    /// Requests in flight to this host, over all workers.
    active: AtomicU64,
    /// Per-host stats admin's `/clusters` reports (shared by all workers, as
    /// Envoy's host stats are), from the host's first connection or request.
    pub stats: Lazy<HostStats>,
    /// Outlier-detection inputs and ejection state (hosts of clusters with
    /// outlier detection only).
    pub outlier: Lazy<super::outlier::HostOutlier>,
    /// Active health-check state (hosts of clusters with health checks only).
    pub health: Lazy<super::health_check::HostHealth>,
    /// Gone from its EDS assignment but kept while it passes active health
    /// checks (Envoy's `PENDING_DYNAMIC_REMOVAL`): its first failed check
    /// removes it.
    pending_removal: std::sync::atomic::AtomicBool,
    /// The endpoint's `envoy.lb` metadata `hash_key`: its key on a hash ring
    /// or Maglev table instead of its address (boxed: most hosts have none).
    #[allow(clippy::box_collection)]
    hash_key: Option<Box<String>>,
    /// When the host entered slow start (Envoy's `last_hc_pass_time`): when it
    /// first appeared healthy in a set of a cluster with slow start, or when
    /// active health checking last turned it healthy. Unset otherwise.
    slow_start_since: arc_swap::ArcSwapOption<tokio::time::Instant>,
}

pub use super::host_stats::{HostStats, PendingOn};

impl Host {
    /// A host.
    pub fn new(address: SocketAddr, hostname: String, weight: u32, healthy: bool) -> Self {
        Self {
            address,
            pipe: None,
            address_text: OnceBox::new(),
            hostname: (!hostname.is_empty()).then(|| Box::new(hostname)),
            weight: weight.max(1),
            healthy,
            socket: courier_config::cluster::DEFAULT_SOCKET,
            locality: None,
            active: AtomicU64::new(0),
            stats: Lazy::default(),
            outlier: Default::default(),
            health: Default::default(),
            pending_removal: std::sync::atomic::AtomicBool::new(false),
            hash_key: None,
            slow_start_since: arc_swap::ArcSwapOption::empty(),
        }
    }

    /// A host on the Unix domain socket `path`.
    pub fn pipe(path: &str, hostname: String, weight: u32, healthy: bool) -> Self {
        Self {
            pipe: Some(Box::new(path.to_string())),
            ..Self::new(pipe_key(path), hostname, weight, healthy)
        }
    }

    /// The Unix domain socket's path, for a pipe host.
    pub fn pipe_path(&self) -> Option<&str> {
        self.pipe.as_deref().map(String::as_str)
    }

    /// This host with connections over its cluster's transport socket `socket`.
    pub fn with_socket(mut self, socket: SocketIndex) -> Self {
        self.socket = socket;
        self
    }

    /// This host in `locality`.
    pub fn with_locality(mut self, locality: Option<Arc<Locality>>) -> Self {
        self.locality = locality;
        self
    }

    /// This host with the `envoy.lb` metadata `hash_key` `key`.
    pub fn with_hash_key(mut self, key: Option<String>) -> Self {
        self.hash_key = key.map(Box::new);
        self
    }

    /// The endpoint's `envoy.lb` metadata `hash_key`, when it has one.
    pub fn hash_key(&self) -> Option<&str> {
        self.hash_key.as_deref().map(String::as_str)
    }

    /// When the host entered slow start, if it did.
    pub fn slow_start_since(&self) -> Option<tokio::time::Instant> {
        self.slow_start_since.load().as_deref().copied()
    }

    /// Starts the host's slow start at `at` (main thread: joining a set, or
    /// an active health check turning it healthy).
    pub fn set_slow_start_since(&self, at: tokio::time::Instant) {
        self.slow_start_since.store(Some(Arc::new(at)));
    }

    /// Whether the host is kept only until it fails a health check.
    pub fn pending_removal(&self) -> bool {
        self.pending_removal.load(Ordering::Relaxed)
    }

    fn set_pending_removal(&self, pending: bool) {
        self.pending_removal.store(pending, Ordering::Relaxed);
    }

    /// The host name `auto_host_rewrite` uses: the endpoint's `hostname`, or
    /// the DNS name it was resolved from; empty when neither exists.
    pub fn hostname(&self) -> &str {
        self.hostname.as_deref().map_or("", String::as_str)
    }

    /// `address` as text (`%UPSTREAM_HOST%`, `/clusters`): `ip:port`, or a
    /// pipe's path, as Envoy prints them.
    pub fn address_text(&self) -> &str {
        self.address_text.get_or_init(|| {
            Box::new(match self.pipe_path() {
                Some(p) => p.to_string(),
                None => self.address.to_string(),
            })
        })
    }

    /// Requests in flight.
    pub fn active_requests(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }

    /// Counts a request in flight until the guard drops.
    pub fn start_request(self: &Arc<Self>) -> ActiveRequest {
        self.active.fetch_add(1, Ordering::Relaxed);
        ActiveRequest(Arc::clone(self))
    }
}

/// The stand-in address of the pipe host at `path`: an IPv6 address in the
/// discard-only prefix `100::/64` (RFC 6666, never routed), port 0, whose low
/// 64 bits hash the path. The same path gives the same key in every worker and
/// every update, so a pipe host is found again as an IP host is; nothing
/// connects to it ([`Host::pipe_path`] is where pipe hosts connect).
pub fn pipe_key(path: &str) -> SocketAddr {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: stable across runs and threads.
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    path.hash(&mut h);
    let ip = std::net::Ipv6Addr::from((0x0100_u128 << 112) | u128::from(h.finish()));
    SocketAddr::new(std::net::IpAddr::V6(ip), 0)
}

/// A request in flight to a host; dropping it ends the request.
#[derive(Debug)]
pub struct ActiveRequest(Arc<Host>);

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An order to walk hosts in that respects their weights: host `i` appears
/// `weight[i]` times, spread out (smooth weighted round robin), so a cursor or a
/// uniform random index into it picks hosts in proportion to their weights.
/// Equal weights (the common case) need no table: slot `n` is host `n`.
#[derive(Debug)]
pub enum Schedule {
    /// Every host once, in order.
    Uniform(usize),
    /// Host indices, each `weight` times, spread out.
    Weighted(Box<[u32]>),
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule::Uniform(0)
    }
}

/// Above this many slots the weights are scaled down (proportions kept to within a
/// slot) so a schedule stays small.
const MAX_SCHEDULE: u64 = 4096;

impl Schedule {
    /// The order of `hosts` by their weights.
    pub fn new(hosts: &[Arc<Host>]) -> Self {
        let equal = hosts.windows(2).all(|w| w[0].weight == w[1].weight);
        if equal {
            return Schedule::Uniform(hosts.len());
        }
        let weights: Vec<u64> = hosts.iter().map(|h| u64::from(h.weight)).collect();
        Self::weighted(&weights)
    }

    /// Smooth weighted round robin over `weights`: entry `i` appears in
    /// proportion to `weights[i]`; an entry of weight 0 never does.
    fn weighted(weights: &[u64]) -> Self {
        // Common factors only lengthen the table (locality weights are scaled
        // up by 10 000 and mostly share that factor).
        let g = weights.iter().fold(0, |g, &w| gcd(g, w)).max(1);
        let total: u64 = weights.iter().map(|w| w / g).sum();
        let weights: Vec<i64> = weights
            .iter()
            .map(|&w| {
                let w = w / g;
                let w = if total > MAX_SCHEDULE && w > 0 {
                    (w * MAX_SCHEDULE / total).max(1)
                } else {
                    w
                };
                w as i64
            })
            .collect();
        let sum: i64 = weights.iter().sum();
        let mut current = vec![0i64; weights.len()];
        let mut order = Vec::with_capacity(sum as usize);
        for _ in 0..sum {
            let mut best = 0;
            for (i, w) in weights.iter().enumerate() {
                current[i] += w;
                if current[i] > current[best] {
                    best = i;
                }
            }
            current[best] -= sum;
            order.push(best as u32);
        }
        Schedule::Weighted(order.into_boxed_slice())
    }

    /// Slots in the schedule.
    pub fn len(&self) -> usize {
        match self {
            Schedule::Uniform(n) => *n,
            Schedule::Weighted(order) => order.len(),
        }
    }

    /// The host index in slot `n % len` (`None` when empty).
    pub fn slot(&self, n: usize) -> Option<usize> {
        let len = self.len();
        if len == 0 {
            return None;
        }
        match self {
            Schedule::Uniform(_) => Some(n % len),
            Schedule::Weighted(order) => order.get(n % len).map(|&i| i as usize),
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// A level's health: Envoy's `min(100, overprovisioning x healthy / total)`.
fn level_health(p: &PriorityHosts, overprovisioning_factor: u32) -> u32 {
    if p.all.is_empty() {
        return 0;
    }
    let h = u64::from(overprovisioning_factor) * p.healthy().len() as u64 / p.all.len() as u64;
    h.min(100) as u32
}

/// Whether the balancer may pick `h`: the control plane's status allows it and
/// neither outlier detection nor active health checks took it out.
pub(crate) fn usable(h: &Arc<Host>) -> bool {
    h.healthy && !h.outlier.ejected() && !h.health.failed()
}

/// One locality of a priority level, for locality-weighted balancing: how many
/// of the level's hosts it has (they are consecutive in the level's list) and
/// its `load_balancing_weight` (0 when it has none: it takes no traffic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalitySpan {
    /// Hosts of the locality.
    pub hosts: usize,
    /// The locality's weight.
    pub weight: u32,
}

/// Scale of the integer weights a locality schedule is built from: effective
/// weights are fractional (`weight x availability`), and four decimals keep
/// their proportions well within what a test or a user can observe.
const LOCALITY_WEIGHT_SCALE: f64 = 10_000.0;

/// Envoy's `HostSetImpl::effectiveLocalityWeight`: a locality's weight scaled
/// by its availability, `weight x min(1, overprovisioning/100 x healthy / all)`;
/// 0 when it has no host.
pub fn effective_weight(weight: u32, healthy: usize, all: usize, factor: u32) -> f64 {
    if all == 0 {
        return 0.0;
    }
    let availability = f64::from(factor) / 100.0 * healthy as f64 / all as f64;
    f64::from(weight) * availability.min(1.0)
}

/// One locality's healthy hosts and their weighted order.
type LocalityHosts = (Box<[Arc<Host>]>, Schedule);

/// A priority level's hosts by locality (clusters with locality-weighted
/// balancing only: others never build one).
#[derive(Debug)]
pub struct Localities {
    /// Each locality's place in the level's host list and its weight, kept so a
    /// health change can rebuild the set.
    spans: Box<[LocalitySpan]>,
    /// Per locality, its healthy hosts and their weighted order.
    healthy: Box<[LocalityHosts]>,
    /// Locality order by effective weight; empty when no locality has any (the
    /// level then balances over its healthy hosts, as Envoy falls back).
    schedule: Schedule,
    /// The first of this level's per-worker cursor slots: the locality cursor,
    /// then one host cursor per locality.
    cursor_base: usize,
}

impl Localities {
    fn new(all: &[Arc<Host>], spans: Vec<LocalitySpan>, factor: u32, cursor_base: usize) -> Self {
        let mut start = 0;
        let mut healthy = Vec::with_capacity(spans.len());
        let mut scaled = Vec::with_capacity(spans.len());
        for span in &spans {
            let end = (start + span.hosts).min(all.len());
            let hosts = all.get(start..end).unwrap_or_default();
            start = end;
            let up: Box<[Arc<Host>]> = hosts.iter().filter(|h| usable(h)).cloned().collect();
            let w = effective_weight(span.weight, up.len(), hosts.len(), factor);
            // A locality with any effective weight keeps at least one slot.
            let s = (w * LOCALITY_WEIGHT_SCALE).round() as u64;
            scaled.push(if w > 0.0 { s.max(1) } else { 0 });
            let schedule = Schedule::new(&up);
            healthy.push((up, schedule));
        }
        let schedule = if scaled.iter().all(|&w| w == 0) {
            Schedule::Uniform(0)
        } else {
            Schedule::weighted(&scaled)
        };
        Self {
            spans: spans.into_boxed_slice(),
            healthy: healthy.into_boxed_slice(),
            schedule,
            cursor_base,
        }
    }

    /// Per locality, in order, its host count (its healthy hosts', unless
    /// `panic`) and its `load_balancing_weight`: runs of the level's healthy
    /// (or every) host list.
    pub fn groups(&self, panic: bool) -> Vec<(usize, u32)> {
        self.spans
            .iter()
            .zip(self.healthy.iter())
            .map(|(span, (up, _))| (if panic { span.hosts } else { up.len() }, span.weight))
            .collect()
    }

    /// The order localities are picked in (by effective weight).
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Locality `i`'s healthy hosts and their weighted order.
    pub fn healthy(&self, i: usize) -> Option<(&[Arc<Host>], &Schedule)> {
        self.healthy.get(i).map(|(h, s)| (&h[..], s))
    }

    /// This level's cursor slot for picking a locality.
    pub fn locality_cursor(&self) -> usize {
        self.cursor_base
    }

    /// This level's cursor slot for picking a host within locality `i`.
    pub fn host_cursor(&self, i: usize) -> usize {
        self.cursor_base + 1 + i
    }
}

/// One priority level's hosts.
#[derive(Debug, Default)]
pub struct PriorityHosts {
    /// Every host.
    all: Box<[Arc<Host>]>,
    /// The healthy ones and their order, when some host is not: nearly always
    /// every host is, and one list then serves both (a cluster manager holds
    /// thousands of these).
    healthy: Option<(Box<[Arc<Host>]>, Schedule)>,
    /// Weighted order over `all`.
    all_schedule: Schedule,
    /// `100 x healthy / all` (0 when empty).
    pub healthy_percent: f64,
    /// Consistent-hashing tables of the cluster's policy (RING_HASH,
    /// MAGLEV): over the healthy hosts, and over all of them (panic) when
    /// they differ. Built once per set ([`HostSet::prime_hash`] when the
    /// set is stored; a set built elsewhere builds at its first pick).
    tables: [OnceBox<super::hashing::HashTable>; 2],
}

impl PriorityHosts {
    fn new(all: Vec<Arc<Host>>) -> Self {
        // An ejected or health-check-failed host is unhealthy until it returns.
        let count = all.iter().filter(|h| usable(h)).count();
        let healthy_percent = if all.is_empty() {
            0.0
        } else {
            100.0 * count as f64 / all.len() as f64
        };
        let healthy = (count < all.len()).then(|| {
            let healthy: Box<[Arc<Host>]> = all.iter().filter(|h| usable(h)).cloned().collect();
            let schedule = Schedule::new(&healthy);
            (healthy, schedule)
        });
        Self {
            all_schedule: Schedule::new(&all),
            all: all.into_boxed_slice(),
            healthy,
            healthy_percent,
            tables: Default::default(),
        }
    }

    /// The hosts a hash pick chooses from (every host in panic, else the
    /// healthy ones) and `policy`'s table over them; `None` for a policy
    /// that does not hash.
    /// `localities`: the level's hosts by locality, with locality-weighted
    /// balancing (Envoy's ring spreads over localities by their weights).
    pub fn hash_table(
        &self,
        panic: bool,
        policy: &LbPolicy,
        localities: Option<&Localities>,
    ) -> Option<(&[Arc<Host>], &super::hashing::HashTable)> {
        // Every host healthy: one list, one table.
        let (hosts, slot) = if panic || self.healthy.is_none() {
            (self.all(), 1)
        } else {
            (self.healthy(), 0)
        };
        let cell = self.tables.get(slot)?;
        if let Some(t) = cell.get() {
            return Some((hosts, t));
        }
        let groups = localities.map(|l| l.groups(panic));
        let table = super::hashing::HashTable::build(hosts, groups.as_deref(), policy)?;
        Some((hosts, cell.get_or_init(|| Box::new(table))))
    }

    /// Every host.
    pub fn all(&self) -> &[Arc<Host>] {
        &self.all
    }

    /// Weighted order over [`Self::all`].
    pub fn all_schedule(&self) -> &Schedule {
        &self.all_schedule
    }

    /// The healthy hosts.
    pub fn healthy(&self) -> &[Arc<Host>] {
        self.healthy.as_ref().map_or(&self.all, |(h, _)| h)
    }

    /// Weighted order over [`Self::healthy`].
    pub fn healthy_schedule(&self) -> &Schedule {
        self.healthy.as_ref().map_or(&self.all_schedule, |(_, s)| s)
    }
}

/// A cluster's hosts by priority, with the load each priority takes.
#[derive(Debug, Default)]
pub struct HostSet {
    /// Priority levels, 0 first.
    pub priorities: Vec<PriorityHosts>,
    /// Per priority, the end of its share of 0..100 (cumulative percent).
    load_ends: Vec<u32>,
    /// No priority has a healthy host: every level balances over all its hosts
    /// (when panic mode is enabled), with load by host count.
    pub total_panic: bool,
    /// Per priority, its hosts by locality: only for clusters with
    /// locality-weighted balancing, so other sets pay one empty pointer.
    localities: Option<Box<[Localities]>>,
    /// `overprovisioning_factor` the set was built with (a rebuild keeps it).
    overprovisioning_factor: u32,
    /// Slow start clusters: whether LEAST_REQUEST picks by weight (Envoy's
    /// EDF schedulers, built when the set was published during a slow start
    /// window and kept until the next set) rather than by sampling hosts.
    weighted_picks: std::sync::atomic::AtomicBool,
}

impl HostSet {
    /// Builds the set from hosts per priority, with Envoy's priority load:
    /// a level's health is `min(100, overprovisioning x healthy / total)`; levels
    /// take load in order, normalised when the total health is under 100.
    /// (Tests: the builders go through [`Self::with_localities`].)
    #[cfg(test)]
    pub fn new(priorities: Vec<Vec<Arc<Host>>>, overprovisioning_factor: u32) -> Self {
        Self::with_localities(priorities, None, overprovisioning_factor)
    }

    /// [`Self::new`], with the hosts of each priority grouped by locality
    /// (`localities[p]` spans priority `p`'s list in order) when the cluster
    /// balances by locality weight.
    pub fn with_localities(
        priorities: Vec<Vec<Arc<Host>>>,
        localities: Option<Vec<Vec<LocalitySpan>>>,
        overprovisioning_factor: u32,
    ) -> Self {
        let localities = localities.map(|spans| {
            let mut cursor_base = 0;
            let mut spans = spans.into_iter();
            priorities
                .iter()
                .map(|hosts| {
                    let level = spans.next().unwrap_or_default();
                    let base = cursor_base;
                    cursor_base += 1 + level.len();
                    Localities::new(hosts, level, overprovisioning_factor, base)
                })
                .collect::<Box<[Localities]>>()
        });
        let priorities: Vec<PriorityHosts> =
            priorities.into_iter().map(PriorityHosts::new).collect();
        let health: Vec<u32> = priorities
            .iter()
            .map(|p| level_health(p, overprovisioning_factor))
            .collect();
        let total: u32 = health.iter().sum::<u32>().min(100);
        let total_panic = total == 0;
        let load: Vec<u32> = if total_panic {
            // Envoy's total panic: load in proportion to each level's host count.
            let hosts: usize = priorities.iter().map(|p| p.all.len()).sum();
            distribute(
                &priorities
                    .iter()
                    .map(|p| (100 * p.all.len()).checked_div(hosts).unwrap_or(0) as u32)
                    .collect::<Vec<_>>(),
                100,
            )
        } else {
            distribute(&health, total)
        };
        let mut end = 0;
        let load_ends = load
            .iter()
            .map(|l| {
                end += l;
                end
            })
            .collect();
        Self {
            priorities,
            load_ends,
            total_panic,
            localities,
            overprovisioning_factor,
            weighted_picks: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether LEAST_REQUEST picks by weight in this set (see
    /// [`super::slow_start::refresh`]).
    pub fn weighted_picks(&self) -> bool {
        self.weighted_picks.load(Ordering::Relaxed)
    }

    /// Sets [`Self::weighted_picks`] (main thread, when the set is published).
    pub fn set_weighted_picks(&self, weighted: bool) {
        self.weighted_picks.store(weighted, Ordering::Relaxed);
    }

    /// Each level's health, as the priority load is built from.
    pub fn level_health(&self) -> Vec<u32> {
        self.priorities
            .iter()
            .map(|p| level_health(p, self.overprovisioning_factor))
            .collect()
    }

    /// The level `address` is in, if any.
    pub fn priority_of(&self, address: SocketAddr) -> Option<usize> {
        self.priorities
            .iter()
            .position(|p| p.all().iter().any(|h| h.address == address))
    }

    /// The same hosts, re-evaluated: after outlier ejection or an active health
    /// check changed who is healthy, the priority loads, the healthy lists and
    /// the locality weights follow.
    ///
    /// A host kept after its removal from service discovery (see
    /// [`Self::keeping_removed`]) leaves once a health check has failed it.
    pub fn rebuilt(&self) -> Self {
        let gone = |h: &Arc<Host>| h.pending_removal() && h.health.failed();
        let mut localities = self
            .localities
            .as_ref()
            .map(|ls| ls.iter().map(|l| l.spans.to_vec()).collect::<Vec<_>>());
        let priorities = self
            .priorities
            .iter()
            .enumerate()
            .map(|(p, level)| {
                let all = level.all();
                if let Some(spans) = localities.as_mut().and_then(|l| l.get_mut(p)) {
                    // Each locality keeps the hosts of its span that stay.
                    let mut start = 0;
                    for span in spans.iter_mut() {
                        let end = (start + span.hosts).min(all.len());
                        let slice = all.get(start..end).unwrap_or_default();
                        span.hosts = slice.iter().filter(|h| !gone(h)).count();
                        start = end;
                    }
                }
                all.iter().filter(|h| !gone(h)).cloned().collect()
            })
            .collect();
        Self::with_localities(priorities, localities, self.overprovisioning_factor)
    }

    /// This set (a new EDS assignment) with the hosts of `previous` it no
    /// longer has that `keep` says stay, as Envoy keeps a removed host that
    /// still passes active health checks until it fails one (unless the
    /// cluster says `ignore_health_on_host_removal`). They stay in their
    /// priority; with locality weighting they form a locality of weight 0 (they
    /// count for the level's health but take no locality's traffic).
    pub fn keeping_removed(self, previous: &HostSet, keep: impl Fn(&Host) -> bool) -> Self {
        let present: std::collections::HashSet<SocketAddr> =
            self.hosts().map(|h| h.address).collect();
        let mut priorities: Vec<Vec<Arc<Host>>> =
            self.priorities.iter().map(|p| p.all().to_vec()).collect();
        let mut localities = self
            .localities
            .as_ref()
            .map(|ls| ls.iter().map(|l| l.spans.to_vec()).collect::<Vec<_>>());
        let mut kept_any = false;
        for (p, level) in previous.priorities.iter().enumerate() {
            let kept: Vec<Arc<Host>> = level
                .all()
                .iter()
                .filter(|h| !present.contains(&h.address) && keep(h))
                .cloned()
                .collect();
            if kept.is_empty() {
                continue;
            }
            kept_any = true;
            for h in &kept {
                h.set_pending_removal(true);
            }
            if priorities.len() <= p {
                priorities.resize_with(p + 1, Vec::new);
            }
            if let Some(spans) = localities.as_mut() {
                if spans.len() <= p {
                    spans.resize_with(p + 1, Vec::new);
                }
                if let Some(level) = spans.get_mut(p) {
                    level.push(LocalitySpan {
                        hosts: kept.len(),
                        weight: 0,
                    });
                }
            }
            if let Some(level) = priorities.get_mut(p) {
                level.extend(kept);
            }
        }
        if !kept_any {
            return self;
        }
        Self::with_localities(priorities, localities, self.overprovisioning_factor)
    }

    /// Builds the consistent-hashing tables of `policy` (nothing for a
    /// policy that does not hash): on the main thread when the set is
    /// stored, so requests find them built.
    pub fn prime_hash(&self, policy: &LbPolicy) {
        if !policy.uses_hash() {
            return;
        }
        for (p, level) in self.priorities.iter().enumerate() {
            level.hash_table(false, policy, self.localities(p));
            level.hash_table(true, policy, self.localities(p));
        }
    }

    /// Priority `p`'s hosts by locality, when the cluster balances by locality
    /// weight.
    pub fn localities(&self, p: usize) -> Option<&Localities> {
        self.localities.as_ref()?.get(p)
    }

    /// The priority a random percentage `0..100` falls in.
    pub fn priority_for(&self, percent: u32) -> usize {
        self.load_ends
            .iter()
            .position(|&end| percent < end)
            .unwrap_or(0)
    }

    /// Every host, in priority order.
    pub fn hosts(&self) -> impl Iterator<Item = &Arc<Host>> {
        self.priorities.iter().flat_map(|p| p.all.iter())
    }
}

/// Envoy's `distributeLoad`: each level takes `min(remaining, availability x 100 /
/// total)`; rounding leftovers go to the first level with any availability.
fn distribute(availability: &[u32], total: u32) -> Vec<u32> {
    let mut remaining = 100u32;
    let mut first = None;
    let mut load = Vec::with_capacity(availability.len());
    for (i, &a) in availability.iter().enumerate() {
        if first.is_none() && a > 0 {
            first = Some(i);
        }
        let l = (a * 100).checked_div(total).unwrap_or(0).min(remaining);
        remaining -= l;
        load.push(l);
    }
    if let Some(slot) = first.and_then(|i| load.get_mut(i)) {
        *slot += remaining;
    }
    load
}

/// The hosts of a STATIC cluster (endpoints are IP literals), grouped by
/// locality when `locality_weighted`.
pub fn static_hosts(
    la: &LoadAssignment,
    locality_weighted: bool,
    sockets: &HostSockets<'_>,
) -> HostSet {
    static_hosts_reusing(la, None, locality_weighted, sockets)
}

/// The endpoints of one priority level in the order their hosts are listed,
/// each with its index in the level (config order, over localities).
///
/// Without locality weighting: one group, in config order. With it: Envoy's
/// grouping, one group per distinct locality (entries naming the same
/// locality, or none, which is the empty locality, are one) in order of first
/// appearance; a group's weight is the last `load_balancing_weight` its entries
/// give, 0 when none does.
pub(crate) fn level_groups(
    level: &Priority,
    locality_weighted: bool,
) -> Vec<(u32, Vec<(usize, &Endpoint)>)> {
    let numbered = level
        .localities
        .iter()
        .scan(0, |next, l| {
            let first = *next;
            *next += l.endpoints.len();
            Some((first, l))
        })
        .collect::<Vec<_>>();
    if !locality_weighted {
        let all = numbered
            .iter()
            .flat_map(|(first, l)| {
                l.endpoints
                    .iter()
                    .enumerate()
                    .map(move |(i, e)| (first + i, e))
            })
            .collect();
        return vec![(0, all)];
    }
    let mut groups: Vec<(u32, Vec<(usize, &Endpoint)>)> = Vec::new();
    let mut index: std::collections::HashMap<(&str, &str, &str), usize> =
        std::collections::HashMap::new();
    for (first, l) in numbered {
        let key = l.locality.as_ref().map_or(("", "", ""), |x| {
            (x.region.as_str(), x.zone.as_str(), x.sub_zone.as_str())
        });
        let g = *index.entry(key).or_insert_with(|| {
            groups.push((0, Vec::new()));
            groups.len() - 1
        });
        let Some(group) = groups.get_mut(g) else {
            continue;
        };
        if let Some(w) = l.load_balancing_weight {
            group.0 = w;
        }
        group
            .1
            .extend(l.endpoints.iter().enumerate().map(|(i, e)| (first + i, e)));
    }
    groups
}

/// [`static_hosts`], keeping the host objects of `previous` (and so their
/// health, outlier and request state) whose address, hostname, weight and
/// health status are unchanged: an EDS update that moves one endpoint leaves
/// the others as they were.
pub fn static_hosts_reusing(
    la: &LoadAssignment,
    previous: Option<&HostSet>,
    locality_weighted: bool,
    sockets: &HostSockets<'_>,
) -> HostSet {
    // Envoy keys hosts by address; an index keeps large updates linear.
    let by_addr: std::collections::HashMap<SocketAddr, &Arc<Host>> = previous
        .map(|p| p.hosts().map(|h| (h.address, h)).collect())
        .unwrap_or_default();
    let mut spans: Vec<Vec<LocalitySpan>> = Vec::new();
    let priorities = la
        .priorities
        .iter()
        .map(|p| {
            // Sized up front: the list is kept for the set's life.
            let mut hosts =
                Vec::with_capacity(p.localities.iter().map(|l| l.endpoints.len()).sum());
            let mut level = Vec::new();
            let level_sockets = sockets.level(p);
            let localities = level_localities(p);
            for (weight, endpoints) in level_groups(p, locality_weighted) {
                let start = hosts.len();
                hosts.extend(endpoints.into_iter().filter_map(|(i, e)| {
                    let locality = localities.get(i).cloned().flatten();
                    let address = match &e.address {
                        Address::Socket(sa) => SocketAddr::new(sa.ip?, sa.port),
                        Address::Pipe(p) => pipe_key(&p.path),
                    };
                    let hostname = e.hostname.clone().unwrap_or_default();
                    let healthy = e.health_status.is_healthy();
                    let socket = HostSockets::of(&level_sockets, i);
                    let hash_key = endpoint_hash_key(e);
                    if let Some(h) = by_addr.get(&address).filter(|h| {
                        h.hostname() == hostname
                            && h.weight == e.weight.max(1)
                            && h.healthy == healthy
                            && h.socket == socket
                            && h.locality == locality
                            && h.hash_key() == hash_key.as_deref()
                    }) {
                        // Back in the assignment: no longer on its way out.
                        h.set_pending_removal(false);
                        return Some(Arc::clone(h));
                    }
                    sockets.count(socket);
                    let host = match &e.address {
                        Address::Pipe(p) => Host::pipe(&p.path, hostname, e.weight, healthy),
                        Address::Socket(_) => Host::new(address, hostname, e.weight, healthy),
                    };
                    carry_slow_start(&host, by_addr.get(&address).copied());
                    Some(Arc::new(
                        host.with_socket(socket)
                            .with_locality(locality)
                            .with_hash_key(hash_key),
                    ))
                }));
                level.push(LocalitySpan {
                    hosts: hosts.len() - start,
                    weight,
                });
            }
            spans.push(level);
            hosts
        })
        .collect();
    HostSet::with_localities(
        priorities,
        locality_weighted.then_some(spans),
        la.overprovisioning_factor,
    )
}

/// An endpoint's `envoy.lb` metadata `hash_key` (a string; Envoy ignores
/// other kinds).
pub(crate) fn endpoint_hash_key(e: &Endpoint) -> Option<String> {
    e.metadata
        .get("envoy.lb")?
        .get("hash_key")?
        .as_str()
        .filter(|k| !k.is_empty())
        .map(str::to_string)
}

/// Per endpoint of `level` (in config order), its group's locality: one `Arc`
/// per group, shared by its hosts.
pub(crate) fn level_localities(level: &Priority) -> Vec<Option<Arc<Locality>>> {
    level
        .localities
        .iter()
        .flat_map(|l| {
            let shared = l.locality.clone().map(Arc::new);
            std::iter::repeat_n(shared, l.endpoints.len())
        })
        .collect()
}

/// A host for `endpoint` (of `locality`) resolved to `address`; keeps
/// `previous`'s host object (and so its active request count) when nothing
/// about it changed.
pub fn resolved_host(
    endpoint: &Endpoint,
    address: SocketAddr,
    previous: Option<&HostSet>,
    (socket, sockets): (SocketIndex, &HostSockets<'_>),
    locality: Option<Arc<Locality>>,
) -> Arc<Host> {
    let hostname = endpoint.hostname.clone().unwrap_or_else(|| {
        endpoint
            .address
            .socket()
            .map(|sa| sa.host.clone())
            .unwrap_or_default()
    });
    let healthy = endpoint.health_status.is_healthy();
    let hash_key = endpoint_hash_key(endpoint);
    if let Some(h) = previous.and_then(|p| {
        p.hosts().find(|h| {
            h.address == address
                && h.hostname() == hostname
                && h.weight == endpoint.weight.max(1)
                && h.healthy == healthy
                && h.socket == socket
                && h.locality == locality
                && h.hash_key() == hash_key.as_deref()
        })
    }) {
        return Arc::clone(h);
    }
    sockets.count(socket);
    let host = Host::new(address, hostname, endpoint.weight, healthy);
    carry_slow_start(
        &host,
        previous.and_then(|p| p.hosts().find(|h| h.address == address)),
    );
    Arc::new(
        host.with_socket(socket)
            .with_locality(locality)
            .with_hash_key(hash_key),
    )
}

/// Gives `host`, replacing `previous` at the same address (its weight,
/// health status or the like changed), the slow start time `previous` had:
/// Envoy updates such a host in place, keeping its `last_hc_pass_time`, so
/// it does not start slow start over.
fn carry_slow_start(host: &Host, previous: Option<&Arc<Host>>) {
    if let Some(at) = previous.and_then(|p| p.slow_start_since()) {
        host.set_slow_start_since(at);
    }
}

#[cfg(test)]
pub(in crate::upstream) mod tests {
    use super::*;

    fn hosts(n: usize, healthy: usize) -> Vec<Arc<Host>> {
        (0..n)
            .map(|i| {
                Arc::new(Host::new(
                    SocketAddr::from(([127, 0, 0, 1], 1000 + i as u16)),
                    String::new(),
                    1,
                    i < healthy,
                ))
            })
            .collect()
    }

    #[test]
    fn priority_load_follows_envoy() {
        // P0 fully healthy takes everything.
        let s = HostSet::new(vec![hosts(2, 2), hosts(2, 2)], 140);
        assert_eq!(s.load_ends, vec![100, 100]);
        // P0 half healthy: 140 x 0.5 = 70%, the rest spills to P1.
        let s = HostSet::new(vec![hosts(2, 1), hosts(2, 2)], 140);
        assert_eq!(s.load_ends, vec![70, 100]);
        // P0 all unhealthy: all to P1.
        let s = HostSet::new(vec![hosts(2, 0), hosts(1, 1)], 140);
        assert_eq!(s.load_ends, vec![0, 100]);
        assert_eq!(s.priority_for(0), 1);
        // Total health under 100 is normalised: 35 + 35 of 70 -> 50/50.
        let s = HostSet::new(vec![hosts(4, 1), hosts(4, 1)], 140);
        assert_eq!(s.load_ends, vec![50, 100]);
        // Nothing healthy anywhere: total panic, load by host count.
        let s = HostSet::new(vec![hosts(1, 0), hosts(3, 0)], 140);
        assert!(s.total_panic);
        assert_eq!(s.load_ends, vec![25, 100]);
    }

    #[test]
    fn a_fully_healthy_level_keeps_one_list() {
        let all = PriorityHosts::new(hosts(3, 3));
        assert!(all.healthy.is_none());
        assert_eq!(all.healthy().len(), 3);
        assert!(matches!(all.healthy_schedule(), Schedule::Uniform(3)));
        let some = PriorityHosts::new(hosts(3, 2));
        assert_eq!(some.healthy().len(), 2);
        assert!(some.healthy().iter().all(|h| h.healthy));
        assert!(matches!(some.healthy_schedule(), Schedule::Uniform(2)));
        assert_eq!(some.all().len(), 3);
        // No outlier state until outlier detection uses it.
        assert!(!some.all()[0].outlier.ejected());
        assert!(some.all()[0].outlier.get().is_none());
    }

    /// A pipe host connects to its path and prints it; its stand-in key is
    /// the same for the same path (so an update finds it again) and never a
    /// routable address.
    #[test]
    fn pipe_hosts_are_keyed_by_their_path() {
        let h = Host::pipe("/run/a.sock", String::new(), 1, true);
        assert_eq!(h.pipe_path(), Some("/run/a.sock"));
        assert_eq!(h.address_text(), "/run/a.sock");
        assert_eq!(h.address, pipe_key("/run/a.sock"));
        assert_ne!(pipe_key("/run/a.sock"), pipe_key("/run/b.sock"));
        let std::net::IpAddr::V6(ip) = h.address.ip() else {
            panic!("{}", h.address)
        };
        assert_eq!(
            ip.segments()[..4],
            [0x0100, 0, 0, 0],
            "RFC 6666 discard prefix"
        );
        let tcp = Host::new(
            SocketAddr::from(([127, 0, 0, 1], 80)),
            String::new(),
            1,
            true,
        );
        assert_eq!(
            (tcp.pipe_path(), tcp.address_text()),
            (None, "127.0.0.1:80")
        );
    }

    #[test]
    fn weighted_schedule_is_proportional_and_spread() {
        let hs: Vec<Arc<Host>> = [1u32, 2, 3]
            .iter()
            .enumerate()
            .map(|(i, w)| {
                Arc::new(Host::new(
                    SocketAddr::from(([127, 0, 0, 1], i as u16)),
                    String::new(),
                    *w,
                    true,
                ))
            })
            .collect();
        let s = Schedule::new(&hs);
        assert_eq!(s.len(), 6);
        let mut counts = [0; 3];
        for n in 0..6 {
            counts[s.slot(n).unwrap()] += 1;
        }
        assert_eq!(counts, [1, 2, 3]);
        // Spread: the heaviest host is not picked three times in a row.
        assert_ne!(
            (s.slot(0), s.slot(1), s.slot(2)),
            (Some(2), Some(2), Some(2))
        );
    }

    /// A load assignment of one level from `(locality zone, weight, ports)`;
    /// zone `None` is an entry without `locality`.
    pub(in crate::upstream) fn assignment(
        localities: &[(Option<&str>, Option<u32>, &[u16])],
        factor: u32,
    ) -> LoadAssignment {
        use courier_config::cluster::{HealthStatus, Locality, LocalityEndpoints};
        use courier_config::core::SocketAddress;
        let localities = localities
            .iter()
            .map(|(zone, weight, ports)| LocalityEndpoints {
                locality: zone.map(|z| Locality {
                    zone: z.to_string(),
                    ..Locality::default()
                }),
                load_balancing_weight: *weight,
                endpoints: ports
                    .iter()
                    .map(|&port| Endpoint {
                        address: courier_config::core::Address::Socket(SocketAddress {
                            host: "127.0.0.1".into(),
                            ip: Some([127, 0, 0, 1].into()),
                            port,
                        }),
                        hostname: None,
                        health_check_port: None,
                        health_check_hostname: None,
                        health_status: HealthStatus::Unknown,
                        weight: 1,
                        metadata: Default::default(),
                    })
                    .collect(),
                metadata: Default::default(),
            })
            .collect();
        LoadAssignment {
            cluster_name: "c".into(),
            priorities: vec![Priority { localities }],
            overprovisioning_factor: factor,
        }
    }

    fn ports(hosts: &[Arc<Host>]) -> Vec<u16> {
        hosts.iter().map(|h| h.address.port()).collect()
    }

    #[test]
    fn static_hosts_group_by_locality_only_when_weighted() {
        // Zone a appears twice (Envoy merges the entries; the last weight
        // given wins); the entry without a locality has no weight.
        let la = assignment(
            &[
                (Some("a"), Some(1), &[1]),
                (Some("b"), Some(3), &[2, 3]),
                (Some("a"), Some(2), &[4]),
                (None, None, &[5]),
            ],
            140,
        );
        let flat = static_hosts(&la, false, &HostSockets::NONE);
        assert_eq!(ports(flat.priorities[0].all()), [1, 2, 3, 4, 5]);
        assert!(flat.localities(0).is_none());
        let s = static_hosts(&la, true, &HostSockets::NONE);
        assert_eq!(ports(s.priorities[0].all()), [1, 4, 2, 3, 5]);
        let l = s.localities(0).unwrap();
        assert_eq!(
            l.spans[..],
            [
                LocalitySpan {
                    hosts: 2,
                    weight: 2
                },
                LocalitySpan {
                    hosts: 2,
                    weight: 3
                },
                LocalitySpan {
                    hosts: 1,
                    weight: 0
                },
            ]
        );
        assert_eq!(ports(l.healthy(1).unwrap().0), [2, 3]);
        // 2 : 3, the weightless locality never.
        let mut counts = [0; 3];
        for n in 0..l.schedule().len() {
            counts[l.schedule().slot(n).unwrap()] += 1;
        }
        assert_eq!(counts, [2, 3, 0]);
        // An EDS update keeps the layout and the host objects.
        let again = static_hosts_reusing(&la, Some(&s), true, &HostSockets::NONE);
        assert!(Arc::ptr_eq(
            &again.priorities[0].all()[0],
            &s.priorities[0].all()[0]
        ));
        assert_eq!(again.localities(0).unwrap().spans, l.spans);
    }

    #[test]
    fn a_rebuilt_set_follows_health_and_keeps_its_factor() {
        let la = assignment(
            &[(Some("a"), Some(1), &[1, 2]), (Some("b"), Some(1), &[3, 4])],
            140,
        );
        let s = static_hosts(&la, true, &HostSockets::NONE);
        assert_eq!(s.localities(0).unwrap().schedule().len(), 2);
        // Port 2 fails its health check: A's weight becomes 0.7, 7 : 10.
        s.priorities[0].all()[1].health.set_failed(true);
        let r = s.rebuilt();
        let l = r.localities(0).unwrap();
        assert_eq!(ports(l.healthy(0).unwrap().0), [1]);
        let mut counts = [0; 2];
        for n in 0..l.schedule().len() {
            counts[l.schedule().slot(n).unwrap()] += 1;
        }
        assert_eq!(counts, [7, 10]);
        // With a factor of 200, half of A is enough for its full weight.
        let la = assignment(
            &[(Some("a"), Some(1), &[1, 2]), (Some("b"), Some(1), &[3, 4])],
            200,
        );
        let s = static_hosts(&la, true, &HostSockets::NONE);
        s.priorities[0].all()[1].health.set_failed(true);
        let l = s.rebuilt();
        assert_eq!(l.localities(0).unwrap().schedule().len(), 2);
    }
}
