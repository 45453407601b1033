//! The per-cluster detector: consecutive-failure events, ejection with
//! `max_ejection_percent` and the `enforcing_*` chance, republishing the host set,
//! and the stats.

use super::{HostOutlier, Kind};
use crate::upstream::host::{Host, HostSet};
use crate::upstream::{ClusterManager, UpstreamCluster};
use courier_config::cluster::OutlierDetection;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::Notify;
use tokio::time::Instant;

/// A cluster's outlier detector state.
#[derive(Debug)]
pub struct Detector {
    /// The config.
    pub config: OutlierDetection,
    /// Woken by a worker when a consecutive-failure threshold is reached.
    pub wake: Notify,
    start: Instant,
    /// `ejections_active`.
    pub(super) active: AtomicU64,
    /// `ejections_enforced_total`.
    enforced_total: AtomicU64,
    /// `ejections_overflow`.
    overflow: AtomicU64,
    detected: [AtomicU64; 7],
    enforced: [AtomicU64; 7],
}

impl Detector {
    /// A detector for `config`.
    pub fn new(config: OutlierDetection) -> Self {
        Self {
            config,
            wake: Notify::new(),
            start: Instant::now(),
            active: AtomicU64::new(0),
            enforced_total: AtomicU64::new(0),
            overflow: AtomicU64::new(0),
            detected: Default::default(),
            enforced: Default::default(),
        }
    }

    /// Milliseconds since the detector started (main-thread timestamps).
    pub(super) fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn enforcing(&self, kind: Kind) -> u32 {
        let c = &self.config;
        match kind {
            Kind::Consecutive5xx => c.enforcing_consecutive_5xx,
            Kind::ConsecutiveGateway => c.enforcing_consecutive_gateway_failure,
            Kind::ConsecutiveLocalOrigin => c.enforcing_consecutive_local_origin_failure,
            Kind::SuccessRate => c.enforcing_success_rate,
            Kind::LocalOriginSuccessRate => c.enforcing_local_origin_success_rate,
            Kind::FailurePercentage => c.enforcing_failure_percentage,
            Kind::LocalOriginFailurePercentage => c.enforcing_failure_percentage_local_origin,
        }
    }

    /// Envoy's `ejectHost`: within `max_ejection_percent` of all hosts (or the one
    /// host `always_eject_one_host` allows), with the kind's enforcing chance.
    /// Returns whether the host was ejected.
    pub(super) fn eject(&self, o: &HostOutlier, kind: Kind, hosts: usize) -> bool {
        let active = self.active.load(Ordering::Relaxed);
        let pct = 100.0 * (active + 1) as f64 / hosts.max(1) as f64;
        let allowed = pct <= f64::from(self.config.max_ejection_percent)
            || (self.config.always_eject_one_host && active == 0);
        if !allowed {
            self.overflow.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if fastrand::u32(0..100) >= self.enforcing(kind) {
            return false;
        }
        let base = self.config.base_ejection_time.as_millis() as u64;
        let max = self.config.max_ejection_time.as_millis() as u64;
        let k = o.multiplier.load(Ordering::Relaxed);
        // The multiplier grows while the ejection time is below the cap.
        if u64::from(k) * base < max + base {
            o.multiplier.store(k + 1, Ordering::Relaxed);
        }
        let jitter = self.config.max_ejection_time_jitter.as_millis() as u64;
        o.jitter_ms
            .store(fastrand::u64(0..=jitter), Ordering::Relaxed);
        o.ejected_at.store(self.now_ms(), Ordering::Relaxed);
        o.ejected.store(true, Ordering::Relaxed);
        self.active.fetch_add(1, Ordering::Relaxed);
        self.enforced_total.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = self.enforced.get(kind as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        tracing::info!(kind = kind.name(), "outlier detection: host ejected");
        true
    }

    /// Counts a detection of `kind`.
    pub(super) fn detected(&self, kind: Kind) {
        if let Some(c) = self.detected.get(kind as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `outlier_detection.*` stats.
    pub fn stats(&self) -> Vec<(String, u64)> {
        let mut out = vec![
            (
                "outlier_detection.ejections_active".to_string(),
                self.active.load(Ordering::Relaxed),
            ),
            (
                "outlier_detection.ejections_enforced_total".to_string(),
                self.enforced_total.load(Ordering::Relaxed),
            ),
            (
                "outlier_detection.ejections_overflow".to_string(),
                self.overflow.load(Ordering::Relaxed),
            ),
        ];
        for k in Kind::ALL {
            let i = k as usize;
            let get = |a: &[AtomicU64; 7]| a.get(i).map_or(0, |c| c.load(Ordering::Relaxed));
            out.push((
                format!("outlier_detection.ejections_detected_{}", k.name()),
                get(&self.detected),
            ));
            out.push((
                format!("outlier_detection.ejections_enforced_{}", k.name()),
                get(&self.enforced),
            ));
        }
        out
    }
}

/// Every cluster's outlier stats (`cluster.<name>.outlier_detection.*`).
pub fn samples(clusters: &ClusterManager, out: &mut Vec<(String, u64)>) {
    for c in clusters.clusters() {
        if let Some(d) = &c.outlier {
            let name = &c.config.name;
            for (stat, v) in d.stats() {
                out.push((format!("cluster.{name}.{stat}"), v));
            }
        }
    }
}

/// Republishes the cluster's host set, so workers see ejections (ejected hosts
/// are unhealthy in it).
pub(super) fn republish(cluster: &UpstreamCluster) {
    let current = cluster.hosts.load_full();
    let factor = cluster
        .config
        .load_assignment
        .as_ref()
        .map_or(140, |la| la.overprovisioning_factor);
    let priorities: Vec<Vec<Arc<Host>>> =
        current.priorities.iter().map(|p| p.all.clone()).collect();
    cluster
        .hosts
        .store(Arc::new(HostSet::new(priorities, factor)));
}

/// Handles the pending consecutive-failure events of every host.
fn events(cluster: &UpstreamCluster, d: &Detector) -> bool {
    let set = cluster.hosts.load_full();
    let count = set.hosts().count();
    let mut changed = false;
    for h in set.hosts() {
        let o = &h.outlier;
        let bits = o.events.swap(0, Ordering::Relaxed);
        for kind in [
            Kind::Consecutive5xx,
            Kind::ConsecutiveGateway,
            Kind::ConsecutiveLocalOrigin,
        ] {
            if bits & (1 << kind as u8) == 0 || o.ejected() {
                continue;
            }
            d.detected(kind);
            changed |= d.eject(o, kind, count);
            // The counter starts over after a detection.
            let counter = match kind {
                Kind::Consecutive5xx => &o.consecutive_5xx,
                Kind::ConsecutiveGateway => &o.consecutive_gateway,
                _ => &o.consecutive_local,
            };
            counter.store(0, Ordering::Relaxed);
        }
    }
    changed
}

/// Starts every cluster's detector on the current (main thread's) runtime.
pub fn spawn(clusters: &ClusterManager) {
    for c in clusters.clusters() {
        if c.outlier.is_none() {
            continue;
        }
        let cluster = Arc::clone(c);
        tokio::spawn(async move {
            let Some(d) = cluster.outlier.as_ref() else {
                return;
            };
            let mut tick = tokio::time::interval(d.config.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                let changed = tokio::select! {
                    _ = d.wake.notified() => events(&cluster, d),
                    _ = tick.tick() => super::sweep::sweep(&cluster, d),
                };
                if changed {
                    republish(&cluster);
                }
            }
        });
    }
}
