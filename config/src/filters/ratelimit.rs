//! The global rate limit filter's config (`envoy.extensions.filters.http.ratelimit.v3.
//! RateLimit`) and its per-route config (`RateLimitPerRoute`).
//!
//! Served: `domain`, `stage`, `request_type`, `timeout` (20 ms by default),
//! `failure_mode_deny`, `rate_limited_as_resource_exhausted`, `rate_limit_service` (an
//! `envoy_grpc` cluster, which need not exist yet, as Envoy's rate limit client skips that
//! check; transport API v3 or unset), `enable_x_ratelimit_headers`,
//! `disable_x_envoy_ratelimited_header`, `rate_limited_status` and the filter's own
//! `rate_limits` (with `hits_addend`; `apply_on_stream_done` refused there, as Envoy does
//! not split the filter's own list by it); per route `domain` and `rate_limits` (with
//! `hits_addend` and `apply_on_stream_done`); else the route's and (when it has
//! none, or with `include_vh_rate_limits`) the virtual host's `rate_limits` of the
//! filter's `stage`. Refused by the
//! support table: `response_headers_to_add`, `status_on_error`, `stat_prefix`,
//! `filter_enabled`, `filter_enforced`, `failure_mode_deny_percent`, `metadata_namespace`,
//! `enable_retry_after_header`; per route `vh_rate_limits` and `override_option`; a
//! `google_grpc` service is refused here.

use super::rate_limit_actions::{self, RateLimitPolicy, StreamFields};
use crate::config_source::{self, GrpcService, GrpcTarget};
use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::core::v3 as core_pb;
use envoy_types::pb::envoy::extensions::filters::http::ratelimit::v3 as pb;
use std::time::Duration;

/// Envoy's default deadline of a rate limit call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(20);

/// Which requests the filter applies to (`request_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestType {
    /// `both` (the default).
    Both,
    /// `internal`: requests with `x-envoy-internal: true`.
    Internal,
    /// `external`: the others.
    External,
}

/// A validated `RateLimit` filter config.
#[derive(Debug, Clone)]
pub struct RateLimitFilter {
    /// The rate limit domain.
    pub domain: String,
    /// Which requests are limited.
    pub request_type: RequestType,
    /// The call's deadline (`None` for `0s`: no deadline).
    pub timeout: Option<Duration>,
    /// An unreachable service denies the request (500) instead of letting it through.
    pub failure_mode_deny: bool,
    /// gRPC replies to limited requests carry RESOURCE_EXHAUSTED (8).
    pub rate_limited_as_resource_exhausted: bool,
    /// The rate limit service.
    pub service: GrpcService,
    /// `enable_x_ratelimit_headers: DRAFT_VERSION_03`.
    pub x_ratelimit_headers: bool,
    /// Leave `x-envoy-ratelimited` off limited replies.
    pub disable_x_envoy_ratelimited_header: bool,
    /// The status of a limited reply (429; a code below 400 also means 429).
    pub rate_limited_status: u16,
    /// The filter's own `rate_limits`.
    pub rate_limits: Vec<RateLimitPolicy>,
    /// `stage`: the route and virtual host `rate_limits` of this stage apply.
    pub stage: u32,
}

/// A validated `RateLimitPerRoute`.
#[derive(Debug, Clone)]
pub struct RateLimitPerRoute {
    /// Replaces the filter's domain.
    pub domain: Option<String>,
    /// Replace the filter's (and the route's) `rate_limits`.
    pub rate_limits: Vec<RateLimitPolicy>,
}

