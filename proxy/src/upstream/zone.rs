//! Zone-aware routing, as Envoy's `ZoneAwareLoadBalancerBase`: when the
//! bootstrap names a local cluster (the proxy's own fleet), a cluster's
//! priority 0 sends each request to the proxy's own locality when that
//! locality has at least its fair share of the upstream hosts (direct routing),
//! otherwise it keeps locally what the local zone can take and spreads the rest
//! over the localities with capacity left (residual routing).
//!
//! The routing state depends on two host sets: the cluster's and the local
//! cluster's. It is computed once per pair of sets (by the first pick that sees
//! the pair, on whichever worker) and shared by all workers, so an EDS update,
//! a DNS answer, an ejection or a health-check change of either cluster is
//! followed at the next pick.

use super::UpstreamCluster;
use super::host::{Host, HostSet, Schedule, usable};
use crate::stats::Counter;
use arc_swap::ArcSwapOption;
use courier_config::cluster::{LoadBalancer, Locality, LocalityBasis, ZoneAware};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// No runtime value: the clusters' own settings apply.
const UNSET: u64 = u64::MAX;
/// `upstream.zone_routing.enabled` in force (process-wide, as Envoy's runtime).
static RUNTIME_ENABLED: AtomicU64 = AtomicU64::new(UNSET);
/// `upstream.zone_routing.min_cluster_size` in force.
static RUNTIME_MIN_CLUSTER_SIZE: AtomicU64 = AtomicU64::new(UNSET);

/// Sets the runtime's `upstream.zone_routing.enabled` and
/// `upstream.zone_routing.min_cluster_size` (`None`: not set by any layer).
/// The first applies from the next pick, the second from the next time a
/// cluster's zone routing is computed (as Envoy reads it).
pub fn set_runtime(enabled: Option<u64>, min_cluster_size: Option<u64>) {
    RUNTIME_ENABLED.store(enabled.unwrap_or(UNSET), Ordering::Relaxed);
    RUNTIME_MIN_CLUSTER_SIZE.store(min_cluster_size.unwrap_or(UNSET), Ordering::Relaxed);
}

/// The runtime's value of a key, or `default`.
fn runtime_or(key: &AtomicU64, default: u64) -> u64 {
    match key.load(Ordering::Relaxed) {
        UNSET => default,
        v => v,
    }
}

/// The proxy's side of zone-aware routing, shared by every cluster.
#[derive(Debug)]
pub struct ZoneContext {
    /// `node.locality` (or `--service-zone`); `None` when the node has none.
    pub locality: Option<Locality>,
    /// `cluster_manager.local_cluster_name`.
    pub local_name: String,
    /// The local cluster in force.
    local: ArcSwapOption<UpstreamCluster>,
}

impl ZoneContext {
    /// A context for the local cluster `local_name`, the node at `locality`.
    pub fn new(local_name: String, locality: Option<Locality>) -> Self {
        Self {
            locality,
            local_name,
            local: ArcSwapOption::empty(),
        }
    }

    /// Records the local cluster in force (at start and when it is replaced).
    pub fn set_local(&self, c: &Arc<UpstreamCluster>) {
        if c.config.name == self.local_name {
            self.local.store(Some(Arc::clone(c)));
        }
    }
}

/// Why an EDS assignment for the local cluster `name` is refused: Envoy takes
/// the local fleet from priority 0 only and rejects an assignment with hosts
/// in another (in its words).
pub fn local_assignment_error(
    la: &courier_config::cluster::LoadAssignment,
    name: &str,
) -> Option<String> {
    la.priorities
        .iter()
        .skip(1)
        .any(|p| p.localities.iter().any(|l| !l.endpoints.is_empty()))
        .then(|| format!("Unexpected non-zero priority for local cluster '{name}'."))
}

/// A cluster's zone-aware routing: the context and the state computed last.
#[derive(Debug)]
pub struct ClusterZone {
    ctx: Arc<ZoneContext>,
    routing: ArcSwapOption<ZoneRouting>,
}

/// `cluster.<name>.lb_*` counters of zone-aware routing (shared by workers
/// and by the versions of a cluster CDS updates).
#[derive(Debug, Default)]
pub struct ZoneStats {
    /// `lb_recalculate_zone_structures`.
    pub recalculate: Counter,
    /// `lb_zone_cluster_too_small`.
    pub cluster_too_small: Counter,
    /// `lb_local_cluster_not_ok`.
    pub local_cluster_not_ok: Counter,
    /// `lb_zone_routing_all_directly`.
    pub all_directly: Counter,
    /// `lb_zone_routing_sampled`.
    pub sampled: Counter,
    /// `lb_zone_routing_cross_zone`.
    pub cross_zone: Counter,
    /// `lb_zone_no_capacity_left`.
    pub no_capacity_left: Counter,
    // No `lb_zone_number_differs`: Envoy 1.40 no longer has it (differing
    // numbers of zones route by zone).
}

