//! Circuit breakers and retry budgets: per-cluster resource counts shared by every
//! worker (atomics on the cluster), checked before a request or a retry starts.
//! A slot is taken by incrementing first and checking after, so workers racing
//! for the last slot never overshoot a limit.
//!
//! Requests waiting for a connection (`rq_pending_open`) sleep on their
//! priority's [`Counts::freed`] and are woken when capacity frees: a connection
//! slot on any worker, or a connection or stream of their own worker's pool.
//! Nothing polls.

use courier_config::cluster::{CircuitBreakers, Thresholds};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use tokio::sync::Notify;

/// The open counts of one routing priority.
#[derive(Debug, Default)]
pub struct Counts {
    /// Requests in flight (`rq_open`).
    pub requests: AtomicU64,
    /// Requests waiting for a connection (`rq_pending_open`).
    pub pending: AtomicU64,
    /// Retries in flight (`rq_retry_open`).
    pub retries: AtomicU64,
    /// Open connections (`cx_open`).
    pub connections: AtomicU64,
    /// Connection pools in use, over every worker (`cx_pool_open`).
    pub pools: AtomicU64,
    /// Woken when capacity frees while requests are pending.
    freed: Notify,
}

impl Counts {
    /// Wakes the pending requests after a free that only a request of this
    /// thread can use (an idle HTTP/1.1 connection or an HTTP/2 stream of this
    /// worker's pool): no fence, as the waiter that counted itself in
    /// `pending` ran on this thread. One relaxed load when nobody waits, which
    /// is every request but an overloaded one's.
    pub fn wake_local(&self) {
        if self.pending.load(Ordering::Relaxed) > 0 {
            self.freed.notify_waiters();
        }
    }

    /// Wakes the pending requests after a free that any worker's request can
    /// use (a connection slot). The fence pairs with the one in
    /// [`Counts::armed`]: either this load sees the waiter's `pending`, or the
    /// waiter's look after arming sees the free.
    fn wake_shared(&self) {
        fence(Ordering::SeqCst);
        if self.pending.load(Ordering::Relaxed) > 0 {
            self.freed.notify_waiters();
        }
    }

    /// A wake-up registered now: any [`Counts::wake_local`] or
    /// [`Counts::wake_shared`] after this call completes it. Arm, then look
    /// for capacity, then wait: a free between the look and the wait is not
    /// lost.
    pub fn armed(&self) -> std::pin::Pin<Box<tokio::sync::futures::Notified<'_>>> {
        let mut n = Box::pin(self.freed.notified());
        n.as_mut().enable();
        fence(Ordering::SeqCst);
        n
    }
}

/// A cluster's circuit-breaker state: DEFAULT and HIGH priority counts with their
/// thresholds.
#[derive(Debug)]
pub struct Circuit {
    thresholds: CircuitBreakers,
    default: Arc<Counts>,
    high: Arc<Counts>,
}

/// One resource held (a request or a retry); released on drop.
#[derive(Debug)]
pub struct Held {
    counts: Arc<Counts>,
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Request,
    Retry,
    Pending,
    Connection,
    Pool,
}

impl Drop for Held {
    fn drop(&mut self) {
        let c = match self.kind {
            Kind::Request => &self.counts.requests,
            Kind::Retry => &self.counts.retries,
            Kind::Pending => &self.counts.pending,
            Kind::Connection => &self.counts.connections,
            Kind::Pool => &self.counts.pools,
        };
        c.fetch_sub(1, Ordering::Relaxed);
        if let Kind::Connection = self.kind {
            self.counts.wake_shared();
        }
    }
}

impl Held {
    /// The counts of the priority this slot is of.
    pub fn counts(&self) -> &Arc<Counts> {
        &self.counts
    }
}

impl Circuit {
    /// The state for `thresholds`, nothing open.
    pub fn new(thresholds: CircuitBreakers) -> Self {
        Self {
            thresholds,
            default: Arc::default(),
            high: Arc::default(),
        }
    }