/// Translates a `RateLimit` filter config.
pub fn translate(m: &pb::RateLimit, path: &Path<'_>, ctx: &mut Ctx) -> Option<RateLimitFilter> {
    let mut ok = true;
    if m.domain.is_empty() {
        ctx.error(&path.field("domain"), "must not be empty");
        ok = false;
    }
    if m.stage > 10 {
        ctx.error(&path.field("stage"), "must be at most 10");
        ok = false;
    }
    let request_type = match m.request_type.as_str() {
        "" | "both" => RequestType::Both,
        "internal" => RequestType::Internal,
        "external" => RequestType::External,
        other => {
            ctx.error(
                &path.field("request_type"),
                format!("\"{other}\" is not one of internal, external, both"),
            );
            ok = false;
            RequestType::Both
        }
    };
    let timeout = core::duration_or(
        m.timeout.as_ref(),
        DEFAULT_TIMEOUT,
        &path.field("timeout"),
        ctx,
    );
    let sp = path.field("rate_limit_service");
    let service = match m.rate_limit_service.as_ref() {
        None => {
            ctx.error(&sp, "is required");
            None
        }
        Some(rls) => {
            // Envoy 1.40 takes AUTO (unset) as v3 and refuses v2.
            if rls.transport_api_version == core_pb::ApiVersion::V2 as i32 {
                ctx.error(
                    &sp.field("transport_api_version"),
                    "the v2 xDS major version has been removed and is no longer supported",
                );
                ok = false;
            }
            let gp = sp.field("grpc_service");
            match rls.grpc_service.as_ref() {
                None => {
                    ctx.error(&gp, "is required");
                    None
                }
                Some(g) => config_source::grpc_service_any_cluster(g, &gp, ctx).and_then(|s| {
                    if matches!(s.target, GrpcTarget::GoogleGrpc { .. }) {
                        ctx.unsupported(
                            &gp.field("google_grpc"),
                            "a google_grpc rate limit service",
                        );
                        return None;
                    }
                    Some(s)
                }),
            }
        }
    };
    let rate_limited_status = match m.rate_limited_status.as_ref().map(|s| s.code) {
        None => 429,
        Some(c) if !(100..=599).contains(&c) => {
            ctx.error(
                &path.field("rate_limited_status").field("code"),
                format!("{c} is not an HTTP status"),
            );
            ok = false;
            429
        }
        Some(c) if c < 400 => 429,
        Some(c) => c as u16,
    };
    // Envoy's filter-level `rate_limits` are not split by `apply_on_stream_done`: refused.
    let served = StreamFields {
        hits_addend: true,
        apply_on_stream_done: false,
        place: "the rate limit filter's own rate_limits",
    };
    let rate_limits =
        rate_limit_actions::policies(&m.rate_limits, &path.field("rate_limits"), served, ctx);
    use pb::rate_limit::XRateLimitHeadersRfcVersion as X;
    let service = service?;
    let rate_limits = rate_limits?;
    ok.then(|| RateLimitFilter {
        domain: m.domain.clone(),
        request_type,
        timeout: (!timeout.is_zero()).then_some(timeout),
        failure_mode_deny: m.failure_mode_deny,
        rate_limited_as_resource_exhausted: m.rate_limited_as_resource_exhausted,
        service,
        x_ratelimit_headers: m.enable_x_ratelimit_headers == X::DraftVersion03 as i32,
        disable_x_envoy_ratelimited_header: m.disable_x_envoy_ratelimited_header,
        rate_limited_status,
        rate_limits,
        stage: m.stage,
    })
}

/// Translates a `RateLimitPerRoute`.
pub fn per_route(
    m: &pb::RateLimitPerRoute,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<RateLimitPerRoute> {
    let served = StreamFields {
        hits_addend: true,
        apply_on_stream_done: true,
        place: "RateLimitPerRoute.rate_limits",
    };
    let rate_limits =
        rate_limit_actions::policies(&m.rate_limits, &path.field("rate_limits"), served, ctx)?;
    Some(RateLimitPerRoute {
        domain: (!m.domain.is_empty()).then(|| m.domain.clone()),
        rate_limits,
    })
}

#[cfg(test)]
#[path = "ratelimit_tests.rs"]
mod tests;
