//! Retry state of one request (Envoy's `RetryStateImpl`): the route's (or virtual
//! host's) policy merged with the trusted `x-envoy-*` request headers, which
//! attempt outcomes are retriable, the retry limit and the jittered exponential
//! back-off. The headers count only on internal requests, as in Envoy, and are
//! consumed: they never go upstream.

use crate::upstream::pool::SendError;
use courier_config::filters::http_uri::CallRetryPolicy;
use courier_config::matcher::HeaderMatcher;
use courier_config::route::{
    RateLimitedBackOff, ResetFormat, RetryBackOff, RetryOn, RetryPolicy, RouteAction, VirtualHost,
};
use http::HeaderMap;
use http::header::HeaderName;
use std::time::Duration;

const RETRY_ON: &str = "x-envoy-retry-on";
const RETRY_GRPC_ON: &str = "x-envoy-retry-grpc-on";
const MAX_RETRIES: &str = "x-envoy-max-retries";
const RQ_TIMEOUT: &str = "x-envoy-upstream-rq-timeout-ms";
const PER_TRY_TIMEOUT: &str = "x-envoy-upstream-rq-per-try-timeout-ms";
const RETRIABLE_CODES: &str = "x-envoy-retriable-status-codes";
const RETRIABLE_HEADER_NAMES: &str = "x-envoy-retriable-header-names";
const HEDGE: &str = "x-envoy-hedge-on-per-try-timeout";
const RATELIMITED: &str = "x-envoy-ratelimited";
const OVERLOADED: &str = "x-envoy-overloaded";

/// The route timeout and the per-try timeout of a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeouts {
    /// Over all attempts (`None`: off).
    pub global: Option<Duration>,
    /// Of each attempt (`None`: off).
    pub per_try: Option<Duration>,
    /// `per_try_idle_timeout`: the longest an attempt may go without a
    /// response event — before its headers and while its body streams.
    pub per_try_idle: Option<Duration>,
}

impl Timeouts {
    /// What `x-envoy-expected-rq-timeout-ms` says: the per-try timeout if set,
    /// else the route's.
    pub fn expected(&self) -> Option<Duration> {
        self.per_try.or(self.global)
    }

    /// When the route timeout fires for a request that was complete at
    /// `done_at` (`None`: still arriving, the timeout has not started).
    pub fn route_deadline(
        &self,
        done_at: Option<tokio::time::Instant>,
    ) -> Option<tokio::time::Instant> {
        done_at.and_then(|d| self.global.map(|g| d + g))
    }
}

/// What one attempt ended with.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    /// Response headers arrived.
    Response(u16, &'a HeaderMap),
    /// No response: connect failure, reset, termination.
    Failed(&'a SendError),
    /// The per-try timeout fired first.
    PerTryTimeout,
}

/// Whether a failed attempt is retried.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Retriable, but no retries are left (`upstream_rq_retry_limit_exceeded`).
    LimitExceeded,
    /// Retry after this back-off.
    Retry(Duration, Wait),
}

/// Which back-off a retry waits (Envoy counts each kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The jittered exponential back-off (`upstream_rq_retry_backoff_exponential`).
    Exponential,
    /// What the upstream asked for in a reset header
    /// (`upstream_rq_retry_backoff_ratelimited`).
    RateLimited,
}

impl Wait {
    /// Counts the retry's back-off in the cluster's stats.
    pub fn count(self, stats: &crate::stats::ClusterStats) {
        match self {
            Wait::Exponential => stats.rq_retry_backoff_exponential.inc(),
            Wait::RateLimited => stats.rq_retry_backoff_ratelimited.inc(),
        }
    }
}

/// The retry state of one request.
#[derive(Debug)]
pub struct Retry<'a> {
    on: RetryOn,
    remaining: u32,
    back_off: RetryBackOff,
    rate_limited: Option<&'a RateLimitedBackOff>,
    /// Back-off exponent (Envoy's `current_retry_`, from 1).
    step: u32,
    codes: Vec<u16>,
    headers: &'a [HeaderMatcher],
    header_names: Vec<HeaderName>,
    /// Reject hosts already tried.
    pub previous_hosts: bool,
    /// Extra host picks when the predicate rejects one.
    pub host_attempts: u32,
    /// `retry_priority` `previous_priorities`, when the policy has it.
    pub priorities: Option<super::priorities::PreviousPriorities>,
    /// The request's hash (route `hash_policy`), for a consistent-hashing
    /// cluster's re-picks.
    pub hash: Option<u64>,
}

