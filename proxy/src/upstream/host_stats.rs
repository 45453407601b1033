//! A host's own stats, shared by the workers as Envoy's host stats are:
//! what `/clusters` lists per host and `track_cluster_stats.per_endpoint_stats`
//! lists as `cluster.<name>.endpoint.<address>.*`.

use super::host::Host;
use std::sync::atomic::{AtomicU64, Ordering};

/// A host's stats (`/clusters`, and `cluster.<name>.endpoint.<address>.*`
/// under `track_cluster_stats.per_endpoint_stats`), summed over workers by
/// being shared. As Envoy's host stats they live outside the stats store:
/// `/reset_counters` leaves them alone.
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
    /// `rq_success`: attempts answered with a status below 500.
    pub rq_success: AtomicU64,
    /// `rq_error`: attempts that ended in a 5xx, the upstream's or the one
    /// charged for a failure (connect failure, reset, timeout).
    pub rq_error: AtomicU64,
    /// `rq_timeout`: attempts ended by the route or per-try timeout.
    pub rq_timeout: AtomicU64,
    /// `rq_pending_active` (a gauge): requests waiting for a connection to it.
    pub rq_pending_active: AtomicU64,
}

impl HostStats {
    /// Counts an attempt's end by the status it was charged: 5xx is an
    /// error, anything else a success (Envoy's router).
    pub fn charge(&self, status: u16) {
        let c = if status >= 500 {
            &self.rq_error
        } else {
            &self.rq_success
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request attached to a connection to the host (`rq_total`: as
    /// in Envoy's pool, one that never got a connection is not counted).
    pub fn attached(&self) {
        self.rq_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an attempt the route or per-try timeout ended: `rq_timeout`,
    /// and the 504 it is charged as an error.
    pub fn timed_out(&self) {
        self.rq_timeout.fetch_add(1, Ordering::Relaxed);
        self.charge(504);
    }
}

/// A request waiting for a connection to a host, counted in its
/// `rq_pending_active` until dropped.
pub struct PendingOn<'a>(&'a HostStats);

impl<'a> PendingOn<'a> {
    /// Counts one more request pending on `host`.
    pub fn start(host: &'a Host) -> Self {
        let s: &HostStats = &host.stats;
        s.rq_pending_active.fetch_add(1, Ordering::Relaxed);
        Self(s)
    }
}

impl Drop for PendingOn<'_> {
    fn drop(&mut self) {
        self.0.rq_pending_active.fetch_sub(1, Ordering::Relaxed);
    }
}