impl ZoneStats {
    /// The counters by their names under `cluster.<name>.`.
    pub fn values(&self) -> [(&'static str, &Counter); 7] {
        [
            ("lb_local_cluster_not_ok", &self.local_cluster_not_ok),
            ("lb_recalculate_zone_structures", &self.recalculate),
            ("lb_zone_cluster_too_small", &self.cluster_too_small),
            ("lb_zone_no_capacity_left", &self.no_capacity_left),
            ("lb_zone_routing_all_directly", &self.all_directly),
            ("lb_zone_routing_cross_zone", &self.cross_zone),
            ("lb_zone_routing_sampled", &self.sampled),
        ]
    }
}

/// Every cluster's zone-aware routing counters.
pub fn samples(clusters: &super::ClusterManager, out: &mut Vec<crate::stats::Sample>) {
    for c in clusters.clusters() {
        let name = c.config.stat_name();
        for (stat, v) in c.zone_stats.values() {
            out.push((format!("cluster.{name}.{stat}"), v.get()));
        }
    }
}

/// How priority 0 routes by zone (Envoy's `LocalityRoutingState`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Zones are not considered.
    NoLocalityRouting,
    /// Everything to the local locality.
    Direct,
    /// `local_percent` (of 10 000) to the local locality, the rest by the
    /// cumulative residual capacities.
    Residual {
        /// Share of picks kept local, of 10 000.
        local_percent: u64,
        /// Cumulative residual capacity per locality (the local one adds 0).
        residual: Box<[u64]>,
    },
}

/// Which early exit left zones out, for its counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    /// None counted (fewer than two localities).
    Silent,
    /// `lb_local_cluster_not_ok`.
    LocalNotOk,
    /// `lb_zone_cluster_too_small`.
    TooSmall,
}

/// One locality's healthy hosts and their order.
type LocalityHosts = (Box<[Arc<Host>]>, Schedule);

/// The routing computed from one upstream set and one local set.
#[derive(Debug)]
pub struct ZoneRouting {
    upstream: Arc<HostSet>,
    local: Arc<HostSet>,
    /// How picks route.
    pub state: State,
    /// Priority 0's healthy hosts per locality (the local one first when the
    /// level has it, then the others in Envoy's order) and their orders.
    localities: Box<[LocalityHosts]>,
    /// The local cluster is in panic (too few healthy hosts).
    local_panic: bool,
    exit: Option<Exit>,
}

/// A host's locality as Envoy orders them (region, zone, sub-zone); no
/// locality is the empty one.
fn key(h: &Host) -> (&str, &str, &str) {
    h.locality.as_deref().map_or(("", "", ""), |l| {
        (l.region.as_str(), l.zone.as_str(), l.sub_zone.as_str())
    })
}

/// Envoy's hosts per locality: the node's own locality first when some host
/// is in it, then the others in lexicographic order. Returns the groups and
/// whether the first is the local one.
fn per_locality(hosts: &[Arc<Host>], node: Option<&Locality>) -> (Vec<Vec<Arc<Host>>>, bool) {
    let mut by: BTreeMap<(&str, &str, &str), Vec<Arc<Host>>> = BTreeMap::new();
    for h in hosts {
        by.entry(key(h)).or_default().push(Arc::clone(h));
    }
    let local = node.map(|l| (l.region.as_str(), l.zone.as_str(), l.sub_zone.as_str()));
    let first = local.and_then(|k| by.remove(&k));
    let has_local = first.is_some();
    let groups = first.into_iter().chain(by.into_values()).collect();
    (groups, has_local)
}

fn healthy(groups: &[Vec<Arc<Host>>]) -> Vec<Vec<Arc<Host>>> {
    groups
        .iter()
        .map(|g| g.iter().filter(|h| usable(h)).cloned().collect())
        .collect()
}

fn weight(group: &[Arc<Host>], basis: LocalityBasis) -> u64 {
    match basis {
        LocalityBasis::HealthyHosts => group.len() as u64,
        LocalityBasis::HealthyWeight => group.iter().map(|h| u64::from(h.weight)).sum(),
    }
}

