//! The Zipkin reporter of one worker, as Envoy's per-worker `ReporterImpl`:
//! finished spans wait in a buffer per tracer config; `tracing.zipkin.min_flush_spans`
//! of them (default 5), or the `tracing.zipkin.flush_interval_ms` timer (default
//! 5000 ms), send them as one JSON array, POSTed to `collector_endpoint` through
//! the collector's cluster (the worker's own connections), bounded by
//! `tracing.zipkin.request_timeout`. A report is counted sent on `202 Accepted`,
//! dropped on any other status and failed when the call fails. A collector that is
//! down or slow loses spans, never requests.

use crate::upstream::client::{ClientError, ClusterClient};
use bytes::Bytes;
use courier_config::runtime::ZipkinRuntime;
use courier_config::tracing::Zipkin;
use http::{Request, header};
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// `tracing.zipkin.spans_sent`.
static SPANS_SENT: AtomicU64 = AtomicU64::new(0);
/// `tracing.zipkin.timer_flushed`.
static TIMER_FLUSHED: AtomicU64 = AtomicU64::new(0);
/// `tracing.zipkin.reports_sent`: answered `202 Accepted`.
static REPORTS_SENT: AtomicU64 = AtomicU64::new(0);
/// `tracing.zipkin.reports_dropped`: answered another status.
static REPORTS_DROPPED: AtomicU64 = AtomicU64::new(0);
/// `tracing.zipkin.reports_failed`: no answer (connection failure, timeout).
static REPORTS_FAILED: AtomicU64 = AtomicU64::new(0);
/// `tracing.zipkin.reports_skipped_no_cluster`: the collector cluster is gone.
static REPORTS_SKIPPED: AtomicU64 = AtomicU64::new(0);
/// Whether a Zipkin tracer was ever configured (its stats show from then on).
static CONFIGURED: AtomicBool = AtomicBool::new(false);

/// `tracing.zipkin.min_flush_spans`, `flush_interval_ms` and `request_timeout`.
static MIN_FLUSH_SPANS: AtomicU64 = AtomicU64::new(5);
static FLUSH_INTERVAL_MS: AtomicU64 = AtomicU64::new(5000);
static REQUEST_TIMEOUT_MS: AtomicU64 = AtomicU64::new(5000);

/// Sets the runtime's settings (from the bootstrap's layers, `/runtime_modify`).
pub fn set_runtime(rt: ZipkinRuntime) {
    MIN_FLUSH_SPANS.store(rt.min_flush_spans, Ordering::Relaxed);
    FLUSH_INTERVAL_MS.store(rt.flush_interval_ms.max(1), Ordering::Relaxed);
    REQUEST_TIMEOUT_MS.store(rt.request_timeout_ms, Ordering::Relaxed);
}

/// Marks that a Zipkin tracer is configured.
pub fn configured() {
    if !CONFIGURED.load(Ordering::Relaxed) {
        CONFIGURED.store(true, Ordering::Relaxed);
    }
}

/// The `tracing.zipkin.*` samples, once a tracer is configured.
pub fn samples() -> Vec<(String, u64)> {
    if !CONFIGURED.load(Ordering::Relaxed) {
        return Vec::new();
    }
    COUNTERS
        .iter()
        .map(|(n, c)| (format!("tracing.zipkin.{n}"), c.load(Ordering::Relaxed)))
        .collect()
}

const COUNTERS: [(&str, &AtomicU64); 6] = [
    ("reports_dropped", &REPORTS_DROPPED),
    ("reports_failed", &REPORTS_FAILED),
    ("reports_sent", &REPORTS_SENT),
    ("reports_skipped_no_cluster", &REPORTS_SKIPPED),
    ("spans_sent", &SPANS_SENT),
    ("timer_flushed", &TIMER_FLUSHED),
];

/// Zeroes the counters (`/reset_counters`).
pub fn reset() {
    for (_, c) in COUNTERS {
        c.store(0, Ordering::Relaxed);
    }
}

/// Spans waiting for one tracer config.
struct Reporter {
    config: Arc<Zipkin>,
    spans: Vec<serde_json::Value>,
}

