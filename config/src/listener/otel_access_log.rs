//! The OpenTelemetry access logger (`envoy.access_loggers.open_telemetry`):
//! each entry becomes an OTLP `LogRecord` whose `body` and `attributes` are
//! `AnyValue`s with format strings in their string values, batched per worker
//! and exported over gRPC (`LogsService/Export`) through a cluster.

use crate::config_source;
use crate::core;
use crate::ctx::Ctx;
use crate::format::{self, FormatString};
use crate::path::Path;
use crate::support::{ALL, Support};
use envoy_types::pb::envoy::extensions::access_loggers::open_telemetry::v3::OpenTelemetryAccessLogConfig;
use envoy_types::pb::opentelemetry::proto::common::v1::{AnyValue, KeyValueList, any_value};
use std::time::Duration;

/// Fields of the OpenTelemetry access logger's messages courier implements.
/// `http_service`, `resource_detectors`, `formatters`, `custom_tags` and
/// `filter_state_objects_to_log` are refused by their absence, as is the
/// common config's `grpc_stream_retry_policy`.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig",
        &[
            "common_config",
            "grpc_service",
            "disable_builtin_labels",
            "resource_attributes",
            "body",
            "attributes",
            "stat_prefix",
            "log_name",
            "buffer_flush_interval",
            "buffer_size_bytes",
        ],
    ),
    (
        "envoy.extensions.access_loggers.grpc.v3.CommonGrpcAccessLogConfig",
        &[
            "log_name",
            "grpc_service",
            "transport_api_version",
            "buffer_flush_interval",
            "buffer_size_bytes",
        ],
    ),
    ("opentelemetry.proto.common.v1.AnyValue", ALL),
    ("opentelemetry.proto.common.v1.KeyValue", ALL),
    ("opentelemetry.proto.common.v1.KeyValueList", ALL),
    ("opentelemetry.proto.common.v1.ArrayValue", ALL),
];

/// Envoy's default `buffer_flush_interval`.
const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Envoy's default `buffer_size_bytes`.
const DEFAULT_BUFFER_BYTES: u32 = 16_384;

/// An OTLP value: in `body` and `attributes` strings are format strings and
/// only strings, lists and key-value lists are allowed (as in Envoy); in
/// `resource_attributes` every value is taken as is.
#[derive(Debug, Clone, PartialEq)]
pub enum OtelValue {
    /// A string rendered per entry.
    Format(FormatString),
    /// A string taken as is.
    Text(String),
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A double.
    Double(f64),
    /// Bytes.
    Bytes(Vec<u8>),
    /// A list.
    Array(Vec<OtelValue>),
    /// A key-value list.
    KvList(Vec<(String, OtelValue)>),
    /// An `AnyValue` with no value set.
    Empty,
}

/// A validated OpenTelemetry access logger.
#[derive(Debug, Clone, PartialEq)]
pub struct OtelAccessLog {
    /// The collector's cluster (`envoy_grpc.cluster_name`).
    pub cluster: String,
    /// `:authority` of the export calls (the cluster name when unset).
    pub authority: String,
    /// `grpc_service.initial_metadata`, sent with every call.
    pub initial_metadata: Vec<(String, String)>,
    /// `log_name` (the `log_name` resource attribute).
    pub log_name: String,
    /// `buffer_flush_interval` (1 s).
    pub buffer_flush_interval: Duration,
    /// `buffer_size_bytes` (16 KiB): a worker's batch this big goes at once.
    pub buffer_size_bytes: u32,
    /// `body`, if set.
    pub body: Option<OtelValue>,
    /// `attributes`, in order.
    pub attributes: Vec<(String, OtelValue)>,
    /// `resource_attributes`, in order (after the built-in labels).
    pub resource_attributes: Vec<(String, OtelValue)>,
    /// `disable_builtin_labels`: no `log_name`, `zone_name`, `cluster_name`,
    /// `node_name` resource attributes.
    pub disable_builtin_labels: bool,
    /// `stat_prefix`: stats under `access_logs.open_telemetry_access_log.<prefix>`.
    pub stat_prefix: String,
}

