//! Hedged attempts (`hedge_policy.hedge_on_per_try_timeout`): when an attempt's
//! per-try timeout fires it is not cancelled; a retry (if the policy allows one)
//! races it, and the first response that is not retriable wins — the other
//! attempts are then dropped (reset). A retriable response of an attempt that
//! was already hedged is kept only in case nothing better arrives, as Envoy does
//! not retry an attempt twice.

use super::one::{self, Ended};
use super::retry::Outcome;
use super::{Attempts, Done, Final, HeldBody, pick};
use crate::request::body::{RequestBody, UpstreamBody};
use crate::request::tee::Teed;
use crate::upstream::circuit::Held;
use crate::upstream::host::Host;
use crate::upstream::outlier;
use crate::upstream::pool::{self, Failed, Lease, SendError};
use http::Response;
use http::request::Parts;
use hyper::body::Incoming;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use tokio::sync::oneshot;
use tokio::time::Instant;

type Sent<'a> =
    Pin<Box<dyn Future<Output = Result<(Response<Incoming>, Lease), Failed>> + Send + 'a>>;

/// One attempt in flight.
struct Flight<'a> {
    sent: Sent<'a>,
    host: Arc<Host>,
    /// The circuit-breaker request slot, then the retry slot if it is a retry.
    slots: (Held, Option<Held>),
    /// When its per-try timeout fires (`None` once it has).
    soft: Option<Instant>,
    /// A retry was started (or refused) for it: it is not retried again.
    hedged: bool,
    /// When the cluster's `max_stream_duration` ends it.
    max_at: Option<Instant>,
    /// What its response must tell the cluster's upstream HTTP filters.
    filtered: Option<courier_filters::upstream::Attempt>,
}

/// A retry waiting for its back-off.
struct Next {
    at: Instant,
    slot: Option<Held>,
}

enum Event {
    // Boxed: a response is large next to a timer tick.
    Done(usize, Box<Result<(Response<Incoming>, Lease), Failed>>),
    Timer,
    /// A filter answers the request (its request body encoder failed).
    Filtered,
}