#[derive(Default)]
struct Reporters {
    client: Option<ClusterClient>,
    reporters: Vec<Reporter>,
}

thread_local! {
    static REPORTERS: RefCell<Reporters> = RefCell::default();
}

/// Sets this worker's client and starts its flush timer (on the worker's runtime).
pub fn start(client: ClusterClient) {
    REPORTERS.with(|r| r.borrow_mut().client = Some(client));
    tokio::spawn(async {
        loop {
            let ms = FLUSH_INTERVAL_MS.load(Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            REPORTERS.with(|r| {
                let mut r = r.borrow_mut();
                let Reporters { client, reporters } = &mut *r;
                // Envoy's reporter exists per worker from the config on and counts
                // every tick; courier's come with their first span.
                let configured = u64::from(CONFIGURED.load(Ordering::Relaxed));
                TIMER_FLUSHED
                    .fetch_add((reporters.len() as u64).max(configured), Ordering::Relaxed);
                for rep in reporters.iter_mut() {
                    flush(client.as_ref(), rep);
                }
            });
        }
    });
}

/// Sends what waits now (a worker's last act when it stops); whether any report
/// was started.
pub fn flush_at_exit() -> bool {
    REPORTERS.with(|r| {
        let mut r = r.borrow_mut();
        let Reporters { client, reporters } = &mut *r;
        let mut sent = false;
        for rep in reporters.iter_mut() {
            sent |= !rep.spans.is_empty();
            flush(client.as_ref(), rep);
        }
        sent
    })
}

/// Adds a finished span to its tracer's buffer, reporting at `min_flush_spans`.
pub(super) fn record(config: &Arc<Zipkin>, span: serde_json::Value) {
    REPORTERS.with(|r| {
        let mut r = r.borrow_mut();
        let Reporters { client, reporters } = &mut *r;
        let i = match reporters
            .iter()
            .position(|r| Arc::ptr_eq(&r.config, config) || *r.config == **config)
        {
            Some(i) => i,
            None => {
                reporters.push(Reporter {
                    config: Arc::clone(config),
                    spans: Vec::new(),
                });
                reporters.len() - 1
            }
        };
        let Some(rep) = reporters.get_mut(i) else {
            return;
        };
        rep.spans.push(span);
        if rep.spans.len() as u64 >= MIN_FLUSH_SPANS.load(Ordering::Relaxed) {
            flush(client.as_ref(), rep);
        }
    });
}

/// Sends `rep`'s spans (if any) on a task of their own.
fn flush(client: Option<&ClusterClient>, rep: &mut Reporter) {
    if rep.spans.is_empty() {
        return;
    }
    let spans = std::mem::take(&mut rep.spans);
    SPANS_SENT.fetch_add(spans.len() as u64, Ordering::Relaxed);
    let Some(client) = client.cloned() else {
        return;
    };
    let config = Arc::clone(&rep.config);
    let body = Bytes::from(serde_json::Value::Array(spans).to_string());
    tokio::spawn(async move {
        let Ok(head) = head(&config) else {
            REPORTS_FAILED.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS.load(Ordering::Relaxed));
        let call = client.unary(&config.cluster, head, body);
        let counter = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(resp)) if resp.head.status == http::StatusCode::ACCEPTED => &REPORTS_SENT,
            Ok(Ok(_)) => &REPORTS_DROPPED,
            Ok(Err(ClientError::UnknownCluster(_))) => &REPORTS_SKIPPED,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "Zipkin report failed");
                &REPORTS_FAILED
            }
            Err(_) => &REPORTS_FAILED,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    });
}

/// The report's head: `POST <collector_endpoint>` to `<collector_hostname>` (the
/// `host` of an HTTP/1.1 call, the `:authority` of an HTTP/2 one),
/// `content-type: application/json`.
fn head(z: &Zipkin) -> Result<Request<()>, http::Error> {
    let uri = http::Uri::builder()
        .scheme(http::uri::Scheme::HTTP)
        .authority(z.hostname.as_str())
        .path_and_query(z.endpoint.as_str())
        .build()?;
    Request::builder()
        .method(http::Method::POST)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(())
}
