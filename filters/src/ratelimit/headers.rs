//! Headers built from a rate limit service's answer: the `x-ratelimit-*` headers of
//! draft 03 (Envoy's `XRateLimitHeaderUtils`) and the service's header lists.

use envoy_types::pb::envoy::config::core::v3::HeaderValue as PbHeader;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::DescriptorStatus;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use http::{HeaderMap, HeaderName, HeaderValue};

/// A unit's window in seconds (0: unknown, left out of the quota policy).
fn window(unit: i32) -> u64 {
    match Unit::try_from(unit).unwrap_or(Unit::Unknown) {
        Unit::Unknown => 0,
        Unit::Second => 1,
        Unit::Minute => 60,
        Unit::Hour => 3600,
        Unit::Day => 86_400,
        Unit::Week => 604_800,
        Unit::Month => 2_592_000,
        Unit::Year => 31_536_000,
    }
}

/// `x-ratelimit-limit` (the tightest limit, then `, <limit>;w=<window>[;name="<name>"]` for
/// each status with a limit), `-remaining` and `-reset` of the status with the fewest
/// requests remaining; nothing when no status carries a limit.
pub fn x_ratelimit(statuses: &[DescriptorStatus], out: &mut HeaderMap) {
    let mut min: Option<&DescriptorStatus> = None;
    let mut policy = String::new();
    for s in statuses {
        let Some(limit) = &s.current_limit else {
            continue;
        };
        if min.is_none_or(|m| s.limit_remaining < m.limit_remaining) {
            min = Some(s);
        }
        let w = window(limit.unit);
        if w != 0 {
            policy.push_str(&format!(", {};w={w}", limit.requests_per_unit));
            if !limit.name.is_empty() {
                policy.push_str(&format!(";name=\"{}\"", limit.name));
            }
        }
    }
    let Some(m) = min else {
        return;
    };
    let limit = m.current_limit.as_ref().map_or(0, |l| l.requests_per_unit);
    if let Ok(v) = HeaderValue::from_str(&format!("{limit}{policy}")) {
        out.append("x-ratelimit-limit", v);
    }
    out.append(
        "x-ratelimit-remaining",
        HeaderValue::from(m.limit_remaining),
    );
    let reset = m.duration_until_reset.as_ref().map_or(0, |d| d.seconds);
    out.append("x-ratelimit-reset", HeaderValue::from(reset));
}

/// The service's header list as a map (invalid names or values left out).
pub fn from_service(list: &[PbHeader], out: &mut HeaderMap) {
    for h in list {
        let Ok(name) = HeaderName::from_bytes(h.key.to_ascii_lowercase().as_bytes()) else {
            continue;
        };
        let value = if h.value.is_empty() && !h.raw_value.is_empty() {
            HeaderValue::from_bytes(&h.raw_value)
        } else {
            HeaderValue::from_str(&h.value)
        };
        if let Ok(v) = value {
            out.append(name, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit;
    use envoy_types::pb::google::protobuf::Duration;

    #[test]
    fn draft_03_headers_from_the_tightest_status() {
        let status = |rpu, unit: Unit, name: &str, remaining, reset| DescriptorStatus {
            code: 1,
            current_limit: Some(RateLimit {
                name: name.into(),
                requests_per_unit: rpu,
                unit: unit as i32,
            }),
            limit_remaining: remaining,
            duration_until_reset: Some(Duration {
                seconds: reset,
                nanos: 0,
            }),
            ..Default::default()
        };
        let mut h = HeaderMap::new();
        x_ratelimit(
            &[
                status(10, Unit::Second, "per-ip", 3, 1),
                DescriptorStatus::default(),
                status(1000, Unit::Hour, "", 999, 3000),
            ],
            &mut h,
        );
        assert_eq!(
            h["x-ratelimit-limit"],
            "10, 10;w=1;name=\"per-ip\", 1000;w=3600"
        );
        assert_eq!(h["x-ratelimit-remaining"], "3");
        assert_eq!(h["x-ratelimit-reset"], "1");
        let mut h = HeaderMap::new();
        x_ratelimit(&[DescriptorStatus::default()], &mut h);
        assert!(h.is_empty());
    }
}
