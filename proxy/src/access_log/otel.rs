//! The OpenTelemetry access logger of one worker, as Envoy's per-thread gRPC
//! access logger: each entry becomes a `LogRecord` (start time, the rendered
//! `body` and `attributes`, the request's trace and span ids when traced) in
//! the worker's batch for that logger; `buffer_size_bytes` of records, or the
//! `buffer_flush_interval` timer, send the batch as one
//! `ExportLogsServiceRequest`, a unary gRPC call through the collector's
//! cluster spawned so that no request waits on it. A collector that is down
//! or slow loses records, never requests.

use super::Entry;
use super::render;
use crate::stats::{Counter, Sample};
use crate::upstream::client::{ClusterClient, grpc_frame, grpc_head};
use arc_swap::ArcSwap;
use courier_config::listener::otel_access_log::{OtelAccessLog, OtelValue};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, KeyValueList};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::cell::RefCell;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, UNIX_EPOCH};

const EXPORT_PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
/// Bounds an export call, so a stalled collector cannot pile calls up.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The node's identity for the built-in resource labels.
struct Node {
    id: String,
    cluster: String,
    zone: String,
}

static NODE: OnceLock<Node> = OnceLock::new();

/// Sets the node the built-in labels name (`node_name`, `cluster_name`, `zone_name`).
pub fn set_node(id: &str, cluster: &str, zone: &str) {
    let _ = NODE.set(Node {
        id: id.to_string(),
        cluster: cluster.to_string(),
        zone: zone.to_string(),
    });
}

/// A stat prefix's counters (`access_logs.open_telemetry_access_log.[<prefix>.]*`).
#[derive(Debug, Default)]
struct Stats {
    /// `logs_written`: records whose export call started.
    written: Counter,
    /// `logs_dropped`: records that had no way out (no client on the thread).
    dropped: Counter,
}

type Table = ArcSwap<Vec<(String, Arc<Stats>)>>;

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(Table::default)
}

/// The counters of `prefix`, made on a logger's first record (workers may
/// race to make them: `rcu` keeps one).
fn stats(prefix: &str) -> Arc<Stats> {
    let find = |t: &Vec<(String, Arc<Stats>)>| {
        t.iter()
            .find(|(p, _)| p == prefix)
            .map(|(_, s)| Arc::clone(s))
    };
    if let Some(s) = find(&table().load()) {
        return s;
    }
    let fresh = Arc::new(Stats::default());
    table().rcu(|t| {
        let mut next = Vec::clone(t);
        if find(t).is_none() {
            next.push((prefix.to_string(), Arc::clone(&fresh)));
        }
        next
    });
    find(&table().load()).unwrap_or(fresh)
}

/// The loggers' samples (prefixes that have logged).
pub fn samples(out: &mut Vec<Sample>) {
    for (prefix, s) in table().load().iter() {
        let base = if prefix.is_empty() {
            "access_logs.open_telemetry_access_log".to_string()
        } else {
            format!("access_logs.open_telemetry_access_log.{prefix}")
        };
        out.push((format!("{base}.logs_written"), s.written.get()));
        out.push((format!("{base}.logs_dropped"), s.dropped.get()));
    }
}

/// Zeroes the counters (`/reset_counters`).
pub fn reset_counters() {
    for (_, s) in table().load().iter() {
        s.written.reset();
        s.dropped.reset();
    }
}

/// This worker's batches: per config, its records and its counters.
type Batch = super::batch::Batch<OtelAccessLog, LogRecord, Arc<Stats>>;

#[derive(Default)]
struct Loggers {
    client: Option<ClusterClient>,
    batches: super::batch::Batches<OtelAccessLog, LogRecord, Arc<Stats>>,
}

thread_local! {
    static LOGGERS: RefCell<Loggers> = RefCell::default();
}

/// Sets this worker's client (calls go through the worker's own connections).
pub fn start(client: ClusterClient) {
    LOGGERS.with_borrow_mut(|l| l.client = Some(client));
}

/// Adds `e`'s record to this worker's batch for `config`, sending the batch
/// once it reaches `buffer_size_bytes`.
pub fn record(config: &Arc<OtelAccessLog>, e: &Entry<'_>, ids: Option<(Vec<u8>, Vec<u8>)>) {
    let record = log_record(config, e, ids);
    let size = prost::Message::encoded_len(&record);
    let limit = config.buffer_size_bytes as usize;
    let arm = LOGGERS.with_borrow_mut(|l| {
        let Loggers { client, batches } = l;
        let (b, pushed) =
            batches.push(config, record, size, limit, || stats(&config.stat_prefix))?;
        if pushed.full {
            send(client.as_ref(), b);
        }
        Some(super::batch::needs_timer(b))
    });
    if arm == Some(true) {
        super::batch::arm(config.buffer_flush_interval, Arc::clone(config), flush);
    }
}

