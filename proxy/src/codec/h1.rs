//! Serving an HTTP/1.1 connection that parks when idle (issue 8): hyper's
//! HTTP/1 codec holds an 8 KiB read buffer, a header write buffer and its
//! dispatcher for as long as it lives, so a connection with no stream in
//! flight and nothing read for [`PARK_AFTER`] has its codec ended (silently:
//! hyper closes an idle keep-alive codec without writing) and taken apart. The
//! socket and the bytes hyper had read but not parsed stay in a
//! [`Parkable`]; the task then waits for the client to send and builds a new
//! codec over the bytes read.
//!
//! Also detects HTTP/2 prior knowledge for codec `AUTO` (the connection starts
//! parked, so even a connection that never sends costs no codec).
//!
//! Everything that ends a connection keeps working while parked or across
//! parks: the server's drain closes a parked connection at once; the idle
//! timeout, a retired listener version and `max_connection_duration` start
//! Envoy's drain sequence, which a park does not interrupt; the request
//! headers timer lives in the socket wrapper, which a park keeps.

use crate::codec::ends::{self, End, Ends, Fired, retired};
use crate::codec::idle::Activity;
use crate::codec::park::{Parkable, Woken};
use crate::codec::serve::{Limits, ListenerDrain};
use crate::codec::wake_gate::WakeGate;
use crate::request::phase::Phase;
use crate::stats::HcmStats;
use hyper::body::{Body, Incoming};
use hyper::service::HttpService;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;

/// How long an HTTP/1.1 connection must be quiet (no stream in flight,
/// nothing read) before it parks. A keep-alive client under load sends its
/// next request within milliseconds and never parks; one second is long past
/// the gaps inside a burst (a page's subresources, a retry), so a park costs
/// at most one codec rebuild (two 8 KiB allocations and a read) per pause of
/// a second or more, while an idle pool's connections give their memory back
/// one second after their last request.
pub(crate) const PARK_AFTER: Duration = Duration::from_secs(1);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How the connection's HTTP/1.1 serving ended.
// Returned once, and moved at once into HTTP/2's box: boxing the large
// variant would cost an allocation for nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Served<S, Svc> {
    /// The connection is over.
    Done,
    /// Codec `AUTO` found the HTTP/2 preface (waiting in the socket's replay
    /// buffer), or the codec is HTTP/2: serve HTTP/2.
    Http2(Parkable<S>, Svc, H1),
}

/// What a connection needs besides its socket and service (owned: this is
/// the connection's state, in the one box that serves it).
pub(crate) struct H1 {
    /// The connection manager's limits (shared by the filter chain's connections).
    pub limits: Arc<Limits>,
    /// The connection's streams.
    pub activity: Arc<Activity>,
    /// The connection manager's stats.
    pub stats: Arc<HcmStats>,
    /// The server's phase.
    pub shutdown: watch::Receiver<Phase>,
    /// The listener version's drain signal.
    pub listener_drain: Option<ListenerDrain>,
    /// When `max_connection_duration` is reached.
    pub lifetime: Option<Instant>,
    /// Codec `AUTO`: HTTP/2 prior knowledge is served too.
    pub auto: bool,
    /// Codec `HTTP2`: served as HTTP/2 at once.
    pub http2: bool,
}

/// What woke the codec's serving loop besides the codec.
enum Control {
    /// Time to check whether the connection can park.
    Tick,
    /// One of the connection's ends.
    End(End),
}

/// Waits, parked, for the client to send (`true`) or for the connection to
/// end (`false`). Holds one timer (the earliest of the idle timeout,
/// `max_connection_duration` and the drain sequence's end) and the two watch
/// waits: a parked connection is kept small.
async fn wait_parked<S: AsyncRead + Unpin>(
    io: &mut Parkable<S>,
    h: &mut H1,
    fired: &mut Fired,
) -> bool {
    let overload = h.activity.overload();
    loop {
        let idle = match h.limits.idle_timeout {
            Some(t) if !fired.idle => Some(h.activity.idle_deadline(t)),
            _ => None,
        };
        let lifetime = h.lifetime.filter(|_| !fired.lifetime);
        let next = [
            idle.map(|(at, _)| at),
            lifetime,
            fired.deadline.map(|(at, _)| at),
        ]
        .into_iter()
        .flatten()
        .min();
        let timer = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let retiring = !fired.retired && h.listener_drain.is_some();
        tokio::select! {
            biased;
            w = io.wait() => return matches!(w, Ok(Woken::Bytes)),
            // Nothing in flight: any end closes a parked connection.
            _ = h.shutdown.wait_for(|p| *p >= Phase::ConnectionsDraining) => return false,
            r = retired(&mut h.listener_drain), if retiring => {
                fired.retired_reached(&h.activity, r);
            }
            () = timer => {
                let now = Instant::now();
                if let Some((at, true)) = idle
                    && now >= at
                {
                    fired.idle_reached(&h.activity, h.limits.drain_timeout);
                }
                if lifetime.is_some_and(|at| now >= at) {
                    fired.lifetime_reached(
                        &h.activity,
                        &h.stats,
                        h.limits.drain_timeout,
                        h.limits.http1_safe_lifetime,
                    );
                }
                if fired.deadline.is_some_and(|(at, _)| now >= at) {
                    return false;
                }
            }
            // `reduce_timeouts` changed: the idle deadline moves.
            () = overload.timers_changed(), if idle.is_some() => {}
        }
    }
}

/// How one codec's serving ended.
enum Codec<S, Svc> {
    /// Parked: the socket (with the bytes read but not parsed) and the service.
    Parked(Parkable<S>, Svc),
    /// The connection is over.
    Done,
}

