//! Bootstrap `stats_sinks` and `stats_flush_interval`: where courier's counters
//! and gauges go on every flush, as Envoy's `envoy.stat_sinks.statsd`,
//! `envoy.stat_sinks.metrics_service` and `envoy.stat_sinks.open_telemetry` sinks
//! send them. Other sinks, and the
//! fields of these that change what is sent in ways courier does not implement,
//! are refused with their path.

use crate::config_source;
use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::metrics::v3 as pb;
use envoy_types::pb::envoy::extensions::stat_sinks::open_telemetry::v3 as otel_pb;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Fields of the sink messages courier implements. `tcp_cluster_name` (statsd
/// over a cluster's TCP connections), `emit_tags_as_labels`, `histogram_emit_mode`
/// and `batch_size` are refused by their absence.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.config.metrics.v3.StatsSink",
        &["name", "typed_config"],
    ),
    ("envoy.config.metrics.v3.StatsdSink", &["address", "prefix"]),
    (
        "envoy.config.metrics.v3.MetricsServiceConfig",
        &[
            "grpc_service",
            "transport_api_version",
            "report_counters_as_deltas",
        ],
    ),
    // `report_histograms_as_deltas` (courier's sinks send no histograms),
    // `custom_metric_conversions`, `max_data_points_per_request` and `http_service`
    // are refused by their absence.
    (
        "envoy.extensions.stat_sinks.open_telemetry.v3.SinkConfig",
        &[
            "grpc_service",
            "resource_detectors",
            "report_counters_as_deltas",
            "emit_tags_as_attributes",
            "use_tag_extracted_name",
            "prefix",
        ],
    ),
];

/// Envoy's default `stats_flush_interval`.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(5);

/// A stats sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatsSink {
    /// `envoy.stat_sinks.statsd`: statsd lines over UDP.
    Statsd {
        /// Where the datagrams go.
        address: SocketAddr,
        /// The names' prefix (`envoy` when unset).
        prefix: String,
    },
    /// `envoy.stat_sinks.metrics_service`: `StreamMetrics` over gRPC.
    MetricsService {
        /// The service's cluster (`envoy_grpc`).
        cluster: String,
        /// `:authority` of the stream (the cluster's name when unset).
        authority: String,
        /// `grpc_service.initial_metadata`.
        initial_metadata: Vec<(String, String)>,
        /// `report_counters_as_deltas`: counters as their change since the last
        /// flush rather than their value.
        counters_as_deltas: bool,
    },
    /// `envoy.stat_sinks.open_telemetry`: an OTLP `Export` call per flush.
    OpenTelemetry(OtlpSink),
}

/// The `envoy.stat_sinks.open_telemetry` sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpSink {
    /// The collector's cluster (`envoy_grpc`).
    pub cluster: String,
    /// `:authority` of the calls (the cluster's name when unset).
    pub authority: String,
    /// `grpc_service.initial_metadata`.
    pub initial_metadata: Vec<(String, String)>,
    /// Resource attributes from the `static_config` detectors.
    pub resource: Vec<(String, String)>,
    /// `report_counters_as_deltas`: DELTA sums instead of CUMULATIVE ones.
    pub counters_as_deltas: bool,
    /// `emit_tags_as_attributes` (default true): the stat's tags as attributes.
    pub emit_tags: bool,
    /// `use_tag_extracted_name` (default true): the metric is named by the
    /// tag-extracted name rather than the full one.
    pub tag_extracted_name: bool,
    /// `prefix`, with its `.` (empty when unset).
    pub prefix: String,
}

