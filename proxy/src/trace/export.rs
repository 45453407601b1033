//! The OpenTelemetry exporter of one worker, as Envoy's per-worker tracer: finished
//! spans wait in a buffer per tracer config; `tracing.opentelemetry.min_flush_spans`
//! of them (default 5), or the `tracing.opentelemetry.flush_interval_ms` timer
//! (default 5000 ms), send them as one `ExportTraceServiceRequest` — a unary gRPC
//! call through the collector's cluster (`envoy_grpc`, the worker's own connections,
//! as ext_authz's checks), spawned so that no request waits on it. A collector that
//! is down or slow loses spans, never requests.

use crate::stats::trace::{
    self as stats, OTEL_CONFIGURED, SPANS_DROPPED, SPANS_SENT, TIMER_FLUSHED,
};
use crate::upstream::client::{ClusterClient, grpc_frame, grpc_head};
use courier_config::tracing::OpenTelemetry;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// Spans a tracer keeps at most (Envoy's `max_cache_size` default); more are dropped.
const MAX_CACHE: usize = 1024;
/// Bounds an export call, so a stalled collector cannot pile calls up.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// `tracing.opentelemetry.min_flush_spans`, process-wide as Envoy's runtime.
static MIN_FLUSH_SPANS: AtomicU64 = AtomicU64::new(5);
/// `tracing.opentelemetry.flush_interval_ms`.
static FLUSH_INTERVAL_MS: AtomicU64 = AtomicU64::new(5000);

/// Sets the runtime's flush settings (from the bootstrap's static layers).
pub fn set_flush(min_spans: u64, interval_ms: u64) {
    MIN_FLUSH_SPANS.store(min_spans, Ordering::Relaxed);
    FLUSH_INTERVAL_MS.store(interval_ms.max(1), Ordering::Relaxed);
}

/// The flush settings in force (`min_flush_spans`, `flush_interval_ms`).
#[cfg(test)]
pub fn flush_settings() -> (u64, u64) {
    (
        MIN_FLUSH_SPANS.load(Ordering::Relaxed),
        FLUSH_INTERVAL_MS.load(Ordering::Relaxed),
    )
}

/// Marks that an OpenTelemetry tracer is configured (its stats show from then on).
pub fn configured() {
    if !OTEL_CONFIGURED.load(Ordering::Relaxed) {
        OTEL_CONFIGURED.store(true, Ordering::Relaxed);
    }
}

/// Spans waiting for one tracer config.
struct Tracer {
    provider: Arc<OpenTelemetry>,
    spans: Vec<Span>,
}

#[derive(Default)]
struct Exporter {
    client: Option<ClusterClient>,
    tracers: Vec<Tracer>,
}

thread_local! {
    static EXPORTER: RefCell<Exporter> = RefCell::default();
}

/// Sets this worker's client and starts its flush timer (on the worker's runtime).
pub fn start(client: ClusterClient) {
    EXPORTER.with(|e| e.borrow_mut().client = Some(client));
    tokio::spawn(async {
        loop {
            let ms = FLUSH_INTERVAL_MS.load(Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            EXPORTER.with(|e| {
                let mut e = e.borrow_mut();
                let Exporter { client, tracers } = &mut *e;
                // Envoy's worker has its tracer from the config on, and its timer
                // counts every tick; courier's buffers come with the first span.
                let configured = u64::from(OTEL_CONFIGURED.load(Ordering::Relaxed));
                stats::add(&TIMER_FLUSHED, (tracers.len() as u64).max(configured));
                for t in tracers.iter_mut() {
                    flush(client.as_ref(), t);
                }
            });
        }
    });
}

/// Sends what waits now (a worker's last act when it stops); whether any call
/// was started.
pub fn flush_at_exit() -> bool {
    EXPORTER.with(|e| {
        let mut e = e.borrow_mut();
        let Exporter { client, tracers } = &mut *e;
        let mut sent = false;
        for t in tracers.iter_mut() {
            sent |= !t.spans.is_empty();
            flush(client.as_ref(), t);
        }
        sent
    })
}

/// Adds a finished span to its tracer's buffer, exporting at `min_flush_spans`.
pub fn record(provider: &Arc<OpenTelemetry>, span: Span) {
    EXPORTER.with(|e| {
        let mut e = e.borrow_mut();
        let Exporter { client, tracers } = &mut *e;
        let i = match tracers
            .iter()
            .position(|t| Arc::ptr_eq(&t.provider, provider))
            .or_else(|| tracers.iter().position(|t| *t.provider == **provider))
        {
            Some(i) => i,
            None => {
                tracers.push(Tracer {
                    provider: Arc::clone(provider),
                    spans: Vec::new(),
                });
                tracers.len() - 1
            }
        };
        let Some(t) = tracers.get_mut(i) else { return };
        if t.spans.len() >= MAX_CACHE {
            stats::add(&SPANS_DROPPED, 1);
            return;
        }
        t.spans.push(span);
        if t.spans.len() as u64 >= MIN_FLUSH_SPANS.load(Ordering::Relaxed) {
            flush(client.as_ref(), t);
        }
    });
}

/// Sends `t`'s spans (if any) on a task of their own.
fn flush(client: Option<&ClusterClient>, t: &mut Tracer) {
    if t.spans.is_empty() {
        return;
    }
    let spans = std::mem::take(&mut t.spans);
    stats::add(&SPANS_SENT, spans.len() as u64);
    let Some(client) = client.cloned() else {
        return;
    };
    let provider = Arc::clone(&t.provider);
    let body = grpc_frame(&request(&provider, spans));
    tokio::spawn(async move {
        let Ok(head) = grpc_head(&provider.authority, EXPORT_PATH, &provider.initial_metadata)
        else {
            return;
        };
        let call = client.unary(&provider.cluster, head, body);
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(resp)) if resp.head.status == http::StatusCode::OK => {}
            Ok(Ok(resp)) => {
                tracing::debug!(status = %resp.head.status, "OpenTelemetry export refused")
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "OpenTelemetry export failed"),
            Err(_) => tracing::debug!("OpenTelemetry export timed out"),
        }
    });
}

fn string_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.to_string())),
        }),
        ..Default::default()
    }
}

/// One `ResourceSpans` with the tracer's resource and one scope of `spans`.
fn request(provider: &OpenTelemetry, spans: Vec<Span>) -> ExportTraceServiceRequest {
    let mut attributes: Vec<KeyValue> = provider
        .resource
        .iter()
        .map(|(k, v)| string_kv(k, v))
        .collect();
    // Envoy's `set_telemetry_sdk_resource_attributes` default: the SDK's own.
    for (k, v) in [
        ("telemetry.sdk.language", "rust"),
        ("telemetry.sdk.name", "courier"),
        ("telemetry.sdk.version", env!("CARGO_PKG_VERSION")),
    ] {
        if !attributes.iter().any(|kv| kv.key == k) {
            attributes.push(string_kv(k, v));
        }
    }
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes,
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}
