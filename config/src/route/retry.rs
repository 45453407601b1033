//! Retry and hedge policies (virtual host or route; a route's policy replaces its
//! virtual host's, without merging).

pub use super::back_off::{RateLimitedBackOff, ResetFormat, ResetHeader, RetryBackOff};

use super::back_off;
use crate::core;
use crate::ctx::Ctx;
use crate::matcher::{self, HeaderMatcher};
use crate::path::Path;
use envoy_types::pb::envoy::config::route::v3 as pb;
use envoy_types::pb::envoy::extensions::retry::host::previous_hosts::v3::PreviousHostsPredicate;
use envoy_types::pb::envoy::extensions::retry::priority::previous_priorities::v3::PreviousPrioritiesConfig;
use prost::Name;
use std::time::Duration;

/// The set of `retry_on` conditions (HTTP and gRPC), as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct RetryOn(u32);

impl RetryOn {
    /// Nothing.
    pub const NONE: RetryOn = RetryOn(0);
    /// `5xx`: any 5xx response, reset, connect failure, refused stream or per-try timeout.
    pub const FIVE_XX: RetryOn = RetryOn(1);
    /// `gateway-error`: 502/503/504, reset, connect failure or per-try timeout.
    pub const GATEWAY_ERROR: RetryOn = RetryOn(1 << 1);
    /// `reset`: no response (disconnect, reset, per-try timeout).
    pub const RESET: RetryOn = RetryOn(1 << 2);
    /// `reset-before-request`: reset before the request was fully sent.
    pub const RESET_BEFORE_REQUEST: RetryOn = RetryOn(1 << 3);
    /// `connect-failure`: TCP/TLS connect failure or connect timeout.
    pub const CONNECT_FAILURE: RetryOn = RetryOn(1 << 4);
    /// `envoy-ratelimited`: the response carries `x-envoy-ratelimited`.
    pub const ENVOY_RATELIMITED: RetryOn = RetryOn(1 << 5);
    /// `retriable-4xx`: 409.
    pub const RETRIABLE_4XX: RetryOn = RetryOn(1 << 6);
    /// `refused-stream`: HTTP/2 REFUSED_STREAM.
    pub const REFUSED_STREAM: RetryOn = RetryOn(1 << 7);
    /// `retriable-status-codes`: `retriable_status_codes` or `x-envoy-retriable-status-codes`.
    pub const RETRIABLE_STATUS_CODES: RetryOn = RetryOn(1 << 8);
    /// `retriable-headers`: `retriable_headers` or `x-envoy-retriable-header-names`.
    pub const RETRIABLE_HEADERS: RetryOn = RetryOn(1 << 9);
    /// `http3-post-connect-failure` (courier has no HTTP/3 upstreams, so it never fires).
    pub const HTTP3_POST_CONNECT_FAILURE: RetryOn = RetryOn(1 << 10);
    /// gRPC `cancelled`.
    pub const GRPC_CANCELLED: RetryOn = RetryOn(1 << 16);
    /// gRPC `deadline-exceeded`.
    pub const GRPC_DEADLINE_EXCEEDED: RetryOn = RetryOn(1 << 17);
    /// gRPC `internal`.
    pub const GRPC_INTERNAL: RetryOn = RetryOn(1 << 18);
    /// gRPC `resource-exhausted`.
    pub const GRPC_RESOURCE_EXHAUSTED: RetryOn = RetryOn(1 << 19);
    /// gRPC `unavailable`.
    pub const GRPC_UNAVAILABLE: RetryOn = RetryOn(1 << 20);

