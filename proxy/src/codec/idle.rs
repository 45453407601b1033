//! `common_http_protocol_options.idle_timeout`: a downstream connection with no
//! active stream for that long is closed (HTTP/1.1) or sent GOAWAY (HTTP/2). A
//! stream is active from its request headers until its response body has been
//! sent (or dropped). Also `stream_idle_timeout` once the response has started:
//! a response body that stalls that long resets the stream (Envoy's behaviour
//! when the response headers are already out).

use crate::request::progress::Progress;
use crate::stats::HcmStats;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Active streams of one connection and when the last one ended.
#[derive(Debug)]
pub struct Activity {
    start: Instant,
    active: AtomicUsize,
    /// Requests whose headers have arrived, ever.
    heads: AtomicU64,
    /// Milliseconds from `start` to when the connection last became idle.
    idle_since_ms: AtomicU64,
    /// Reads that returned bytes to the codec, ever (parking looks for none).
    reads: AtomicU64,
    /// [`DRAINING`], [`PARKING`] and [`BYPASS_OVERLOAD`].
    flags: AtomicU8,
}

/// The connection is draining (`max_connection_duration`): HTTP/1 responses
/// close it.
const DRAINING: u8 = 2;
/// The HTTP/1.1 codec is being ended to park the connection: its socket must
/// not be shut down.
const PARKING: u8 = 4;
/// Its listener bypasses the overload manager (`bypass_overload_manager`).
const BYPASS_OVERLOAD: u8 = 8;

impl Activity {
    /// A connection just opened (idle until its first request).
    pub fn new() -> Arc<Self> {
        Arc::new(Activity {
            start: Instant::now(),
            active: AtomicUsize::new(0),
            heads: AtomicU64::new(0),
            idle_since_ms: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            flags: AtomicU8::new(0),
        })
    }

    /// Notes that the connection's listener bypasses the overload manager.
    pub fn bypass_overload(&self) {
        self.flags.fetch_or(BYPASS_OVERLOAD, Ordering::Relaxed);
    }

    /// The overload state this connection goes by ([`crate::overload::of`]).
    pub fn overload(&self) -> &'static crate::overload::Overload {
        crate::overload::of(self.flags.load(Ordering::Relaxed) & BYPASS_OVERLOAD != 0)
    }

    /// The connection starts draining.
    pub fn start_draining(&self) {
        self.flags.fetch_or(DRAINING, Ordering::Relaxed);
    }

    /// Whether the connection is draining.
    pub fn draining(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & DRAINING != 0
    }

    /// The codec is being ended to park the connection (`true`), or for good.
    pub fn set_parking(&self, parking: bool) {
        if parking {
            self.flags.fetch_or(PARKING, Ordering::Relaxed);
        } else {
            self.flags.fetch_and(!PARKING, Ordering::Relaxed);
        }
    }

    /// Whether the codec is being ended to park the connection.
    pub fn parking(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & PARKING != 0
    }

    /// The codec read bytes.
    pub fn note_read(&self) {
        self.reads.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads that returned bytes to the codec so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// A stream starts; it ends when the guard drops.
    pub fn stream(self: &Arc<Self>) -> StreamGuard {
        self.heads.fetch_add(1, Ordering::Relaxed);
        self.active.fetch_add(1, Ordering::Relaxed);
        StreamGuard(Arc::clone(self))
    }

    /// Streams in progress.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// Requests whose headers have arrived so far.
    pub fn heads(&self) -> u64 {
        self.heads.load(Ordering::Relaxed)
    }

    /// When an idle timeout of `configured` (as the overload manager's
    /// `reduce_timeouts` scales it now) is due, and whether the connection is
    /// idle: busy, the earliest an idle period starting now could end.
    pub fn idle_deadline(&self, configured: Duration) -> (Instant, bool) {
        let timeout = self.overload().scaled(
            courier_config::overload::ScaledTimer::ConnectionIdle,
            configured,
        );
        if self.active.load(Ordering::Relaxed) > 0 {
            return (Instant::now() + timeout, false);
        }
        let since = self.start + Duration::from_millis(self.idle_since_ms.load(Ordering::Relaxed));
        (since + timeout, true)
    }

    /// Resolves once the connection has had no active stream for `timeout`
    /// (as the overload manager's `reduce_timeouts` scales it, re-armed when
    /// that changes).
    pub async fn idle_for(&self, configured: Duration) {
        let overload = self.overload();
        loop {
            let (next, idle) = self.idle_deadline(configured);
            if idle && Instant::now() >= next {
                return;
            }
            // Busy: check again a full timeout later (an idle period starting
            // meanwhile ends no sooner than that).
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = overload.timers_changed() => {}
            }
        }
    }
}

