//! `envoy.filters.http.admission_control` as an upstream filter: each worker
//! keeps its own sliding window of request and success counts (Envoy's
//! thread-local controller: no lock, no shared cache line), and a request is
//! rejected with a probability that grows as the window's success rate falls
//! below `sr_threshold`.

use courier_config::filters::admission_control::AdmissionControl;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// Envoy's history granularity: a new sample opens at most once a second.
const GRANULARITY: Duration = Duration::from_secs(1);

/// `cluster.<name>.admission_control.*`.
#[derive(Debug, Default)]
pub struct AdmissionStats {
    /// `rq_rejected`.
    pub rq_rejected: AtomicU64,
    /// `rq_success`.
    pub rq_success: AtomicU64,
    /// `rq_failure`.
    pub rq_failure: AtomicU64,
}

/// One worker's window (Envoy's `ThreadLocalControllerImpl`): samples from
/// oldest to newest, each opened when a record came a second or more after
/// the newest, and their sums.
#[derive(Debug, Default)]
pub(crate) struct Window {
    samples: VecDeque<(Instant, u32, u32)>,
    requests: u32,
    successes: u32,
}

impl Window {
    /// Drops samples as old as the window, and opens a new one when there is
    /// none or the newest is a second old.
    fn update(&mut self, now: Instant, window: Duration) {
        while let Some(&(at, r, s)) = self.samples.front() {
            if now.saturating_duration_since(at) < window {
                break;
            }
            self.requests -= r;
            self.successes -= s;
            self.samples.pop_front();
        }
        let open = self
            .samples
            .back()
            .is_none_or(|&(at, _, _)| now.saturating_duration_since(at) >= GRANULARITY);
        if open {
            self.samples.push_back((now, 0, 0));
        }
    }

    /// Records a request's outcome.
    pub(crate) fn record(&mut self, success: bool, now: Instant, window: Duration) {
        self.update(now, window);
        if let Some(b) = self.samples.back_mut() {
            b.1 += 1;
            b.2 += u32::from(success);
        }
        self.requests += 1;
        self.successes += u32::from(success);
    }

    /// The requests and successes in the window.
    pub(crate) fn counts(&mut self, now: Instant, window: Duration) -> (u32, u32) {
        self.update(now, window);
        (self.requests, self.successes)
    }

    /// The average rate over the window: its requests over the window or,
    /// when longer, the age of its oldest sample, in whole seconds (Envoy's;
    /// at least one, where Envoy would divide by zero for a window under a
    /// second).
    pub(crate) fn average_rps(&self, now: Instant, window: Duration) -> u32 {
        let Some(&(at, _, _)) = self.samples.front() else {
            return 0;
        };
        if self.requests == 0 {
            return 0;
        }
        let secs = now
            .saturating_duration_since(at)
            .as_secs()
            .max(window.as_secs())
            .max(1);
        u32::try_from(u64::from(self.requests) / secs).unwrap_or(u32::MAX)
    }
}

/// The rejection probability for `total` requests of which `successes`
/// succeeded (Envoy's formula, before the random draw):
/// `min((total - successes / sr) / (total + 1)) ^ (1 / aggression), max)`.
pub fn rejection_probability(c: &AdmissionControl, total: u32, successes: u32) -> f64 {
    let total = f64::from(total);
    let mut p = (total - f64::from(successes) / c.sr_threshold) / (total + 1.0);
    if c.aggression != 1.0 {
        // A negative base gives NaN, which rejects nothing, as in Envoy.
        p = p.powf(1.0 / c.aggression);
    }
    // `f64::min` would turn a NaN into the cap; C++'s `std::min` keeps it.
    if p.is_nan() {
        return p;
    }
    p.min(c.max_rejection_probability)
}

/// Whether a draw `r` (a random number) rejects at probability `p`: Envoy's
/// four significant figures.
pub fn rejects(p: f64, r: u64) -> bool {
    const ACCURACY: u64 = 10_000;
    // `max` drops a NaN: no rejection, as Envoy's comparison with NaN gives.
    let p = p.max(0.0);
    (ACCURACY as f64) * p > (r % ACCURACY) as f64
}

