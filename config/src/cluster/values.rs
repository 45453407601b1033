//! Checks for the PGV rules that recur in the cluster messages (positive durations,
//! percentages, bounded integers), with one wording for each.

use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::r#type::v3::Percent;
use envoy_types::pb::google::protobuf as gpb;
use std::time::Duration;

/// A duration with PGV `gt {}` (strictly positive), or `default` when absent.
pub(super) fn positive_duration(
    d: Option<&gpb::Duration>,
    default: Duration,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Duration {
    match d {
        None => default,
        Some(d) => positive(d, path, ctx).unwrap_or(default),
    }
}

/// A set duration with PGV `gt {}`.
pub(super) fn positive(d: &gpb::Duration, path: &Path<'_>, ctx: &mut Ctx) -> Option<Duration> {
    let d = core::duration(d, path, ctx)?;
    if d.is_zero() {
        ctx.error(path, "must be greater than 0s");
        return None;
    }
    Some(d)
}

/// An optional duration with PGV `gt {}`.
pub(super) fn optional_positive(
    d: Option<&gpb::Duration>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Duration> {
    positive(d?, path, ctx)
}

/// A `type.v3.Percent` (PGV: 0 to 100) as a percentage, or `default` when absent.
pub(super) fn percent(p: Option<&Percent>, default: f64, path: &Path<'_>, ctx: &mut Ctx) -> f64 {
    let Some(p) = p else { return default };
    if !(0.0..=100.0).contains(&p.value) {
        ctx.error(
            &path.field("value"),
            format!("{} is not a percentage (0 to 100)", p.value),
        );
        return default;
    }
    p.value
}

/// A `UInt32Value` with an upper bound (PGV `lte`), or `default` when absent.
pub(super) fn u32_at_most(
    v: Option<&gpb::UInt32Value>,
    default: u32,
    max: u32,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> u32 {
    match v {
        None => default,
        Some(v) if v.value > max => {
            ctx.error(path, format!("must be at most {max}, found {}", v.value));
            default
        }
        Some(v) => v.value,
    }
}

/// A `UInt32Value` with bounds `min..=max` (PGV `gte`/`lte`), or `default` when absent.
pub(super) fn u32_in(
    v: Option<&gpb::UInt32Value>,
    default: u32,
    min: u32,
    max: u32,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> u32 {
    match v {
        None => default,
        Some(v) if v.value < min => {
            ctx.error(path, format!("must be at least {min}, found {}", v.value));
            default
        }
        Some(v) if v.value > max => {
            ctx.error(path, format!("must be at most {max}, found {}", v.value));
            default
        }
        Some(v) => v.value,
    }
}

/// Whether `name` is a valid HTTP header name (RFC 7230 token).
pub(super) fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether `value` is a valid HTTP header value (no NUL, CR or LF; PGV `HTTP_HEADER_VALUE`).
pub(super) fn is_header_value(value: &str) -> bool {
    !value.bytes().any(|b| matches!(b, 0 | b'\r' | b'\n'))
}
