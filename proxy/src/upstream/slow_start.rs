//! Slow start (Envoy's `EdfLoadBalancerBase` slow start mode for ROUND_ROBIN
//! and LEAST_REQUEST): a host's weight is scaled by
//! `max(min_weight, (elapsed / window)^(1 / aggression))` while `elapsed`,
//! the time since it entered slow start, is under the window.
//!
//! A host enters slow start when it first appears healthy in a published host
//! set with no start time yet (joining the cluster: every host present when
//! the cluster is built, one added by EDS or DNS later), or when active health
//! checking turns it healthy (Envoy's `last_hc_pass_time`). Weights are
//! computed at each pick, so the share a host gets rises continuously over
//! the window, as Envoy re-weighs a host each time its EDF scheduler picks it.

use super::host::{Host, HostSet, usable};
use courier_config::cluster::{LbPolicy, SlowStart};
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::sync::Arc;
use tokio::time::Instant;

/// A worker's smooth weighted round-robin state for one host list.
#[derive(Default)]
struct Credits {
    /// Which list: its address and length, to notice a new set.
    list: (usize, usize),
    /// Each host's credit.
    credits: Vec<f64>,
    /// Scratch room for the hosts' current weights (kept to save an
    /// allocation per pick).
    weights: Vec<f64>,
}

thread_local! {
    /// Per (cluster, cursor table, slot): this worker's credits over the
    /// list it picks from while some host is in slow start.
    static CREDITS: RefCell<FxHashMap<(usize, usize, usize), Credits>> =
        RefCell::new(FxHashMap::default());
}

/// Envoy's `EdfLoadBalancerBase::refresh` for a newly published `set` of a
/// cluster with slow start `slow`: each usable host that has not started slow
/// start starts it now (`recalculateHostsInSlowStart`), and the set notes
/// whether LEAST_REQUEST picks by weight in it. Envoy builds its EDF
/// schedulers when some host, or the balancer itself (`new_balancer`: the
/// cluster was just built), started within the window, and keeps them until
/// the next set; otherwise LEAST_REQUEST samples hosts.
pub fn refresh(set: &HostSet, slow: &SlowStart, now: Instant, new_balancer: bool) {
    let mut in_window = new_balancer;
    for h in set.hosts() {
        if !usable(h) {
            continue;
        }
        let since = h.slow_start_since().unwrap_or_else(|| {
            h.set_slow_start_since(now);
            now
        });
        in_window |= now.saturating_duration_since(since) <= slow.window;
    }
    set.set_weighted_picks(in_window);
}

/// The host of `hosts` to pick at `now` when some of them is in slow start,
/// or by weight anyway with `weighted` (`None` otherwise: the cluster's usual
/// pick applies). `key` names this worker's state for the list: (cluster,
/// cursor table, slot).
///
/// Weights as Envoy's `hostWeight`: the host's weight (for LEAST_REQUEST
/// divided by `(active + 1)^active_request_bias`), scaled by the slow start
/// factor of a healthy host in its window; picked by smooth weighted round
/// robin over them, which gives each host its current weight's share as
/// Envoy's EDF scheduler does.
pub fn pick(
    hosts: &[Arc<Host>],
    slow: &SlowStart,
    policy: &LbPolicy,
    key: (usize, usize, usize),
    now: Instant,
    weighted: bool,
) -> Option<usize> {
    let factor = |h: &Arc<Host>| match h.slow_start_since() {
        // Envoy scales only a healthy host's weight.
        Some(since) if usable(h) => slow.factor(now.saturating_duration_since(since)),
        _ => 1.0,
    };
    if !weighted && !hosts.iter().any(|h| factor(h) < 1.0) {
        return None;
    }
    CREDITS.with(|c| {
        let mut c = c.borrow_mut();
        let state = c.entry(key).or_default();
        let list = (hosts.as_ptr() as usize, hosts.len());
        if state.list != list {
            state.list = list;
            state.credits.clear();
            state.credits.resize(hosts.len(), 0.0);
        }
        state.weights.clear();
        state
            .weights
            .extend(hosts.iter().map(|h| base_weight(h, policy) * factor(h)));
        smooth_pick(&mut state.credits, &state.weights)
    })
}

/// Envoy's weight of `h` before slow start: its `load_balancing_weight`, for
/// LEAST_REQUEST divided by `(active requests + 1)^active_request_bias`.
fn base_weight(h: &Host, policy: &LbPolicy) -> f64 {
    let w = f64::from(h.weight);
    match policy {
        LbPolicy::LeastRequest {
            active_request_bias,
            ..
        } if *active_request_bias != 0.0 => {
            let active = h.active_requests().saturating_add(1) as f64;
            if *active_request_bias == 1.0 {
                w / active
            } else {
                w / active.powf(*active_request_bias)
            }
        }
        _ => w,
    }
}

/// One step of smooth weighted round robin: every entry earns its weight, the
/// richest is picked and pays the total.
fn smooth_pick(credits: &mut [f64], weights: &[f64]) -> Option<usize> {
    let total: f64 = weights.iter().sum();
    if total <= 0.0 || !total.is_finite() {
        return None;
    }
    let mut best: Option<(usize, f64)> = None;
    for (i, (c, w)) in credits.iter_mut().zip(weights).enumerate() {
        *c += w;
        if best.is_none_or(|(_, b)| *c > b) {
            best = Some((i, *c));
        }
    }
    let (b, _) = best?;
    if let Some(c) = credits.get_mut(b) {
        *c -= total;
    }
    Some(b)
}

#[cfg(test)]
#[path = "slow_start_tests.rs"]
mod tests;
