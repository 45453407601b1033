//! One attempt, whichever scheduler runs it ([`super::run`] one after the
//! other, [`super::hedge`] racing them): the body it sends, its request, what
//! its result counts (stats, outlier detection), and whether and when a retry
//! follows it.

use super::retry::{Decision, Outcome, Retry};
use super::{ATTEMPT_COUNT, HeldBody};
use crate::request::body::{RequestBody, UpstreamBody};
use crate::request::header_case::ReadCase;
use crate::request::tee::Teed;
use crate::stats::vhost::Charges;
use crate::upstream::circuit::Held;
use crate::upstream::host::Host;
use crate::upstream::pool::{Failed, Lease, SendError};
use crate::upstream::proxy_header::Downstream;
use crate::upstream::{UpstreamCluster, outlier};
use courier_filters::LocalReply;
use courier_filters::upstream::Attempt;
use http::header::HeaderValue;
use http::request::Parts;
use http::{Request, Response};
use hyper::body::Incoming;
use std::time::Duration;
use tokio::sync::oneshot;

/// The body of the next attempt: the held bytes again, or the body that can
/// be sent once (`None` once it has been).
pub(super) fn next_body(body: &mut HeldBody) -> Option<UpstreamBody> {
    match body {
        HeldBody::Whole(d, t) => Some(UpstreamBody::new(
            RequestBody::replay(d.clone(), t.clone(), None),
            None,
        )),
        HeldBody::Once(b) => b.take(),
    }
}

/// An attempt's request: a copy of the head `parts` with `body`, and
/// `x-envoy-attempt-count` when asked for.
pub(super) fn request(
    parts: &Parts,
    body: UpstreamBody,
    attempt: Option<u32>,
) -> Request<UpstreamBody> {
    let mut r = Request::new(body);
    *r.method_mut() = parts.method.clone();
    *r.uri_mut() = parts.uri.clone();
    *r.version_mut() = parts.version;
    *r.headers_mut() = parts.headers.clone();
    if let Some(case) = parts.extensions.get::<ReadCase>() {
        *r.extensions_mut() = case.extensions();
    }
    if let Some(d) = parts.extensions.get::<Downstream>() {
        r.extensions_mut().insert(*d);
    }
    with_attempt(r, attempt)
}

/// [`request`] for the only attempt: the head is moved, not copied (its
/// extensions are dropped as the copy drops them, but for the header case
/// record of `preserve_case` and the downstream addresses of a PROXY header).
pub(super) fn request_once(
    mut parts: Parts,
    body: UpstreamBody,
    attempt: Option<u32>,
) -> Request<UpstreamBody> {
    let case = parts.extensions.remove::<ReadCase>();
    let downstream = parts.extensions.remove::<Downstream>();
    parts.extensions.clear();
    if let Some(case) = case {
        parts.extensions = case.extensions();
    }
    if let Some(d) = downstream {
        parts.extensions.insert(d);
    }
    with_attempt(Request::from_parts(parts, body), attempt)
}

fn with_attempt(mut r: Request<UpstreamBody>, attempt: Option<u32>) -> Request<UpstreamBody> {
    if let Some(n) = attempt {
        r.headers_mut().insert(ATTEMPT_COUNT, HeaderValue::from(n));
    }
    r
}

/// Runs the cluster's upstream HTTP filters on an attempt's request head
/// (Envoy's upstream filter chain, before the request goes to the pool):
/// `Err` is a filter's local reply, the attempt's answer in place of the
/// upstream's.
pub(super) fn decode_filters(
    cluster: &UpstreamCluster,
    req: &mut Request<UpstreamBody>,
) -> Result<Option<Attempt>, Box<LocalReply>> {
    match cluster.filters.as_deref() {
        Some(f) => f.decode(req.headers_mut()).map(Some),
        None => Ok(None),
    }
}

/// Tells the cluster's upstream HTTP filters an attempt's response head; a
/// gRPC status they must read from the trailers leaves its recorder in the
/// response's extensions, for the router to put on the body.
pub(super) fn encode_filters(
    cluster: &UpstreamCluster,
    attempt: Option<Attempt>,
    resp: &mut Response<Incoming>,
) {
    if let (Some(f), Some(a)) = (cluster.filters.as_deref(), attempt) {
        use http_body::Body as _;
        let end_stream = resp.body().is_end_stream();
        if let Some(t) = f.encode(a, resp.status().as_u16(), resp.headers(), end_stream) {
            resp.extensions_mut().insert(t);
        }
    }
}