    /// The open counts of a routing priority.
    pub fn counts(&self, high: bool) -> &Arc<Counts> {
        self.pick(high).1
    }

    fn pick(&self, high: bool) -> (&Thresholds, &Arc<Counts>) {
        let counts = if high { &self.high } else { &self.default };
        (self.thresholds.for_priority(high), counts)
    }

    /// Starts a request, or `None` when `max_requests` are already in flight.
    pub fn try_request(&self, high: bool) -> Option<Held> {
        let (t, c) = self.pick(high);
        // Increment first, then check: concurrent workers never overshoot.
        if c.requests.fetch_add(1, Ordering::Relaxed) >= u64::from(t.max_requests) {
            c.requests.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Held {
            counts: Arc::clone(c),
            kind: Kind::Request,
        })
    }

    /// Opens a connection at a routing priority (each has its own pools), or
    /// `None` when its `max_connections` are open.
    pub fn try_connection(&self, high: bool) -> Option<Held> {
        let (t, c) = self.pick(high);
        take(
            c,
            &c.connections,
            u64::from(t.max_connections),
            Kind::Connection,
        )
    }

    /// Creates a connection pool (a worker's pool for one host) at a routing
    /// priority, or `None` when `max_connection_pools` are in use.
    pub fn try_pool(&self, high: bool) -> Option<Held> {
        let (t, c) = self.pick(high);
        take(c, &c.pools, max_pools(t), Kind::Pool)
    }

    /// Queues a request for a connection at a routing priority, or `None` when
    /// its `max_pending_requests` are already waiting.
    pub fn try_pending(&self, high: bool) -> Option<Held> {
        let (t, c) = self.pick(high);
        take(
            c,
            &c.pending,
            u64::from(t.max_pending_requests),
            Kind::Pending,
        )
    }

    /// Starts a retry, or `None` when the retry budget (or `max_retries` without
    /// one) is used up. The budget is Envoy's: `max(budget_percent x (active +
    /// pending requests), min_retry_concurrency)` retries at once.
    pub fn try_retry(&self, high: bool) -> Option<Held> {
        let (t, c) = self.pick(high);
        let limit = retry_limit(t, c);
        if c.retries.fetch_add(1, Ordering::Relaxed) >= limit {
            c.retries.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Held {
            counts: Arc::clone(c),
            kind: Kind::Retry,
        })
    }

    /// `circuit_breakers.<prio>.*` gauges (open counts, and `remaining_*` when
    /// `track_remaining`), as `(name, value)`.
    pub fn gauges(&self) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for (high, prio) in [(false, "default"), (true, "high")] {
            let (t, c) = self.pick(high);
            let (rq, pending, retries, cx) = (
                c.requests.load(Ordering::Relaxed),
                c.pending.load(Ordering::Relaxed),
                c.retries.load(Ordering::Relaxed),
                c.connections.load(Ordering::Relaxed),
            );
            let pools = c.pools.load(Ordering::Relaxed);
            let open = |n: u64, max: u64| u64::from(n >= max);
            let retry_max = retry_limit(t, c);
            out.push((
                format!("circuit_breakers.{prio}.cx_open"),
                open(cx, u64::from(t.max_connections)),
            ));
            out.push((
                format!("circuit_breakers.{prio}.rq_open"),
                open(rq, u64::from(t.max_requests)),
            ));
            out.push((
                format!("circuit_breakers.{prio}.rq_pending_open"),
                open(pending, u64::from(t.max_pending_requests)),
            ));
            out.push((
                format!("circuit_breakers.{prio}.rq_retry_open"),
                open(retries, retry_max),
            ));
            out.push((
                format!("circuit_breakers.{prio}.cx_pool_open"),
                open(pools, max_pools(t)),
            ));
            if t.track_remaining {
                out.push((
                    format!("circuit_breakers.{prio}.remaining_cx"),
                    u64::from(t.max_connections).saturating_sub(cx),
                ));
                out.push((
                    format!("circuit_breakers.{prio}.remaining_rq"),
                    u64::from(t.max_requests).saturating_sub(rq),
                ));
                out.push((
                    format!("circuit_breakers.{prio}.remaining_pending"),
                    u64::from(t.max_pending_requests).saturating_sub(pending),
                ));
                // Envoy pins the retry gauge to 0 when a budget governs retries.
                let remaining = if t.retry_budget.is_some() {
                    0
                } else {
                    u64::from(t.max_retries).saturating_sub(retries)
                };
                out.push((
                    format!("circuit_breakers.{prio}.remaining_retries"),
                    remaining,
                ));
                out.push((
                    format!("circuit_breakers.{prio}.remaining_cx_pools"),
                    max_pools(t).saturating_sub(pools),
                ));
            }
        }
        out
    }
}