/// Translates the logger's `typed_config`.
pub fn translate(
    c: &OpenTelemetryAccessLogConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<OtelAccessLog> {
    #[allow(deprecated)]
    let common = c.common_config.as_ref();
    let cp = path.field("common_config");
    let (service, service_path) = match (
        c.grpc_service.as_ref(),
        common.and_then(|c| c.grpc_service.as_ref()),
    ) {
        (Some(_), Some(_)) => {
            ctx.error(
                path,
                "only one of common_config, grpc_service or http_service may be set",
            );
            return None;
        }
        (Some(g), None) => (g, path.field("grpc_service")),
        (None, Some(g)) => (g, cp.field("grpc_service")),
        (None, None) => {
            ctx.error(
                path,
                "grpc_service is required (http_service is not supported)",
            );
            return None;
        }
    };
    let service =
        config_source::envoy_grpc_only(service, &service_path, "OpenTelemetry access logger", ctx)?;
    let log_name = if c.log_name.is_empty() {
        common.map(|c| c.log_name.clone()).unwrap_or_default()
    } else {
        c.log_name.clone()
    };
    let interval = c
        .buffer_flush_interval
        .as_ref()
        .map(|d| (d, path.field("buffer_flush_interval")))
        .or_else(|| {
            common
                .and_then(|c| c.buffer_flush_interval.as_ref())
                .map(|d| (d, cp.field("buffer_flush_interval")))
        });
    let buffer_flush_interval = match interval {
        Some((d, p)) => core::duration(d, &p, ctx)?,
        None => DEFAULT_FLUSH_INTERVAL,
    };
    let buffer_size_bytes = c
        .buffer_size_bytes
        .as_ref()
        .or_else(|| common.and_then(|c| c.buffer_size_bytes.as_ref()))
        .map_or(DEFAULT_BUFFER_BYTES, |v| v.value);
    let body = match &c.body {
        Some(v) => Some(value(v, &path.field("body"), true, ctx)?),
        None => None,
    };
    let attributes = match &c.attributes {
        Some(l) => list(l, &path.field("attributes"), true, ctx)?,
        None => Vec::new(),
    };
    let resource_attributes = match &c.resource_attributes {
        Some(l) => list(l, &path.field("resource_attributes"), false, ctx)?,
        None => Vec::new(),
    };
    Some(OtelAccessLog {
        cluster: service.cluster,
        authority: service.authority,
        initial_metadata: service.initial_metadata,
        log_name,
        buffer_flush_interval,
        buffer_size_bytes,
        body,
        attributes,
        resource_attributes,
        disable_builtin_labels: c.disable_builtin_labels,
        stat_prefix: c.stat_prefix.clone(),
    })
}

fn list(
    l: &KeyValueList,
    path: &Path<'_>,
    formatted: bool,
    ctx: &mut Ctx,
) -> Option<Vec<(String, OtelValue)>> {
    let vp = path.field("values");
    let mut out = Vec::with_capacity(l.values.len());
    let mut ok = true;
    for (i, kv) in l.values.iter().enumerate() {
        let v = match &kv.value {
            Some(v) => value(v, &vp.index(i).field("value"), formatted, ctx),
            None => Some(OtelValue::Empty),
        };
        match v {
            Some(v) => out.push((kv.key.clone(), v)),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn value(v: &AnyValue, path: &Path<'_>, formatted: bool, ctx: &mut Ctx) -> Option<OtelValue> {
    use any_value::Value as V;
    let nested = matches!(
        v.value,
        Some(V::StringValue(_) | V::KvlistValue(_) | V::ArrayValue(_))
    );
    if formatted && !nested {
        // Envoy's formatter takes only these (its message, word for word).
        ctx.error(
            path,
            "Only string values, nested key value lists and array values are supported in OpenTelemetry access log format.",
        );
        return None;
    }
    Some(match &v.value {
        None => OtelValue::Empty,
        Some(V::StringValue(s)) if formatted => match format::parse(s) {
            Ok(f) => OtelValue::Format(f),
            Err(e) => {
                ctx.error(&path.field("string_value"), e);
                return None;
            }
        },
        Some(V::StringValue(s)) => OtelValue::Text(s.clone()),
        Some(V::BoolValue(b)) => OtelValue::Bool(*b),
        Some(V::IntValue(n)) => OtelValue::Int(*n),
        Some(V::DoubleValue(d)) => OtelValue::Double(*d),
        Some(V::BytesValue(b)) => OtelValue::Bytes(b.clone()),
        Some(V::ArrayValue(a)) => {
            let av = path.field("array_value");
            let ap = av.field("values");
            let mut out = Vec::with_capacity(a.values.len());
            for (i, v) in a.values.iter().enumerate() {
                out.push(value(v, &ap.index(i), formatted, ctx)?);
            }
            OtelValue::Array(out)
        }
        Some(V::KvlistValue(l)) => {
            OtelValue::KvList(list(l, &path.field("kvlist_value"), formatted, ctx)?)
        }
        Some(V::StringValueStrindex(_)) => {
            // An index into a profile's string table: meaningless in a log.
            ctx.unsupported(
                &path.field("string_value_strindex"),
                "string_value_strindex",
            );
            return None;
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::listener::test_util::errors;
    use serde_json::json;

    fn with_log(config: serde_json::Value) -> serde_json::Value {
        let mut c = json!({
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig",
            "grpc_service": {"envoy_grpc": {"cluster_name": "otel"}},
        });
        if let (Some(c), Some(extra)) = (c.as_object_mut(), config.as_object()) {
            c.extend(extra.clone());
        }
        json!({"static_resources": {
            "listeners": [{"name": "l", "address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}},
                "filter_chains": [{"filters": [{"name": "t", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                    "stat_prefix": "t", "cluster": "otel",
                    "access_log": [{"name": "o", "typed_config": c}]}}]}]}],
            "clusters": [{"name": "otel", "load_assignment": {"cluster_name": "otel", "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 4317}}}}]}]}}]}})
    }

    #[test]
    fn formats_take_strings_and_lists_only() {
        const T: &str = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.access_log[0].typed_config";
        assert_eq!(
            errors(&with_log(json!({"body": {"string_value": "%PROTOCOL%"}}))),
            Vec::<String>::new()
        );
        assert_eq!(
            errors(&with_log(
                json!({"body": {"kvlist_value": {"values": [{"key": "n", "value": {"int_value": 1}}]}}})
            )),
            [format!(
                "{T}.body.kvlist_value.values[0].value: Only string values, nested key value lists and array values are supported in OpenTelemetry access log format."
            )]
        );
        // Resource attributes are not formatted: any value goes.
        assert_eq!(
            errors(&with_log(
                json!({"resource_attributes": {"values": [{"key": "n", "value": {"int_value": 1}}]}})
            )),
            Vec::<String>::new()
        );
        assert_eq!(
            errors(&with_log(
                json!({"custom_tags": [{"tag": "a", "literal": {"value": "b"}}]})
            )),
            [format!("{T}.custom_tags: custom_tags is not supported")]
        );
    }
}
