//! The `envoy.tracers.datadog` provider (`envoy.config.trace.v3.DatadogConfig`):
//! spans reported as msgpack to a Datadog agent through a cluster, Datadog and
//! W3C trace context propagation (Envoy 1.40 embeds dd-trace-cpp for this).
//!
//! dd-trace-cpp also reads `DD_*` environment variables (`DD_SERVICE`, `DD_ENV`,
//! `DD_TRACE_SAMPLE_RATE`, `DD_TRACE_PROPAGATION_STYLE`, ...), which then override
//! the config in Envoy; courier serves the config alone and reads none of them.

use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::trace::v3 as trace_pb;

/// Fields of `DatadogConfig` courier implements. `remote_config` (polling the
/// agent for sampling rules) is refused by its absence.
pub(crate) const SUPPORT: &[crate::support::Support] = &[(
    "envoy.config.trace.v3.DatadogConfig",
    &["collector_cluster", "service_name", "collector_hostname"],
)];

/// The service of a tracer whose `service_name` is empty (Envoy's).
pub const DEFAULT_SERVICE: &str = "envoy";

/// The `envoy.tracers.datadog` provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datadog {
    /// `collector_cluster`: the agent's cluster.
    pub cluster: String,
    /// `collector_hostname`: the reports' `host` (the cluster's name when unset).
    pub hostname: String,
    /// `service_name`: the spans' service (`envoy` when unset).
    pub service: String,
}

/// Translates a `DatadogConfig`, with Envoy's refusals.
pub(crate) fn translate(
    c: &trace_pb::DatadogConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Datadog> {
    let cp = path.field("collector_cluster");
    if c.collector_cluster.is_empty() {
        // The proto's `min_len: 1`.
        ctx.error(&cp, "must not be empty");
        return None;
    }
    // Envoy's driver checks the cluster exists (`checkCluster`, clusters added
    // through the API included), when the set of clusters is known here.
    if ctx.cluster_known(&c.collector_cluster) == Some(false) {
        ctx.error(&cp, format!("unknown cluster '{}'", c.collector_cluster));
        return None;
    }
    Some(Datadog {
        cluster: c.collector_cluster.clone(),
        hostname: if c.collector_hostname.is_empty() {
            c.collector_cluster.clone()
        } else {
            c.collector_hostname.clone()
        },
        service: if c.service_name.is_empty() {
            DEFAULT_SERVICE.to_string()
        } else {
            c.service_name.clone()
        },
    })
}
