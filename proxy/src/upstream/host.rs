//! Hosts and host sets: what a cluster's load balancer picks from. Built on the
//! main thread (from the config, or from DNS answers) and published whole, so a
//! worker always sees one consistent set.

use super::lazy::Lazy;
use courier_config::cluster::{Endpoint, LoadAssignment};
use once_cell::race::OnceBox;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One upstream host. Shared by every worker (LEAST_REQUEST compares the active
/// request counts all workers keep).
#[derive(Debug)]
pub struct Host {
    /// Where to connect.
    pub address: SocketAddr,
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
}

/// A host's counters (`/clusters`), summed over workers by being shared.
#[derive(Debug, Default)]
pub struct HostStats {
    /// `rq_total`: requests sent.
    pub rq_total: AtomicU64,
    /// `cx_total`: connections opened (or attempted).
    pub cx_total: AtomicU64,
    /// `cx_active`: connections open.
    pub cx_active: AtomicU64,
    /// `cx_connect_fail`.
    pub cx_connect_fail: AtomicU64,
}

impl HostStats {
    /// Zeroes the counters (`/reset_counters`); `cx_active` is a gauge.
    pub fn reset_counters(&self) {
        for c in [&self.rq_total, &self.cx_total, &self.cx_connect_fail] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

impl Host {
    /// A host.
    pub fn new(address: SocketAddr, hostname: String, weight: u32, healthy: bool) -> Self {
        Self {
            address,
            address_text: OnceBox::new(),
            hostname: (!hostname.is_empty()).then(|| Box::new(hostname)),
            weight: weight.max(1),
            healthy,
            active: AtomicU64::new(0),
            stats: Lazy::default(),
            outlier: Default::default(),
            health: Default::default(),
        }
    }

    /// The host name `auto_host_rewrite` uses: the endpoint's `hostname`, or
    /// the DNS name it was resolved from; empty when neither exists.
    pub fn hostname(&self) -> &str {
        self.hostname.as_deref().map_or("", String::as_str)
    }

    /// `address` as text (`%UPSTREAM_HOST%`).
    pub fn address_text(&self) -> &str {
        self.address_text
            .get_or_init(|| Box::new(self.address.to_string()))
    }

    /// Requests in flight.
    pub fn active_requests(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }

    /// Counts a request in flight until the guard drops.
    pub fn start_request(self: &Arc<Self>) -> ActiveRequest {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.stats.rq_total.fetch_add(1, Ordering::Relaxed);
        ActiveRequest(Arc::clone(self))
    }
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
    fn new(hosts: &[Arc<Host>]) -> Self {
        let equal = hosts.windows(2).all(|w| w[0].weight == w[1].weight);
        if equal {
            return Schedule::Uniform(hosts.len());
        }
        let total: u64 = hosts.iter().map(|h| u64::from(h.weight)).sum();
        let weights: Vec<i64> = hosts
            .iter()
            .map(|h| {
                let w = u64::from(h.weight);
                let w = if total > MAX_SCHEDULE {
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
}

impl PriorityHosts {
    fn new(all: Vec<Arc<Host>>) -> Self {
        // An ejected or health-check-failed host is unhealthy until it returns.
        let is_healthy = |h: &Arc<Host>| h.healthy && !h.outlier.ejected() && !h.health.failed();
        let count = all.iter().filter(|h| is_healthy(h)).count();
        let healthy_percent = if all.is_empty() {
            0.0
        } else {
            100.0 * count as f64 / all.len() as f64
        };
        let healthy = (count < all.len()).then(|| {
            let healthy: Box<[Arc<Host>]> = all.iter().filter(|h| is_healthy(h)).cloned().collect();
            let schedule = Schedule::new(&healthy);
            (healthy, schedule)
        });
        Self {
            all_schedule: Schedule::new(&all),
            all: all.into_boxed_slice(),
            healthy,
            healthy_percent,
        }
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
}

impl HostSet {
    /// Builds the set from hosts per priority, with Envoy's priority load:
    /// a level's health is `min(100, overprovisioning x healthy / total)`; levels
    /// take load in order, normalised when the total health is under 100.
    pub fn new(priorities: Vec<Vec<Arc<Host>>>, overprovisioning_factor: u32) -> Self {
        let priorities: Vec<PriorityHosts> =
            priorities.into_iter().map(PriorityHosts::new).collect();
        let health: Vec<u32> = priorities
            .iter()
            .map(|p| {
                if p.all.is_empty() {
                    0
                } else {
                    let h = u64::from(overprovisioning_factor) * p.healthy().len() as u64
                        / p.all.len() as u64;
                    h.min(100) as u32
                }
            })
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
        }
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

/// The hosts of a STATIC cluster (endpoints are IP literals).
pub fn static_hosts(la: &LoadAssignment) -> HostSet {
    static_hosts_reusing(la, None)
}

/// [`static_hosts`], keeping the host objects of `previous` (and so their
/// health, outlier and request state) whose address, hostname, weight and
/// health status are unchanged: an EDS update that moves one endpoint leaves
/// the others as they were.
pub fn static_hosts_reusing(la: &LoadAssignment, previous: Option<&HostSet>) -> HostSet {
    // Envoy keys hosts by address; an index keeps large updates linear.
    let by_addr: std::collections::HashMap<SocketAddr, &Arc<Host>> = previous
        .map(|p| p.hosts().map(|h| (h.address, h)).collect())
        .unwrap_or_default();
    let priorities = la
        .priorities
        .iter()
        .map(|p| {
            // Sized up front: the list is kept for the set's life.
            let mut hosts =
                Vec::with_capacity(p.localities.iter().map(|l| l.endpoints.len()).sum());
            hosts.extend(
                p.localities
                    .iter()
                    .flat_map(|l| l.endpoints.iter())
                    .filter_map(|e| {
                        let ip = e.address.ip?;
                        let address = SocketAddr::new(ip, e.address.port);
                        let hostname = e.hostname.clone().unwrap_or_default();
                        let healthy = e.health_status.is_healthy();
                        if let Some(h) = by_addr.get(&address).filter(|h| {
                            h.hostname() == hostname
                                && h.weight == e.weight.max(1)
                                && h.healthy == healthy
                        }) {
                            return Some(Arc::clone(h));
                        }
                        Some(Arc::new(Host::new(address, hostname, e.weight, healthy)))
                    }),
            );
            hosts
        })
        .collect();
    HostSet::new(priorities, la.overprovisioning_factor)
}

/// A host for `endpoint` resolved to `address`; keeps `previous`'s host object (and
/// so its active request count) when nothing about it changed.
pub fn resolved_host(
    endpoint: &Endpoint,
    address: SocketAddr,
    previous: Option<&HostSet>,
) -> Arc<Host> {
    let hostname = endpoint
        .hostname
        .clone()
        .unwrap_or_else(|| endpoint.address.host.clone());
    let healthy = endpoint.health_status.is_healthy();
    if let Some(h) = previous.and_then(|p| {
        p.hosts().find(|h| {
            h.address == address
                && h.hostname() == hostname
                && h.weight == endpoint.weight.max(1)
                && h.healthy == healthy
        })
    }) {
        return Arc::clone(h);
    }
    Arc::new(Host::new(address, hostname, endpoint.weight, healthy))
}

#[cfg(test)]
mod tests {
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
}
