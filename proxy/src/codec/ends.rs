//! How a connection ends, for HTTP/1.1 and HTTP/2 alike: the server's drain,
//! the idle timeout, `max_connection_duration` and a retired listener version
//! ([`Ends`], polled beside the codec), and what has happened of them
//! ([`Fired`], kept across an HTTP/1.1 connection's parks). Envoy's drain
//! sequence: HTTP/1.1 answers `connection: close` from its start and is shut
//! down gracefully (or closed, for a retired listener) at its end; HTTP/2 gets
//! GOAWAY at its start and its streams finish.

use crate::codec::idle::Activity;
use crate::codec::serve::{Limits, ListenerDrain};
use crate::request::phase::Phase;
use crate::stats::HcmStats;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

/// What ends the connection, or starts its end.
pub(super) enum End {
    /// The server drains: graceful shutdown now.
    Drain,
    /// The drain sequence's time is up: graceful shutdown (`true`), or closed.
    Deadline(bool),
    /// HTTP/2: the drain sequence started (idle timeout, `max_connection_duration`,
    /// a retired listener version): GOAWAY now, streams in flight finish.
    GoAway,
}

/// What has happened of the connection's ends, kept across parks: each event
/// fires once.
#[derive(Default)]
pub(super) struct Fired {
    pub(super) idle: bool,
    pub(super) lifetime: bool,
    pub(super) retired: bool,
    /// The drain sequence's end, once started, and whether it ends gracefully.
    pub(super) deadline: Option<(Instant, bool)>,
}

impl Fired {
    /// Starts Envoy's drain sequence (`connection: close` on the responses
    /// from now on), ending `after` from now; a sequence already started keeps
    /// its sooner end. The new end, if it changed.
    pub(super) fn start_drain(
        &mut self,
        activity: &Activity,
        after: Duration,
        graceful: bool,
    ) -> bool {
        activity.start_draining();
        let at = Instant::now() + after;
        match self.deadline {
            Some((d, _)) if d <= at => false,
            _ => {
                self.deadline = Some((at, graceful));
                true
            }
        }
    }

    /// The idle timeout is reached: Envoy's drain sequence, `drain_timeout`
    /// more, then closed. Whether the sequence's end changed.
    pub(super) fn idle_reached(&mut self, activity: &Activity, drain_timeout: Duration) -> bool {
        self.idle = true;
        self.start_drain(activity, drain_timeout, true)
    }

    /// `max_connection_duration` is reached: the same drain sequence, counted;
    /// or, `safe` (HTTP/1 with `http1_safe_max_connection_duration`), only
    /// `connection: close` on the next response, with no end of its own: the
    /// connection stays open for that request however long it takes.
    pub(super) fn lifetime_reached(
        &mut self,
        activity: &Activity,
        stats: &HcmStats,
        drain_timeout: Duration,
        safe: bool,
    ) -> bool {
        self.lifetime = true;
        stats.edge.cx_max_duration_reached.inc();
        if safe {
            activity.start_draining();
            return false;
        }
        self.start_drain(activity, drain_timeout, true)
    }

    /// The listener version is retired: whatever is still open after its
    /// drain time (none: the server's drain applies) is closed.
    pub(super) fn retired_reached(
        &mut self,
        activity: &Activity,
        drain_time: Option<Duration>,
    ) -> bool {
        self.retired = true;
        drain_time.is_some_and(|t| self.start_drain(activity, t, false))
    }
}

/// Resolves once the listener version is retired, with its drain time; to
/// `None` if it never will be (the server is stopping and the server's
/// drain applies).
pub(super) async fn retired(drain: &mut Option<ListenerDrain>) -> Option<Duration> {
    let d = drain.as_mut()?;
    d.signal.wait_for(|retired| *retired).await.ok()?;
    Some(d.drain_time)
}

/// The events that end a connection while its codec serves (each future is
/// pinned in the codec's boxed future, built anew per codec from what has
/// [`Fired`], and polled until it fires once).
pub(super) struct Ends<'p, D, I, L, R> {
    drain: Option<Pin<&'p mut D>>,
    idle: Option<Pin<&'p mut I>>,
    lifetime: Option<Pin<&'p mut L>>,
    retired: Option<Pin<&'p mut R>>,
    deadline: Option<(Pin<Box<Sleep>>, bool)>,
    fired: &'p mut Fired,
    activity: &'p Activity,
    stats: &'p HcmStats,
    drain_timeout: Duration,
    /// HTTP/2: a started drain sequence is told at once ([`End::GoAway`]).
    http2: bool,
    /// HTTP/1 with `http1_safe_max_connection_duration`.
    safe_lifetime: bool,
}

