//! Load balancing: pick a priority by Envoy's priority load, go into panic mode
//! when too few of its hosts are healthy, then pick a host by the cluster's
//! policy. Cursors are per worker (thread-local: a worker is one thread), so
//! picking takes no lock and touches no shared cache line except LEAST_REQUEST's
//! active request counts.

use super::host::{Host, HostSet};
use courier_config::cluster::{LbPolicy, LoadBalancer};
use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    /// Round-robin cursors of this worker, by (cluster index, slot).
    static CURSORS: RefCell<Vec<Vec<usize>>> = const { RefCell::new(Vec::new()) };
}

/// Picks a host of `set` for cluster number `cluster`; `None` = no healthy upstream.
pub fn choose(set: &HostSet, lb: &LoadBalancer, cluster: usize) -> Option<Arc<Host>> {
    let priority = set.priority_for(fastrand::u32(0..100));
    let level = set.priorities.get(priority)?;
    let panic = lb.healthy_panic_threshold > 0.0
        && (set.total_panic || level.healthy_percent < lb.healthy_panic_threshold);
    let (hosts, schedule, slot) = if panic {
        (level.all(), level.all_schedule(), 2 * priority + 1)
    } else {
        (level.healthy(), level.healthy_schedule(), 2 * priority)
    };
    if hosts.is_empty() {
        return None;
    }
    let index = match lb.policy {
        LbPolicy::RoundRobin => schedule.slot(next_cursor(cluster, slot, schedule.len()))?,
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
    };
    hosts.get(index).cloned()
}

/// This worker's next round-robin position for `(cluster, slot)`. Starts at a
/// random place so workers do not all begin with the same host.
fn next_cursor(cluster: usize, slot: usize, len: usize) -> usize {
    CURSORS.with(|c| {
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
}