/// Reads (and removes) the retry and timeout headers and builds the request's
/// retry state (`None`: no retries) and timeouts. The headers reach the router
/// only when the connection manager trusts the request: it strips them from
/// external ones.
pub fn plan<'a>(
    action: &'a RouteAction,
    vhost: &'a VirtualHost,
    headers: &mut HeaderMap,
) -> (Option<Retry<'a>>, Timeouts) {
    let policy: Option<&RetryPolicy> = action.retry_policy.as_ref().or(vhost.retry_policy.as_ref());
    // Envoy honours the headers only on internal requests (the connection
    // manager marks them `x-envoy-internal: true`); they are consumed either way.
    // One pass over the names first: most requests carry none of these headers
    // (an edge request does carry `x-envoy-external-address`), and each lookup
    // by name below parses and hashes that name.
    let any = headers.keys().any(|k| {
        matches!(
            k.as_str(),
            RETRY_ON
                | RETRY_GRPC_ON
                | MAX_RETRIES
                | RETRIABLE_CODES
                | RETRIABLE_HEADER_NAMES
                | PER_TRY_TIMEOUT
                | RQ_TIMEOUT
                | HEDGE
        )
    });
    let trusted = any
        && headers
            .get("x-envoy-internal")
            .is_some_and(|v| v.as_bytes() == b"true");
    let text = |h: &mut HeaderMap, name: &str| {
        any.then(|| h.remove(name))
            .flatten()
            .filter(|_| trusted)
            .and_then(|v| v.to_str().ok().map(str::to_string))
    };
    let retry_on = text(headers, RETRY_ON);
    let grpc_on = text(headers, RETRY_GRPC_ON);
    let max_retries = text(headers, MAX_RETRIES);
    let codes = text(headers, RETRIABLE_CODES);
    let names = text(headers, RETRIABLE_HEADER_NAMES);
    let per_try_header = text(headers, PER_TRY_TIMEOUT);
    let global_header = text(headers, RQ_TIMEOUT);
    if any {
        headers.remove(HEDGE);
    }

    let ms = |s: &str| s.trim().parse::<u64>().ok().map(Duration::from_millis);
    let mut global = action.timeout;
    if let Some(t) = global_header.as_deref().and_then(ms) {
        global = (!t.is_zero()).then_some(t);
    }
    let mut per_try = policy.and_then(|p| p.per_try_timeout);
    if let Some(t) = per_try_header.as_deref().and_then(ms) {
        per_try = (!t.is_zero()).then_some(t);
    }
    // A per-try timeout at or past the route's is ignored, as in Envoy.
    if let (Some(p), Some(g)) = (per_try, global)
        && p >= g
    {
        per_try = None;
    }
    let timeouts = Timeouts {
        global,
        per_try,
        per_try_idle: policy.and_then(|p| p.per_try_idle_timeout),
    };

    if policy.is_none() && retry_on.is_none() && grpc_on.is_none() {
        return (None, timeouts);
    }
    let mut on = policy.map_or(RetryOn::NONE, |p| p.retry_on);
    // Unknown values in the headers are ignored (Envoy skips them).
    for list in [&retry_on, &grpc_on].into_iter().flatten() {
        for item in list.split(',').map(str::trim) {
            if let Some(v) = RetryOn::from_name(item) {
                on = on | v;
            }
        }
    }
    let mut remaining = policy.map_or(1, |p| p.num_retries);
    if let Some(n) = max_retries
        .as_deref()
        .and_then(|s| s.trim().parse::<u32>().ok())
    {
        remaining = n;
    }
    let mut status_codes = policy.map_or_else(Vec::new, |p| p.retriable_status_codes.clone());
    if let Some(list) = &codes {
        status_codes.extend(list.split(',').filter_map(|c| c.trim().parse::<u16>().ok()));
    }
    let header_names = names
        .as_deref()
        .map(|l| {
            l.split(',')
                .filter_map(|n| HeaderName::try_from(n.trim()).ok())
                .collect()
        })
        .unwrap_or_default();
    // `retriable_request_headers`: when set, a request matching none is not retried.
    if let Some(p) = policy
        && !p.retriable_request_headers.is_empty()
        && !p
            .retriable_request_headers
            .iter()
            .any(|m| m.matches(joined(headers, &m.name).as_deref()))
    {
        return (None, timeouts);
    }
    if on.is_empty() {
        return (None, timeouts);
    }
    let retry = Retry {
        on,
        remaining,
        back_off: policy.map_or_else(RetryBackOff::default, |p| p.back_off),
        rate_limited: policy.and_then(|p| p.rate_limited_back_off.as_ref()),
        step: 1,
        codes: status_codes,
        headers: policy.map_or(&[][..], |p| &p.retriable_headers[..]),
        header_names,
        previous_hosts: policy.is_some_and(|p| !p.retry_host_predicates.is_empty()),
        host_attempts: policy.map_or(0, |p| p.host_selection_retry_max_attempts),
        priorities: policy
            .and_then(|p| p.previous_priorities)
            .map(super::priorities::PreviousPriorities::new),
        hash: None,
    };
    (Some(retry), timeouts)
}

