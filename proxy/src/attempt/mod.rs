//! The attempts of one forwarded request: circuit-breaker admission, the
//! per-try and route timeouts, retries with back-off and host predicates, and
//! the request body held for replay up to the buffer limit.

mod hedge;
mod one;
mod priorities;
pub mod retry;

use crate::request::body::RequestBody;
use crate::request::tee::{Tee, Teed};
use crate::stats::vhost::Charges;
use crate::upstream::circuit::Held;
use crate::upstream::host::Host;
use crate::upstream::pool::{self, Lease, SendError, UpstreamBody};
use crate::upstream::{UpstreamCluster, lb, outlier};
use bytes::{Bytes, BytesMut};
use http::header::HeaderName;
use http::request::Parts;
use http::{HeaderMap, Response};
use http_body::Body as _;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use one::Ended;
use retry::{Outcome, Retry, Timeouts};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// `x-envoy-attempt-count`.
pub const ATTEMPT_COUNT: HeaderName = HeaderName::from_static("x-envoy-attempt-count");

/// What the attempts need.
pub struct Attempts<'a> {
    /// The cluster.
    pub cluster: &'a UpstreamCluster,
    /// This worker's stats of the cluster.
    pub stats: &'a Charges<'a>,
    /// HIGH routing priority (circuit breakers).
    pub high: bool,
    /// The retry state (`None`: one attempt).
    pub retry: Option<Retry<'a>>,
    /// Route and per-try timeouts.
    pub timeouts: Timeouts,
    /// Send `x-envoy-attempt-count` upstream.
    pub count_upstream: bool,
    /// Request body bytes held for a retry at most.
    pub buffer_limit: u64,
    /// When the request started: a hedged request's route timeout runs from
    /// here (an unhedged one's from the request's end, see `deadlines`).
    pub started: Instant,
    /// The request's progress, told when an attempt timeout is armed.
    pub progress: &'a crate::request::progress::Progress,
    /// `hedge_on_per_try_timeout`: a per-try timeout starts a retry without
    /// cancelling the attempt.
    pub hedge: bool,
    /// The cluster's `common_http_protocol_options.max_stream_duration`: an
    /// attempt still without response headers this long after it started is
    /// reset (retriable as a reset) and, when not retried, answered with 408
    /// or 504 `upstream max stream duration reached`.
    pub max_stream: Option<std::time::Duration>,
}

/// How the last attempt ended.
pub enum Final {
    /// Response headers (the lease is released when the body ends).
    Response(Response<Incoming>, Lease),
    /// An upgrade's response (its connection is the upgraded stream's).
    Upgraded(Response<Incoming>),
    /// No response.
    Failed(SendError),
    /// The route timeout or the last per-try timeout fired.
    Timeout,
    /// The cluster's `max_stream_duration` ended the last attempt before its
    /// response headers.
    MaxStreamDuration,
    /// A circuit breaker refused the request.
    Overflow,
    /// No host to send a retry to.
    NoHost,
    /// `max_connection_pools` refused a new pool for the host.
    PoolOverflow,
    /// A cluster's upstream HTTP filter answered in place of the upstream
    /// (admission control's rejection, a credential that could not be
    /// injected).
    Local(Box<courier_filters::LocalReply>),
}

/// The end of the attempts.
pub struct Done {
    /// How the last attempt ended.
    pub last: Final,
    /// The host of the last attempt.
    pub host: Arc<Host>,
    /// Attempts made (1 = no retry).
    pub attempts: u32,
    /// The last outcome was retriable but no retry was left.
    pub limit_exceeded: bool,
    /// When the last attempt's `max_stream_duration` ends: its response body
    /// is cut short then.
    pub stream_deadline: Option<Instant>,
}

pub(super) enum HeldBody {
    /// The whole body (and trailers), sent again on every attempt.
    Whole(Bytes, Option<HeaderMap>),
    /// Sent once (too long to hold); `None` once taken.
    Once(Option<UpstreamBody>),
}

/// Reads the body ahead, up to `limit` bytes, so a retry can send it again.
async fn hold(mut body: UpstreamBody, limit: u64) -> HeldBody {
    if body.is_end_stream() {
        return HeldBody::Whole(Bytes::new(), None);
    }
    let mut data = BytesMut::new();
    // Bounded by the limit: each data frame grows `data` or ends the loop.
    loop {
        match body.frame().await {
            None => return HeldBody::Whole(data.freeze(), None),
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => {
                    data.extend_from_slice(&d);
                    if data.len() as u64 > limit {
                        break;
                    }
                }
                Err(f) => return HeldBody::Whole(data.freeze(), f.into_trailers().ok()),
            },
            // The downstream failed mid-body; sending the rest surfaces it.
            Some(Err(_)) => break,
        }
    }
    let rest = UpstreamBody::new(
        RequestBody::replay(data.freeze(), None, Some(Box::new(body))),
        None,
    );
    HeldBody::Once(Some(rest))
}