/// Per upstream locality, (local share, upstream share) of 10 000, by healthy
/// hosts (or their weights) as Envoy's `calculateLocalityPercentages`.
fn percentages(
    local: &[Vec<Arc<Host>>],
    upstream: &[Vec<Arc<Host>>],
    basis: LocalityBasis,
) -> Vec<(u64, u64)> {
    let total_local: u64 = local.iter().map(|g| weight(g, basis)).sum();
    let local_by: BTreeMap<_, u64> = local
        .iter()
        .filter_map(|g| g.first().map(|h| (key(h), weight(g, basis))))
        .collect();
    let total_up: u64 = upstream.iter().map(|g| weight(g, basis)).sum();
    upstream
        .iter()
        .map(|g| {
            let Some(first) = g.first() else {
                return (0, 0);
            };
            let l = local_by.get(&key(first)).copied().unwrap_or(0);
            let lp = (10_000 * l).checked_div(total_local).unwrap_or(0);
            let up = (10_000 * weight(g, basis))
                .checked_div(total_up)
                .unwrap_or(0);
            (lp, up)
        })
        .collect()
}

/// Envoy's `isHostSetInPanic` on priority 0 of `set`.
fn in_panic(set: &HostSet, threshold: f64) -> bool {
    let Some(level) = set.priorities.first() else {
        return threshold.min(100.0) > 0.0;
    };
    let all = level.all().len();
    let healthy = if all == 0 {
        0.0
    } else {
        100.0 * level.healthy().len() as f64 / all as f64
    };
    healthy < threshold.min(100.0)
}

/// Envoy's `regenerateLocalityRoutingStructures` for `upstream` against `local`.
pub fn compute(
    upstream: &Arc<HostSet>,
    local: &Arc<HostSet>,
    node: Option<&Locality>,
    lb: &LoadBalancer,
) -> ZoneRouting {
    let cfg: &ZoneAware = &lb.zone_aware;
    let none: &[Arc<Host>] = &[];
    let p0 = upstream.priorities.first();
    let (up_all, up_has_local) = per_locality(p0.map_or(none, |l| l.all()), node);
    let up = healthy(&up_all);
    let (local_all, local_has_local) =
        per_locality(local.priorities.first().map_or(none, |l| l.all()), node);
    let mut routing = ZoneRouting {
        upstream: Arc::clone(upstream),
        local: Arc::clone(local),
        state: State::NoLocalityRouting,
        localities: up
            .iter()
            .map(|g| (g.clone().into_boxed_slice(), Schedule::new(g)))
            .collect(),
        local_panic: in_panic(local, lb.healthy_panic_threshold),
        exit: None,
    };
    // earlyExitNonLocalityRouting, in Envoy's order.
    // Fewer than two upstream localities, or (unless forced) local ones.
    let few = up_all.len() < 2 || (cfg.force_local_zone_min_size.is_none() && local_all.len() < 2);
    let exit = if few {
        Some(Exit::Silent)
    } else if !local_has_local || local_all.first().is_none_or(|g| g.is_empty()) {
        Some(Exit::LocalNotOk)
    } else if (p0.map_or(0, |l| l.healthy().len()) as u64)
        < runtime_or(&RUNTIME_MIN_CLUSTER_SIZE, cfg.min_cluster_size)
    {
        Some(Exit::TooSmall)
    } else {
        None
    };
    if exit.is_some() {
        routing.exit = exit;
        return routing;
    }
    let pct = percentages(&healthy(&local_all), &up, cfg.locality_basis);
    let (local_pct, up_pct) = pct.first().copied().unwrap_or((0, 0));
    if up_has_local {
        let forced = cfg
            .force_local_zone_min_size
            .is_some_and(|m| up.first().map_or(0, Vec::len) >= m as usize);
        if (up_pct > 0 && up_pct >= local_pct) || forced {
            routing.state = State::Direct;
            return routing;
        }
    }
    // What the local zone can take, of 10 000; the rest goes by residual
    // capacity (upstream share above local share), accumulated for sampling.
    let local_percent = if up_has_local && local_pct > 0 {
        up_pct * 10_000 / local_pct
    } else {
        0
    };
    let mut sum = 0;
    let residual = pct
        .iter()
        .enumerate()
        .map(|(i, &(l, u))| {
            if !(i == 0 && up_has_local) && u > l {
                sum += u - l;
            }
            sum
        })
        .collect();
    routing.state = State::Residual {
        local_percent,
        residual,
    };
    routing
}

