//! How far a downstream request has got: shared by the codec's idle timers, the
//! connection manager and the router (which starts its timeouts at the request's end).

use std::task::Poll;

/// How far a downstream request has got, for the connection manager's request
/// and stream idle timers: whether its body has ended, and when it last moved.
#[derive(Debug)]
pub struct Progress {
    start: tokio::time::Instant,
    /// Milliseconds from `start` to the last header or data event.
    last_ms: std::sync::atomic::AtomicU64,
    /// Nanoseconds from `start` to the request's end (`NO_OVERRIDE`: still arriving).
    done_ns: std::sync::atomic::AtomicU64,
    /// Woken when the request ends: the router's timeouts start then.
    on_done: atomic_waker::AtomicWaker,
    /// The route's `idle_timeout` in milliseconds (0: disabled), or
    /// `NO_OVERRIDE` for the connection manager's `stream_idle_timeout`.
    idle_override_ms: std::sync::atomic::AtomicU64,
    /// The route's `max_stream_duration` in milliseconds (0: none), or
    /// `NO_OVERRIDE` for the connection manager's.
    duration_override_ms: std::sync::atomic::AtomicU64,
    /// When the router's armed attempt timeout wakes the request's task, in
    /// nanoseconds from `start` (`NO_OVERRIDE`: no such timer).
    router_wake_ns: std::sync::atomic::AtomicU64,
    /// The downstream's body was malformed (its codec refused it).
    body_failed: std::sync::atomic::AtomicBool,
    /// A filter's request body encoder failed and answers with this reply (gRPC-Web's
    /// 400 for a body that is not base64): the router answers with it.
    filter_reply: std::sync::OnceLock<courier_filters::LocalReply>,
}

const NO_OVERRIDE: u64 = u64::MAX;

impl Progress {
    /// A request whose headers just arrived.
    pub fn new() -> Self {
        Progress {
            start: tokio::time::Instant::now(),
            last_ms: std::sync::atomic::AtomicU64::new(0),
            done_ns: std::sync::atomic::AtomicU64::new(NO_OVERRIDE),
            on_done: atomic_waker::AtomicWaker::new(),
            idle_override_ms: std::sync::atomic::AtomicU64::new(NO_OVERRIDE),
            duration_override_ms: std::sync::atomic::AtomicU64::new(NO_OVERRIDE),
            router_wake_ns: std::sync::atomic::AtomicU64::new(NO_OVERRIDE),
            body_failed: std::sync::atomic::AtomicBool::new(false),
            filter_reply: std::sync::OnceLock::new(),
        }
    }

    /// The router armed a timer that wakes the request's task `at` (`None`:
    /// it holds none now). The connection manager's request timers, in the
    /// same task, need no timer of their own while the router's comes first:
    /// its firing ends the wait for the response.
    pub fn set_router_wake(&self, at: Option<tokio::time::Instant>) {
        let ns = at.map_or(NO_OVERRIDE, |at| self.offset_ns(at));
        self.router_wake_ns
            .store(ns, std::sync::atomic::Ordering::Relaxed);
    }

    /// When the router's armed timer wakes the request's task, if it holds one.
    pub fn router_wake(&self) -> Option<tokio::time::Instant> {
        self.at_offset(
            self.router_wake_ns
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// `at` as nanoseconds from `start`, below `NO_OVERRIDE`.
    fn offset_ns(&self, at: tokio::time::Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.start).as_nanos())
            .unwrap_or(NO_OVERRIDE - 1)
            .min(NO_OVERRIDE - 1)
    }

    /// The instant `ns` nanoseconds from `start` (`NO_OVERRIDE`: none).
    fn at_offset(&self, ns: u64) -> Option<tokio::time::Instant> {
        (ns != NO_OVERRIDE).then(|| self.start + std::time::Duration::from_nanos(ns))
    }

    /// The route's `max_stream_duration` replaces the connection manager's
    /// (`None`: no limit for this stream).
    pub fn set_route_max_stream_duration(&self, t: Option<std::time::Duration>) {
        let ms = t.map_or(0, |t| {
            // Zero and below a millisecond: reached at once (Envoy's timer
            // fires at 0 ms).
            u64::try_from(t.as_millis())
                .unwrap_or(NO_OVERRIDE - 1)
                .clamp(1, NO_OVERRIDE - 1)
        });
        self.duration_override_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// The stream's `max_stream_duration`: the route's, else `default` (the
    /// connection manager's).
    pub fn max_stream_duration(
        &self,
        default: Option<std::time::Duration>,
    ) -> Option<std::time::Duration> {
        match self
            .duration_override_ms
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            NO_OVERRIDE => default,
            0 => None,
            ms => Some(std::time::Duration::from_millis(ms)),
        }
    }

    /// When the request's headers arrived.
    pub fn started(&self) -> tokio::time::Instant {
        self.start
    }

    /// The route's `idle_timeout` replaces the stream idle timeout (zero disables it).
    pub fn set_route_idle_timeout(&self, t: std::time::Duration) {
        let ms = u64::try_from(t.as_millis()).unwrap_or(NO_OVERRIDE - 1);
        self.idle_override_ms.store(
            ms.min(NO_OVERRIDE - 1),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The stream idle timeout in force: the route's, else `default` (the
    /// connection manager's).
    pub fn idle_timeout(
        &self,
        default: Option<std::time::Duration>,
    ) -> Option<std::time::Duration> {
        match self
            .idle_override_ms
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            NO_OVERRIDE => default,
            0 => None,
            ms => Some(std::time::Duration::from_millis(ms)),
        }
    }

    /// The downstream's codec refused the request body (a malformed chunk).
    pub fn body_failed(&self) {
        self.body_failed
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the downstream's codec refused the request body: the request
    /// is answered as Envoy's codec answers it (400), whatever the upstream did.
    pub fn has_body_failed(&self) -> bool {
        self.body_failed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A filter's request body encoder failed with `reply`: the router stops waiting for
    /// the upstream (woken as by the request's end) and answers with it.
    pub fn fail_by_filter(&self, reply: courier_filters::LocalReply) {
        let _ = self.filter_reply.set(reply);
        self.on_done.wake();
    }

    /// The reply a filter's failed request body encoder answers with, if one failed.
    pub fn filter_reply(&self) -> Option<&courier_filters::LocalReply> {
        self.filter_reply.get()
    }

    /// Whether the whole request body has been read.
    pub fn done(&self) -> bool {
        self.done_at().is_some()
    }

    /// When the whole request had been read, if it has.
    pub fn done_at(&self) -> Option<tokio::time::Instant> {
        self.at_offset(self.done_ns.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Resolves when the whole request has been read (the body is read by
    /// the upstream connection's task: this wakes the request's).
    pub async fn completed(&self) {
        std::future::poll_fn(|cx| {
            if self.done() || self.filter_reply().is_some() {
                return Poll::Ready(());
            }
            self.on_done.register(cx.waker());
            if self.done() || self.filter_reply().is_some() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// When the request last moved (headers or a body frame).
    pub fn last_activity(&self) -> tokio::time::Instant {
        self.start
            + std::time::Duration::from_millis(
                self.last_ms.load(std::sync::atomic::Ordering::Relaxed),
            )
    }

    pub(crate) fn moved(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn finish(&self) {
        if !self.done() {
            let ns = self.offset_ns(tokio::time::Instant::now());
            self.done_ns.store(ns, std::sync::atomic::Ordering::Release);
            self.on_done.wake();
        }
    }
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}