/// The retry state of one of courier's own calls (ext_authz's check) under a core
/// `RetryPolicy`: Envoy turns it into a route policy with only the conditions, the retry
/// count and the back-off set (`Http::Utility::convertCoreToRouteRetryPolicy`).
pub fn for_call(policy: &CallRetryPolicy) -> Retry<'static> {
    Retry {
        on: policy.retry_on,
        remaining: policy.num_retries,
        back_off: policy.back_off,
        rate_limited: None,
        step: 1,
        codes: Vec::new(),
        headers: &[],
        header_names: Vec::new(),
        previous_hosts: false,
        host_attempts: 0,
        priorities: None,
        hash: None,
    }
}

/// A header's values joined with `,` (`None` when absent).
fn joined(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut values = headers.get_all(name).iter().filter_map(|v| v.to_str().ok());
    let first = values.next()?;
    let mut out = first.to_string();
    for v in values {
        out.push(',');
        out.push_str(v);
    }
    Some(out)
}

impl Retry<'_> {
    /// Whether `outcome` is retriable under this policy.
    pub fn retriable(&self, outcome: Outcome<'_>) -> bool {
        let on = |c| self.on.contains(c);
        match outcome {
            Outcome::PerTryTimeout => {
                on(RetryOn::FIVE_XX) || on(RetryOn::GATEWAY_ERROR) || on(RetryOn::RESET)
            }
            Outcome::Failed(e) => {
                let connect = matches!(e, SendError::ConnectFailure(_) | SendError::ConnectTimeout);
                let refused = matches!(e, SendError::Reset(r) if r.contains("refused"));
                on(RetryOn::FIVE_XX)
                    || on(RetryOn::GATEWAY_ERROR)
                    || on(RetryOn::RESET)
                    || (connect && on(RetryOn::CONNECT_FAILURE))
                    || (connect && on(RetryOn::RESET_BEFORE_REQUEST))
                    || (refused && on(RetryOn::REFUSED_STREAM))
            }
            Outcome::Response(status, headers) => self.response_retriable(status, headers),
        }
    }

    fn response_retriable(&self, status: u16, headers: &HeaderMap) -> bool {
        let on = |c| self.on.contains(c);
        // An overloaded upstream is never retried.
        if headers.contains_key(OVERLOADED) {
            return false;
        }
        // A response an upstream Envoy rate limited is retried only under
        // `envoy-ratelimited`, whatever its status.
        if headers.contains_key(RATELIMITED) {
            return on(RetryOn::ENVOY_RATELIMITED);
        }
        if on(RetryOn::FIVE_XX) && (500..600).contains(&status) {
            return true;
        }
        if on(RetryOn::GATEWAY_ERROR) && matches!(status, 502..=504) {
            return true;
        }
        if on(RetryOn::RETRIABLE_4XX) && status == 409 {
            return true;
        }
        if on(RetryOn::RETRIABLE_STATUS_CODES) && self.codes.contains(&status) {
            return true;
        }
        if on(RetryOn::RETRIABLE_HEADERS)
            && (self
                .headers
                .iter()
                .any(|m| m.matches(joined(headers, &m.name).as_deref()))
                || self.header_names.iter().any(|n| headers.contains_key(n)))
        {
            return true;
        }
        grpc_retriable(self.on, headers)
    }

    /// The decision for a retriable outcome: a retry (taking one of the retries
    /// left) or the limit. `response` is the retriable response's headers, where
    /// the outcome was one: a reset header in it sets the back-off when
    /// `rate_limited_retry_back_off` is configured.
    pub fn next(&mut self, response: Option<&HeaderMap>) -> Decision {
        if self.remaining == 0 {
            return Decision::LimitExceeded;
        }
        self.remaining -= 1;
        if let (Some(policy), Some(headers)) = (self.rate_limited, response)
            && let Some(wait) = reset_interval(policy, headers, unix_now())
        {
            return Decision::Retry(wait, Wait::RateLimited);
        }
        Decision::Retry(self.back_off(), Wait::Exponential)
    }

    /// Envoy's jittered exponential back-off: retry N waits a random time below
    /// `(2^N - 1) x base`, capped at the max.
    fn back_off(&mut self) -> Duration {
        let base = self.back_off.base_interval.as_millis().max(1) as u64;
        let max = self.back_off.max_interval.as_millis() as u64;
        let multiplier = (1u64 << self.step.min(32)) - 1;
        let ceiling = multiplier.saturating_mul(base);
        if ceiling <= max {
            self.step += 1;
        }
        Duration::from_millis((fastrand::u64(..) % ceiling.max(1)).min(max))
    }
}