/// Every cluster's shared gauges (`cluster.<name>.circuit_breakers.*`), for
/// the admin's stats.
pub fn samples(clusters: &super::ClusterManager, out: &mut Vec<(String, u64)>) {
    for c in clusters.clusters() {
        let name = c.config.stat_name();
        for (stat, v) in c.circuit.gauges() {
            out.push((format!("cluster.{name}.{stat}"), v));
        }
    }
}

fn take(counts: &Arc<Counts>, counter: &AtomicU64, max: u64, kind: Kind) -> Option<Held> {
    if counter.fetch_add(1, Ordering::Relaxed) >= max {
        counter.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    Some(Held {
        counts: Arc::clone(counts),
        kind,
    })
}

/// Envoy's limit when `max_connection_pools` is unset is the largest u64.
fn max_pools(t: &Thresholds) -> u64 {
    t.max_connection_pools.map_or(u64::MAX, u64::from)
}

fn retry_limit(t: &Thresholds, c: &Counts) -> u64 {
    match &t.retry_budget {
        None => u64::from(t.max_retries),
        Some(b) => {
            let active = c.requests.load(Ordering::Relaxed) + c.pending.load(Ordering::Relaxed);
            let budget = (b.budget_percent / 100.0 * active as f64).floor() as u64;
            budget.max(u64::from(b.min_retry_concurrency))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_config::cluster::RetryBudget;

    #[test]
    fn max_requests_and_release() {
        let mut cb = CircuitBreakers::default();
        cb.default.max_requests = 2;
        let c = Circuit::new(cb);
        let a = c.try_request(false).unwrap();
        let _b = c.try_request(false).unwrap();
        assert!(c.try_request(false).is_none());
        // HIGH has its own counts.
        assert!(c.try_request(true).is_some());
        drop(a);
        assert!(c.try_request(false).is_some());
    }

    #[test]
    fn max_connection_pools() {
        let mut cb = CircuitBreakers::default();
        cb.default.max_connection_pools = Some(1);
        let c = Circuit::new(cb);
        let a = c.try_pool(false).unwrap();
        assert!(c.try_pool(false).is_none());
        // Unset for HIGH: unlimited.
        let many: Vec<_> = (0..100).map(|_| c.try_pool(true).unwrap()).collect();
        drop(a);
        assert!(c.try_pool(false).is_some());
        drop(many);
    }

    #[test]
    fn retry_budget_formula() {
        let mut cb = CircuitBreakers::default();
        cb.default.retry_budget = Some(RetryBudget {
            budget_percent: 10.0,
            min_retry_concurrency: 3,
        });
        let c = Circuit::new(cb);
        // Idle: the floor of 3.
        let held: Vec<_> = (0..3).map(|_| c.try_retry(false).unwrap()).collect();
        assert!(c.try_retry(false).is_none());
        // 50 active requests: 10% = 5.
        let reqs: Vec<_> = (0..50).map(|_| c.try_request(false).unwrap()).collect();
        let more: Vec<_> = (0..2).map(|_| c.try_retry(false).unwrap()).collect();
        assert!(c.try_retry(false).is_none());
        drop((held, reqs, more));
    }
}
