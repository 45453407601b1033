//! The fault injection HTTP filter (`envoy.extensions.filters.http.fault.v3.HTTPFault`,
//! as the filter's config and as its per-route config): a fixed delay and an abort
//! (an HTTP status or a gRPC status, with `response_body`), each for a share of the
//! requests, and `max_active_faults`. Header-controlled faults, request matching
//! (`headers`, `upstream_cluster`, `downstream_nodes`), response rate limits and the
//! runtime key overrides are refused by their absence.

use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use crate::tracing::Fraction;
use envoy_types::pb::envoy::extensions::filters::http::fault::v3 as pb;
use std::time::Duration;

/// Fields of the fault messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.extensions.filters.http.fault.v3.HTTPFault",
        &["delay", "abort", "max_active_faults"],
    ),
    (
        "envoy.extensions.filters.http.fault.v3.FaultAbort",
        &["http_status", "grpc_status", "percentage", "response_body"],
    ),
    (
        "envoy.extensions.filters.common.fault.v3.FaultDelay",
        &["fixed_delay", "percentage"],
    ),
];

/// What an abort answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbortStatus {
    /// `http_status` (200..600).
    Http(u16),
    /// `grpc_status`: a gRPC answer with this status.
    Grpc(u32),
}

/// A validated `HTTPFault`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// `delay.fixed_delay` and its share of requests.
    pub delay: Option<(Duration, Fraction)>,
    /// `abort`: its status, share and body (`fault filter abort` when unset).
    pub abort: Option<(AbortStatus, Fraction, String)>,
    /// `max_active_faults`: faults in progress at most (unlimited when unset).
    pub max_active_faults: Option<u64>,
}

/// The share of a fault without `percentage`: none (Envoy 1.40 injects nothing then;
/// checked in tests/fault_differential.rs).
const NONE: Fraction = Fraction {
    numerator: 0,
    denominator: 100,
};

/// Translates an `HTTPFault`.
pub fn translate(m: &pb::HttpFault, path: &Path<'_>, ctx: &mut Ctx) -> Option<Fault> {
    use envoy_types::pb::envoy::extensions::filters::common::fault::v3::fault_delay::FaultDelaySecifier as D;
    use pb::fault_abort::ErrorType as E;
    let mut ok = true;
    let delay = match &m.delay {
        None => None,
        Some(d) => {
            let dp = path.field("delay");
            let pct = d.percentage.as_ref().map_or(NONE, Fraction::of);
            match &d.fault_delay_secifier {
                Some(D::FixedDelay(t)) => {
                    core::duration(t, &dp.field("fixed_delay"), ctx).map(|t| (t, pct))
                }
                // `header_delay` is refused by the support walker.
                Some(_) => None,
                None => {
                    ctx.error(&dp, "one of fixed_delay or header_delay is required");
                    ok = false;
                    None
                }
            }
        }
    };
    let abort = match &m.abort {
        None => None,
        Some(a) => {
            let ap = path.field("abort");
            let pct = a.percentage.as_ref().map_or(NONE, Fraction::of);
            let status = match &a.error_type {
                Some(E::HttpStatus(s)) if (200..600).contains(s) => {
                    Some(AbortStatus::Http(*s as u16))
                }
                Some(E::HttpStatus(s)) => {
                    ctx.error(&ap.field("http_status"), format!("{s} is not in 200..600"));
                    ok = false;
                    None
                }
                Some(E::GrpcStatus(s)) => Some(AbortStatus::Grpc(*s)),
                Some(E::HeaderAbort(_)) => None,
                None => {
                    ctx.error(
                        &ap,
                        "one of http_status, grpc_status or header_abort is required",
                    );
                    ok = false;
                    None
                }
            };
            let body = if a.response_body.is_empty() {
                "fault filter abort".to_string()
            } else {
                a.response_body.clone()
            };
            status.map(|s| (s, pct, body))
        }
    };
    ok.then(|| Fault {
        delay,
        abort,
        max_active_faults: m.max_active_faults.as_ref().map(|v| u64::from(v.value)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::HttpFilterConfig;
    use crate::filters::test_util::{errors, filter};

    const HEAD: &str = "name: envoy.filters.http.fault\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault\n";

    #[test]
    fn delays_aborts_and_refusals() {
        let f = filter(&format!(
            "{HEAD}  delay: {{fixed_delay: 5.4s, percentage: {{numerator: 800000, denominator: MILLION}}}}\n  abort: {{grpc_status: 14}}\n  max_active_faults: 3\n"
        ))
        .unwrap();
        let HttpFilterConfig::Fault(c) = f.config else {
            panic!("fault")
        };
        let (d, pct) = c.delay.unwrap();
        assert_eq!(d, Duration::from_millis(5400));
        assert_eq!((pct.numerator, pct.denominator), (800_000, 1_000_000));
        // Without a percentage nothing is injected (Envoy 1.40).
        let (status, pct, body) = c.abort.clone().unwrap();
        assert_eq!(status, AbortStatus::Grpc(14));
        assert_eq!(pct.numerator, 0);
        assert_eq!(body, "fault filter abort");
        assert_eq!(c.max_active_faults, Some(3));
        for (yaml, want) in [
            (
                "  abort: {http_status: 600}\n",
                "typed_config.abort.http_status: 600 is not in 200..600",
            ),
            (
                "  abort: {header_abort: {}}\n",
                "typed_config.abort.header_abort: header_abort is not supported",
            ),
            (
                "  upstream_cluster: c\n",
                "typed_config.upstream_cluster: upstream_cluster is not supported",
            ),
        ] {
            assert_eq!(
                errors(filter(&format!("{HEAD}{yaml}"))),
                vec![want.to_string()]
            );
        }
    }
}
