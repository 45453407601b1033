//! The local rate limit filter's config (`envoy.extensions.filters.http.local_ratelimit.v3.
//! LocalRateLimit`), used both as the filter's config and as its per-route config.
//!
//! Served: `stat_prefix`, `status`, `token_bucket`, `filter_enabled` / `filter_enforced`
//! (their `default_value`: there is no runtime layer, `runtime_key` is refused), `descriptors`
//! (with wildcard entries and `shadow_mode`), `max_dynamic_descriptors`,
//! `always_consume_default_token_bucket`, `enable_x_ratelimit_headers`,
//! `rate_limited_as_resource_exhausted`, the filter's own `rate_limits`, and `stage` and
//! `vh_rate_limits`, which pick the route's and virtual host's `rate_limits` when the filter
//! has none of its own.
//! Refused by the support table: `response_headers_to_add`,
//! `request_headers_to_add_when_not_enforced`, `local_rate_limit_per_downstream_connection`,
//! `local_cluster_rate_limit`, `enable_retry_after_header`.

use super::rate_limit_actions::{self, RateLimitPolicy};
use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use crate::tracing::Fraction;
use envoy_types::pb::envoy::extensions::filters::http::local_ratelimit::v3 as pb;
use envoy_types::pb::envoy::r#type::v3 as type_pb;
use std::any::Any;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Envoy's smallest fill interval.
pub const MIN_FILL_INTERVAL: Duration = Duration::from_millis(50);
/// Envoy's default `max_dynamic_descriptors`.
pub const DEFAULT_MAX_DYNAMIC_DESCRIPTORS: u32 = 20;

/// A validated `LocalRateLimit` (filter or per-route config).
#[derive(Debug, Clone)]
pub struct LocalRateLimit {
    /// `stat_prefix`: counters are `<stat_prefix>.http_local_rate_limit.*`.
    pub stat_prefix: String,
    /// Status of a rate-limited reply (`status`, 429 when unset or below 400).
    pub status: u16,
    /// The default token bucket; `None` when none is configured (every request that no
    /// descriptor limits is allowed).
    pub token_bucket: Option<TokenBucket>,
    /// `filter_enabled`; `None` (absent) means the filter is off.
    pub filter_enabled: Option<Fraction>,
    /// `filter_enforced`; `None` (absent) means limited requests are only counted.
    pub filter_enforced: Option<Fraction>,
    /// The configured descriptors, each with its bucket.
    pub descriptors: Vec<Descriptor>,
    /// `max_dynamic_descriptors` (default 20): the buckets a wildcard descriptor keeps.
    pub max_dynamic_descriptors: u32,
    /// `always_consume_default_token_bucket` (default true).
    pub always_consume_default_token_bucket: bool,
    /// `enable_x_ratelimit_headers: DRAFT_VERSION_03`.
    pub x_ratelimit_headers: bool,
    /// `rate_limited_as_resource_exhausted`: gRPC replies carry RESOURCE_EXHAUSTED (8).
    pub rate_limited_as_resource_exhausted: bool,
    /// The filter's own `rate_limits`.
    pub rate_limits: Vec<RateLimitPolicy>,
    /// `stage`: the route and virtual host `rate_limits` of this stage apply.
    pub stage: u32,
    /// `vh_rate_limits`: whether the virtual host's `rate_limits` apply.
    pub vh_rate_limits: VhRateLimits,
    /// The runtime state (token buckets) of this config, made by the filter on first use and
    /// shared by every worker and every copy of this config, so its buckets live as long
    /// as the config does (Envoy's per-config limiter).
    pub state: StateSlot,
}

/// Whether a virtual host's `rate_limits` apply besides the route's (a route's
/// `include_vh_rate_limits` makes it `Include`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VhRateLimits {
    /// Only when the route has none (the default).
    Override,
    /// Always.
    Include,
    /// Never.
    Ignore,
}

/// A token bucket: `max_tokens`, refilled by `tokens_per_fill` every `fill_interval`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    /// Capacity (and the initial tokens).
    pub max_tokens: u32,
    /// Tokens added per interval (default 1).
    pub tokens_per_fill: u32,
    /// The interval (at least 50 ms).
    pub fill_interval: Duration,
}

/// One configured descriptor.
#[derive(Debug, Clone)]
pub struct Descriptor {
    /// `(key, value)` entries; an empty value is a wildcard.
    pub entries: Vec<(String, String)>,
    /// Its bucket.
    pub token_bucket: TokenBucket,
    /// `shadow_mode`: a request this bucket limits is counted but let through.
    pub shadow_mode: bool,
}

impl Descriptor {
    /// Whether an entry is a wildcard (each distinct request value gets its own bucket).
    pub fn is_dynamic(&self) -> bool {
        self.entries.iter().any(|(_, v)| v.is_empty())
    }
}

/// A slot for a filter's runtime state, filled once.
#[derive(Clone, Default)]
pub struct StateSlot(Arc<OnceLock<Arc<dyn Any + Send + Sync>>>);

impl StateSlot {
    /// The state, made by `make` on first use.
    pub fn get_or_init(
        &self,
        make: impl FnOnce() -> Arc<dyn Any + Send + Sync>,
    ) -> &Arc<dyn Any + Send + Sync> {
        self.0.get_or_init(make)
    }
}

impl std::fmt::Debug for StateSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "StateSlot(set)"
        } else {
            "StateSlot(empty)"
        })
    }
}