    /// The condition named `name` (as in `retry_on`, `x-envoy-retry-on` or
    /// `x-envoy-retry-grpc-on`), if it is one.
    pub fn from_name(name: &str) -> Option<RetryOn> {
        Some(match name {
            "5xx" => Self::FIVE_XX,
            "gateway-error" => Self::GATEWAY_ERROR,
            "reset" => Self::RESET,
            "reset-before-request" => Self::RESET_BEFORE_REQUEST,
            "connect-failure" => Self::CONNECT_FAILURE,
            "envoy-ratelimited" => Self::ENVOY_RATELIMITED,
            "retriable-4xx" => Self::RETRIABLE_4XX,
            "refused-stream" => Self::REFUSED_STREAM,
            "retriable-status-codes" => Self::RETRIABLE_STATUS_CODES,
            "retriable-headers" => Self::RETRIABLE_HEADERS,
            "http3-post-connect-failure" => Self::HTTP3_POST_CONNECT_FAILURE,
            "cancelled" => Self::GRPC_CANCELLED,
            "deadline-exceeded" => Self::GRPC_DEADLINE_EXCEEDED,
            "internal" => Self::GRPC_INTERNAL,
            "resource-exhausted" => Self::GRPC_RESOURCE_EXHAUSTED,
            "unavailable" => Self::GRPC_UNAVAILABLE,
            _ => return None,
        })
    }

    /// Parses a comma-separated list (whitespace around items and empty items are
    /// ignored); the error names the first unknown value.
    pub fn parse(list: &str) -> Result<RetryOn, String> {
        let mut out = Self::NONE;
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match Self::from_name(item) {
                Some(v) => out = out | v,
                None => return Err(format!("unknown retry_on value '{item}'")),
            }
        }
        Ok(out)
    }

    /// Whether every condition of `other` is in `self`.
    pub fn contains(self, other: RetryOn) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether no condition is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::BitOr for RetryOn {
    type Output = RetryOn;
    fn bitor(self, rhs: RetryOn) -> RetryOn {
        RetryOn(self.0 | rhs.0)
    }
}

/// A retry host predicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryHostPredicate {
    /// `envoy.retry_host_predicates.previous_hosts`: reject hosts already tried.
    PreviousHosts,
}

/// A validated `RetryPolicy` with Envoy's defaults applied.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Conditions that trigger a retry.
    pub retry_on: RetryOn,
    /// Maximum retries (default 1).
    pub num_retries: u32,
    /// Timeout of each attempt (`None`: only the route timeout applies).
    pub per_try_timeout: Option<Duration>,
    /// Idle timeout of each attempt (`None`: off).
    pub per_try_idle_timeout: Option<Duration>,
    /// Host predicates applied when picking a host for a retry.
    pub retry_host_predicates: Vec<RetryHostPredicate>,
    /// Extra host picks allowed when a predicate rejects a host.
    pub host_selection_retry_max_attempts: u32,
    /// `retry_priority` `envoy.retry_priorities.previous_priorities`: its
    /// `update_frequency` (every that many attempts, retries leave out the
    /// priorities tried so far).
    pub previous_priorities: Option<u32>,
    /// Statuses retried with `retriable-status-codes`.
    pub retriable_status_codes: Vec<u16>,
    /// Back-off between attempts (Envoy's defaults when not configured).
    pub back_off: RetryBackOff,
    /// `rate_limited_retry_back_off`: the back-off an upstream asks for in a
    /// response header, used instead of `back_off` when present.
    pub rate_limited_back_off: Option<RateLimitedBackOff>,
    /// Response headers that make a response retriable (`retriable-headers`).
    pub retriable_headers: Vec<HeaderMatcher>,
    /// If non-empty, only requests matching one of these are retried.
    pub retriable_request_headers: Vec<HeaderMatcher>,
}

/// A validated `HedgePolicy` (only `hedge_on_per_try_timeout` is implemented).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HedgePolicy {
    /// On a per-try timeout, start another attempt without cancelling the first.
    pub hedge_on_per_try_timeout: bool,
}