/// Whether the body ends within `limit` bytes: empty, or its `content-length`
/// says so.
fn bounded(headers: &HeaderMap, body: &UpstreamBody, limit: u64) -> bool {
    body.is_end_stream()
        || headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|n| n <= limit)
}

/// Picks a host for a retry: `previous_hosts` rejects hosts already tried, for
/// up to `host_selection_retry_max_attempts` extra picks; the last pick is used
/// when every pick was rejected, as in Envoy. With `previous_priorities` the
/// level comes from the retry's own priority load when it has one.
pub(super) fn pick(
    cluster: &UpstreamCluster,
    retry: &mut Retry<'_>,
    tried: &[SocketAddr],
) -> Option<Arc<Host>> {
    let set = cluster.hosts();
    let load = retry.priorities.as_mut().and_then(|p| {
        let attempted: Vec<Option<usize>> = tried.iter().map(|a| set.priority_of(*a)).collect();
        p.load(&attempted, &set.level_health())
    });
    let mut last = None;
    // A consistent-hashing cluster moves re-pick `i` along its table, as
    // Envoy's host selection retries do.
    for i in 0..=retry.host_attempts.min(64) {
        let h = match &load {
            Some(l) => {
                let p = priorities::priority_for(l, fastrand::u32(0..100));
                lb::choose_at_priority(cluster, &set, p)?
            }
            None => lb::choose_hashed(cluster, &set, retry.hash, i)?,
        };
        if !retry.previous_hosts || !tried.contains(&h.address) {
            return Some(h);
        }
        last = Some(h);
    }
    last
}

