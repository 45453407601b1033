//! Outlier detection (`outlier_detection`), with Envoy's defaults applied.

use super::values;
use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::cluster::v3 as pb;
use envoy_types::pb::google::protobuf::UInt32Value;
use std::time::Duration;

/// Envoy's default `max_ejection_time` floor: `max(300 s, base_ejection_time)`.
pub const DEFAULT_MAX_EJECTION_TIME: Duration = Duration::from_secs(300);

/// Outlier detection of a cluster. Every `enforcing_*` value is the percentage
/// chance (0-100) that a detected outlier is actually ejected.
#[derive(Debug, Clone, PartialEq)]
pub struct OutlierDetection {
    /// Consecutive 5xx (and, unsplit, local-origin failures) that eject a host (5).
    pub consecutive_5xx: u32,
    /// Period of the ejection sweep and success-rate analysis (10 s).
    pub interval: Duration,
    /// Base ejection time, multiplied by the number of back-to-back ejections (30 s).
    pub base_ejection_time: Duration,
    /// Cap on an ejection's duration (`max(300 s, base_ejection_time)` by default).
    pub max_ejection_time: Duration,
    /// Random extra ejection time, up to this (0).
    pub max_ejection_time_jitter: Duration,
    /// Maximum percentage of the cluster's hosts ejected at once (10).
    pub max_ejection_percent: u32,
    /// Eject one host even when `max_ejection_percent` would forbid it (false).
    pub always_eject_one_host: bool,
    /// `enforcing_consecutive_5xx` (100).
    pub enforcing_consecutive_5xx: u32,
    /// Consecutive 502/503/504 that eject a host (5).
    pub consecutive_gateway_failure: u32,
    /// `enforcing_consecutive_gateway_failure` (0).
    pub enforcing_consecutive_gateway_failure: u32,
    /// Count local-origin failures (connect failure, reset, timeout) apart from HTTP codes (false).
    pub split_external_local_origin_errors: bool,
    /// Consecutive local-origin failures that eject a host, when split (5).
    pub consecutive_local_origin_failure: u32,
    /// `enforcing_consecutive_local_origin_failure` (100).
    pub enforcing_consecutive_local_origin_failure: u32,
    /// `enforcing_success_rate` (100).
    pub enforcing_success_rate: u32,
    /// `enforcing_local_origin_success_rate` (100).
    pub enforcing_local_origin_success_rate: u32,
    /// Hosts with enough volume needed for success-rate analysis (5).
    pub success_rate_minimum_hosts: u32,
    /// Requests in an interval for a host to count in success-rate analysis (100).
    pub success_rate_request_volume: u32,
    /// Ejection threshold is `mean - stdev_factor x stdev`; this is the proto's
    /// `success_rate_stdev_factor` divided by 1000 (1.9).
    pub success_rate_stdev_factor: f64,
    /// Failure percentage at or above which a host is ejected (85).
    pub failure_percentage_threshold: u32,
    /// `enforcing_failure_percentage` (0).
    pub enforcing_failure_percentage: u32,
    /// `enforcing_failure_percentage_local_origin` (0).
    pub enforcing_failure_percentage_local_origin: u32,
    /// Hosts with enough volume needed for failure-percentage analysis (5).
    pub failure_percentage_minimum_hosts: u32,
    /// Requests in an interval for a host to count in failure-percentage analysis (50).
    pub failure_percentage_request_volume: u32,
    /// A successful active health check unejects the host at once (true).
    pub successful_active_health_check_uneject_host: bool,
}