impl<D, I, L, R> Ends<'_, D, I, L, R>
where
    D: Future<Output = ()>,
    I: Future<Output = ()>,
    L: Future<Output = ()>,
    R: Future<Output = Option<Duration>>,
{
    /// Arms the drain sequence's timer anew when its end `changed`.
    fn rearm(&mut self, changed: bool) {
        if changed && let Some((at, graceful)) = self.fired.deadline {
            self.deadline = Some((Box::pin(tokio::time::sleep_until(at)), graceful));
        }
    }

    /// The connection's next end event, if one fired.
    pub(super) fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<End> {
        if let Some(d) = self.drain.as_mut()
            && d.as_mut().poll(cx).is_ready()
        {
            self.drain = None;
            return Poll::Ready(End::Drain);
        }
        // Whether a drain sequence started in this poll.
        let mut started = false;
        if let Some(i) = self.idle.as_mut()
            && i.as_mut().poll(cx).is_ready()
        {
            self.idle = None;
            let changed = self.fired.idle_reached(self.activity, self.drain_timeout);
            self.rearm(changed);
            started = true;
        }
        if let Some(l) = self.lifetime.as_mut()
            && l.as_mut().poll(cx).is_ready()
        {
            self.lifetime = None;
            let changed = self.fired.lifetime_reached(
                self.activity,
                self.stats,
                self.drain_timeout,
                self.safe_lifetime,
            );
            self.rearm(changed);
            started = true;
        }
        if let Some(r) = self.retired.as_mut()
            && let Poll::Ready(drain_time) = r.as_mut().poll(cx)
        {
            self.retired = None;
            let changed = self.fired.retired_reached(self.activity, drain_time);
            self.rearm(changed);
            started |= drain_time.is_some();
        }
        if let Some((s, graceful)) = self.deadline.as_mut()
            && s.as_mut().poll(cx).is_ready()
        {
            let graceful = *graceful;
            self.deadline = None;
            return Poll::Ready(End::Deadline(graceful));
        }
        if started && self.http2 {
            return Poll::Ready(End::GoAway);
        }
        Poll::Pending
    }
}

/// Resolves once the server drains (`/drain_listeners?graceful`, shutdown).
pub(super) async fn drained(shutdown: &mut watch::Receiver<Phase>) {
    // The watch guard must not live across an await.
    let _ = shutdown
        .wait_for(|p| *p >= Phase::ConnectionsDraining)
        .await;
}

/// Resolves once the connection has been idle for the idle timeout (never
/// without one).
pub(super) async fn idle(limits: &Limits, activity: &Activity) {
    match limits.idle_timeout {
        Some(t) => activity.idle_for(t).await,
        None => std::future::pending().await,
    }
}

/// Resolves at `max_connection_duration` (never without one).
pub(super) async fn lifetime(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The end events, pinned where the codec is served.
pub(super) struct Events<'p, D, I, L, R> {
    pub(super) drain: Pin<&'p mut D>,
    pub(super) idle: Pin<&'p mut I>,
    pub(super) lifetime: Pin<&'p mut L>,
    pub(super) retired: Pin<&'p mut R>,
}

impl<'p, D, I, L, R> Ends<'p, D, I, L, R> {
    /// The ends of a codec's serving: the events that have not [`Fired`]
    /// yet, and the drain sequence's timer if it runs.
    pub(super) fn new(
        events: Events<'p, D, I, L, R>,
        fired: &'p mut Fired,
        activity: &'p Activity,
        stats: &'p HcmStats,
        drain_timeout: Duration,
        http2: bool,
        safe_lifetime: bool,
    ) -> Self {
        let deadline = fired
            .deadline
            .map(|(at, graceful)| (Box::pin(tokio::time::sleep_until(at)), graceful));
        Self {
            drain: Some(events.drain),
            idle: (!fired.idle).then_some(events.idle),
            lifetime: (!fired.lifetime).then_some(events.lifetime),
            retired: (!fired.retired).then_some(events.retired),
            deadline,
            fired,
            activity,
            stats,
            drain_timeout,
            http2,
            safe_lifetime,
        }
    }
}