/// Envoy's rate-limited back-off: the first reset header that parses to an
/// interval within `max_interval` (only its first value counts: the header is
/// trusted), longer than 1 ms, jittered to `[interval, 1.5 × interval)`.
fn reset_interval(policy: &RateLimitedBackOff, headers: &HeaderMap, now: u64) -> Option<Duration> {
    let ms = policy.reset_headers.iter().find_map(|h| {
        let value = headers.get(h.name.as_str())?.to_str().ok()?;
        let n = value.parse::<u64>().ok()?;
        let secs = match h.format {
            ResetFormat::Seconds => n,
            ResetFormat::UnixTimestamp => n.checked_sub(now)?,
        };
        let ms = secs.saturating_mul(1000);
        (u128::from(ms) <= policy.max_interval.as_millis()).then_some(ms)
    })?;
    // Envoy builds its lower-bound strategy only for intervals above 1 ms.
    (ms > 1).then(|| Duration::from_millis(ms + fastrand::u64(..) % (ms / 2)))
}

/// Seconds since the epoch, for `UNIX_TIMESTAMP` reset headers.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The gRPC conditions: a `grpc-status` in the response headers (a trailers-only
/// response), as Envoy checks it.
fn grpc_retriable(on: RetryOn, headers: &HeaderMap) -> bool {
    let Some(code) = headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
    else {
        return false;
    };
    let want = match code {
        1 => RetryOn::GRPC_CANCELLED,
        4 => RetryOn::GRPC_DEADLINE_EXCEEDED,
        8 => RetryOn::GRPC_RESOURCE_EXHAUSTED,
        13 => RetryOn::GRPC_INTERNAL,
        14 => RetryOn::GRPC_UNAVAILABLE,
        _ => return false,
    };
    on.contains(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(on: RetryOn, n: u32) -> Retry<'static> {
        Retry {
            on,
            remaining: n,
            back_off: RetryBackOff::default(),
            rate_limited: None,
            step: 1,
            codes: vec![418],
            headers: &[],
            header_names: Vec::new(),
            previous_hosts: false,
            host_attempts: 0,
            priorities: None,
            hash: None,
        }
    }

    #[test]
    fn conditions() {
        let h = HeaderMap::new();
        let r = retry(RetryOn::GATEWAY_ERROR, 1);
        assert!(r.retriable(Outcome::Response(503, &h)));
        assert!(!r.retriable(Outcome::Response(500, &h)));
        assert!(r.retriable(Outcome::PerTryTimeout));
        let c = retry(RetryOn::CONNECT_FAILURE, 1);
        assert!(c.retriable(Outcome::Failed(&SendError::ConnectTimeout)));
        assert!(!c.retriable(Outcome::Failed(&SendError::Termination)));
        assert!(!c.retriable(Outcome::Response(503, &h)));
        let s = retry(RetryOn::RETRIABLE_STATUS_CODES, 1);
        assert!(s.retriable(Outcome::Response(418, &h)));
        let mut g = HeaderMap::new();
        g.insert("grpc-status", http::HeaderValue::from_static("14"));
        assert!(retry(RetryOn::GRPC_UNAVAILABLE, 1).retriable(Outcome::Response(200, &g)));
        assert!(!retry(RetryOn::GRPC_CANCELLED, 1).retriable(Outcome::Response(200, &g)));
        let mut o = HeaderMap::new();
        o.insert(OVERLOADED, http::HeaderValue::from_static("true"));
        assert!(!retry(RetryOn::FIVE_XX, 1).retriable(Outcome::Response(503, &o)));
    }

    #[test]
    fn limit_and_back_off_bounds() {
        let mut r = retry(RetryOn::FIVE_XX, 3);
        let bounds = [25, 75, 175];
        for b in bounds {
            match r.next(None) {
                Decision::Retry(d, Wait::Exponential) => {
                    assert!(d < Duration::from_millis(b), "{d:?} {b}")
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(r.next(None), Decision::LimitExceeded);
    }

    #[test]
    fn ratelimited_response_retried_only_under_envoy_ratelimited() {
        let mut h = HeaderMap::new();
        h.insert(RATELIMITED, http::HeaderValue::from_static("true"));
        assert!(!retry(RetryOn::FIVE_XX, 1).retriable(Outcome::Response(503, &h)));
        assert!(retry(RetryOn::ENVOY_RATELIMITED, 1).retriable(Outcome::Response(429, &h)));
    }

    #[test]
    fn reset_headers_set_the_back_off() {
        use courier_config::route::ResetHeader;
        let policy = RateLimitedBackOff {
            reset_headers: vec![
                ResetHeader {
                    name: "retry-after".into(),
                    format: ResetFormat::Seconds,
                },
                ResetHeader {
                    name: "x-ratelimit-reset".into(),
                    format: ResetFormat::UnixTimestamp,
                },
            ],
            max_interval: Duration::from_secs(10),
        };
        let now = 1_000_000;
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, http::HeaderValue::from_static(v));
            }
            h
        };
        let within = |d: Option<Duration>, ms: u64| {
            let d = d.expect("a rate-limited back-off");
            assert!(
                d >= Duration::from_millis(ms) && d < Duration::from_millis(ms * 3 / 2),
                "{d:?} for {ms} ms"
            );
        };
        for _ in 0..50 {
            within(
                reset_interval(&policy, &headers(&[("retry-after", "2")]), now),
                2000,
            );
            // The first header past max_interval is skipped for the next one.
            within(
                reset_interval(
                    &policy,
                    &headers(&[("retry-after", "11"), ("x-ratelimit-reset", "1000003")]),
                    now,
                ),
                3000,
            );
        }
        // Only the first value of a repeated header counts.
        assert_eq!(
            reset_interval(
                &policy,
                &headers(&[("retry-after", "x"), ("retry-after", "1")]),
                now
            ),
            None
        );
        // A past timestamp, zero, and values over the cap give no interval.
        assert_eq!(
            reset_interval(&policy, &headers(&[("x-ratelimit-reset", "999999")]), now),
            None
        );
        assert_eq!(
            reset_interval(&policy, &headers(&[("retry-after", "0")]), now),
            None
        );
        assert_eq!(
            reset_interval(&policy, &headers(&[("retry-after", "11")]), now),
            None
        );

        let mut r = retry(RetryOn::FIVE_XX, 2);
        r.rate_limited = Some(&policy);
        assert!(matches!(
            r.next(Some(&headers(&[("retry-after", "1")]))),
            Decision::Retry(d, Wait::RateLimited) if d >= Duration::from_secs(1)
        ));
        assert!(matches!(
            r.next(Some(&HeaderMap::new())),
            Decision::Retry(_, Wait::Exponential)
        ));
    }
}
