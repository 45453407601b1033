//! `RouteAction.request_mirror_policies`: copies of a route's requests sent to
//! other clusters, fire and forget (Envoy's shadowing).

use super::Settings;
use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::route::v3 as pb;

/// One `RequestMirrorPolicy`.
#[derive(Debug, Clone, PartialEq)]
pub struct MirrorPolicy {
    /// The cluster the copies go to.
    pub cluster: String,
    /// `runtime_fraction.default_value` as a probability; `None`: every request.
    pub fraction: Option<f64>,
    /// Append `-shadow` to the copy's host (unless
    /// `disable_shadow_host_suffix_append`).
    pub shadow_suffix: bool,
}

/// Translates `request_mirror_policies` (`path`). `cluster_header`,
/// `request_headers_mutations`, `host_rewrite_literal`, `trace_sampled` and a
/// fraction's `runtime_key` are refused by the support table.
pub(super) fn translate(
    list: &[pb::route_action::RequestMirrorPolicy],
    path: &Path<'_>,
    settings: &Settings,
    ctx: &mut Ctx,
) -> Vec<MirrorPolicy> {
    list.iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let p = path.index(i);
            if m.cluster.is_empty() {
                // Envoy's rule: exactly one of cluster and cluster_header.
                ctx.error(&p.field("cluster"), "must not be empty");
                return None;
            }
            if settings.validate_clusters && ctx.cluster_known(&m.cluster) == Some(false) {
                // Envoy's wording.
                ctx.error(
                    &p.field("cluster"),
                    format!("unknown shadow cluster '{}'", m.cluster),
                );
            }
            let fraction = m.runtime_fraction.as_ref().map(|f| match &f.default_value {
                Some(v) => core::fractional_percent(v),
                None => {
                    // PGV: required.
                    ctx.error(&p.field("runtime_fraction.default_value"), "is required");
                    0.0
                }
            });
            Some(MirrorPolicy {
                cluster: m.cluster.clone(),
                fraction,
                shadow_suffix: !m.disable_shadow_host_suffix_append,
            })
        })
        .collect()
}

/// A copy's `:authority`: Envoy's `shadowAppendedHost`, `-shadow` after the
/// host name and before any port (`a.com:80` -> `a.com-shadow:80`).
pub fn shadow_host(host: &str) -> String {
    match host.rsplit_once(':') {
        // An IPv6 literal without a port ends in `]`.
        Some((h, port)) if !port.contains(']') && port.bytes().all(|b| b.is_ascii_digit()) => {
            format!("{h}-shadow:{port}")
        }
        _ => format!("{host}-shadow"),
    }
}
