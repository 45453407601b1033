//! Slow start (`slow_start_config` of the RoundRobin and LeastRequest
//! policies, typed or legacy): a host's weight ramps up over a window after it
//! joins the cluster or turns healthy by active health checking.

use super::values;
use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::cluster::v3::cluster::SlowStartConfig as LegacyProto;
use envoy_types::pb::envoy::config::core::v3::RuntimeDouble;
use envoy_types::pb::envoy::extensions::load_balancing_policies::common::v3::SlowStartConfig as TypedProto;
use envoy_types::pb::envoy::r#type::v3::Percent;
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use std::time::Duration;

/// Envoy's default `min_weight_percent`.
pub const DEFAULT_MIN_WEIGHT_PERCENT: f64 = 10.0;
/// Envoy's default (and fallback) `aggression`.
pub const DEFAULT_AGGRESSION: f64 = 1.0;

/// A cluster's slow start settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlowStart {
    /// How long a host stays in slow start (at least 1 ms: Envoy counts whole
    /// milliseconds, and a window of none disables slow start).
    pub window: Duration,
    /// `aggression.default_value`: the time factor is raised to `1 / aggression`.
    /// Envoy falls back to 1.0 for a value that is not positive, as here.
    pub aggression: f64,
    /// The least share of its weight a host in slow start gets, as a fraction
    /// (`min_weight_percent / 100`).
    pub min_weight: f64,
}

impl SlowStart {
    /// The factor a host's weight is scaled by `elapsed` after it entered slow
    /// start: Envoy's `max(min_weight, (max(1 ms, elapsed) / window)^(1 /
    /// aggression))` within the window, 1 after it.
    pub fn factor(&self, elapsed: Duration) -> f64 {
        // Envoy works in whole milliseconds.
        let elapsed_ms = elapsed.as_millis();
        let window_ms = self.window.as_millis();
        if elapsed_ms >= window_ms {
            return 1.0;
        }
        let time_factor = elapsed_ms.max(1) as f64 / window_ms as f64;
        let scaled = if self.aggression == 1.0 || time_factor == 1.0 {
            time_factor
        } else {
            time_factor.powf(1.0 / self.aggression)
        };
        scaled.max(self.min_weight)
    }
}

/// The typed policies' `slow_start_config`.
pub(super) fn typed(c: Option<&TypedProto>, path: &Path<'_>, ctx: &mut Ctx) -> Option<SlowStart> {
    let c = c?;
    translate(
        c.slow_start_window.as_ref(),
        c.aggression.as_ref(),
        c.min_weight_percent.as_ref(),
        &path.field("slow_start_config"),
        ctx,
    )
}

/// The legacy `round_robin_lb_config` / `least_request_lb_config`
/// `slow_start_config`.
pub(super) fn legacy(c: Option<&LegacyProto>, path: &Path<'_>, ctx: &mut Ctx) -> Option<SlowStart> {
    let c = c?;
    translate(
        c.slow_start_window.as_ref(),
        c.aggression.as_ref(),
        c.min_weight_percent.as_ref(),
        &path.field("slow_start_config"),
        ctx,
    )
}

fn translate(
    window: Option<&PbDuration>,
    aggression: Option<&RuntimeDouble>,
    min_weight_percent: Option<&Percent>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<SlowStart> {
    let min_weight = values::percent(
        min_weight_percent,
        DEFAULT_MIN_WEIGHT_PERCENT,
        &path.field("min_weight_percent"),
        ctx,
    ) / 100.0;
    // Envoy reads the runtime value at each pick and falls back to 1.0 (with
    // an error log) when it is not positive; only the default is read here
    // (a runtime_key is refused by the support table).
    let aggression = aggression
        .map(|a| a.default_value)
        .filter(|a| *a > 0.0 && a.is_finite())
        .unwrap_or(DEFAULT_AGGRESSION);
    let window = core::duration(window?, &path.field("slow_start_window"), ctx)?;
    // Envoy truncates the window to whole milliseconds; none disables slow
    // start.
    if window.as_millis() == 0 {
        return None;
    }
    Some(SlowStart {
        window,
        aggression,
        min_weight,
    })
}