impl ZoneRouting {
    /// Envoy's `tryChooseLocalLocalityHosts`: the locality of this pick, counted.
    fn pick(&self, stats: &ZoneStats) -> usize {
        match &self.state {
            State::NoLocalityRouting | State::Direct => {
                stats.all_directly.inc();
                0
            }
            State::Residual {
                local_percent,
                residual,
            } => {
                if fastrand::u64(..) % 10_000 < *local_percent {
                    stats.sampled.inc();
                    return 0;
                }
                stats.cross_zone.inc();
                let n = residual.len();
                let total = residual.last().copied().unwrap_or(0);
                if total == 0 {
                    // Rounding left no capacity anywhere: any locality.
                    stats.no_capacity_left.inc();
                    return fastrand::usize(..n.max(1));
                }
                let t = fastrand::u64(..) % total;
                residual.iter().position(|&r| t < r).unwrap_or(0)
            }
        }
    }

    /// Locality `i`'s healthy hosts and their order.
    fn locality(&self, i: usize) -> Option<(&[Arc<Host>], &Schedule)> {
        self.localities.get(i).map(|(h, s)| (&h[..], s))
    }
}

impl ClusterZone {
    /// Zone-aware routing of a cluster in `ctx`.
    pub fn new(ctx: Arc<ZoneContext>) -> Self {
        Self {
            ctx,
            routing: ArcSwapOption::empty(),
        }
    }

    /// The routing for `set` and the local cluster's current hosts:
    /// the shared one when it was computed from them, else computed now (and
    /// counted once, by the worker whose result is kept).
    pub fn routing(
        &self,
        set: &Arc<HostSet>,
        lb: &LoadBalancer,
        stats: &ZoneStats,
    ) -> Option<Arc<ZoneRouting>> {
        let local = self.ctx.local.load();
        let local_set = local.as_ref()?.hosts();
        let current = self.routing.load();
        if let Some(r) = current.as_ref()
            && Arc::ptr_eq(&r.upstream, set)
            && Arc::ptr_eq(&r.local, &local_set)
        {
            return Some(Arc::clone(r));
        }
        let fresh = Arc::new(compute(set, &local_set, self.ctx.locality.as_ref(), lb));
        let previous = self
            .routing
            .compare_and_swap(&current, Some(Arc::clone(&fresh)));
        let won = match (previous.as_ref(), current.as_ref()) {
            (Some(p), Some(c)) => Arc::ptr_eq(p, c),
            (None, None) => true,
            _ => false,
        };
        if won {
            stats.recalculate.inc();
            match fresh.exit {
                Some(Exit::LocalNotOk) => stats.local_cluster_not_ok.inc(),
                Some(Exit::TooSmall) => stats.cluster_too_small.inc(),
                Some(Exit::Silent) | None => {}
            }
        }
        Some(fresh)
    }
}

/// Envoy's zone part of `hostSourceToUse` for a pick in priority 0 (not in
/// panic, not locality-weighted): `None` = use the level's healthy hosts;
/// `Some(None)` = fail the pick; `Some(Some(..))` = this locality's hosts.
pub fn choose_locality(
    zone: &ClusterZone,
    set: &Arc<HostSet>,
    lb: &LoadBalancer,
    stats: &ZoneStats,
) -> Option<Option<(Arc<ZoneRouting>, usize)>> {
    let routing = zone.routing(set, lb, stats)?;
    if routing.state == State::NoLocalityRouting {
        return None;
    }
    // Envoy's featureEnabled(`upstream.zone_routing.enabled`, routing_enabled):
    // that percent of picks.
    let enabled = runtime_or(&RUNTIME_ENABLED, u64::from(lb.zone_aware.routing_enabled));
    if fastrand::u64(0..100) >= enabled {
        return None;
    }
    if routing.local_panic {
        stats.local_cluster_not_ok.inc();
        return lb.zone_aware.fail_traffic_on_panic.then_some(None);
    }
    let index = routing.pick(stats);
    Some(Some((routing, index)))
}

/// The hosts of locality `index` of `routing`.
pub fn locality_hosts(routing: &ZoneRouting, index: usize) -> (&[Arc<Host>], &Schedule) {
    routing.locality(index).unwrap_or((&[], &EMPTY))
}

static EMPTY: Schedule = Schedule::Uniform(0);

#[cfg(test)]
#[path = "zone_tests.rs"]
mod tests;
