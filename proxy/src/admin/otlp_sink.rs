//! The `envoy.stat_sinks.open_telemetry` sink: one OTLP `MetricsService/Export`
//! call per flush through the collector's `envoy_grpc` cluster, as Envoy's sink
//! builds it without `custom_metric_conversions`: one resource (the static
//! detectors' attributes), one scope, a metric per stat — gauges first, then
//! counters — named `<prefix>` + the tag-extracted name (or the full one), the
//! stat's tags as the data point's attributes, counters as monotonic sums
//! (CUMULATIVE, or DELTA with `report_counters_as_deltas`), every point stamped
//! with the flush time and the previous flush as its start.

use crate::upstream::client::{ClusterClient, grpc_frame, grpc_head};
use courier_config::stats::StatsConfig;
use courier_config::stats::sinks::OtlpSink;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::collections::HashMap;
use std::time::Duration;

const EXPORT_PATH: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";
/// Bounds an export call, so a stalled collector cannot pile calls up.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.to_string())),
        }),
        ..Default::default()
    }
}

/// The resource's attributes: the detectors', then the SDK's own as Envoy adds
/// them (courier names itself: `courier`, `rust`, its version).
fn resource(detected: &[(String, String)]) -> Vec<KeyValue> {
    let mut attrs: Vec<KeyValue> = detected.iter().map(|(k, v)| kv(k, v)).collect();
    for (k, v) in [
        ("telemetry.sdk.language", "rust"),
        ("telemetry.sdk.name", "courier"),
        ("telemetry.sdk.version", env!("CARGO_PKG_VERSION")),
    ] {
        if !detected.iter().any(|(key, _)| key == k) {
            attrs.push(kv(k, v));
        }
    }
    attrs
}

/// What the sink keeps between flushes: each stat's name and attributes (the tag
/// regexes run once per stat) and the previous flush's time.
pub struct OtlpState {
    config: OtlpSink,
    names: HashMap<String, (String, Vec<KeyValue>)>,
    last_flush_ns: u64,
}

impl OtlpState {
    /// A sink whose first points start at `start_ns` (the server's start).
    pub fn new(config: OtlpSink, start_ns: u64) -> Self {
        Self {
            config,
            names: HashMap::new(),
            last_flush_ns: start_ns,
        }
    }

    /// The export request for this flush's stats (name, value, delta, gauge).
    pub fn request(
        &mut self,
        stats: &[(String, u64, u64, bool)],
        now_ns: u64,
        tags: &StatsConfig,
    ) -> ExportMetricsServiceRequest {
        let c = &self.config;
        let mut gauges = Vec::new();
        let mut counters = Vec::new();
        for (name, value, delta, gauge) in stats {
            let (metric_name, attributes) = self
                .names
                .entry(name.clone())
                .or_insert_with(|| {
                    let (extracted, t) = tags.tags.produce(name);
                    let metric = if c.tag_extracted_name {
                        format!("{}{extracted}", c.prefix)
                    } else {
                        format!("{}{name}", c.prefix)
                    };
                    let attrs = if c.emit_tags {
                        t.iter().map(|t| kv(&t.name, &t.value)).collect()
                    } else {
                        Vec::new()
                    };
                    (metric, attrs)
                })
                .clone();
            let point = |v: u64| NumberDataPoint {
                attributes,
                start_time_unix_nano: self.last_flush_ns,
                time_unix_nano: now_ns,
                value: Some(number_data_point::Value::AsInt(v as i64)),
                ..Default::default()
            };
            if *gauge {
                gauges.push(Metric {
                    name: metric_name,
                    data: Some(Data::Gauge(Gauge {
                        data_points: vec![point(*value)],
                    })),
                    ..Default::default()
                });
            } else {
                let (temporality, v) = if c.counters_as_deltas {
                    (AggregationTemporality::Delta, *delta)
                } else {
                    (AggregationTemporality::Cumulative, *value)
                };
                counters.push(Metric {
                    name: metric_name,
                    data: Some(Data::Sum(Sum {
                        data_points: vec![point(v)],
                        aggregation_temporality: temporality as i32,
                        is_monotonic: true,
                    })),
                    ..Default::default()
                });
            }
        }
        self.last_flush_ns = now_ns;
        gauges.extend(counters);
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: resource(&c.resource),
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics: gauges,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    /// Sends `req` on a task of its own; a failed call loses this flush.
    pub fn send(&self, client: &ClusterClient, req: &ExportMetricsServiceRequest) {
        let body = grpc_frame(req);
        let c = &self.config;
        let Ok(head) = grpc_head(&c.authority, EXPORT_PATH, &c.initial_metadata) else {
            return;
        };
        let client = client.clone();
        let cluster = self.config.cluster.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(CALL_TIMEOUT, client.unary(&cluster, head, body)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::debug!(%cluster, error = %e, "OTLP metrics export failed"),
                Err(_) => tracing::debug!(%cluster, "OTLP metrics export timed out"),
            }
        });
    }
}
