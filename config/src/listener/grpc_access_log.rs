//! The HTTP gRPC access logger (`envoy.access_loggers.http_grpc`, Envoy's
//! access log service client): each entry becomes an `HTTPAccessLogEntry`,
//! batched per worker and sent on a long-lived `StreamAccessLogs` stream
//! through a cluster.

use crate::config_source;
use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::extensions::access_loggers::grpc::v3::HttpGrpcAccessLogConfig;
use std::time::Duration;

/// Fields of the logger's message courier implements; the common config's are
/// in [`super::otel_access_log::SUPPORT`] (`filter_state_objects_to_log`,
/// `grpc_stream_retry_policy` and `custom_tags` are refused by their absence).
pub(crate) const SUPPORT: &[Support] = &[(
    "envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig",
    &[
        "common_config",
        "additional_request_headers_to_log",
        "additional_response_headers_to_log",
        "additional_response_trailers_to_log",
    ],
)];

/// Envoy's default `buffer_flush_interval`.
const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Envoy's default `buffer_size_bytes`.
const DEFAULT_BUFFER_BYTES: u32 = 16384;

/// A validated HTTP gRPC access logger.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpGrpcAccessLog {
    /// The service's cluster (`envoy_grpc.cluster_name`).
    pub cluster: String,
    /// `:authority` of the stream (the cluster name when unset).
    pub authority: String,
    /// `grpc_service.initial_metadata`, sent when the stream opens.
    pub initial_metadata: Vec<(String, String)>,
    /// `log_name`: the stream's identifier names it.
    pub log_name: String,
    /// `buffer_flush_interval` (1 s).
    pub buffer_flush_interval: Duration,
    /// `buffer_size_bytes` (16 KiB): a worker's batch this big goes at once.
    pub buffer_size_bytes: u32,
    /// `additional_request_headers_to_log`, lower-cased.
    pub request_headers: Vec<String>,
    /// `additional_response_headers_to_log`, lower-cased.
    pub response_headers: Vec<String>,
    /// `additional_response_trailers_to_log`, lower-cased.
    pub response_trailers: Vec<String>,
}

/// Translates the logger's `typed_config`.
pub fn translate(
    c: &HttpGrpcAccessLogConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<HttpGrpcAccessLog> {
    let before = ctx.error_count();
    let cp = path.field("common_config");
    let Some(common) = &c.common_config else {
        ctx.error(&cp, "is required");
        return None;
    };
    if common.log_name.is_empty() {
        // Envoy's PGV rule (`min_len: 1`).
        ctx.error(
            &cp.field("log_name"),
            "value length must be at least 1 characters",
        );
    }
    // Envoy 1.40 speaks only the v3 service (AUTO means v3).
    if common.transport_api_version == 1 {
        ctx.error(
            &cp.field("transport_api_version"),
            "V2 is not supported (as Envoy 1.40: use V3)",
        );
    }
    let gp = cp.field("grpc_service");
    let Some(g) = &common.grpc_service else {
        ctx.error(&gp, "is required");
        return None;
    };
    let service = config_source::envoy_grpc_only(g, &gp, "gRPC access log service", ctx)?;
    let buffer_flush_interval = match &common.buffer_flush_interval {
        Some(d) => core::duration(d, &cp.field("buffer_flush_interval"), ctx)?,
        None => DEFAULT_FLUSH_INTERVAL,
    };
    let lower = |v: &[String]| v.iter().map(|h| h.to_ascii_lowercase()).collect();
    (ctx.error_count() == before).then(|| HttpGrpcAccessLog {
        cluster: service.cluster,
        authority: service.authority,
        initial_metadata: service.initial_metadata,
        log_name: common.log_name.clone(),
        buffer_flush_interval,
        buffer_size_bytes: common
            .buffer_size_bytes
            .as_ref()
            .map_or(DEFAULT_BUFFER_BYTES, |v| v.value),
        request_headers: lower(&c.additional_request_headers_to_log),
        response_headers: lower(&c.additional_response_headers_to_log),
        response_trailers: lower(&c.additional_response_trailers_to_log),
    })
}

#[cfg(test)]
mod tests {
    use crate::listener::access_log::Sink;
    use crate::listener::test_util::{errors, listener, load};
    use serde_json::json;

    const T: &str =
        "type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig";

    fn log(config: serde_json::Value) -> serde_json::Value {
        let mut c = config;
        c["@type"] = json!(T);
        let mut b = listener(
            json!({"access_log": [{"name": "envoy.access_loggers.http_grpc", "typed_config": c}]}),
        );
        b["static_resources"]["clusters"] =
            json!([{"name": "c", "load_assignment": {"cluster_name": "c"}}]);
        b
    }

    #[test]
    fn a_logger_loads_with_envoys_defaults() {
        let b = load(&log(json!({
            "common_config": {"log_name": "als", "transport_api_version": "V3",
                "grpc_service": {"envoy_grpc": {"cluster_name": "c"}}},
            "additional_request_headers_to_log": ["X-A"]
        })))
        .unwrap();
        let Sink::HttpGrpc(g) = &b.listeners[0].access_log[0].sink else {
            panic!("not http_grpc");
        };
        assert_eq!(g.log_name, "als");
        assert_eq!(g.cluster, "c");
        assert_eq!(g.buffer_flush_interval, super::DEFAULT_FLUSH_INTERVAL);
        assert_eq!(g.buffer_size_bytes, 16384);
        assert_eq!(g.request_headers, ["x-a"]);
    }

    #[test]
    fn what_is_not_built_is_refused_at_its_path() {
        let p = "static_resources.listeners[0].access_log[0].typed_config.common_config";
        let e = errors(&log(json!({
            "common_config": {"log_name": "", "transport_api_version": "V2",
                "grpc_service": {"envoy_grpc": {"cluster_name": "c"}},
                "filter_state_objects_to_log": ["x"]}
        })));
        assert_eq!(
            e,
            [
                format!(
                    "{p}.filter_state_objects_to_log: filter_state_objects_to_log is not supported"
                ),
                format!("{p}.log_name: value length must be at least 1 characters"),
                format!("{p}.transport_api_version: V2 is not supported (as Envoy 1.40: use V3)"),
            ]
        );
    }
}