/// Translates `stats_sinks`.
pub fn translate(sinks: &[pb::StatsSink], path: &Path<'_>, ctx: &mut Ctx) -> Vec<StatsSink> {
    use pb::stats_sink::ConfigType;
    use prost::Name;
    let mut out = Vec::with_capacity(sinks.len());
    for (i, s) in sinks.iter().enumerate() {
        let p = path.index(i);
        let tp = p.field("typed_config");
        let Some(ConfigType::TypedConfig(any)) = &s.config_type else {
            ctx.error(&tp, "is required");
            continue;
        };
        // Found by the config's type, as Envoy finds the sink's factory.
        let sink = if any.type_url == pb::StatsdSink::type_url() {
            core::unpack::<pb::StatsdSink>(any, &tp, ctx).and_then(|c| statsd(&c, &tp, ctx))
        } else if any.type_url == otel_pb::SinkConfig::type_url() {
            core::unpack::<otel_pb::SinkConfig>(any, &tp, ctx).and_then(|c| otlp(&c, &tp, ctx))
        } else if any.type_url == pb::MetricsServiceConfig::type_url() {
            core::unpack::<pb::MetricsServiceConfig>(any, &tp, ctx)
                .and_then(|c| metrics_service(&c, &tp, ctx))
        } else {
            ctx.unsupported(
                &p.field("name"),
                format!(
                    "stats sink {} ({}; envoy.stat_sinks.statsd, envoy.stat_sinks.metrics_service and envoy.stat_sinks.open_telemetry are implemented)",
                    s.name, any.type_url
                ),
            );
            None
        };
        out.extend(sink);
    }
    out
}

fn statsd(c: &pb::StatsdSink, path: &Path<'_>, ctx: &mut Ctx) -> Option<StatsSink> {
    use envoy_types::pb::envoy::config::core::v3::address::Address as A;
    use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
    use pb::statsd_sink::StatsdSpecifier as S;
    let ap = path.field("address");
    let sa = match &c.statsd_specifier {
        Some(S::Address(a)) => match &a.address {
            Some(A::SocketAddress(sa)) => sa,
            _ => {
                ctx.unsupported(&ap, "a statsd address other than socket_address");
                return None;
            }
        },
        // Refused by the support walker.
        Some(S::TcpClusterName(_)) => return None,
        None => {
            ctx.error(path, "one of address or tcp_cluster_name is required");
            return None;
        }
    };
    let sp = ap.field("socket_address");
    // The sink sends UDP datagrams to the address, whatever its `protocol` says
    // (Istio's bootstraps leave it TCP), and takes an IP, not a name.
    let Ok(ip) = sa.address.parse::<IpAddr>() else {
        ctx.error(
            &sp.field("address"),
            format!("\"{}\" is not an IP address", sa.address),
        );
        return None;
    };
    let port = match &sa.port_specifier {
        Some(PortSpecifier::PortValue(p)) => match u16::try_from(*p) {
            Ok(p) => p,
            Err(_) => {
                ctx.error(&sp.field("port_value"), format!("{p} is not a port"));
                return None;
            }
        },
        _ => {
            ctx.unsupported(&sp.field("named_port"), "named_port");
            return None;
        }
    };
    Some(StatsSink::Statsd {
        address: SocketAddr::new(ip, port),
        prefix: if c.prefix.is_empty() {
            "envoy".to_string()
        } else {
            c.prefix.clone()
        },
    })
}