/// The flush timer of `config`'s batch fired.
fn flush(config: &Arc<OtelAccessLog>) {
    LOGGERS.with_borrow_mut(|l| {
        let Loggers { client, batches } = l;
        if let Some(b) = batches.fired(config) {
            send(client.as_ref(), b);
        }
    });
}

/// Sends every batch now (a worker's last act when it stops); whether any
/// call was started.
pub fn flush_at_exit() -> bool {
    LOGGERS.with_borrow_mut(|l| {
        let Loggers { client, batches } = l;
        let mut sent = false;
        for b in batches.iter_mut() {
            sent |= !b.items.is_empty();
            send(client.as_ref(), b);
        }
        sent
    })
}

/// Sends `b`'s records (if any) on a task of their own.
fn send(client: Option<&ClusterClient>, b: &mut Batch) {
    if b.items.is_empty() {
        return;
    }
    let records = b.take();
    let n = records.len() as u64;
    let (Some(client), Ok(rt)) = (client.cloned(), tokio::runtime::Handle::try_current()) else {
        b.state.dropped.add(n);
        return;
    };
    b.state.written.add(n);
    let config = Arc::clone(&b.config);
    let body = grpc_frame(&request(&config, records));
    rt.spawn(async move {
        let Ok(head) = grpc_head(&config.authority, EXPORT_PATH, &config.initial_metadata) else {
            return;
        };
        let call = client.unary(&config.cluster, head, body);
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(resp)) if resp.head.status == http::StatusCode::OK => {}
            Ok(Ok(resp)) => {
                tracing::debug!(status = %resp.head.status, "OpenTelemetry log export refused")
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "OpenTelemetry log export failed"),
            Err(_) => tracing::debug!("OpenTelemetry log export timed out"),
        }
    });
}

/// The entry as a `LogRecord`.
fn log_record(c: &OtelAccessLog, e: &Entry<'_>, ids: Option<(Vec<u8>, Vec<u8>)>) -> LogRecord {
    let time_unix_nano = e
        .req
        .start
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let (trace_id, span_id) = ids.unwrap_or_default();
    LogRecord {
        time_unix_nano,
        body: c.body.as_ref().map(|v| any(v, Some(e))),
        attributes: c
            .attributes
            .iter()
            .map(|(k, v)| kv(k, any(v, Some(e))))
            .collect(),
        trace_id,
        span_id,
        ..Default::default()
    }
}

fn kv(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(value),
        ..Default::default()
    }
}

/// `v` as an `AnyValue`, its format strings rendered for `e`.
fn any(v: &OtelValue, e: Option<&Entry<'_>>) -> AnyValue {
    let value = match v {
        OtelValue::Format(f) => Some(Value::StringValue(match e {
            Some(e) => render::text(f, e, false),
            None => String::new(),
        })),
        OtelValue::Text(s) => Some(Value::StringValue(s.clone())),
        OtelValue::Bool(b) => Some(Value::BoolValue(*b)),
        OtelValue::Int(n) => Some(Value::IntValue(*n)),
        OtelValue::Double(d) => Some(Value::DoubleValue(*d)),
        OtelValue::Bytes(b) => Some(Value::BytesValue(b.clone())),
        OtelValue::Array(a) => Some(Value::ArrayValue(ArrayValue {
            values: a.iter().map(|v| any(v, e)).collect(),
        })),
        OtelValue::KvList(l) => Some(Value::KvlistValue(KeyValueList {
            values: l.iter().map(|(k, v)| kv(k, any(v, e))).collect(),
        })),
        OtelValue::Empty => None,
    };
    AnyValue { value }
}

/// One `ResourceLogs`: the built-in labels (unless disabled), then the
/// configured resource attributes, and one scope of `records`.
fn request(c: &OtelAccessLog, records: Vec<LogRecord>) -> ExportLogsServiceRequest {
    let mut attributes = Vec::new();
    if !c.disable_builtin_labels {
        let node = NODE.get();
        let text = |s: &str| AnyValue {
            value: Some(Value::StringValue(s.to_string())),
        };
        attributes.push(kv("log_name", text(&c.log_name)));
        attributes.push(kv("zone_name", text(node.map_or("", |n| &n.zone))));
        attributes.push(kv("cluster_name", text(node.map_or("", |n| &n.cluster))));
        attributes.push(kv("node_name", text(node.map_or("", |n| &n.id))));
    }
    for (k, v) in &c.resource_attributes {
        // A configured attribute replaces a built-in label of the same key,
        // in its place (as Envoy's resource merge does).
        match attributes.iter_mut().find(|a| a.key == *k) {
            Some(a) => a.value = Some(any(v, None)),
            None => attributes.push(kv(k, any(v, None))),
        }
    }
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes,
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}
