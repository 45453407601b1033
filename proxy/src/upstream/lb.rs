//! Load balancing: pick a priority by Envoy's priority load, go into panic mode
//! when too few of its hosts are healthy, with locality-weighted balancing pick
//! a locality by its effective weight, then pick a host by the cluster's
//! policy. Cursors are per worker (thread-local: a worker is one thread), so
//! picking takes no lock and touches no shared cache line except LEAST_REQUEST's
//! active request counts.

use super::host::{Host, HostSet, Schedule};
use super::zone::{self, ClusterZone, ZoneStats};
use courier_config::cluster::{LbPolicy, LoadBalancer};
use std::cell::RefCell;
use std::sync::Arc;
use std::thread::LocalKey;

/// A worker's cursors, by (cluster index, slot).
type Cursors = RefCell<Vec<Vec<usize>>>;

thread_local! {
    /// Round-robin cursors of this worker over a level's hosts: slot `2p` for
    /// priority `p`'s healthy hosts, `2p + 1` for all of them (panic).
    static CURSORS: Cursors = const { RefCell::new(Vec::new()) };
    /// Cursors of locality-weighted clusters: per level, one over its
    /// localities and one per locality over its hosts (slots from
    /// [`super::host::Localities`]). Apart from [`CURSORS`] so other clusters'
    /// tables stay two slots a level.
    static LOCALITY_CURSORS: Cursors = const { RefCell::new(Vec::new()) };
    /// Cursors of zone-aware picks: one per locality of priority 0.
    static ZONE_CURSORS: Cursors = const { RefCell::new(Vec::new()) };
}

/// Picks a host of `set` for cluster number `cluster`; `None` = no healthy
/// upstream. Zones are not considered (see [`choose_in`]).
#[cfg(test)]
pub fn choose(set: &HostSet, lb: &LoadBalancer, cluster: usize) -> Option<Arc<Host>> {
    pick(set, lb, cluster, None)
}

/// Picks a host of `set` (`cluster`'s current hosts) as [`choose`], with
/// zone-aware routing when the bootstrap names a local cluster.
pub fn choose_in(cluster: &super::UpstreamCluster, set: &Arc<HostSet>) -> Option<Arc<Host>> {
    let zone = cluster
        .zone
        .as_deref()
        .map(|z| (z, &*cluster.zone_stats, set));
    pick(set, &cluster.config.lb, cluster.lb_slot, zone)
}

/// Picks a host of `set` for `cluster` with the request's `hash` (from the
/// route's hash policies; `None`: none produced one) on pick `attempt` (0,
/// then a retry host predicate's re-picks). Only the consistent-hashing
/// policies read the hash; the others pick as [`choose_in`].
pub fn choose_hashed(
    cluster: &super::UpstreamCluster,
    set: &Arc<HostSet>,
    hash: Option<u64>,
    attempt: u32,
) -> Option<Arc<Host>> {
    let lb = &cluster.config.lb;
    if lb.policy.uses_hash() {
        return pick_hashed(set, lb, hash.unwrap_or_else(|| fastrand::u64(..)), attempt);
    }
    choose_in(cluster, set)
}

/// Envoy's thread-aware balancers (RING_HASH, MAGLEV): the hash (a random one
/// without a hash policy's) picks the priority (`hash % 100` against the
/// priority loads) and then the host in that level's table; a level in panic
/// uses its table over every host. With locality-weighted balancing the table
/// spreads over the localities by their weights (not their health, as in
/// Envoy); zones play no part, as in Envoy (nor does `fail_traffic_on_panic`,
/// which these balancers do not read).
fn pick_hashed(set: &HostSet, lb: &LoadBalancer, hash: u64, attempt: u32) -> Option<Arc<Host>> {
    let priority = set.priority_for((hash % 100) as u32);
    let level = set.priorities.get(priority)?;
    let panic = lb.healthy_panic_threshold > 0.0
        && (set.total_panic || level.healthy_percent < lb.healthy_panic_threshold);
    let (hosts, table) = level.hash_table(panic, &lb.policy, set.localities(priority))?;
    hosts.get(table.choose(hash, attempt)?).cloned()
}