fn metrics_service(
    c: &pb::MetricsServiceConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<StatsSink> {
    if c.transport_api_version == envoy_types::pb::envoy::config::core::v3::ApiVersion::V2 as i32 {
        ctx.unsupported(&path.field("transport_api_version"), "the v2 API");
    }
    let gp = path.field("grpc_service");
    let Some(g) = c.grpc_service.as_ref() else {
        ctx.error(&gp, "is required");
        return None;
    };
    let service = config_source::envoy_grpc_only(g, &gp, "metrics service stream", ctx)?;
    Some(StatsSink::MetricsService {
        authority: service.authority,
        cluster: service.cluster,
        initial_metadata: service.initial_metadata,
        counters_as_deltas: core::bool_or(c.report_counters_as_deltas.as_ref(), false),
    })
}

fn otlp(c: &otel_pb::SinkConfig, path: &Path<'_>, ctx: &mut Ctx) -> Option<StatsSink> {
    use otel_pb::sink_config::ProtocolSpecifier as P;
    let gp = path.field("grpc_service");
    let g = match &c.protocol_specifier {
        Some(P::GrpcService(g)) => g,
        // `http_service` is refused by the support walker.
        Some(_) => return None,
        None => {
            ctx.error(path, "one of grpc_service or http_service is required");
            return None;
        }
    };
    let service = config_source::envoy_grpc_only(g, &gp, "OpenTelemetry stats sink", ctx)?;
    let mut resource: Vec<(String, String)> = Vec::new();
    crate::tracing::detect_resource(
        &c.resource_detectors,
        &path.field("resource_detectors"),
        &mut resource,
        ctx,
    );
    Some(StatsSink::OpenTelemetry(OtlpSink {
        authority: service.authority,
        cluster: service.cluster,
        initial_metadata: service.initial_metadata,
        resource,
        counters_as_deltas: c.report_counters_as_deltas,
        emit_tags: core::bool_or(c.emit_tags_as_attributes.as_ref(), true),
        tag_extracted_name: core::bool_or(c.use_tag_extracted_name.as_ref(), true),
        prefix: if c.prefix.is_empty() {
            String::new()
        } else {
            format!("{}.", c.prefix)
        },
    }))
}

/// Translates `stats_flush_interval` (Envoy: 1 ms to 300 s, 5 s when unset).
pub fn flush_interval(
    d: Option<&envoy_types::pb::google::protobuf::Duration>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Duration {
    let Some(d) = d else {
        return DEFAULT_FLUSH_INTERVAL;
    };
    let Some(v) = core::duration(d, path, ctx) else {
        return DEFAULT_FLUSH_INTERVAL;
    };
    if v < Duration::from_millis(1) || v >= Duration::from_secs(300) {
        ctx.error(path, "must be at least 1ms and less than 300s");
        return DEFAULT_FLUSH_INTERVAL;
    }
    v
}

/// Checks `stats_eviction_interval`: a multiple of the flush interval, as
/// Envoy requires. There is nothing more to it for courier: Envoy evicts
/// unused stats only from scopes created evictable, and none of the stats
/// Envoy itself (or courier) keeps are, so every stat stays listed, as in
/// Envoy 1.40 (`tests/stats_sinks_differential.rs` shows it).
pub fn check_eviction_interval(
    eviction: Option<&envoy_types::pb::envoy::config::bootstrap::v3::bootstrap::StatsEviction>,
    flush: Duration,
    path: &Path<'_>,
    ctx: &mut Ctx,
) {
    use envoy_types::pb::envoy::config::bootstrap::v3::bootstrap::StatsEviction;
    let Some(StatsEviction::StatsEvictionInterval(d)) = eviction else {
        return;
    };
    let Some(v) = core::duration(d, path, ctx) else {
        return;
    };
    if v.as_nanos() % flush.as_nanos() != 0 {
        ctx.error(
            path,
            "stats_eviction_interval must be a multiple of stats_flush_interval",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listener::test_util::{errors, load};
    use serde_json::{Value, json};

    fn with_sinks(sinks: Value) -> Value {
        json!({"stats_sinks": sinks, "stats_flush_interval": "0.5s",
            "static_resources": {"clusters": [{"name": "envoy_metrics_service",
                "load_assignment": {"cluster_name": "envoy_metrics_service", "endpoints": [{"lb_endpoints": [
                    {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 15000}}}}]}]}}]}})
    }

    #[test]
    fn eviction_interval_a_multiple_of_the_flush_interval() {
        // Istio's `stats_eviction_interval` and `stats_interval` goldens.
        assert!(load(&json!({"stats_eviction_interval": "10s"})).is_ok());
        assert!(
            load(&json!({"stats_flush_interval": "10s", "stats_eviction_interval": "20s"})).is_ok()
        );
        for (b, path) in [
            (
                json!({"stats_eviction_interval": "7s"}),
                "stats_eviction_interval",
            ),
            (
                json!({"stats_flush_interval": "2s", "stats_eviction_interval": "3s"}),
                "stats_eviction_interval",
            ),
        ] {
            assert_eq!(
                errors(&b),
                vec![format!(
                    "{path}: stats_eviction_interval must be a multiple of stats_flush_interval"
                )]
            );
        }
    }

    #[test]
    fn istio_sinks_and_the_flush_interval() {
        let b = load(&with_sinks(json!([
            {"name": "envoy.stat_sinks.metrics_service", "typed_config": {
                "@type": "type.googleapis.com/envoy.config.metrics.v3.MetricsServiceConfig",
                "transport_api_version": "V3",
                "grpc_service": {"envoy_grpc": {"cluster_name": "envoy_metrics_service"}}}},
            {"name": "envoy.stat_sinks.statsd", "typed_config": {
                "@type": "type.googleapis.com/envoy.config.metrics.v3.StatsdSink",
                "address": {"socket_address": {"address": "10.1.1.1", "port_value": 9125}}}}
        ])))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.stats_flush_interval, Duration::from_millis(500));
        assert_eq!(
            b.stats_sinks,
            vec![
                StatsSink::MetricsService {
                    cluster: "envoy_metrics_service".into(),
                    authority: "envoy_metrics_service".into(),
                    initial_metadata: Vec::new(),
                    counters_as_deltas: false,
                },
                StatsSink::Statsd {
                    address: "10.1.1.1:9125".parse().unwrap(),
                    prefix: "envoy".into(),
                },
            ]
        );
        assert_eq!(
            load(&json!({})).unwrap().stats_flush_interval,
            DEFAULT_FLUSH_INTERVAL
        );
    }

    #[test]
    fn refusals_name_their_paths() {
        let statsd = "type.googleapis.com/envoy.config.metrics.v3.StatsdSink";
        let cases = [
            (
                json!([{"name": "s", "typed_config": {"@type": statsd, "tcp_cluster_name": "c"}}]),
                "stats_sinks[0].typed_config.tcp_cluster_name: tcp_cluster_name is not supported",
            ),
            (
                json!([{"name": "s", "typed_config": {"@type": statsd,
                    "address": {"socket_address": {"address": "statsd.local", "port_value": 1}}}}]),
                "stats_sinks[0].typed_config.address.socket_address.address: \"statsd.local\" is not an IP address",
            ),
            (
                json!([{"name": "m", "typed_config": {
                    "@type": "type.googleapis.com/envoy.config.metrics.v3.MetricsServiceConfig",
                    "emit_tags_as_labels": true,
                    "grpc_service": {"envoy_grpc": {"cluster_name": "envoy_metrics_service"}}}}]),
                "stats_sinks[0].typed_config.emit_tags_as_labels: emit_tags_as_labels is not supported",
            ),
            (
                json!([{"name": "envoy.stat_sinks.dog_statsd", "typed_config": {
                    "@type": "type.googleapis.com/envoy.config.metrics.v3.DogStatsdSink",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": 8125}}}}]),
                "stats_sinks[0].name: stats sink envoy.stat_sinks.dog_statsd (type.googleapis.com/envoy.config.metrics.v3.DogStatsdSink; envoy.stat_sinks.statsd, envoy.stat_sinks.metrics_service and envoy.stat_sinks.open_telemetry are implemented) is not supported",
            ),
            (
                json!([{"name": "o", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.stat_sinks.open_telemetry.v3.SinkConfig",
                    "report_histograms_as_deltas": true,
                    "grpc_service": {"envoy_grpc": {"cluster_name": "envoy_metrics_service"}}}}]),
                "stats_sinks[0].typed_config.report_histograms_as_deltas: report_histograms_as_deltas is not supported",
            ),
        ];
        for (sinks, want) in cases {
            assert_eq!(errors(&with_sinks(sinks)), vec![want.to_string()]);
        }
        let mut b = with_sinks(json!([]));
        b["stats_flush_interval"] = json!("300s");
        assert_eq!(
            errors(&b),
            vec!["stats_flush_interval: must be at least 1ms and less than 300s".to_string()]
        );
    }
}
