//! Outlier detection (Envoy's `DetectorImpl`). Workers record each attempt's
//! result into the host's atomics ([`HostOutlier`]); a consecutive-failure
//! counter reaching its threshold flags the host and wakes the cluster's
//! detector. The detector runs on the main thread: it ejects (within
//! `max_ejection_percent`, with the `enforcing_*` chance), unejects on its
//! `interval` sweep, runs the success-rate and failure-percentage analyses, and
//! republishes the host set, in which ejected hosts are unhealthy. Workers only
//! ever read the published set: no lock on the request path.

mod detector;
mod event_log;
mod sweep;

pub use detector::{Detector, samples, spawn, spawn_one};
pub use event_log::{EventLog, Evidence};

use super::UpstreamCluster;
use super::host::Host;
use super::pool::SendError;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};

/// Detection types, in Envoy's stat names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `consecutive_5xx`.
    Consecutive5xx = 0,
    /// `consecutive_gateway_failure`.
    ConsecutiveGateway = 1,
    /// `consecutive_local_origin_failure`.
    ConsecutiveLocalOrigin = 2,
    /// `success_rate`.
    SuccessRate = 3,
    /// `local_origin_success_rate`.
    LocalOriginSuccessRate = 4,
    /// `failure_percentage`.
    FailurePercentage = 5,
    /// `local_origin_failure_percentage`.
    LocalOriginFailurePercentage = 6,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 7] = [
        Kind::Consecutive5xx,
        Kind::ConsecutiveGateway,
        Kind::ConsecutiveLocalOrigin,
        Kind::SuccessRate,
        Kind::LocalOriginSuccessRate,
        Kind::FailurePercentage,
        Kind::LocalOriginFailurePercentage,
    ];

    /// Envoy's stat suffix.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Consecutive5xx => "consecutive_5xx",
            Kind::ConsecutiveGateway => "consecutive_gateway_failure",
            Kind::ConsecutiveLocalOrigin => "consecutive_local_origin_failure",
            Kind::SuccessRate => "success_rate",
            Kind::LocalOriginSuccessRate => "local_origin_success_rate",
            Kind::FailurePercentage => "failure_percentage",
            Kind::LocalOriginFailurePercentage => "local_origin_failure_percentage",
        }
    }
}

impl super::lazy::Lazy<HostOutlier> {
    /// Whether the host is ejected (never, before any outlier state: only
    /// hosts of clusters with outlier detection get one).
    pub fn ejected(&self) -> bool {
        self.get().is_some_and(|o| o.ejected())
    }
}

/// A host's outlier-detection inputs (written by workers) and ejection state
/// (written by the main thread).
#[derive(Debug, Default)]
pub struct HostOutlier {
    consecutive_5xx: AtomicU32,
    consecutive_gateway: AtomicU32,
    consecutive_local: AtomicU32,
    /// Pending consecutive events, as bits of [`Kind`].
    events: AtomicU8,
    /// This interval's external-origin requests and successes.
    ext_total: AtomicU64,
    ext_success: AtomicU64,
    /// This interval's local-origin requests and successes (split mode).
    local_total: AtomicU64,
    local_success: AtomicU64,
    /// Whether the host is ejected (the load balancer skips it).
    ejected: AtomicBool,
    /// Main thread only: when ejected / unejected (ms since the detector's start).
    ejected_at: AtomicU64,
    unejected_at: AtomicU64,
    /// Main thread only: back-to-back ejection multiplier and this ejection's jitter.
    multiplier: AtomicU32,
    jitter_ms: AtomicU64,
    /// Main thread only: ejections so far (the event log's `num_ejections`).
    num_ejections: AtomicU32,
}

impl HostOutlier {
    /// Whether the host is ejected.
    pub fn ejected(&self) -> bool {
        self.ejected.load(Ordering::Relaxed)
    }

    fn bump(&self, counter: &AtomicU32, threshold: u32, kind: Kind) -> bool {
        // Exactly the threshold posts one event (as in Envoy).
        if counter.fetch_add(1, Ordering::Relaxed) + 1 == threshold {
            self.events.fetch_or(1 << kind as u8, Ordering::Relaxed);
            return true;
        }
        false
    }

    fn reset_consecutive(&self) {
        self.consecutive_5xx.store(0, Ordering::Relaxed);
        self.consecutive_gateway.store(0, Ordering::Relaxed);
        self.consecutive_local.store(0, Ordering::Relaxed);
    }
}

/// Republishes `cluster`'s host set (health changed).
pub(crate) fn republish_now(cluster: &UpstreamCluster) {
    detector::republish(cluster);
}

/// A passing active health check returns an ejected host at once, unless
/// `successful_active_health_check_uneject_host` is off. Main thread only.
pub(crate) fn uneject_on_health_check(cluster: &UpstreamCluster, host: &Host) {
    let Some(d) = &cluster.outlier else { return };
    let o = &host.outlier;
    if d.config.successful_active_health_check_uneject_host && o.ejected() {
        d.uneject(&cluster.config.name, host);
        detector::republish(cluster);
    }
}

/// Records an upstream response status for `host`.
pub fn record_status(cluster: &UpstreamCluster, host: &Host, status: u16) {
    let Some(d) = &cluster.outlier else { return };
    let o = &host.outlier;
    if d.config.split_external_local_origin_errors {
        // The connection worked: a local-origin success.
        o.local_total.fetch_add(1, Ordering::Relaxed);
        o.local_success.fetch_add(1, Ordering::Relaxed);
        o.consecutive_local.store(0, Ordering::Relaxed);
    }
    http_code(d, o, status);
}

fn http_code(d: &Detector, o: &HostOutlier, status: u16) {
    o.ext_total.fetch_add(1, Ordering::Relaxed);
    let mut posted = false;
    if (500..600).contains(&status) {
        if matches!(status, 502..=504) {
            posted |= o.bump(
                &o.consecutive_gateway,
                d.config.consecutive_gateway_failure,
                Kind::ConsecutiveGateway,
            );
        } else {
            o.consecutive_gateway.store(0, Ordering::Relaxed);
        }
        posted |= o.bump(
            &o.consecutive_5xx,
            d.config.consecutive_5xx,
            Kind::Consecutive5xx,
        );
    } else {
        o.ext_success.fetch_add(1, Ordering::Relaxed);
        o.consecutive_5xx.store(0, Ordering::Relaxed);
        o.consecutive_gateway.store(0, Ordering::Relaxed);
    }
    if posted {
        d.wake.notify_one();
    }
}

fn local_failure(cluster: &UpstreamCluster, host: &Host, unsplit_code: u16) {
    let Some(d) = &cluster.outlier else { return };
    let o = &host.outlier;
    if !d.config.split_external_local_origin_errors {
        // Unsplit, a local-origin failure counts as an HTTP code.
        http_code(d, o, unsplit_code);
        return;
    }
    o.local_total.fetch_add(1, Ordering::Relaxed);
    if o.bump(
        &o.consecutive_local,
        d.config.consecutive_local_origin_failure,
        Kind::ConsecutiveLocalOrigin,
    ) {
        d.wake.notify_one();
    }
}

/// Records a failure without a response (connect failure, reset): 503 unsplit.
pub fn record_failure(cluster: &UpstreamCluster, host: &Host, _e: &SendError) {
    local_failure(cluster, host, 503);
}

/// Records a timeout: 504 unsplit.
pub fn record_timeout(cluster: &UpstreamCluster, host: &Host) {
    local_failure(cluster, host, 504);
}
