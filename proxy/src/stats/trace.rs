//! Tracing counters: the connection manager's sampling decisions
//! (`http.<prefix>.tracing.*`, per worker) and the OpenTelemetry tracer's export
//! counts (`tracing.opentelemetry.*`, process-wide as Envoy's tracer stats).

use super::Counter;
use std::sync::atomic::{AtomicU64, Ordering};

/// A connection manager's tracing decisions (`http.<prefix>.tracing.*`).
#[derive(Debug, Default)]
pub struct TracingStats {
    /// `tracing.client_enabled`: traced for `x-client-trace-id`.
    pub client_enabled: Counter,
    /// `tracing.health_check` (courier has no health-check filter: stays 0).
    pub health_check: Counter,
    /// `tracing.not_traceable`.
    pub not_traceable: Counter,
    /// `tracing.random_sampling`: traced by sampling (or a sampled `x-request-id`).
    pub random_sampling: Counter,
    /// `tracing.service_forced`: traced for `x-envoy-force-trace`.
    pub service_forced: Counter,
}

impl TracingStats {
    /// Samples by Envoy's names (relative to `http.<prefix>.`).
    pub fn samples(&self) -> [(&'static str, u64); 5] {
        [
            ("tracing.client_enabled", self.client_enabled.get()),
            ("tracing.health_check", self.health_check.get()),
            ("tracing.not_traceable", self.not_traceable.get()),
            ("tracing.random_sampling", self.random_sampling.get()),
            ("tracing.service_forced", self.service_forced.get()),
        ]
    }

    /// The counters `/reset_counters` zeroes.
    pub fn counters(&self) -> [&Counter; 5] {
        [
            &self.client_enabled,
            &self.health_check,
            &self.not_traceable,
            &self.random_sampling,
            &self.service_forced,
        ]
    }
}

/// `tracing.opentelemetry.spans_sent`: spans handed to an export call.
pub static SPANS_SENT: AtomicU64 = AtomicU64::new(0);
/// `tracing.opentelemetry.spans_dropped`: spans dropped with a full buffer.
pub static SPANS_DROPPED: AtomicU64 = AtomicU64::new(0);
/// `tracing.opentelemetry.timer_flushed`: flushes by the timer (per tracer and worker).
pub static TIMER_FLUSHED: AtomicU64 = AtomicU64::new(0);
/// Whether an OpenTelemetry tracer was ever configured (its stats show from then on,
/// as Envoy's exist once its tracer does).
pub static OTEL_CONFIGURED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Adds `n` to one of the process-wide counters.
pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// The `tracing.opentelemetry.*` samples, once a tracer is configured.
pub fn otel_samples() -> Vec<(String, u64)> {
    if !OTEL_CONFIGURED.load(Ordering::Relaxed) {
        return Vec::new();
    }
    [
        ("spans_dropped", &SPANS_DROPPED),
        ("spans_sent", &SPANS_SENT),
        ("timer_flushed", &TIMER_FLUSHED),
    ]
    .into_iter()
    .map(|(n, c)| {
        (
            format!("tracing.opentelemetry.{n}"),
            c.load(Ordering::Relaxed),
        )
    })
    .collect()
}

/// Zeroes the process-wide counters (`/reset_counters`).
pub fn reset_otel() {
    for c in [&SPANS_SENT, &SPANS_DROPPED, &TIMER_FLUSHED] {
        c.store(0, Ordering::Relaxed);
    }
}
