//! `envoy.filters.http.admission_control`: requests rejected with a probability
//! that grows as the success rate over a sliding window falls below a
//! threshold. Runtime-backed fields take their `default_value` (a
//! `runtime_key` is refused by the support table: courier has no runtime layer
//! for them).

use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::extensions::filters::http::admission_control::v3 as pb;
use std::time::Duration;

/// Envoy's default `sampling_window`.
pub const DEFAULT_SAMPLING_WINDOW: Duration = Duration::from_secs(30);

/// A validated `AdmissionControl`.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionControl {
    /// `enabled` (default true): off, the filter passes everything, uncounted.
    pub enabled: bool,
    /// `sampling_window`, whole seconds (Envoy truncates it).
    pub sampling_window: Duration,
    /// `aggression` (default 1; below 1 counts as 1).
    pub aggression: f64,
    /// `sr_threshold` as a fraction (default 0.95; above 100% counts as 100%).
    pub sr_threshold: f64,
    /// `rps_threshold` (default 0): below this average rate nothing is
    /// rejected.
    pub rps_threshold: u32,
    /// `max_rejection_probability` as a fraction (default 0.8).
    pub max_rejection_probability: f64,
    /// What counts as a success.
    pub criteria: SuccessCriteria,
}

/// `success_criteria`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuccessCriteria {
    /// HTTP statuses that are successes, as `[start, end)` ranges; `None`:
    /// every status below 500 (Envoy's default).
    pub http: Option<Vec<(u16, u16)>>,
    /// gRPC statuses that are successes.
    pub grpc: Vec<u32>,
}

/// Envoy's default gRPC successes: every status but DEADLINE_EXCEEDED (4),
/// RESOURCE_EXHAUSTED (8), ABORTED (10), INTERNAL (13), UNAVAILABLE (14),
/// DATA_LOSS (15) and PERMISSION_DENIED (7).
const DEFAULT_GRPC_SUCCESS: &[u32] = &[0, 1, 2, 3, 5, 6, 9, 11, 12, 16];

impl SuccessCriteria {
    /// Whether an HTTP status is a success.
    pub fn http_success(&self, status: u16) -> bool {
        match &self.http {
            None => status < 500,
            Some(ranges) => ranges.iter().any(|&(s, e)| s <= status && status < e),
        }
    }

    /// Whether a gRPC status is a success.
    pub fn grpc_success(&self, status: u32) -> bool {
        self.grpc.contains(&status)
    }
}

/// Translates an `AdmissionControl` (`path` is its `typed_config`).
pub fn translate(
    c: &pb::AdmissionControl,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<AdmissionControl> {
    let before = ctx.error_count();
    let enabled = c
        .enabled
        .as_ref()
        .is_none_or(|f| f.default_value.as_ref().is_none_or(|v| v.value));
    let sampling_window = match &c.sampling_window {
        None => DEFAULT_SAMPLING_WINDOW,
        Some(d) => {
            let d = crate::core::duration(d, &path.field("sampling_window"), ctx)?;
            Duration::from_secs(d.as_secs())
        }
    };
    let aggression = c
        .aggression
        .as_ref()
        .map_or(1.0, |a| a.default_value)
        .max(1.0);
    let percent = |p: Option<&envoy_types::pb::envoy::config::core::v3::RuntimePercent>,
                   default: f64| {
        p.and_then(|p| p.default_value.as_ref())
            .map_or(default, |v| v.value)
    };
    let sr = percent(c.sr_threshold.as_ref(), 95.0);
    if sr < 1.0 {
        // Envoy's wording.
        ctx.error(
            &path.field("sr_threshold"),
            "Success rate threshold cannot be less than 1.0%.",
        );
    }
    let max_rejection = percent(c.max_rejection_probability.as_ref(), 80.0);
    let rps_threshold = c.rps_threshold.as_ref().map_or(0, |r| r.default_value);
    use pb::admission_control::EvaluationCriteria;
    let criteria = match &c.evaluation_criteria {
        Some(EvaluationCriteria::SuccessCriteria(s)) => {
            criteria(s, &path.field("success_criteria"), ctx)
        }
        None => {
            ctx.error(&path.field("evaluation_criteria"), "is required");
            return None;
        }
    };
    if ctx.error_count() > before {
        return None;
    }
    Some(AdmissionControl {
        enabled,
        sampling_window,
        aggression,
        sr_threshold: sr.min(100.0) / 100.0,
        rps_threshold,
        max_rejection_probability: max_rejection / 100.0,
        criteria,
    })
}

fn criteria(
    s: &pb::admission_control::SuccessCriteria,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> SuccessCriteria {
    let http = s.http_criteria.as_ref().map(|h| {
        let hc = path.field("http_criteria");
        let hp = hc.field("http_success_status");
        let mut out = Vec::new();
        for (i, r) in h.http_success_status.iter().enumerate() {
            // Envoy's check and wording.
            if r.start < 100 || r.end > 600 || r.start > r.end {
                ctx.error(
                    &hp.index(i),
                    format!("invalid HTTP range: [{}, {})", r.start, r.end),
                );
                continue;
            }
            // In range, so the casts keep the values.
            out.push((r.start as u16, r.end as u16));
        }
        out
    });
    let grpc = match &s.grpc_criteria {
        None => DEFAULT_GRPC_SUCCESS.to_vec(),
        Some(g) => {
            let gc = path.field("grpc_criteria");
            let gp = gc.field("grpc_success_status");
            for (i, &code) in g.grpc_success_status.iter().enumerate() {
                if code > 16 {
                    ctx.error(&gp.index(i), format!("invalid gRPC code {code}"));
                }
            }
            g.grpc_success_status.clone()
        }
    };
    SuccessCriteria { http, grpc }
}
