//! The health check HTTP filter (`envoy.extensions.filters.http.health_check.v3.HealthCheck`):
//! which requests are health checks (`headers`, all of which must match) and
//! whether they are answered by the filter or passed to the upstream
//! (`pass_through_mode`). `cache_time` (a cache of the upstream's answers) and
//! `cluster_min_healthy_percentages` (answers from the clusters' host health)
//! are refused by the support table.

use crate::ctx::Ctx;
use crate::matcher::{self, HeaderMatcher};
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::extensions::filters::http::health_check::v3 as pb;

/// Fields of `HealthCheck` courier implements.
pub(crate) const SUPPORT: &[Support] = &[(
    "envoy.extensions.filters.http.health_check.v3.HealthCheck",
    &["pass_through_mode", "headers"],
)];

/// A validated `HealthCheck`.
#[derive(Debug, Clone)]
pub struct HealthCheck {
    /// `pass_through_mode`: health checks go on to the upstream (and are only
    /// answered here while the server fails its health checks).
    pub pass_through_mode: bool,
    /// `headers`: a request is a health check when all of them match.
    pub headers: Vec<HeaderMatcher>,
}

/// Translates a `HealthCheck`; `pass_through_mode` is required (Envoy's validation).
pub fn translate(m: &pb::HealthCheck, path: &Path<'_>, ctx: &mut Ctx) -> Option<HealthCheck> {
    let Some(pass_through_mode) = m.pass_through_mode.as_ref().map(|b| b.value) else {
        ctx.error(&path.field("pass_through_mode"), "is required");
        return None;
    };
    let hp = path.field("headers");
    let before = ctx.error_count();
    let headers: Vec<HeaderMatcher> = m
        .headers
        .iter()
        .enumerate()
        .filter_map(|(i, h)| matcher::header_matcher(h, &hp.index(i), ctx))
        .collect();
    (ctx.error_count() == before).then_some(HealthCheck {
        pass_through_mode,
        headers,
    })
}

#[cfg(test)]
#[path = "health_check_tests.rs"]
mod tests;