/// An attempt's result once counted.
// Matched as soon as returned; boxing the response would allocate per request.
#[allow(clippy::large_enum_variant)]
pub(super) enum Ended {
    /// Response headers arrived.
    Response(Response<Incoming>, Lease),
    /// No response; whether the body can still be sent again (a connect
    /// failure gives an unsent body back).
    Failed(SendError, bool),
    /// `max_pending_requests` refused it: never retried.
    Overflow,
    /// `max_connection_pools` refused a pool for the host: answered as
    /// without a host, never retried.
    PoolOverflow,
}

/// Counts an attempt's result (`upstream_rq_*`, the response class, outlier
/// detection unless `outlier` is off: a hedged attempt whose per-try timeout
/// already counted as its outlier event) and takes back the body a connect
/// failure returns.
pub(super) fn record(
    cluster: &UpstreamCluster,
    stats: &Charges<'_>,
    host: &Host,
    result: Result<(Response<Incoming>, Lease), Failed>,
    body: &mut HeldBody,
    outlier: bool,
) -> Ended {
    match result {
        Ok((resp, lease)) => {
            let status = resp.status().as_u16();
            stats.attached();
            stats.response(status);
            host.stats.attached();
            host.stats.charge(status);
            if outlier {
                outlier::record_status(cluster, host, status);
            }
            Ended::Response(resp, lease)
        }
        Err((SendError::Overflow, _)) => {
            stats.rq_pending_overflow.inc();
            Ended::Overflow
        }
        Err((SendError::PoolOverflow, _)) => Ended::PoolOverflow,
        Err((e, back)) => {
            if e.attached() {
                stats.attached();
                host.stats.attached();
            }
            stats.response(e.status());
            host.stats.charge(e.status());
            outlier::record_failure(cluster, host, &e);
            let replayable = match (body, back) {
                (HeldBody::Whole(..), _) => true,
                (HeldBody::Once(slot @ None), Some(r)) => {
                    *slot = Some(r.into_body());
                    true
                }
                (HeldBody::Once(_), _) => false,
            };
            Ended::Failed(e, replayable)
        }
    }
}

/// Whether the body can be sent again: held whole, or copied whole while it
/// was sent (then held whole from now on).
pub(super) fn replayable(body: &mut HeldBody, teed: &mut Option<oneshot::Receiver<Teed>>) -> bool {
    if matches!(body, HeldBody::Whole(..)) {
        return true;
    }
    if let Some(rx) = teed.as_mut()
        && let Ok((d, t)) = rx.try_recv()
    {
        *body = HeldBody::Whole(d, t);
        *teed = None;
        return true;
    }
    false
}

/// What follows an attempt that ended with `outcome`.
pub(super) enum Next {
    /// The outcome is not one the policy retries.
    NotRetriable,
    /// Retriable, but the body cannot be sent again (past the buffer limit).
    NotReplayable,
    /// Retriable, but no retry is left (`upstream_rq_retry_limit_exceeded`).
    LimitExceeded,
    /// Retriable, but `max_retries` refused it (`upstream_rq_retry_overflow`).
    Overflow,
    /// A retry after `wait`, holding its circuit-breaker retry slot.
    Retry(Duration, Held),
}

/// Decides on a retry after an attempt, counting it as Envoy does
/// (`upstream_rq_retry`, the back-off kind, the limit and overflow counters).
/// `replayable`: the attempt's body can be sent again as things stand (a
/// body copied while sent is checked here too).
#[allow(clippy::too_many_arguments)]
pub(super) fn next(
    retry: &mut Retry<'_>,
    outcome: Outcome<'_>,
    replayable_now: bool,
    body: &mut HeldBody,
    teed: &mut Option<oneshot::Receiver<Teed>>,
    cluster: &UpstreamCluster,
    stats: &Charges<'_>,
    high: bool,
) -> Next {
    if !retry.retriable(outcome) {
        return Next::NotRetriable;
    }
    if !replayable_now && !replayable(body, teed) {
        return Next::NotReplayable;
    }
    let response = match outcome {
        Outcome::Response(_, headers) => Some(headers),
        _ => None,
    };
    let (wait, kind) = match retry.next(response) {
        Decision::Retry(wait, kind) => (wait, kind),
        Decision::LimitExceeded => {
            stats.retry_limit_exceeded();
            return Next::LimitExceeded;
        }
    };
    let Some(slot) = cluster.circuit.try_retry(high) else {
        stats.retry_overflow();
        return Next::Overflow;
    };
    stats.retry();
    kind.count(stats);
    Next::Retry(wait, slot)
}