/// Runs hedged attempts: the first to `host`. The caller checked that there is
/// a retry policy and a per-try timeout.
pub(super) async fn run(
    a: Attempts<'_>,
    parts: Parts,
    mut body: HeldBody,
    mut teed: Option<oneshot::Receiver<Teed>>,
    host: Arc<Host>,
) -> Done {
    let Attempts {
        cluster,
        stats,
        high,
        mut retry,
        timeouts,
        count_upstream,
        started,
        progress,
        max_stream,
        ..
    } = a;
    let deadline = timeouts.global.map(|t| started + t);
    let per_try = timeouts.per_try;
    let mut flights: Vec<Flight<'_>> = Vec::new();
    let mut next = Some(Next {
        at: Instant::now(),
        slot: None,
    });
    let mut next_host = Some(host.clone());
    let mut last_host = host;
    let mut tried: Vec<SocketAddr> = Vec::new();
    let mut attempt: u32 = 0;
    let mut limit_exceeded = false;
    // The best answer so far when every attempt has ended without a winner.
    let mut fallback: Option<Final> = None;
    // The `max_stream_duration` end of the attempt whose response is the fallback.
    let mut fallback_deadline: Option<Instant> = None;
    // Bounded: each pass starts an attempt, ends one, or fires a timer.
    for _ in 0..10_000 {
        let now = Instant::now();
        if let Some(n) = next.take_if(|n| n.at <= now) {
            let host = match next_host.take() {
                Some(h) => Some(h),
                None => retry
                    .as_mut()
                    .and_then(|r| pick(cluster, r, &tried))
                    // A dynamic forward proxy cluster's one host for the name.
                    .or_else(|| cluster.dynamic.is_some().then(|| Arc::clone(&last_host))),
            };
            match (host, cluster.circuit.try_request(high)) {
                (None, _) => fallback = fallback.or(Some(Final::NoHost)),
                (Some(h), None) => {
                    stats.rq_pending_overflow.inc();
                    last_host = h;
                    fallback = fallback.or(Some(Final::Overflow));
                }
                (Some(h), Some(slot)) => {
                    // The body of the first attempt goes once; others with it
                    // in flight send none (they are never started: a body that
                    // cannot be sent again is never retried).
                    let b = one::next_body(&mut body).unwrap_or_else(|| {
                        UpstreamBody::new(RequestBody::full(bytes::Bytes::new()), None)
                    });
                    attempt += 1;
                    let mut req = one::request(&parts, b, count_upstream.then_some(attempt));
                    let filtered = match one::decode_filters(cluster, &mut req) {
                        Ok(a) => a,
                        Err(reply) => {
                            drop(slot);
                            fallback = Some(Final::Local(reply));
                            continue;
                        }
                    };
                    tried.push(h.address);
                    let host = Arc::clone(&h);
                    last_host = Arc::clone(&h);
                    flights.push(Flight {
                        sent: Box::pin(async move {
                            pool::send_attempt_at(cluster, &host, req, stats, high).await
                        }),
                        host: h,
                        slots: (slot, n.slot),
                        soft: per_try.map(|p| now + p),
                        hedged: false,
                        max_at: max_stream.map(|d| now + d),
                        filtered,
                    });
                }
            }
        }
        if flights.is_empty() && next.is_none() {
            break;
        }
        let wake = flights
            .iter()
            .flat_map(|f| [f.soft, f.max_at])
            .flatten()
            .chain(next.as_ref().map(|n| n.at))
            .chain(deadline)
            .min();
        let done = std::future::poll_fn(|cx| {
            // A filter's reply ends the attempts (the body they send never ends); the
            // progress wakes this task when one is set, until the request is whole.
            if progress.filter_reply().is_some() {
                return Poll::Ready(Event::Filtered);
            }
            if !progress.done() {
                let _ = std::pin::pin!(progress.completed()).poll(cx);
            }
            for (i, f) in flights.iter_mut().enumerate() {
                if let Poll::Ready(r) = f.sent.as_mut().poll(cx) {
                    return Poll::Ready(Event::Done(i, Box::new(r)));
                }
            }
            Poll::Pending
        });
        let event = match wake {
            Some(w) => tokio::time::timeout_at(w, done)
                .await
                .unwrap_or(Event::Timer),
            None => done.await,
        };
        let now = Instant::now();
        // Whether a retry was scheduled for an attempt that failed this way.
        let mut schedule = |retry: &mut Option<super::retry::Retry<'_>>,
                            outcome: Outcome<'_>,
                            body: &mut HeldBody,
                            next: &mut Option<Next>| {
            let Some(r) = retry.as_mut() else {
                return false;
            };
            if next.is_some() {
                return false;
            }
            match one::next(r, outcome, false, body, &mut teed, cluster, stats, high) {
                one::Next::Retry(wait, slot) => {
                    *next = Some(Next {
                        at: now + wait,
                        slot: Some(slot),
                    });
                    true
                }
                one::Next::LimitExceeded => {
                    limit_exceeded = true;
                    false
                }
                one::Next::NotRetriable | one::Next::NotReplayable | one::Next::Overflow => false,
            }
        };
        match event {
            Event::Filtered => {
                return done_with(
                    Final::Failed(SendError::Termination),
                    last_host,
                    attempt,
                    limit_exceeded,
                );
            }
            Event::Timer => {
                if deadline.is_some_and(|g| g <= now) {
                    stats.attached();
                    stats.response(504);
                    stats.timeout();
                    for f in &flights {
                        // Envoy's onResponseTimeout: every request in
                        // flight timed out on its host.
                        f.host.stats.attached();
                        f.host.stats.timed_out();
                        if f.soft.is_some() {
                            outlier::record_timeout(cluster, &f.host);
                        }
                    }
                    return done_with(Final::Timeout, last_host, attempt, limit_exceeded);
                }
                // Envoy's onStreamMaxDurationReached: that attempt is reset,
                // retriable as a local reset.
                let mut i = 0;
                while i < flights.len() {
                    if flights[i].max_at.is_some_and(|m| m <= now) {
                        let f = flights.swap_remove(i);
                        stats.rq_max_duration_reached.inc();
                        if !f.hedged {
                            schedule(
                                &mut retry,
                                Outcome::Failed(&super::LOCAL_RESET),
                                &mut body,
                                &mut next,
                            );
                        }
                        if !matches!(fallback, Some(Final::Response(..))) {
                            fallback = Some(Final::MaxStreamDuration);
                            last_host = f.host;
                        }
                    } else {
                        i += 1;
                    }
                }
                for f in flights.iter_mut() {
                    if f.soft.is_some_and(|s| s <= now) {
                        // Counted for outlier detection though it may still answer.
                        f.soft = None;
                        outlier::record_timeout(cluster, &f.host);
                        if !f.hedged {
                            f.hedged = true;
                            schedule(&mut retry, Outcome::PerTryTimeout, &mut body, &mut next);
                        }
                    }
                }
            }
            Event::Done(i, result) => {
                let f = flights.swap_remove(i);
                // A per-try timeout already counted as its outlier event.
                let outlier = f.soft.is_some();
                match one::record(cluster, stats, &f.host, *result, &mut body, outlier) {
                    Ended::Response(mut resp, mut lease) => {
                        one::encode_filters(cluster, f.filtered, &mut resp);
                        let retriable = retry.as_ref().is_some_and(|r| {
                            r.retriable(Outcome::Response(resp.status().as_u16(), resp.headers()))
                        });
                        if retriable
                            && !f.hedged
                            && schedule(
                                &mut retry,
                                Outcome::Response(resp.status().as_u16(), resp.headers()),
                                &mut body,
                                &mut next,
                            )
                        {
                            continue;
                        }
                        lease.hold(f.slots.0);
                        if retriable && !(flights.is_empty() && next.is_none()) {
                            // Others may still answer better.
                            fallback = Some(Final::Response(resp, lease));
                            fallback_deadline = f.max_at;
                            last_host = f.host;
                            continue;
                        }
                        if attempt > 1 && !retriable {
                            stats.retry_success();
                        }
                        // The first good response wins: the others are reset.
                        drop(flights);
                        let mut done = done_with(
                            Final::Response(resp, lease),
                            f.host,
                            attempt,
                            limit_exceeded,
                        );
                        done.stream_deadline = f.max_at;
                        return done;
                    }
                    Ended::Overflow => fallback = fallback.or(Some(Final::Overflow)),
                    Ended::PoolOverflow => fallback = fallback.or(Some(Final::PoolOverflow)),
                    Ended::Failed(e, _) => {
                        if !f.hedged {
                            schedule(&mut retry, Outcome::Failed(&e), &mut body, &mut next);
                        }
                        if !matches!(fallback, Some(Final::Response(..))) {
                            fallback = Some(Final::Failed(e));
                            last_host = f.host;
                        }
                    }
                }
            }
        }
    }
    let last = fallback.unwrap_or(Final::Failed(SendError::Termination));
    let mut done = done_with(last, last_host, attempt, limit_exceeded);
    done.stream_deadline = fallback_deadline;
    done
}

fn done_with(last: Final, host: Arc<Host>, attempts: u32, limit_exceeded: bool) -> Done {
    Done {
        last,
        host,
        attempts: attempts.max(1),
        limit_exceeded,
        stream_deadline: None,
    }
}
