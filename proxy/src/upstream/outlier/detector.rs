//! The per-cluster detector: consecutive-failure events, ejection with
//! `max_ejection_percent` and the `enforcing_*` chance, republishing the host set,
//! and the stats.

use super::Kind;
use super::event_log::{Event, EventLog, Evidence};
use crate::upstream::host::Host;
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
    /// The bootstrap's event log, set when the detector starts.
    log: std::sync::OnceLock<Arc<EventLog>>,
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
            log: std::sync::OnceLock::new(),
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
    pub(super) fn eject(
        &self,
        cluster: &str,
        host: &Host,
        kind: Kind,
        evidence: Evidence,
        hosts: usize,
    ) -> bool {
        let o = &host.outlier;
        let active = self.active.load(Ordering::Relaxed);
        let pct = 100.0 * (active + 1) as f64 / hosts.max(1) as f64;
        let allowed = pct <= f64::from(self.config.max_ejection_percent)
            || (self.config.always_eject_one_host && active == 0);
        if !allowed {
            self.overflow.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if fastrand::u32(0..100) >= self.enforcing(kind) {
            // Detected but not enforced: Envoy logs it all the same.
            self.log_event(cluster, host, Some((kind, evidence, false)));
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
        o.num_ejections.fetch_add(1, Ordering::Relaxed);
        self.active.fetch_add(1, Ordering::Relaxed);
        self.enforced_total.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = self.enforced.get(kind as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        tracing::info!(
            host = %host.address_text(),
            kind = kind.name(),
            multiplier = k + 1,
            "outlier detection: host ejected"
        );
        self.log_event(cluster, host, Some((kind, evidence, true)));
        true
    }

    /// Returns an ejected host to service (its time is up, or an active health
    /// check passed).
    pub(super) fn uneject(&self, cluster: &str, host: &Host) {
        let o = &host.outlier;
        o.ejected.store(false, Ordering::Relaxed);
        o.unejected_at.store(self.now_ms(), Ordering::Relaxed);
        o.reset_consecutive();
        self.active.fetch_sub(1, Ordering::Relaxed);
        self.log_event(cluster, host, None);
    }

    /// Writes an event to the event log, if there is one. `secs_since_last_action`
    /// is the time since the host's last unejection (for an ejection) or ejection
    /// (for an unejection), when it had one.
    fn log_event(&self, cluster: &str, host: &Host, eject: Option<(Kind, Evidence, bool)>) {
        let Some(log) = self.log.get() else { return };
        let o = &host.outlier;
        let num_ejections = o.num_ejections.load(Ordering::Relaxed);
        let last = match eject {
            // Every ejection before the current one has ended in an unejection.
            Some((_, _, enforced)) => {
                let earlier = num_ejections.saturating_sub(u32::from(enforced));
                (earlier > 0).then(|| o.unejected_at.load(Ordering::Relaxed))
            }
            None => Some(o.ejected_at.load(Ordering::Relaxed)),
        };
        log.write(&Event {
            cluster,
            host,
            eject,
            secs_since_last_action: last.map(|at| self.now_ms().saturating_sub(at) / 1000),
            num_ejections,
        });
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
            let name = c.config.stat_name();
            for (stat, v) in d.stats() {
                out.push((format!("cluster.{name}.{stat}"), v));
            }
        }
    }
}

/// Republishes the cluster's host set, so workers see ejections (ejected hosts
/// are unhealthy in it).
pub(super) fn republish(cluster: &UpstreamCluster) {
    // The set keeps its overprovisioning factor (an EDS cluster's comes with
    // its assignment) and its locality layout, so only health changes.
    let current = cluster.hosts.load_full();
    cluster.store_hosts(current.rebuilt());
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
            changed |= d.eject(&cluster.config.name, h, kind, Evidence::Consecutive, count);
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

/// Starts every cluster's detector on the current (main thread's) runtime,
/// writing events to `log` when the bootstrap names one.
pub fn spawn(clusters: &ClusterManager, log: Option<&Arc<EventLog>>) {
    for c in &clusters.clusters() {
        spawn_one(c, log);
    }
}

/// Starts `c`'s detector (when it has one) until the cluster retires.
pub fn spawn_one(c: &Arc<UpstreamCluster>, log: Option<&Arc<EventLog>>) {
    let Some(d) = &c.outlier else {
        return;
    };
    if let Some(log) = log {
        let _ = d.log.set(Arc::clone(log));
    }
    let cluster = Arc::clone(c);
    tokio::spawn(async move {
        let Some(d) = cluster.outlier.as_ref() else {
            return;
        };
        let mut tick = tokio::time::interval(d.config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        while !cluster.retired() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Envoy's defaults, with these two fields.
    fn config(max_pct: u32, always_one: bool) -> OutlierDetection {
        OutlierDetection {
            consecutive_5xx: 5,
            interval: Duration::from_secs(10),
            base_ejection_time: Duration::from_secs(30),
            max_ejection_time: Duration::from_secs(300),
            max_ejection_time_jitter: Duration::ZERO,
            max_ejection_percent: max_pct,
            always_eject_one_host: always_one,
            enforcing_consecutive_5xx: 100,
            consecutive_gateway_failure: 5,
            enforcing_consecutive_gateway_failure: 0,
            split_external_local_origin_errors: false,
            consecutive_local_origin_failure: 5,
            enforcing_consecutive_local_origin_failure: 100,
            enforcing_success_rate: 100,
            enforcing_local_origin_success_rate: 100,
            success_rate_minimum_hosts: 5,
            success_rate_request_volume: 100,
            success_rate_stdev_factor: 1.9,
            failure_percentage_threshold: 85,
            enforcing_failure_percentage: 0,
            enforcing_failure_percentage_local_origin: 0,
            failure_percentage_minimum_hosts: 5,
            failure_percentage_request_volume: 50,
            successful_active_health_check_uneject_host: true,
        }
    }

    fn host(port: u16) -> Host {
        Host::new(
            std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            String::new(),
            1,
            true,
        )
    }

    #[test]
    fn max_ejection_percent_and_always_eject_one_host() {
        // 10% of 5 hosts allows none...
        let d = Detector::new(config(10, false));
        assert!(!d.eject(
            "c",
            &host(1),
            Kind::Consecutive5xx,
            Evidence::Consecutive,
            5
        ));
        assert_eq!(d.overflow.load(Ordering::Relaxed), 1);
        // ...unless always_eject_one_host, which allows exactly one.
        let d = Detector::new(config(10, true));
        assert!(d.eject(
            "c",
            &host(1),
            Kind::Consecutive5xx,
            Evidence::Consecutive,
            5
        ));
        assert!(!d.eject(
            "c",
            &host(2),
            Kind::Consecutive5xx,
            Evidence::Consecutive,
            5
        ));
        // 20% of 10 hosts: two.
        let d = Detector::new(config(20, false));
        let hs: Vec<Host> = (0..3).map(host).collect();
        assert!(d.eject("c", &hs[0], Kind::Consecutive5xx, Evidence::Consecutive, 10));
        assert!(d.eject("c", &hs[1], Kind::Consecutive5xx, Evidence::Consecutive, 10));
        assert!(!d.eject("c", &hs[2], Kind::Consecutive5xx, Evidence::Consecutive, 10));
        assert_eq!(d.active.load(Ordering::Relaxed), 2);
        assert_eq!(hs[0].outlier.multiplier.load(Ordering::Relaxed), 1);
    }
}
