//! The Datadog agent reporter of one worker, as Envoy's per-worker dd-trace-cpp
//! tracer: finished traces wait in a buffer per tracer config and go every
//! `flush_interval` (dd-trace-cpp's default, 2 s) as one msgpack array of traces,
//! POSTed to `/v0.4/traces` through the collector's cluster (the worker's own
//! connections), bounded by dd-trace-cpp's 2 s request timeout. The agent's answer
//! carries sampling rates by service (`rate_by_service`), which the agent-rate
//! sampler uses from then on. A report is counted sent on `200`, dropped on any
//! other status and failed when the call fails. An agent that is down or slow
//! loses traces, never requests.
//!
//! dd-trace-cpp's telemetry (`/telemetry/proxy/api/v2/apmtelemetry`) and remote
//! configuration (`/v0.7/config`, refused at config load) are not sent: Envoy 1.40
//! sends neither to the collector cluster by default.

use super::datadog::{DdSpan, msgpack};
use crate::upstream::client::{ClientError, ClusterClient};
use bytes::Bytes;
use courier_config::tracing::Datadog;
use http::{Request, header};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

const TRACES_PATH: &str = "/v0.4/traces";
/// dd-trace-cpp's `flush_interval_milliseconds` default.
const FLUSH_INTERVAL: Duration = Duration::from_millis(2000);
/// dd-trace-cpp's `request_timeout_milliseconds` default.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(2000);
/// Traces a worker keeps at most between flushes; more are dropped (dd-trace-cpp
/// has no bound; an agent that never answers must not grow courier without one).
const MAX_TRACES: usize = 100_000;
/// dd-trace-cpp's key of the agent's default rate.
const DEFAULT_RATE_KEY: &str = "service:,env:";

/// `tracing.datadog.reports_sent`: answered `200`.
static REPORTS_SENT: AtomicU64 = AtomicU64::new(0);
/// `tracing.datadog.reports_dropped`: answered another status.
static REPORTS_DROPPED: AtomicU64 = AtomicU64::new(0);
/// `tracing.datadog.reports_failed`: no answer (connection failure, timeout).
static REPORTS_FAILED: AtomicU64 = AtomicU64::new(0);
/// `tracing.datadog.reports_skipped_no_cluster`: the collector cluster is gone.
static REPORTS_SKIPPED: AtomicU64 = AtomicU64::new(0);
/// Whether a Datadog tracer was ever configured (its stats show from then on).
static CONFIGURED: AtomicBool = AtomicBool::new(false);

const COUNTERS: [(&str, &AtomicU64); 4] = [
    ("reports_dropped", &REPORTS_DROPPED),
    ("reports_failed", &REPORTS_FAILED),
    ("reports_sent", &REPORTS_SENT),
    ("reports_skipped_no_cluster", &REPORTS_SKIPPED),
];

/// Marks that a Datadog tracer is configured.
pub fn configured() {
    if !CONFIGURED.load(Ordering::Relaxed) {
        CONFIGURED.store(true, Ordering::Relaxed);
    }
}

/// The `tracing.datadog.*` samples, once a tracer is configured.
pub fn samples() -> Vec<(String, u64)> {
    if !CONFIGURED.load(Ordering::Relaxed) {
        return Vec::new();
    }
    COUNTERS
        .iter()
        .map(|(n, c)| (format!("tracing.datadog.{n}"), c.load(Ordering::Relaxed)))
        .collect()
}

/// Zeroes the counters (`/reset_counters`).
pub fn reset() {
    for (_, c) in COUNTERS {
        c.store(0, Ordering::Relaxed);
    }
}

/// What the agent said about sampling: its rates by `service:<name>,env:<env>`
/// and its default rate (kept when a later answer has none, as dd-trace-cpp).
#[derive(Debug, Default)]
struct Rates {
    by_key: HashMap<String, f64>,
    default: Option<f64>,
}

thread_local! {
    /// Per worker, as each of Envoy's workers learns them from its own reports.
    static RATES: RefCell<Rates> = RefCell::default();
}

/// The agent's rate for `service` (no environment is configured), else its
/// default rate; `None` before the agent has sent any.
pub(super) fn agent_rate(service: &str) -> Option<f64> {
    RATES.with(|r| {
        let r = r.borrow();
        r.by_key
            .get(&format!("service:{service},env:"))
            .copied()
            .or(r.default)
    })
}