/// The zone state of a pick: the cluster's, its counters and its set.
type ZoneArgs<'a> = (&'a ClusterZone, &'a ZoneStats, &'a Arc<HostSet>);

/// Picks a host of priority `priority` (a retry's own priority load chose it).
pub fn choose_at_priority(
    cluster: &super::UpstreamCluster,
    set: &Arc<HostSet>,
    priority: usize,
) -> Option<Arc<Host>> {
    let zone = cluster
        .zone
        .as_deref()
        .map(|z| (z, &*cluster.zone_stats, set));
    pick_at(set, &cluster.config.lb, cluster.lb_slot, zone, priority)
}

fn pick(
    set: &HostSet,
    lb: &LoadBalancer,
    cluster: usize,
    zone: Option<ZoneArgs<'_>>,
) -> Option<Arc<Host>> {
    if lb.policy.uses_hash() {
        // No hash: Envoy's hash balancers pick by a random one.
        return pick_hashed(set, lb, fastrand::u64(..), 0);
    }
    let priority = set.priority_for(fastrand::u32(0..100));
    pick_at(set, lb, cluster, zone, priority)
}

fn pick_at(
    set: &HostSet,
    lb: &LoadBalancer,
    cluster: usize,
    zone: Option<ZoneArgs<'_>>,
    priority: usize,
) -> Option<Arc<Host>> {
    let level = set.priorities.get(priority)?;
    let panic = lb.healthy_panic_threshold > 0.0
        && (set.total_panic || level.healthy_percent < lb.healthy_panic_threshold);
    if panic && lb.zone_aware.fail_traffic_on_panic {
        // Envoy: a level in panic fails the pick instead of using every host.
        return None;
    }
    // Envoy's hostSourceToUse: a level in panic balances over all its hosts,
    // localities aside; otherwise a locality-weighted cluster picks a locality
    // and balances within its healthy hosts; failing that (no locality with
    // any effective weight, or no locality weighting) zone-aware routing may
    // pick a locality of priority 0 by zone (the routing is kept alive for
    // the pick); else the level's healthy hosts.
    let weighted = if panic || !lb.locality_weighted {
        None
    } else {
        set.localities(priority)
            .and_then(|l| pick_locality(l, cluster))
    };
    let routed = match zone {
        Some((z, stats, arc)) if priority == 0 && !panic && weighted.is_none() => {
            match zone::choose_locality(z, arc, lb, stats) {
                Some(None) => return None,
                Some(Some(r)) => Some(r),
                None => None,
            }
        }
        _ => None,
    };
    let (hosts, schedule, (cursors, slot)) = if panic {
        (
            level.all(),
            level.all_schedule(),
            (&CURSORS, 2 * priority + 1),
        )
    } else if let Some((hosts, schedule, slot)) = weighted {
        (hosts, schedule, (&LOCALITY_CURSORS, slot))
    } else if let Some((routing, index)) = &routed {
        let (hosts, schedule) = zone::locality_hosts(routing, *index);
        (hosts, schedule, (&ZONE_CURSORS, *index))
    } else {
        (
            level.healthy(),
            level.healthy_schedule(),
            (&CURSORS, 2 * priority),
        )
    };
    if hosts.is_empty() {
        return None;
    }
    if let Some(slow) = &lb.slow_start
        && matches!(
            lb.policy,
            LbPolicy::RoundRobin | LbPolicy::LeastRequest { .. }
        )
    {
        let table = std::ptr::from_ref(cursors) as usize;
        let now = tokio::time::Instant::now();
        // Envoy's LEAST_REQUEST keeps picking by weight while the set it
        // built its schedulers for lasts; ROUND_ROBIN's schedule gives the
        // same shares as its EDF once no host is in slow start.
        let weighted = matches!(lb.policy, LbPolicy::LeastRequest { .. }) && set.weighted_picks();
        if let Some(i) = super::slow_start::pick(
            hosts,
            slow,
            &lb.policy,
            (cluster, table, slot),
            now,
            weighted,
        ) {
            return hosts.get(i).cloned();
        }
    }
    let index = match lb.policy {
        // A cluster-provided balancer's cluster (the dynamic forward proxy)
        // has no host set to pick from; were one there, rotate.
        LbPolicy::RoundRobin | LbPolicy::ClusterProvided => {
            schedule.slot(next_cursor(cursors, cluster, slot, schedule.len()))?
        }
        LbPolicy::Random => schedule.slot(fastrand::usize(..))?,
        LbPolicy::LeastRequest {
            choice_count,
            active_request_bias,
        } => {
            // Power of `choice_count` choices: sample (by weight) and keep the host with
            // the least active requests per unit of weight.
            let mut best: Option<(usize, f64)> = None;
            for _ in 0..choice_count.max(1) {
                let i = schedule.slot(fastrand::usize(..))?;
                let h = hosts.get(i)?;
                let load = (h.active_requests() as f64 + 1.0).powf(active_request_bias)
                    / f64::from(h.weight);
                if best.is_none_or(|(_, b)| load < b) {
                    best = Some((i, load));
                }
            }
            best?.0
        }
        // Picked by pick_hashed above.
        LbPolicy::RingHash(_) | LbPolicy::Maglev(_) => return None,
    };
    hosts.get(index).cloned()
}