/// Runs the attempts: the first to `host`, retries as the policy allows.
pub async fn run(a: Attempts<'_>, parts: Parts, body: UpstreamBody, host: Arc<Host>) -> Done {
    let Attempts {
        cluster,
        stats,
        high,
        mut retry,
        timeouts,
        count_upstream,
        buffer_limit,
        started,
        progress,
        hedge,
        max_stream,
    } = a;
    let mut teed: Option<oneshot::Receiver<Teed>> = None;
    // Without a retry policy the request goes once, as it came.
    let (mut parts, mut body) = match retry {
        // Read ahead only a body known to end within the limit: one of unknown
        // length (a gRPC stream, say) may not end before its response starts.
        Some(_) if bounded(&parts.headers, &body, buffer_limit) => {
            (Some(parts), hold(body, buffer_limit).await)
        }
        // One of unknown length is copied as it is sent (Envoy buffers it
        // while streaming the first attempt), for a retry once it has ended.
        Some(_) => {
            let (t, rx) = Tee::new(buffer_limit);
            teed = Some(rx);
            let b = UpstreamBody::new(RequestBody::teed(body, t), None);
            (Some(parts), HeldBody::Once(Some(b)))
        }
        None => (Some(parts), HeldBody::Once(Some(body))),
    };
    // Hedging matters only when a per-try timeout can fire and be retried.
    if hedge && retry.is_some() && timeouts.per_try.is_some() {
        let a = Attempts {
            cluster,
            stats,
            high,
            retry,
            timeouts,
            count_upstream,
            buffer_limit,
            started,
            progress,
            hedge,
            max_stream,
        };
        return match parts {
            // Boxed: hedging is rare, and its state would otherwise sit in
            // every request's future.
            Some(p) => Box::pin(hedge::run(a, p, body, teed, host)).await,
            None => Done {
                last: Final::Failed(SendError::Termination),
                host,
                attempts: 1,
                limit_exceeded: false,
                stream_deadline: None,
            },
        };
    }
    let mut host = host;
    let mut tried: Vec<SocketAddr> = Vec::new();
    let mut attempt: u32 = 1;
    let mut retry_slot: Option<Held> = None;
    let mut retried = false;
    // Bounded: each pass either returns or uses one of the retries left.
    loop {
        let max_at = max_stream.map(|d| Instant::now() + d);
        let done = |last, host, limit_exceeded| Done {
            last,
            host,
            attempts: attempt,
            limit_exceeded,
            stream_deadline: max_at,
        };
        let Some(slot) = cluster.circuit.try_request(high) else {
            stats.rq_pending_overflow.inc();
            return done(Final::Overflow, host, false);
        };
        if parts.is_none() {
            return done(Final::Failed(SendError::Termination), host, false);
        }
        let Some(b) = one::next_body(&mut body) else {
            return done(Final::Failed(SendError::Termination), host, false);
        };
        let count = count_upstream.then_some(attempt);
        // Without a retry policy the head goes once: moved, not copied.
        let mut req = match (&retry, parts.as_ref()) {
            (Some(_), Some(template)) => one::request(template, b, count),
            _ => match parts.take() {
                Some(p) => one::request_once(p, b, count),
                None => return done(Final::Failed(SendError::Termination), host, false),
            },
        };
        let filtered = match one::decode_filters(cluster, &mut req) {
            Ok(a) => a,
            Err(reply) => return done(Final::Local(reply), host, false),
        };
        // Pinned in place and awaited once (through `timed`), so the attempt's
        // future sits only in this suspend point's part of `run`'s future: one
        // awaited from several points would be kept beside every other state
        // (the read-ahead, hedging), and hyper moves the whole request future
        // per request.
        let (try_deadline, result) = {
            let sent = std::pin::pin!(pool::send_attempt_at(cluster, &host, req, stats, high));
            timed(sent, &timeouts, max_at, progress).await
        };
        // The retry slot is held until the retried attempt ends (Envoy's
        // retries().inc() .. resetRetry()).
        drop(retry_slot.take());
        // A filter answers the request (its request body encoder failed): no retry,
        // nothing counted as the upstream's; the router sends the filter's reply.
        if progress.filter_reply().is_some() {
            return done(Final::Failed(SendError::Termination), host, false);
        }
        // Read only by a retry's host pick: no allocation for a request without one.
        if retry.is_some() {
            tried.push(host.address);
        }
        let per_try = try_deadline.is_some_and(|d| d.per_try);
        let idle_first = try_deadline.is_some_and(|d| d.idle);
        let (last, replayable) = match result {
            Waited::MaxStreamDuration => {
                // Envoy's onStreamMaxDurationReached: the stream is reset and
                // may be retried as a local reset; nothing is charged as the
                // upstream's response.
                stats.rq_max_duration_reached.inc();
                (
                    Final::MaxStreamDuration,
                    matches!(body, HeldBody::Whole(..)),
                )
            }
            Waited::TimedOut => {
                stats.attached();
                stats.response(504);
                host.stats.attached();
                host.stats.timed_out();
                if per_try && idle_first {
                    stats.rq_per_try_idle_timeout.inc();
                } else if per_try {
                    stats.rq_per_try_timeout.inc();
                } else {
                    stats.timeout();
                }
                outlier::record_timeout(cluster, &host);
                if !per_try {
                    return done(Final::Timeout, host, false);
                }
                (Final::Timeout, matches!(body, HeldBody::Whole(..)))
            }
            Waited::Done(result) => {
                match one::record(cluster, stats, &host, result, &mut body, true) {
                    Ended::Overflow => return done(Final::Overflow, host, false),
                    Ended::PoolOverflow => return done(Final::PoolOverflow, host, false),
                    Ended::Failed(e, replayable) => (Final::Failed(e), replayable),
                    Ended::Response(mut resp, mut lease) => {
                        one::encode_filters(cluster, filtered, &mut resp);
                        lease.hold(slot);
                        let whole = matches!(body, HeldBody::Whole(..));
                        (Final::Response(resp, lease), whole)
                    }
                }
            }
        };
        let Some(r) = retry.as_mut() else {
            return done(last, host, false);
        };
        let outcome = match &last {
            Final::Response(resp, _) => Outcome::Response(resp.status().as_u16(), resp.headers()),
            Final::Failed(e) => Outcome::Failed(e),
            Final::MaxStreamDuration => Outcome::Failed(&LOCAL_RESET),
            _ => Outcome::PerTryTimeout,
        };
        let wait = match one::next(
            r, outcome, replayable, &mut body, &mut teed, cluster, stats, high,
        ) {
            one::Next::Retry(wait, slot) => {
                retry_slot = Some(slot);
                wait
            }
            one::Next::NotRetriable => {
                if retried {
                    stats.retry_success();
                }
                return done(last, host, false);
            }
            one::Next::LimitExceeded => return done(last, host, true),
            one::Next::NotReplayable | one::Next::Overflow => return done(last, host, false),
        };
        // The failed attempt's response (and connection) is dropped here.
        drop(last);
        let wake = Instant::now() + wait;
        match timeouts.route_deadline(progress.done_at()) {
            Some(g) if g <= wake => {
                tokio::time::sleep_until(g).await;
                stats.timeout();
                return done(Final::Timeout, host, false);
            }
            _ => tokio::time::sleep_until(wake).await,
        }
        host = match pick(cluster, r, &tried) {
            Some(h) => h,
            // A dynamic forward proxy cluster's one host for the name.
            None if cluster.dynamic.is_some() => host,
            None => return done(Final::NoHost, host, false),
        };
        attempt += 1;
        retried = true;
    }
}