/// Translates a `RetryPolicy`.
pub(crate) fn retry_policy(
    rp: &pb::RetryPolicy,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<RetryPolicy> {
    let before = ctx.error_count();
    let retry_on = RetryOn::parse(&rp.retry_on).unwrap_or_else(|e| {
        ctx.error(&path.field("retry_on"), e);
        RetryOn::NONE
    });
    let per_try_timeout = core::optional_timeout(
        rp.per_try_timeout.as_ref(),
        None,
        &path.field("per_try_timeout"),
        ctx,
    );
    let per_try_idle_timeout = core::optional_timeout(
        rp.per_try_idle_timeout.as_ref(),
        None,
        &path.field("per_try_idle_timeout"),
        ctx,
    );
    let pp = path.field("retry_host_predicate");
    let mut retry_host_predicates = Vec::new();
    for (i, p) in rp.retry_host_predicate.iter().enumerate() {
        if let Some(p) = host_predicate(p, &pp.index(i), ctx) {
            retry_host_predicates.push(p);
        }
    }
    let previous_priorities = rp
        .retry_priority
        .as_ref()
        .and_then(|p| retry_priority(p, &path.field("retry_priority"), ctx));
    let host_selection_retry_max_attempts =
        match u32::try_from(rp.host_selection_retry_max_attempts) {
            Ok(n) => n,
            Err(_) => {
                ctx.error(
                    &path.field("host_selection_retry_max_attempts"),
                    "must be between 0 and 4294967295",
                );
                0
            }
        };
    let sp = path.field("retriable_status_codes");
    let mut retriable_status_codes = Vec::with_capacity(rp.retriable_status_codes.len());
    for (i, &code) in rp.retriable_status_codes.iter().enumerate() {
        match u16::try_from(code) {
            Ok(c) if (100..=599).contains(&c) => retriable_status_codes.push(c),
            _ => ctx.error(
                &sp.index(i),
                format!("{code} is not an HTTP status code (100..=599)"),
            ),
        }
    }
    let back_off = match &rp.retry_back_off {
        None => RetryBackOff::default(),
        Some(b) => back_off::back_off(b, &path.field("retry_back_off"), ctx),
    };
    let rate_limited_back_off = rp
        .rate_limited_retry_back_off
        .as_ref()
        .and_then(|b| back_off::rate_limited(b, &path.field("rate_limited_retry_back_off"), ctx));
    let retriable_headers =
        header_matchers(&rp.retriable_headers, &path.field("retriable_headers"), ctx);
    let retriable_request_headers = header_matchers(
        &rp.retriable_request_headers,
        &path.field("retriable_request_headers"),
        ctx,
    );
    if ctx.error_count() != before {
        return None;
    }
    Some(RetryPolicy {
        retry_on,
        num_retries: core::u32_or(rp.num_retries.as_ref(), 1),
        per_try_timeout,
        per_try_idle_timeout,
        retry_host_predicates,
        host_selection_retry_max_attempts,
        previous_priorities,
        retriable_status_codes,
        back_off,
        rate_limited_back_off,
        retriable_headers,
        retriable_request_headers,
    })
}

fn header_matchers(
    list: &[pb::HeaderMatcher],
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Vec<HeaderMatcher> {
    list.iter()
        .enumerate()
        .filter_map(|(i, h)| matcher::header_matcher(h, &path.index(i), ctx))
        .collect()
}

fn host_predicate(
    p: &pb::retry_policy::RetryHostPredicate,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<RetryHostPredicate> {
    use pb::retry_policy::retry_host_predicate::ConfigType;
    // Envoy picks the extension by the type of typed_config; without one it finds none.
    match &p.config_type {
        Some(ConfigType::TypedConfig(any))
            if any.type_url == PreviousHostsPredicate::type_url() =>
        {
            Some(RetryHostPredicate::PreviousHosts)
        }
        Some(ConfigType::TypedConfig(any)) => {
            ctx.unsupported(path, format!("retry host predicate {}", any.type_url));
            None
        }
        None if p.name == "envoy.retry_host_predicates.previous_hosts" => {
            ctx.error(
                &path.field("typed_config"),
                format!("is required ({})", PreviousHostsPredicate::type_url()),
            );
            None
        }
        None => {
            ctx.unsupported(path, format!("retry host predicate {}", p.name));
            None
        }
    }
}

/// Translates a `RetryPriority`: `previous_priorities` is the one Envoy has;
/// its `update_frequency` must be above 0.
fn retry_priority(
    p: &pb::retry_policy::RetryPriority,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<u32> {
    use pb::retry_policy::retry_priority::ConfigType;
    match &p.config_type {
        Some(ConfigType::TypedConfig(any))
            if any.type_url == PreviousPrioritiesConfig::type_url() =>
        {
            let tp = path.field("typed_config");
            let c: PreviousPrioritiesConfig = crate::core::unpack(any, &tp, ctx)?;
            match u32::try_from(c.update_frequency) {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    ctx.error(
                        &tp.field("update_frequency"),
                        format!("must be greater than 0, found {}", c.update_frequency),
                    );
                    None
                }
            }
        }
        Some(ConfigType::TypedConfig(any)) => {
            ctx.unsupported(path, format!("retry priority {}", any.type_url));
            None
        }
        None => {
            ctx.unsupported(path, format!("retry priority {}", p.name));
            None
        }
    }
}

/// Translates a `HedgePolicy`; only Envoy's defaults for `initial_requests` and
/// `additional_request_chance` are accepted.
pub(crate) fn hedge_policy(
    hp: &pb::HedgePolicy,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<HedgePolicy> {
    let mut ok = true;
    match hp.initial_requests.as_ref().map(|v| v.value) {
        None | Some(1) => {}
        Some(0) => {
            ctx.error(&path.field("initial_requests"), "must be at least 1");
            ok = false;
        }
        Some(_) => {
            ctx.unsupported(
                &path.field("initial_requests"),
                "initial_requests other than 1",
            );
            ok = false;
        }
    }
    if hp
        .additional_request_chance
        .as_ref()
        .is_some_and(|p| p.numerator != 0)
    {
        ctx.unsupported(
            &path.field("additional_request_chance"),
            "a non-zero additional_request_chance",
        );
        ok = false;
    }
    ok.then_some(HedgePolicy {
        hedge_on_per_try_timeout: hp.hedge_on_per_try_timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::Duration as PbDuration;

    fn errors(ctx: Ctx) -> Vec<String> {
        ctx.finish(())
            .err()
            .map(|e| e.errors.iter().map(ToString::to_string).collect())
            .unwrap_or_default()
    }

    #[test]
    fn parses_every_retry_on_value() {
        let all = "5xx,gateway-error,reset,reset-before-request,connect-failure,envoy-ratelimited,\
                   retriable-4xx,refused-stream,retriable-status-codes,retriable-headers,\
                   http3-post-connect-failure,cancelled,deadline-exceeded,internal,\
                   resource-exhausted,unavailable";
        let r = RetryOn::parse(all).unwrap();
        assert!(r.contains(RetryOn::FIVE_XX | RetryOn::GRPC_UNAVAILABLE));
        assert!(r.contains(RetryOn::RETRIABLE_4XX));
        assert_eq!(
            RetryOn::parse(" 5xx, ,connect-failure ").unwrap(),
            RetryOn::FIVE_XX | RetryOn::CONNECT_FAILURE
        );
        assert_eq!(
            RetryOn::parse("5xx,bogus").unwrap_err(),
            "unknown retry_on value 'bogus'"
        );
        assert!(RetryOn::parse("").unwrap().is_empty());
    }

    #[test]
    fn defaults() {
        let mut ctx = Ctx::new();
        let p = retry_policy(&pb::RetryPolicy::default(), &Path::ROOT, &mut ctx).unwrap();
        assert_eq!(p.num_retries, 1);
        assert_eq!(p.per_try_timeout, None);
        assert_eq!(p.back_off, RetryBackOff::default());
        assert_eq!(p.back_off.max_interval, Duration::from_millis(250));
        assert!(errors(ctx).is_empty());
    }

    #[test]
    fn back_off_rules() {
        let d = |s| {
            Some(PbDuration {
                seconds: s,
                nanos: 0,
            })
        };
        let mut ctx = Ctx::new();
        let rp = pb::RetryPolicy {
            retry_back_off: Some(pb::retry_policy::RetryBackOff {
                base_interval: d(2),
                max_interval: None,
            }),
            ..Default::default()
        };
        let p = retry_policy(&rp, &Path::ROOT, &mut ctx).unwrap();
        assert_eq!(p.back_off.max_interval, Duration::from_secs(20));

        let mut ctx = Ctx::new();
        let rp = pb::RetryPolicy {
            retry_back_off: Some(pb::retry_policy::RetryBackOff {
                base_interval: d(2),
                max_interval: d(1),
            }),
            ..Default::default()
        };
        assert!(retry_policy(&rp, &Path::ROOT, &mut ctx).is_none());
        assert_eq!(
            errors(ctx),
            vec!["retry_back_off.max_interval: must be greater than or equal to base_interval"]
        );

        let mut ctx = Ctx::new();
        let rp = pb::RetryPolicy {
            retry_back_off: Some(pb::retry_policy::RetryBackOff {
                base_interval: d(0),
                max_interval: None,
            }),
            retriable_status_codes: vec![503, 42],
            ..Default::default()
        };
        assert!(retry_policy(&rp, &Path::ROOT, &mut ctx).is_none());
        assert_eq!(
            errors(ctx),
            vec![
                "retriable_status_codes[1]: 42 is not an HTTP status code (100..=599)",
                "retry_back_off.base_interval: must be greater than 0",
            ]
        );
    }

    #[test]
    fn previous_priorities_update_frequency() {
        use prost::Message;
        let with = |update_frequency: i32, url: String| pb::RetryPolicy {
            retry_priority: Some(pb::retry_policy::RetryPriority {
                name: "envoy.retry_priorities.previous_priorities".into(),
                config_type: Some(pb::retry_policy::retry_priority::ConfigType::TypedConfig(
                    envoy_types::pb::google::protobuf::Any {
                        type_url: url,
                        value: PreviousPrioritiesConfig { update_frequency }.encode_to_vec(),
                    },
                )),
            }),
            ..Default::default()
        };
        let mut ctx = Ctx::new();
        let p = retry_policy(
            &with(3, PreviousPrioritiesConfig::type_url()),
            &Path::ROOT,
            &mut ctx,
        );
        assert_eq!(p.and_then(|p| p.previous_priorities), Some(3));
        let mut ctx = Ctx::new();
        assert!(
            retry_policy(
                &with(0, PreviousPrioritiesConfig::type_url()),
                &Path::ROOT,
                &mut ctx
            )
            .is_none()
        );
        assert_eq!(
            errors(ctx),
            vec!["retry_priority.typed_config.update_frequency: must be greater than 0, found 0"]
        );
        let mut ctx = Ctx::new();
        assert!(
            retry_policy(
                &with(1, "type.googleapis.com/x.Other".into()),
                &Path::ROOT,
                &mut ctx
            )
            .is_none()
        );
        assert_eq!(
            errors(ctx),
            vec!["retry_priority: retry priority type.googleapis.com/x.Other is not supported"]
        );
    }

    #[test]
    fn host_predicates() {
        let any = |url: &str| envoy_types::pb::google::protobuf::Any {
            type_url: url.into(),
            value: vec![],
        };
        use pb::retry_policy::retry_host_predicate::ConfigType;
        let rp = pb::RetryPolicy {
            retry_host_predicate: vec![
                pb::retry_policy::RetryHostPredicate {
                    name: "envoy.retry_host_predicates.previous_hosts".into(),
                    config_type: Some(ConfigType::TypedConfig(any(
                        &PreviousHostsPredicate::type_url(),
                    ))),
                },
                pb::retry_policy::RetryHostPredicate {
                    name: "envoy.retry_host_predicates.omit_canary_hosts".into(),
                    config_type: None,
                },
            ],
            ..Default::default()
        };
        let mut ctx = Ctx::new();
        assert!(retry_policy(&rp, &Path::ROOT, &mut ctx).is_none());
        assert_eq!(
            errors(ctx),
            vec![
                "retry_host_predicate[1]: retry host predicate envoy.retry_host_predicates.omit_canary_hosts is not supported"
            ]
        );
    }

    #[test]
    fn hedge_only_defaults() {
        let mut ctx = Ctx::new();
        let h = hedge_policy(
            &pb::HedgePolicy {
                hedge_on_per_try_timeout: true,
                initial_requests: Some(envoy_types::pb::google::protobuf::UInt32Value { value: 1 }),
                ..Default::default()
            },
            &Path::ROOT,
            &mut ctx,
        );
        assert_eq!(
            h,
            Some(HedgePolicy {
                hedge_on_per_try_timeout: true
            })
        );
        let h = hedge_policy(
            &pb::HedgePolicy {
                initial_requests: Some(envoy_types::pb::google::protobuf::UInt32Value { value: 2 }),
                ..Default::default()
            },
            &Path::ROOT,
            &mut ctx,
        );
        assert!(h.is_none());
        assert_eq!(
            errors(ctx),
            vec!["initial_requests: initial_requests other than 1 is not supported"]
        );
    }
}
