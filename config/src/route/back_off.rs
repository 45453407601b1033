//! Back-off between retries: Envoy's jittered exponential back-off
//! (`retry_back_off`) and the back-off an upstream asks for in a response header
//! (`rate_limited_retry_back_off`).

use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::route::v3 as pb;
use std::time::Duration;

/// Exponential back-off between retries (full jitter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryBackOff {
    /// Base interval (Envoy's default 25 ms).
    pub base_interval: Duration,
    /// Cap (default 10 × base).
    pub max_interval: Duration,
}

impl Default for RetryBackOff {
    fn default() -> Self {
        Self {
            base_interval: Duration::from_millis(25),
            max_interval: Duration::from_millis(250),
        }
    }
}

/// How a reset header states when the upstream will accept the request again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetFormat {
    /// `SECONDS`: a number of seconds from now (e.g. `Retry-After: 30`).
    Seconds,
    /// `UNIX_TIMESTAMP`: seconds since the epoch (e.g. `X-RateLimit-Reset`).
    UnixTimestamp,
}

/// One `reset_headers` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetHeader {
    /// Header name, lower-cased (header maps are looked up in lower case).
    pub name: String,
    /// How its value is read.
    pub format: ResetFormat,
}

/// A validated `RateLimitedRetryBackOff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitedBackOff {
    /// Tried in order; the first that parses to an interval within
    /// `max_interval` sets the back-off.
    pub reset_headers: Vec<ResetHeader>,
    /// Longer intervals are ignored (default 300 s).
    pub max_interval: Duration,
}

/// Translates a `RetryBackOff`.
pub(super) fn back_off(
    b: &pb::retry_policy::RetryBackOff,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> RetryBackOff {
    let bp = path.field("base_interval");
    let base = match b.base_interval.as_ref() {
        None => {
            ctx.error(&bp, "is required");
            None
        }
        Some(d) => positive(d, &bp, ctx),
    };
    let mp = path.field("max_interval");
    let max = b.max_interval.as_ref().and_then(|d| positive(d, &mp, ctx));
    let Some(base) = base else {
        return RetryBackOff::default();
    };
    let max = match max {
        Some(m) if m < base => {
            ctx.error(&mp, "must be greater than or equal to base_interval");
            m
        }
        Some(m) => m,
        None => base.saturating_mul(10),
    };
    RetryBackOff {
        base_interval: base,
        max_interval: max,
    }
}

/// Translates a `RateLimitedRetryBackOff` (Envoy's rules: at least one reset
/// header, each named; a positive `max_interval`).
pub(super) fn rate_limited(
    b: &pb::retry_policy::RateLimitedRetryBackOff,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<RateLimitedBackOff> {
    let before = ctx.error_count();
    let hp = path.field("reset_headers");
    if b.reset_headers.is_empty() {
        ctx.error(&hp, "must have at least 1 item");
    }
    let mut reset_headers = Vec::with_capacity(b.reset_headers.len());
    for (i, h) in b.reset_headers.iter().enumerate() {
        let ep = hp.index(i);
        if h.name.is_empty() {
            ctx.error(&ep.field("name"), "must not be empty");
        } else if !super::headers::valid_name_chars(&h.name) {
            ctx.error(&ep.field("name"), "must not contain NUL, CR or LF");
        }
        let format = match pb::retry_policy::ResetHeaderFormat::try_from(h.format) {
            Ok(pb::retry_policy::ResetHeaderFormat::Seconds) => ResetFormat::Seconds,
            Ok(pb::retry_policy::ResetHeaderFormat::UnixTimestamp) => ResetFormat::UnixTimestamp,
            Err(_) => {
                ctx.error(&ep.field("format"), "must be a defined enum value");
                continue;
            }
        };
        reset_headers.push(ResetHeader {
            name: h.name.to_ascii_lowercase(),
            format,
        });
    }
    let max_interval = match b.max_interval.as_ref() {
        None => Some(Duration::from_secs(300)),
        Some(d) => positive(d, &path.field("max_interval"), ctx),
    };
    if ctx.error_count() != before {
        return None;
    }
    Some(RateLimitedBackOff {
        reset_headers,
        max_interval: max_interval?,
    })
}

fn positive(
    d: &envoy_types::pb::google::protobuf::Duration,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Duration> {
    match core::duration(d, path, ctx) {
        Some(d) if d.is_zero() => {
            ctx.error(path, "must be greater than 0");
            None
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(text: &str) -> Result<RateLimitedBackOff, Vec<String>> {
        let yaml = format!(
            "virtual_hosts:\n- name: v\n  domains: ['*']\n  routes:\n  - match: {{prefix: /}}\n    \
             route:\n      cluster: backend\n      retry_policy: {text}\n"
        );
        let (rc, errors) = crate::route::tests::load_rc(&yaml, true, &["backend"]);
        if !errors.is_empty() {
            return Err(errors);
        }
        let rc = rc.expect("a route config");
        let action = rc.virtual_hosts[0].routes[0]
            .route_action()
            .expect("a route action");
        Ok(action
            .retry_policy
            .as_ref()
            .and_then(|p| p.rate_limited_back_off.clone())
            .expect("a rate-limited back-off"))
    }

    #[test]
    fn rate_limited_back_off_defaults_and_formats() {
        let p = policy(
            "{retry_on: retriable-status-codes, retriable_status_codes: [429], \
             rate_limited_retry_back_off: {reset_headers: [{name: Retry-After}, \
             {name: X-RateLimit-Reset, format: UNIX_TIMESTAMP}]}}",
        )
        .unwrap();
        assert_eq!(p.max_interval, Duration::from_secs(300));
        assert_eq!(
            p.reset_headers,
            vec![
                ResetHeader {
                    name: "retry-after".into(),
                    format: ResetFormat::Seconds
                },
                ResetHeader {
                    name: "x-ratelimit-reset".into(),
                    format: ResetFormat::UnixTimestamp
                },
            ]
        );
        let p = policy(
            "{rate_limited_retry_back_off: {reset_headers: [{name: retry-after}], \
             max_interval: 2s}}",
        )
        .unwrap();
        assert_eq!(p.max_interval, Duration::from_secs(2));
    }

    #[test]
    fn rate_limited_back_off_errors_name_their_paths() {
        let base = "virtual_hosts[0].routes[0].route.retry_policy.rate_limited_retry_back_off";
        let errs = policy("{rate_limited_retry_back_off: {reset_headers: []}}").unwrap_err();
        assert_eq!(
            errs,
            vec![format!("{base}.reset_headers: must have at least 1 item")]
        );
        let errs = policy(
            "{rate_limited_retry_back_off: {reset_headers: [{name: \"\"}], max_interval: 0s}}",
        )
        .unwrap_err();
        assert_eq!(
            errs,
            vec![
                format!("{base}.reset_headers[0].name: must not be empty"),
                format!("{base}.max_interval: must be greater than 0"),
            ]
        );
    }
}