/// A locality of level `l` by weighted round robin over the effective weights
/// (this worker's cursor): its healthy hosts, their order and its host cursor
/// slot. `None` when no locality has effective weight.
fn pick_locality(
    l: &super::host::Localities,
    cluster: usize,
) -> Option<(&[Arc<Host>], &Schedule, usize)> {
    let order = l.schedule();
    if order.len() == 0 {
        return None;
    }
    let n = next_cursor(&LOCALITY_CURSORS, cluster, l.locality_cursor(), order.len());
    let i = order.slot(n)?;
    let (hosts, schedule) = l.healthy(i)?;
    Some((hosts, schedule, l.host_cursor(i)))
}

/// This worker's next round-robin position for `(cluster, slot)` in `cursors`.
/// Starts at a random place so workers do not all begin with the same host.
fn next_cursor(
    cursors: &'static LocalKey<Cursors>,
    cluster: usize,
    slot: usize,
    len: usize,
) -> usize {
    cursors.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() <= cluster {
            c.resize_with(cluster + 1, Vec::new);
        }
        let Some(slots) = c.get_mut(cluster) else {
            return 0;
        };
        if slots.len() <= slot {
            slots.resize_with(slot + 1, || fastrand::usize(..len.max(1)));
        }
        let Some(cursor) = slots.get_mut(slot) else {
            return 0;
        };
        let n = *cursor;
        *cursor = n.wrapping_add(1);
        n
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn set(healthy: &[&[bool]]) -> HostSet {
        let mut port = 0;
        HostSet::new(
            healthy
                .iter()
                .map(|p| {
                    p.iter()
                        .map(|&h| {
                            port += 1;
                            Arc::new(Host::new(
                                SocketAddr::from(([127, 0, 0, 1], port)),
                                String::new(),
                                1,
                                h,
                            ))
                        })
                        .collect()
                })
                .collect(),
            140,
        )
    }

    fn lb(policy: LbPolicy, panic: f64) -> LoadBalancer {
        LoadBalancer {
            policy,
            healthy_panic_threshold: panic,
            locality_weighted: false,
            zone_aware: Default::default(),
            cluster_hash_policy: Vec::new(),
            slow_start: None,
        }
    }

    #[test]
    fn round_robin_rotates_over_healthy_hosts() {
        let s = set(&[&[true, true, true, false]]);
        let l = lb(LbPolicy::RoundRobin, 50.0);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..30 {
            let h = choose(&s, &l, 7).unwrap();
            *counts.entry(h.address.port()).or_insert(0) += 1;
        }
        assert_eq!(counts.len(), 3);
        assert!(counts.values().all(|&n| n == 10), "{counts:?}");
    }

    #[test]
    fn panic_mode_uses_unhealthy_hosts_and_threshold_zero_disables_it() {
        let s = set(&[&[false, false]]);
        assert!(choose(&s, &lb(LbPolicy::Random, 50.0), 0).is_some());
        assert!(choose(&s, &lb(LbPolicy::Random, 0.0), 0).is_none());
        let empty = set(&[&[]]);
        assert!(choose(&empty, &lb(LbPolicy::RoundRobin, 50.0), 0).is_none());
    }

    #[test]
    fn fail_traffic_on_panic_fails_a_level_in_panic() {
        // 1 of 3 healthy (33 % < 50 %): panic. Envoy's zone_aware_lb_config
        // fail_traffic_on_panic fails the pick instead of using every host,
        // with or without a local cluster.
        let s = set(&[&[true, false, false]]);
        let mut l = lb(LbPolicy::RoundRobin, 50.0);
        assert!(choose(&s, &l, 0).is_some());
        l.zone_aware.fail_traffic_on_panic = true;
        assert!(choose(&s, &l, 0).is_none());
        // Not in panic: it picks as usual.
        let healthy = set(&[&[true, true, false]]);
        assert!(choose(&healthy, &l, 0).is_some_and(|h| h.healthy));
    }

    #[test]
    fn least_request_avoids_the_busy_host() {
        let s = set(&[&[true, true]]);
        let busy = Arc::clone(&s.priorities[0].all()[0]);
        let _guards: Vec<_> = (0..10).map(|_| busy.start_request()).collect();
        let l = lb(
            LbPolicy::LeastRequest {
                choice_count: 10,
                active_request_bias: 1.0,
            },
            50.0,
        );
        let picks_busy = (0..100)
            .filter(|_| choose(&s, &l, 0).unwrap().address == busy.address)
            .count();
        // With 10 samples, the idle host is missed only when all 10 hit the busy one.
        assert!(picks_busy < 5, "{picks_busy}");
    }

    /// A locality: its weight and its hosts as (host weight, healthy).
    type Locality<'a> = (u32, &'a [(u32, bool)]);

    /// A set of levels of localities, with locality weighting on; ports
    /// number the hosts from 1 in order.
    fn localities(levels: &[&[Locality<'_>]]) -> HostSet {
        let mut port = 0;
        let mut spans = Vec::new();
        let priorities = levels
            .iter()
            .map(|level| {
                spans.push(
                    level
                        .iter()
                        .map(|(w, hs)| super::super::host::LocalitySpan {
                            hosts: hs.len(),
                            weight: *w,
                        })
                        .collect(),
                );
                level
                    .iter()
                    .flat_map(|(_, hs)| hs.iter())
                    .map(|&(w, h)| {
                        port += 1;
                        Arc::new(Host::new(
                            SocketAddr::from(([127, 0, 0, 1], port)),
                            String::new(),
                            w,
                            h,
                        ))
                    })
                    .collect()
            })
            .collect();
        HostSet::with_localities(priorities, Some(spans), 140)
    }

    fn weighted(policy: LbPolicy, panic: f64) -> LoadBalancer {
        LoadBalancer {
            locality_weighted: true,
            ..lb(policy, panic)
        }
    }

    const POLICIES: [LbPolicy; 3] = [
        LbPolicy::RoundRobin,
        LbPolicy::Random,
        LbPolicy::LeastRequest {
            choice_count: 2,
            active_request_bias: 1.0,
        },
    ];

    /// Picks per port over `n` picks.
    fn picks(
        s: &HostSet,
        l: &LoadBalancer,
        cluster: usize,
        n: usize,
    ) -> std::collections::BTreeMap<u16, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for _ in 0..n {
            let h = choose(s, l, cluster).unwrap();
            *counts.entry(h.address.port()).or_insert(0) += 1;
        }
        counts
    }

    #[test]
    fn localities_weighted_1_to_3_take_1_to_3_of_picks() {
        // Locality A (weight 1): ports 1, 2; locality B (weight 3): ports 3, 4.
        let s = localities(&[&[(1, &[(1, true), (1, true)]), (3, &[(1, true), (1, true)])]]);
        for (k, policy) in POLICIES.into_iter().enumerate() {
            let c = picks(&s, &weighted(policy, 50.0), 100 + k, 4000);
            let a = c.get(&1).unwrap_or(&0) + c.get(&2).unwrap_or(&0);
            let b = c.get(&3).unwrap_or(&0) + c.get(&4).unwrap_or(&0);
            // The locality is picked by weighted round robin whatever the
            // host policy: exactly 1:3 over whole rounds.
            assert_eq!((a, b), (1000, 3000), "{policy:?}: {c:?}");
            if policy == LbPolicy::RoundRobin {
                assert_eq!(
                    c.values().copied().collect::<Vec<_>>(),
                    [500, 500, 1500, 1500]
                );
            }
        }
        // Without locality weighting the same set is balanced over its hosts.
        let c = picks(&s, &lb(LbPolicy::RoundRobin, 50.0), 110, 4000);
        assert!(c.values().all(|&n| n == 1000), "{c:?}");
    }

    #[test]
    fn a_locality_without_weight_gets_nothing() {
        let s = localities(&[&[(0, &[(1, true), (1, true)]), (5, &[(1, true)])]]);
        for (k, policy) in POLICIES.into_iter().enumerate() {
            let c = picks(&s, &weighted(policy, 50.0), 200 + k, 500);
            assert_eq!(c.into_iter().collect::<Vec<_>>(), [(3, 500)], "{policy:?}");
        }
    }

    #[test]
    fn a_half_healthy_locality_has_its_weight_scaled_by_availability() {
        // min(1, 1.4 x 1/2) = 0.7.
        assert!((super::super::host::effective_weight(1, 1, 2, 140) - 0.7).abs() < 1e-12);
        assert_eq!(super::super::host::effective_weight(3, 2, 2, 140), 3.0);
        // 1.4 x 3/4 > 1: capped.
        assert_eq!(super::super::host::effective_weight(2, 3, 4, 140), 2.0);
        assert_eq!(super::super::host::effective_weight(2, 0, 4, 140), 0.0);
        assert_eq!(super::super::host::effective_weight(2, 0, 0, 140), 0.0);
        // A: ports 1 (healthy), 2 (unhealthy); B: ports 3, 4. 0.7 : 1 = 7 : 10.
        let s = localities(&[&[(1, &[(1, true), (1, false)]), (1, &[(1, true), (1, true)])]]);
        let c = picks(&s, &weighted(LbPolicy::RoundRobin, 50.0), 300, 1700);
        assert_eq!(
            c.into_iter().collect::<Vec<_>>(),
            [(1, 700), (3, 500), (4, 500)]
        );
    }

    #[test]
    fn host_weights_apply_within_a_locality() {
        let s = localities(&[&[(1, &[(1, true), (3, true)]), (1, &[(1, true)])]]);
        let c = picks(&s, &weighted(LbPolicy::RoundRobin, 50.0), 400, 800);
        assert_eq!(
            c.into_iter().collect::<Vec<_>>(),
            [(1, 100), (2, 300), (3, 400)]
        );
    }

    #[test]
    fn panic_ignores_localities_and_no_weight_falls_back_to_healthy_hosts() {
        // A (weight 100): ports 1, 2 unhealthy; B (no weight): port 3 healthy,
        // 4 and 5 not. 1 of 5 healthy (20%) is under the 50% threshold: panic,
        // all five hosts evenly, A's weight notwithstanding.
        let s = localities(&[&[
            (100, &[(1, false), (1, false)]),
            (0, &[(1, true), (1, false), (1, false)]),
        ]]);
        let c = picks(&s, &weighted(LbPolicy::RoundRobin, 50.0), 500, 1000);
        assert!(c.len() == 5 && c.values().all(|&n| n == 200), "{c:?}");
        // Without panic no locality has effective weight (A has no healthy
        // host, B no weight): Envoy falls back to the level's healthy hosts.
        let c = picks(&s, &weighted(LbPolicy::RoundRobin, 0.0), 501, 100);
        assert_eq!(c.into_iter().collect::<Vec<_>>(), [(3, 100)]);
    }

    #[test]
    fn localities_follow_health_changes_and_other_levels() {
        // Priority 0 fully unhealthy: everything goes to priority 1, whose
        // localities (weights 1 and 1) split it evenly.
        let s = localities(&[
            &[(1, &[(1, false)])],
            &[(1, &[(1, true)]), (1, &[(1, true)])],
        ]);
        let c = picks(&s, &weighted(LbPolicy::RoundRobin, 50.0), 600, 100);
        assert_eq!(c.into_iter().collect::<Vec<_>>(), [(2, 50), (3, 50)]);
        // The common path keeps no locality lists.
        assert!(set(&[&[true]]).localities(0).is_none());
        assert!(s.localities(1).is_some());
    }
}
