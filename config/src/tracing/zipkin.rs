//! The `envoy.tracers.zipkin` provider (`envoy.config.trace.v3.ZipkinConfig`): spans
//! reported as Zipkin v2 JSON to a collector cluster, B3 propagation.

use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::trace::v3 as trace_pb;

/// Fields of `ZipkinConfig` courier implements. `split_spans_for_request` and
/// `trace_context_option` (W3C propagation beside B3) are refused by their absence.
pub(crate) const SUPPORT: &[crate::support::Support] = &[(
    "envoy.config.trace.v3.ZipkinConfig",
    &[
        "collector_cluster",
        "collector_endpoint",
        "trace_id_128bit",
        "shared_span_context",
        "collector_endpoint_version",
        "collector_hostname",
    ],
)];

/// The `envoy.tracers.zipkin` provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zipkin {
    /// `collector_cluster`: where reports go.
    pub cluster: String,
    /// `collector_endpoint`: the reports' path.
    pub endpoint: String,
    /// `collector_hostname`: the reports' `host` (the cluster's name when unset).
    pub hostname: String,
    /// `trace_id_128bit`: new traces get 128-bit ids.
    pub trace_id_128bit: bool,
    /// `shared_span_context` (default true): a server span takes its caller's span
    /// id rather than a new one, and is reported with `"shared": true`.
    pub shared_span_context: bool,
}

/// Translates a `ZipkinConfig`, with Envoy's refusals.
pub(crate) fn translate(
    c: &trace_pb::ZipkinConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Zipkin> {
    use trace_pb::zipkin_config::CollectorEndpointVersion as V;
    if c.collector_cluster.is_empty() {
        // Envoy's driver: "Either collector_cluster or collector_service must be
        // specified"; courier's protos have no `collector_service`.
        ctx.error(&path.field("collector_cluster"), "must not be empty");
        return None;
    }
    if c.collector_endpoint.is_empty() {
        ctx.error(
            &path.field("collector_endpoint"),
            "must not be empty when collector_cluster is set",
        );
        return None;
    }
    let vp = path.field("collector_endpoint_version");
    match V::try_from(c.collector_endpoint_version) {
        Ok(V::HttpJson) => {}
        Ok(V::DeprecatedAndUnavailableDoNotUse) => {
            // Envoy: "hidden_envoy_deprecated_HTTP_JSON_V1 has been deprecated".
            ctx.error(
                &vp,
                "HTTP_JSON_V1 has been deprecated; use a non-default collector_endpoint_version",
            );
            return None;
        }
        Ok(V::HttpProto) => {
            ctx.unsupported(&vp, "collector_endpoint_version HTTP_PROTO (HTTP_JSON is)");
            return None;
        }
        Ok(V::Grpc) | Err(_) => {
            ctx.unsupported(&vp, "collector_endpoint_version GRPC (HTTP_JSON is)");
            return None;
        }
    }
    Some(Zipkin {
        cluster: c.collector_cluster.clone(),
        endpoint: c.collector_endpoint.clone(),
        hostname: if c.collector_hostname.is_empty() {
            c.collector_cluster.clone()
        } else {
            c.collector_hostname.clone()
        },
        trace_id_128bit: c.trace_id_128bit,
        shared_span_context: core::bool_or(c.shared_span_context.as_ref(), true),
    })
}