/// Translates `outlier_detection`.
pub(super) fn translate(
    o: &pb::OutlierDetection,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> OutlierDetection {
    // PGV `lte: 100` on the percentages.
    let pct = |v: Option<&UInt32Value>, default: u32, name: &str, ctx: &mut Ctx| {
        values::u32_at_most(v, default, 100, &path.field(name), ctx)
    };
    let max_ejection_percent = pct(
        o.max_ejection_percent.as_ref(),
        10,
        "max_ejection_percent",
        ctx,
    );
    let enforcing_consecutive_5xx = pct(
        o.enforcing_consecutive_5xx.as_ref(),
        100,
        "enforcing_consecutive_5xx",
        ctx,
    );
    let enforcing_success_rate = pct(
        o.enforcing_success_rate.as_ref(),
        100,
        "enforcing_success_rate",
        ctx,
    );
    let enforcing_consecutive_gateway_failure = pct(
        o.enforcing_consecutive_gateway_failure.as_ref(),
        0,
        "enforcing_consecutive_gateway_failure",
        ctx,
    );
    let enforcing_consecutive_local_origin_failure = pct(
        o.enforcing_consecutive_local_origin_failure.as_ref(),
        100,
        "enforcing_consecutive_local_origin_failure",
        ctx,
    );
    let enforcing_local_origin_success_rate = pct(
        o.enforcing_local_origin_success_rate.as_ref(),
        100,
        "enforcing_local_origin_success_rate",
        ctx,
    );
    let failure_percentage_threshold = pct(
        o.failure_percentage_threshold.as_ref(),
        85,
        "failure_percentage_threshold",
        ctx,
    );
    let enforcing_failure_percentage = pct(
        o.enforcing_failure_percentage.as_ref(),
        0,
        "enforcing_failure_percentage",
        ctx,
    );
    let enforcing_failure_percentage_local_origin = pct(
        o.enforcing_failure_percentage_local_origin.as_ref(),
        0,
        "enforcing_failure_percentage_local_origin",
        ctx,
    );

    let interval = values::positive_duration(
        o.interval.as_ref(),
        Duration::from_secs(10),
        &path.field("interval"),
        ctx,
    );
    let base_ejection_time = values::positive_duration(
        o.base_ejection_time.as_ref(),
        Duration::from_secs(30),
        &path.field("base_ejection_time"),
        ctx,
    );
    let mp = path.field("max_ejection_time");
    let max_ejection_time = match values::optional_positive(o.max_ejection_time.as_ref(), &mp, ctx)
    {
        Some(max) => {
            if max < base_ejection_time {
                ctx.error(&mp, "cannot be smaller than base_ejection_time");
            }
            max
        }
        None => DEFAULT_MAX_EJECTION_TIME.max(base_ejection_time),
    };
    let max_ejection_time_jitter = core::duration_or(
        o.max_ejection_time_jitter.as_ref(),
        Duration::ZERO,
        &path.field("max_ejection_time_jitter"),
        ctx,
    );

    OutlierDetection {
        consecutive_5xx: core::u32_or(o.consecutive_5xx.as_ref(), 5),
        interval,
        base_ejection_time,
        max_ejection_time,
        max_ejection_time_jitter,
        max_ejection_percent,
        always_eject_one_host: core::bool_or(o.always_eject_one_host.as_ref(), false),
        enforcing_consecutive_5xx,
        consecutive_gateway_failure: core::u32_or(o.consecutive_gateway_failure.as_ref(), 5),
        enforcing_consecutive_gateway_failure,
        split_external_local_origin_errors: o.split_external_local_origin_errors,
        consecutive_local_origin_failure: core::u32_or(
            o.consecutive_local_origin_failure.as_ref(),
            5,
        ),
        enforcing_consecutive_local_origin_failure,
        enforcing_success_rate,
        enforcing_local_origin_success_rate,
        success_rate_minimum_hosts: core::u32_or(o.success_rate_minimum_hosts.as_ref(), 5),
        success_rate_request_volume: core::u32_or(o.success_rate_request_volume.as_ref(), 100),
        success_rate_stdev_factor: f64::from(core::u32_or(
            o.success_rate_stdev_factor.as_ref(),
            1900,
        )) / 1000.0,
        failure_percentage_threshold,
        enforcing_failure_percentage,
        enforcing_failure_percentage_local_origin,
        failure_percentage_minimum_hosts: core::u32_or(
            o.failure_percentage_minimum_hosts.as_ref(),
            5,
        ),
        failure_percentage_request_volume: core::u32_or(
            o.failure_percentage_request_volume.as_ref(),
            50,
        ),
        successful_active_health_check_uneject_host: core::bool_or(
            o.successful_active_health_check_uneject_host.as_ref(),
            true,
        ),
    }
}