/// Takes the rates of an agent's answer (`{"rate_by_service": {key: rate}}`), as
/// dd-trace-cpp: an answer that is not a JSON object, or has a rate that is not a
/// number in 0..=1, changes nothing; one without `rate_by_service` clears the
/// rates by service and keeps the default.
pub(super) fn take_rates(body: &[u8]) {
    let Ok(serde_json::Value::Object(json)) = serde_json::from_slice::<serde_json::Value>(body)
    else {
        return;
    };
    let mut by_key = HashMap::new();
    match json.get("rate_by_service") {
        None => {}
        Some(serde_json::Value::Object(by)) => {
            for (k, v) in by {
                match v.as_f64() {
                    Some(rate) if (0.0..=1.0).contains(&rate) => {
                        by_key.insert(k.clone(), rate);
                    }
                    _ => return,
                }
            }
        }
        Some(_) => return,
    }
    RATES.with(|r| {
        let mut r = r.borrow_mut();
        if let Some(d) = by_key.get(DEFAULT_RATE_KEY) {
            r.default = Some(*d);
        }
        r.by_key = by_key;
    });
}

/// Encoded traces waiting for one tracer config.
struct Reporter {
    config: Arc<Datadog>,
    traces: Vec<Vec<u8>>,
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
            tokio::time::sleep(FLUSH_INTERVAL).await;
            flush_all();
        }
    });
}

fn flush_all() -> bool {
    REPORTERS.with(|r| {
        let mut r = r.borrow_mut();
        let Reporters { client, reporters } = &mut *r;
        let mut sent = false;
        for rep in reporters.iter_mut() {
            sent |= !rep.traces.is_empty();
            flush(client.as_ref(), rep);
        }
        sent
    })
}

/// Sends what waits now (a worker's last act when it stops); whether any report
/// was started.
pub fn flush_at_exit() -> bool {
    flush_all()
}

/// Adds a finished trace chunk (local root first) to its tracer's buffer.
pub(super) fn record(config: &Arc<Datadog>, spans: &[DdSpan]) {
    let mut chunk = Vec::with_capacity(512 * spans.len());
    msgpack::array(&mut chunk, spans.len());
    for s in spans {
        s.encode(&mut chunk);
    }
    REPORTERS.with(|r| {
        let mut r = r.borrow_mut();
        let reporters = &mut r.reporters;
        let i = match reporters
            .iter()
            .position(|r| Arc::ptr_eq(&r.config, config) || *r.config == **config)
        {
            Some(i) => i,
            None => {
                reporters.push(Reporter {
                    config: Arc::clone(config),
                    traces: Vec::new(),
                });
                reporters.len() - 1
            }
        };
        if let Some(rep) = reporters.get_mut(i)
            && rep.traces.len() < MAX_TRACES
        {
            rep.traces.push(chunk);
        }
    });
}

/// The request body: an array of the trace chunks.
pub(super) fn body(traces: &[Vec<u8>]) -> Bytes {
    let mut out = Vec::with_capacity(5 + traces.iter().map(Vec::len).sum::<usize>());
    msgpack::array(&mut out, traces.len());
    for t in traces {
        out.extend_from_slice(t);
    }
    Bytes::from(out)
}

/// Sends `rep`'s traces (if any) on a task of their own.
fn flush(client: Option<&ClusterClient>, rep: &mut Reporter) {
    if rep.traces.is_empty() {
        return;
    }
    let traces = std::mem::take(&mut rep.traces);
    let Some(client) = client.cloned() else {
        return;
    };
    let config = Arc::clone(&rep.config);
    let count = traces.len();
    let body = body(&traces);
    tokio::spawn(async move {
        let Ok(head) = head(&config, count) else {
            REPORTS_FAILED.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let call = client.unary(&config.cluster, head, body);
        let counter = match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
            Ok(Ok(resp)) if resp.head.status == http::StatusCode::OK => {
                take_rates(&resp.body);
                &REPORTS_SENT
            }
            Ok(Ok(_)) => &REPORTS_DROPPED,
            Ok(Err(ClientError::UnknownCluster(_))) => &REPORTS_SKIPPED,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "Datadog report failed");
                &REPORTS_FAILED
            }
            Err(_) => &REPORTS_FAILED,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    });
}

/// The report's head: `POST /v0.4/traces` to `<collector_hostname>`, msgpack, with
/// dd-trace-cpp's `Datadog-Meta-*` headers (naming courier) and the trace count.
fn head(d: &Datadog, count: usize) -> Result<Request<()>, http::Error> {
    let uri = http::Uri::builder()
        .scheme(http::uri::Scheme::HTTP)
        .authority(d.hostname.as_str())
        .path_and_query(TRACES_PATH)
        .build()?;
    Request::builder()
        .method(http::Method::POST)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/msgpack")
        .header("datadog-meta-lang", super::datadog::LANGUAGE)
        .header("datadog-meta-lang-version", LANG_VERSION)
        .header("datadog-meta-tracer-version", env!("CARGO_PKG_VERSION"))
        .header("x-datadog-trace-count", count.to_string())
        .body(())
}

/// The language version the reports name: the edition courier is written in
/// (dd-trace-cpp sends its C++ standard, `202002`).
const LANG_VERSION: &str = "2024";