/// An active stream; dropping it ends the stream.
#[derive(Debug)]
pub struct StreamGuard(Arc<Activity>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let a = &self.0;
        a.idle_since_ms
            .store(a.start.elapsed().as_millis() as u64, Ordering::Relaxed);
        a.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that holds its stream active until it is sent or dropped,
/// and fails (resetting the stream) when it stalls longer than the stream idle
/// timeout.
#[derive(Debug)]
pub struct Tracked<B> {
    body: B,
    guard: Option<StreamGuard>,
    idle_timeout: Option<Duration>,
    /// Armed on the first stall only: local replies never stall, so never allocate.
    idle: Option<Pin<Box<Sleep>>>,
    /// The request's progress: its events keep the stream alive too (a
    /// bidirectional stream where only the client talks).
    request: Option<Arc<Progress>>,
    /// `max_stream_duration`: when the stream must have ended, and the
    /// connection manager's stats to count it in.
    deadline: Option<(Instant, Arc<HcmStats>)>,
    /// Whether the body's trailers are sent (see [`Tracked::without_trailers`]).
    keep_trailers: bool,
    /// The stream's start and the connection manager whose
    /// `downstream_rq_time` records the stream's length when the body goes
    /// (sent whole, or the stream reset), as Envoy records it at the
    /// stream's end.
    timed: (Instant, Arc<HcmStats>),
}

impl<B> Drop for Tracked<B> {
    fn drop(&mut self) {
        let (started, stats) = &self.timed;
        stats.rq_time.record(started.elapsed().as_millis() as u64);
    }
}

impl<B> Tracked<B> {
    /// The body without its trailers (they end it): an HTTP/1.1 response of a
    /// connection manager without `enable_trailers`, as Envoy's codec sends it.
    pub fn without_trailers(mut self) -> Self {
        self.keep_trailers = false;
        self
    }

    /// `body`, active while `guard` lives, reset after `idle_timeout` without a
    /// frame of it or of the request (`request`).
    pub fn new(
        body: B,
        guard: StreamGuard,
        idle_timeout: Option<Duration>,
        request: Option<Arc<Progress>>,
        deadline: Option<(Instant, Arc<HcmStats>)>,
        timed: (Instant, Arc<HcmStats>),
    ) -> Self {
        // The route's `idle_timeout`, when it set one, replaces the connection manager's.
        let idle_timeout = match &request {
            Some(p) => p.idle_timeout(idle_timeout),
            None => idle_timeout,
        };
        // As `reduce_timeouts` has it when the response starts.
        let overload = guard.0.overload();
        let idle_timeout = idle_timeout
            .map(|t| overload.scaled(courier_config::overload::ScaledTimer::StreamIdle, t));
        Tracked {
            body,
            guard: Some(guard),
            idle_timeout,
            idle: None,
            request,
            deadline,
            keep_trailers: true,
            timed,
        }
    }
}

/// Why a response body was cut short.
#[derive(Debug)]
pub struct StreamIdleTimeout;

impl std::fmt::Display for StreamIdleTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stream idle timeout")
    }
}

impl std::error::Error for StreamIdleTimeout {}

/// A response body cut short by `max_stream_duration`.
#[derive(Debug)]
pub struct MaxStreamDuration;

impl std::fmt::Display for MaxStreamDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("max stream duration reached")
    }
}

impl std::error::Error for MaxStreamDuration {}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<B> Tracked<B> {
    /// `at`, or the stream's deadline when that is sooner.
    fn earliest(&self, at: Instant) -> Instant {
        self.deadline.as_ref().map_or(at, |(d, _)| at.min(*d))
    }

    /// The stream's deadline (far off when there is none).
    fn earliest_deadline(&self) -> Instant {
        self.deadline
            .as_ref()
            .map_or_else(|| Instant::now() + Duration::from_secs(86_400), |(d, _)| *d)
    }
}

impl<B> Body for Tracked<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let mut polled = Pin::new(&mut this.body).poll_frame(cx);
        if !this.keep_trailers {
            polled = crate::request::body::end_at_trailers(polled);
        }
        match &polled {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.guard = None,
            Poll::Ready(Some(Ok(_))) => {
                if let Some(t) = this.idle_timeout {
                    let at = this.earliest(Instant::now() + t);
                    if let Some(idle) = this.idle.as_mut() {
                        idle.as_mut().reset(at);
                    }
                }
            }
            Poll::Pending => {
                if this.idle_timeout.is_some() || this.deadline.is_some() {
                    let first = this.idle_timeout.map(|t| Instant::now() + t);
                    let first =
                        first.map_or_else(|| this.earliest_deadline(), |f| this.earliest(f));
                    let idle = this
                        .idle
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(first)));
                    if idle.as_mut().poll(cx).is_ready() {
                        let now = Instant::now();
                        if let Some((at, stats)) = &this.deadline
                            && *at <= now
                        {
                            // Envoy resets a stream whose response has started.
                            stats.edge.rq_max_duration_reached.inc();
                            this.guard = None;
                            return Poll::Ready(Some(Err(Box::new(MaxStreamDuration))));
                        }
                        let moved = match (this.idle_timeout, this.request.as_ref()) {
                            (Some(t), Some(p)) => Some(p.last_activity() + t),
                            (Some(_), None) => None,
                            // Only the deadline is armed (and has not passed).
                            (None, _) => Some(this.earliest_deadline()),
                        };
                        match moved {
                            Some(later) if later > now => {
                                let later = this.earliest(later);
                                if let Some(idle) = this.idle.as_mut() {
                                    idle.as_mut().reset(later);
                                    // Registers the waker for the new deadline.
                                    let _ = idle.as_mut().poll(cx);
                                }
                            }
                            _ => {
                                this.guard = None;
                                return Poll::Ready(Some(Err(Box::new(StreamIdleTimeout))));
                            }
                        }
                    }
                }
            }
        }
        polled.map(|f| f.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