/// Serves HTTP/1.1 with one codec until the connection ends or parks. Boxed by
/// the caller: the codec's state goes when it parks.
async fn serve_codec<S, Svc, B>(
    io: Parkable<S>,
    service: Svc,
    h: &mut H1,
    fired: &mut Fired,
) -> Codec<S, Svc>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    Svc: HttpService<Incoming, ResBody = B> + Unpin,
    Svc::Error: Into<BoxError>,
    B: Body + 'static,
    B::Error: Into<BoxError>,
{
    let H1 {
        limits,
        activity,
        stats,
        shutdown,
        listener_drain,
        lifetime,
        ..
    } = h;
    let (limits, activity, stats): (&Limits, &Activity, &HcmStats) = (limits, activity, stats);
    let drain = ends::drained(shutdown);
    let idle = ends::idle(limits, activity);
    let lifetime = ends::lifetime(*lifetime);
    let retired = ends::retired(listener_drain);
    tokio::pin!(drain, idle, lifetime, retired);
    let events = ends::Events {
        drain,
        idle,
        lifetime,
        retired,
    };
    let drain_timeout = limits.drain_timeout;
    let safe = limits.http1_safe_lifetime;
    let mut ends = Ends::new(events, fired, activity, stats, drain_timeout, false, safe);
    let heads_at_start = activity.heads();
    let reads_at_start = activity.reads();
    let mut reads_at_tick = reads_at_start;
    let mut conn = {
        // Built per codec: not kept while parked.
        let mut builder = hyper::server::conn::http1::Builder::new();
        limits.h1(&mut builder);
        builder
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades()
    };
    let tick = tokio::time::sleep(PARK_AFTER);
    tokio::pin!(tick);
    // The park tick and the ends are polled only when they woke, not on each of
    // the codec's several wakes per request.
    let mut gate = WakeGate::default();
    let (mut parking, mut closing) = (false, false);
    let served = loop {
        let control = std::future::poll_fn(|cx| {
            gate.poll(cx, |cx| {
                if !parking && tick.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Control::Tick);
                }
                ends.poll_end(cx).map(Control::End)
            })
        });
        tokio::select! {
            biased;
            r = Pin::new(&mut conn) => break r,
            c = control, if !closing => match c {
                Control::Tick => {
                    let reads = activity.reads();
                    // Quiet since the last tick, and hyper's codec is idle:
                    // a request has completed on it (a partial next head is
                    // kept), or it has read nothing (a fresh codec that read
                    // part of a head would answer it `connection: close`).
                    let quiet = activity.active() == 0 && reads == reads_at_tick;
                    if quiet && (activity.heads() != heads_at_start || reads == reads_at_start) {
                        parking = true;
                        activity.set_parking(true);
                        Pin::new(&mut conn).graceful_shutdown();
                    } else {
                        reads_at_tick = reads;
                        tick.as_mut().reset(Instant::now() + PARK_AFTER);
                    }
                }
                Control::End(End::Drain | End::Deadline(true) | End::GoAway) => {
                    // Connection: close on a request in flight; an idle
                    // codec closes at once.
                    closing = true;
                    activity.set_parking(false);
                    Pin::new(&mut conn).graceful_shutdown();
                }
                Control::End(End::Deadline(false)) => {
                    activity.set_parking(false);
                    return Codec::Done;
                }
            },
        }
    };
    activity.set_parking(false);
    if !parking || closing || served.is_err() {
        return Codec::Done;
    }
    // An upgraded connection has no parts: the tunnel owns the socket.
    let Some(parts) = conn.into_parts() else {
        return Codec::Done;
    };
    let mut io = parts.io.into_inner();
    io.unread(parts.read_buf);
    Codec::Parked(io, parts.service)
}

/// Serves HTTP/1.1 on `io` with `service` until the connection ends, parking
/// it whenever it is quiet for [`PARK_AFTER`].
///
/// Not an `async fn`: that would keep its arguments beside the locals they
/// move to, and this future is what a parked connection holds. While parked
/// it holds the socket wrapper, the service, and [`wait_parked`]'s state; the
/// codec and its serving state are in a box of their own, dropped on a park.
#[allow(clippy::manual_async_fn)]
pub(crate) fn serve<S, Svc, B>(
    mut io: Parkable<S>,
    mut service: Svc,
    mut h: H1,
) -> impl Future<Output = Served<S, Svc>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    Svc: HttpService<Incoming, ResBody = B> + Unpin,
    Svc::Error: Into<BoxError>,
    B: Body + 'static,
    B::Error: Into<BoxError>,
{
    async move {
        if h.http2 {
            return Served::Http2(io, service, h);
        }
        let mut fired = Fired::default();
        loop {
            // Parked (or not yet sure of the protocol): only the socket wrapper
            // and the service are held.
            while io.replay().is_empty() || (h.auto && io.undecided()) {
                if !wait_parked(&mut io, &mut h, &mut fired).await {
                    let _ = tokio::time::timeout(PARK_AFTER, io.shutdown()).await;
                    return Served::Done;
                }
            }
            if h.auto {
                if io.is_h2() {
                    return Served::Http2(io, service, h);
                }
                h.auto = false;
            }
            match Box::pin(serve_codec(io, service, &mut h, &mut fired)).await {
                Codec::Parked(parked_io, parked_service) => {
                    io = parked_io;
                    service = parked_service;
                    crate::heap_trim::note_park();
                }
                Codec::Done => return Served::Done,
            }
        }
    }
}

#[cfg(test)]
#[path = "h1_tests.rs"]
mod tests;