thread_local! {
    /// This worker's windows, by filter id; an entry whose filter is gone is
    /// dropped when another is added.
    static WINDOWS: RefCell<HashMap<u64, (Weak<()>, Window)>> = RefCell::new(HashMap::new());
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// The filter: its config, counters, and the key of its per-worker windows.
#[derive(Debug)]
pub struct AdmissionFilter {
    config: Arc<AdmissionControl>,
    /// Its counters.
    pub stats: AdmissionStats,
    id: u64,
    alive: Arc<()>,
}

impl AdmissionFilter {
    /// A filter of `config`.
    pub fn new(config: Arc<AdmissionControl>) -> Self {
        Self {
            config,
            stats: AdmissionStats::default(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            alive: Arc::new(()),
        }
    }

    /// Whether the filter is on (`enabled`).
    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    fn with_window<T>(&self, f: impl FnOnce(&mut Window) -> T) -> T {
        WINDOWS.with(|w| {
            let mut w = w.borrow_mut();
            if !w.contains_key(&self.id) {
                w.retain(|_, (alive, _)| alive.strong_count() > 0);
                w.insert(self.id, (Arc::downgrade(&self.alive), Window::default()));
            }
            match w.get_mut(&self.id) {
                Some((_, win)) => f(win),
                None => f(&mut Window::default()),
            }
        })
    }

    /// Decides on a request: `true` rejects it (counted in `rq_rejected`).
    pub fn reject(&self) -> bool {
        let c = &*self.config;
        let now = Instant::now();
        let (rps, (total, successes)) = self.with_window(|w| {
            (
                w.average_rps(now, c.sampling_window),
                w.counts(now, c.sampling_window),
            )
        });
        if rps < c.rps_threshold {
            return false;
        }
        let p = rejection_probability(c, total, successes);
        let out = rejects(p, fastrand::u64(..));
        if out {
            self.stats.rq_rejected.fetch_add(1, Ordering::Relaxed);
        }
        out
    }

    /// Records a failure (a gRPC response whose trailers have no status).
    pub fn record_failure(&self) {
        self.stats.rq_failure.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let window = self.config.sampling_window;
        self.with_window(|w| w.record(false, now, window));
    }

    /// Records a response: its HTTP status, or its gRPC status when it is a
    /// gRPC response.
    pub fn record(&self, http: u16, grpc: Option<u32>) {
        let c = &*self.config;
        let success = match grpc {
            Some(g) => c.criteria.grpc_success(g),
            None => c.criteria.http_success(http),
        };
        let counter = if success {
            &self.stats.rq_success
        } else {
            &self.stats.rq_failure
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        self.with_window(|w| w.record(success, now, c.sampling_window));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_config::filters::admission_control::SuccessCriteria;

    fn config(sr: f64, aggression: f64, max: f64) -> AdmissionControl {
        AdmissionControl {
            enabled: true,
            sampling_window: Duration::from_secs(30),
            aggression,
            sr_threshold: sr,
            rps_threshold: 0,
            max_rejection_probability: max,
            criteria: SuccessCriteria {
                http: None,
                grpc: vec![0],
            },
        }
    }

    #[test]
    fn probability_follows_envoys_formula() {
        let c = config(0.95, 1.0, 0.8);
        // Nothing recorded: nothing rejected.
        assert_eq!(rejection_probability(&c, 0, 0), 0.0);
        // All successes: negative, so never rejected.
        assert!(rejection_probability(&c, 100, 100) < 0.0);
        // 10 requests, none successful: 10 / 11, capped at 0.8.
        assert_eq!(rejection_probability(&c, 10, 0), 0.8);
        let c = config(0.5, 1.0, 1.0);
        // (10 - 4 / 0.5) / 11 = 2 / 11.
        assert!((rejection_probability(&c, 10, 4) - 2.0 / 11.0).abs() < 1e-12);
        // Aggression 2: the square root.
        let c = config(0.5, 2.0, 1.0);
        assert!((rejection_probability(&c, 10, 4) - (2.0f64 / 11.0).sqrt()).abs() < 1e-12);
        // A negative base with aggression is NaN: no rejection.
        let c = config(0.95, 2.0, 1.0);
        assert!(!rejects(rejection_probability(&c, 10, 10), 0));
    }

    #[test]
    fn draws_have_four_figures() {
        assert!(!rejects(0.0, 0));
        assert!(rejects(0.0001, 0));
        assert!(!rejects(0.0001, 1));
        assert!(rejects(0.5, 4_999));
        assert!(!rejects(0.5, 5_000));
        assert!(!rejects(-1.0, 0));
        // An aggression huge enough makes any failure a certain rejection.
        let c = config(0.95, 1e9, 1.0);
        let p = rejection_probability(&c, 1, 0);
        assert!((0..10_000).all(|r| rejects(p, r)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_slides_by_whole_samples() {
        let w30 = Duration::from_secs(30);
        let mut w = Window::default();
        let t0 = Instant::now();
        w.record(false, t0, w30);
        w.record(true, t0 + Duration::from_millis(500), w30);
        // Same sample (under a second apart), so one sample, two requests.
        assert_eq!(w.samples.len(), 1);
        w.record(false, t0 + Duration::from_secs(10), w30);
        assert_eq!(w.counts(t0 + Duration::from_secs(10), w30), (3, 1));
        assert_eq!(w.average_rps(t0 + Duration::from_secs(10), w30), 0);
        // The first sample ages out at 30 s.
        assert_eq!(w.counts(t0 + Duration::from_secs(30), w30), (1, 0));
        assert_eq!(w.counts(t0 + Duration::from_secs(40), w30), (0, 0));
        let mut w = Window::default();
        for i in 0..20 {
            w.record(true, t0 + Duration::from_millis(100 * i), w30);
        }
        // 60 requests over the window (not the 1 s since the oldest sample).
        for i in 20..60 {
            w.record(true, t0 + Duration::from_millis(10 * i), w30);
        }
        assert_eq!(w.average_rps(t0 + Duration::from_secs(1), w30), 2);
        // Over a 2 s window: the oldest sample's age when it is longer.
        let w2 = Duration::from_secs(2);
        assert_eq!(w.average_rps(t0 + Duration::from_secs(1), w2), 30);
        assert_eq!(w.average_rps(t0 + Duration::from_secs(3), w2), 20);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_reject_and_rejections_are_not_recorded() {
        let f = AdmissionFilter::new(Arc::new(config(0.95, 1e9, 1.0)));
        assert!(!f.reject());
        f.record(503, None);
        for _ in 0..5 {
            assert!(f.reject());
        }
        assert_eq!(f.stats.rq_rejected.load(Ordering::Relaxed), 5);
        assert_eq!(f.stats.rq_failure.load(Ordering::Relaxed), 1);
        // Once the failure leaves the window, requests pass again.
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(!f.reject());
        // rps_threshold: one request over the 30 s window is below 2 a second.
        let mut c = config(0.95, 1e9, 1.0);
        c.rps_threshold = 2;
        let f = AdmissionFilter::new(Arc::new(c));
        f.record(503, None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!f.reject());
        // gRPC statuses decide for gRPC responses.
        let f = AdmissionFilter::new(Arc::new(config(0.95, 1e9, 1.0)));
        f.record(200, Some(14));
        assert!(f.reject());
    }
}