/// The reset a `max_stream_duration` is retried as (Envoy's `LocalReset`).
const LOCAL_RESET: SendError = SendError::Reset("local reset");

/// How waiting for an attempt ended.
enum Waited<T> {
    /// It ended (response headers or a failure).
    Done(T),
    /// A timeout fired (which one: the [`Deadline`] returned beside).
    TimedOut,
    /// The cluster's `max_stream_duration` passed first.
    MaxStreamDuration,
}

/// Waits for an attempt under its deadlines: the per-try timeout and the
/// per-try idle timer (which, before the response starts, nothing resets) end
/// it alike, retriably; the cluster's `max_stream_duration` (ending at
/// `max_at`) runs whether or not the request is complete. Envoy arms that at
/// pool ready; courier at the attempt's start, so it also covers the
/// connection's set-up.
async fn timed<F: Future>(
    mut sent: std::pin::Pin<&mut F>,
    timeouts: &Timeouts,
    max_at: Option<Instant>,
    progress: &crate::request::progress::Progress,
) -> (Option<Deadline>, Waited<F::Output>) {
    let attempt_start = Instant::now();
    let far = || attempt_start + std::time::Duration::from_secs(86_400 * 365);
    loop {
        // A filter answers instead (its request body encoder failed): `run` sees it.
        if progress.filter_reply().is_some() {
            return (None, Waited::TimedOut);
        }
        let done_at = progress.done_at();
        let try_deadline = deadlines(timeouts, attempt_start, done_at);
        if done_at.is_none() {
            // Still arriving: Envoy starts the route and per-try timeouts once
            // the downstream request is complete; only the per-try idle timer
            // runs until then.
            let idle_at = try_deadline.map_or(attempt_start, |d| d.at);
            tokio::select! {
                biased;
                r = sent.as_mut() => return (try_deadline, Waited::Done(r)),
                _ = progress.completed() => continue,
                () = tokio::time::sleep_until(max_at.unwrap_or_else(far)), if max_at.is_some() => {
                    return (try_deadline, Waited::MaxStreamDuration);
                }
                () = tokio::time::sleep_until(idle_at), if try_deadline.is_some() => {
                    return (try_deadline, Waited::TimedOut);
                }
            }
        }
        let timeout_at = try_deadline.map(|d| d.at);
        let at = match (timeout_at, max_at) {
            (Some(t), Some(m)) => Some(t.min(m)),
            (t, m) => t.or(m),
        };
        return match at {
            Some(at) => {
                // This timer wakes the task by `at`: the connection manager's
                // request timers need none of their own before.
                progress.set_router_wake(Some(at));
                let r = tokio::time::timeout_at(at, sent.as_mut()).await.ok();
                progress.set_router_wake(None);
                let waited = match r {
                    Some(r) => Waited::Done(r),
                    // The timeout first when both are due (Envoy's timers
                    // fire in the order they were armed; the route's is
                    // armed at the request's end, later than this one).
                    None if max_at.is_some_and(|m| timeout_at.is_none_or(|t| m < t)) => {
                        Waited::MaxStreamDuration
                    }
                    None => Waited::TimedOut,
                };
                (try_deadline, waited)
            }
            None => (try_deadline, Waited::Done(sent.await)),
        };
    }
}

/// An attempt's earliest deadline.
#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    /// A per-try one (retriable), not the route's.
    per_try: bool,
    /// The per-try idle timer's.
    idle: bool,
}

/// The earliest of an attempt's deadlines. The route timeout runs from when
/// the downstream request was complete (`done_at`, as Envoy's), the per-try
/// timeout from then or the attempt's start, whichever is later; neither runs
/// while the request is still arriving. The per-try idle timer runs from the
/// attempt's start.
fn deadlines(t: &Timeouts, attempt_start: Instant, done_at: Option<Instant>) -> Option<Deadline> {
    let per_try = done_at.and_then(|d| t.per_try.map(|p| d.max(attempt_start) + p));
    let idle = t.per_try_idle.map(|i| attempt_start + i);
    let global = t.route_deadline(done_at);
    let (soft, idle_first) = match (per_try, idle) {
        (Some(p), Some(i)) => (Some(p.min(i)), i < p),
        (Some(p), None) => (Some(p), false),
        (None, Some(i)) => (Some(i), true),
        (None, None) => (None, false),
    };
    let (at, per_try) = match (soft, global) {
        (Some(p), Some(g)) => (p.min(g), p < g),
        (Some(p), None) => (p, true),
        (None, Some(g)) => (g, false),
        (None, None) => return None,
    };
    Some(Deadline {
        at,
        per_try,
        idle: per_try && idle_first,
    })
}