fn fraction(
    f: Option<&envoy_types::pb::envoy::config::core::v3::RuntimeFractionalPercent>,
) -> Option<Fraction> {
    f.map(|f| {
        f.default_value.as_ref().map_or(
            Fraction {
                numerator: 0,
                denominator: 100,
            },
            Fraction::of,
        )
    })
}

fn bucket(tb: &type_pb::TokenBucket, path: &Path<'_>, ctx: &mut Ctx) -> Option<TokenBucket> {
    let mut ok = true;
    if tb.max_tokens == 0 {
        ctx.error(&path.field("max_tokens"), "must be greater than 0");
        ok = false;
    }
    let tokens_per_fill = tb.tokens_per_fill.as_ref().map_or(1, |v| v.value);
    if tokens_per_fill == 0 {
        ctx.error(&path.field("tokens_per_fill"), "must be greater than 0");
        ok = false;
    }
    let fp = path.field("fill_interval");
    let fill_interval = match tb.fill_interval.as_ref() {
        None => {
            ctx.error(&fp, "is required");
            return None;
        }
        Some(d) => core::duration(d, &fp, ctx)?,
    };
    if fill_interval < MIN_FILL_INTERVAL {
        ctx.error(
            &fp,
            "local rate limit token bucket fill timer must be >= 50ms",
        );
        ok = false;
    }
    ok.then_some(TokenBucket {
        max_tokens: tb.max_tokens,
        tokens_per_fill,
        fill_interval,
    })
}

/// Translates a `LocalRateLimit`; `per_route` for a `typed_per_filter_config` entry, which
/// must have a `token_bucket` (Envoy refuses one without).
pub fn translate(
    m: &pb::LocalRateLimit,
    per_route: bool,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<LocalRateLimit> {
    let mut ok = true;
    if m.stat_prefix.is_empty() {
        ctx.error(&path.field("stat_prefix"), "must not be empty");
        ok = false;
    }
    if m.stage > 10 {
        ctx.error(&path.field("stage"), "must be at most 10");
        ok = false;
    }
    let token_bucket = match m.token_bucket.as_ref() {
        Some(tb) => {
            let b = bucket(tb, &path.field("token_bucket"), ctx);
            ok &= b.is_some();
            b
        }
        None if per_route => {
            ctx.error(
                &path.field("token_bucket"),
                "local rate limit token bucket must be set for per filter configs",
            );
            ok = false;
            None
        }
        None => None,
    };
    let status = match m.status.as_ref().map(|s| s.code) {
        None => 429,
        Some(c) if !(100..=599).contains(&c) => {
            ctx.error(
                &path.field("status").field("code"),
                format!("{c} is not an HTTP status"),
            );
            ok = false;
            429
        }
        Some(c) if c < 400 => 429,
        Some(c) => c as u16,
    };
    let dp = path.field("descriptors");
    let mut descriptors: Vec<Descriptor> = Vec::with_capacity(m.descriptors.len());
    for (i, d) in m.descriptors.iter().enumerate() {
        let p = dp.index(i);
        if d.entries.is_empty() {
            ctx.error(&p.field("entries"), "must have at least one item");
            ok = false;
            continue;
        }
        let mut entries = Vec::with_capacity(d.entries.len());
        for (j, e) in d.entries.iter().enumerate() {
            if e.key.is_empty() {
                ctx.error(
                    &p.field("entries").index(j).field("key"),
                    "must not be empty",
                );
                ok = false;
            }
            entries.push((e.key.clone(), e.value.clone()));
        }
        let Some(tb) = d.token_bucket.as_ref() else {
            ctx.error(&p.field("token_bucket"), "is required");
            ok = false;
            continue;
        };
        let Some(token_bucket) = bucket(tb, &p.field("token_bucket"), ctx) else {
            ok = false;
            continue;
        };
        if descriptors.iter().any(|o| o.entries == entries) {
            ctx.error(&p, "duplicate descriptor in the local rate descriptor");
            ok = false;
            continue;
        }
        descriptors.push(Descriptor {
            entries,
            token_bucket,
            shadow_mode: d.shadow_mode,
        });
    }
    let rate_limits = rate_limit_actions::policies(
        &m.rate_limits,
        &path.field("rate_limits"),
        rate_limit_actions::StreamFields::none("the local rate limit filter's rate_limits"),
        ctx,
    );
    ok &= rate_limits.is_some();
    let max_dynamic_descriptors = m
        .max_dynamic_descriptors
        .as_ref()
        .map_or(DEFAULT_MAX_DYNAMIC_DESCRIPTORS, |v| v.value);
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::XRateLimitHeadersRfcVersion as X;
    let x_ratelimit_headers = m.enable_x_ratelimit_headers == X::DraftVersion03 as i32;
    ok.then(|| LocalRateLimit {
        stat_prefix: m.stat_prefix.clone(),
        status,
        token_bucket,
        filter_enabled: fraction(m.filter_enabled.as_ref()),
        filter_enforced: fraction(m.filter_enforced.as_ref()),
        descriptors,
        max_dynamic_descriptors,
        always_consume_default_token_bucket: m
            .always_consume_default_token_bucket
            .as_ref()
            .is_none_or(|b| b.value),
        x_ratelimit_headers,
        rate_limited_as_resource_exhausted: m.rate_limited_as_resource_exhausted,
        rate_limits: rate_limits.unwrap_or_default(),
        stage: m.stage,
        vh_rate_limits: match m.vh_rate_limits {
            1 => VhRateLimits::Include,
            2 => VhRateLimits::Ignore,
            _ => VhRateLimits::Override,
        },
        state: StateSlot::default(),
    })
}

#[cfg(test)]
mod tests;
