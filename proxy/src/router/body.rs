//! The body of every response the connection manager sends: a local reply's bytes,
//! or an upstream response streamed through frame by frame (trailers included).

use crate::upstream::pool::Lease;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A downstream response body.
#[derive(Debug)]
pub enum ResponseBody {
    /// Bytes courier produced itself.
    Local(Full<Bytes>),
    /// An upstream response body; its connection lease is released when the body
    /// ends, so an HTTP/1.1 connection goes back to the pool only when reusable.
    Upstream {
        /// The body.
        body: Incoming,
        /// Released at the end of the body.
        lease: Option<Lease>,
        /// The route's `per_try_idle_timeout`: the stream is reset when the
        /// upstream sends nothing for this long.
        idle: Option<Idle>,
    },
}

/// A per-try idle timer on a streaming response.
#[derive(Debug)]
pub struct Idle {
    every: std::time::Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

/// The upstream sent nothing for `per_try_idle_timeout`: the downstream stream
/// is reset, as Envoy resets it once the response has started.
#[derive(Debug, thiserror::Error)]
#[error("upstream per-try idle timeout")]
pub struct IdleTimeout;

/// A response body's error: the upstream's, or the per-try idle timeout.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl ResponseBody {
    /// An upstream body; releases the lease at once when there is nothing to read.
    pub fn upstream(body: Incoming, lease: Lease, idle: Option<std::time::Duration>) -> Self {
        if body.is_end_stream() {
            lease.release();
            return ResponseBody::Upstream {
                body,
                lease: None,
                idle: None,
            };
        }
        ResponseBody::Upstream {
            body,
            lease: Some(lease),
            idle: idle.map(|every| Idle {
                every,
                sleep: Box::pin(tokio::time::sleep(every)),
            }),
        }
    }
}

impl From<Full<Bytes>> for ResponseBody {
    fn from(b: Full<Bytes>) -> Self {
        ResponseBody::Local(b)
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            ResponseBody::Local(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(|never| match never {}))),
            ResponseBody::Upstream { body, lease, idle } => {
                let polled = Pin::new(&mut *body)
                    .poll_frame(cx)
                    .map(|f| f.map(|r| r.map_err(BodyError::from)));
                if let Some(i) = idle {
                    if polled.is_pending() {
                        if i.sleep.as_mut().poll(cx).is_ready() {
                            // Dropping the lease closes an HTTP/1.1 connection mid-body.
                            lease.take();
                            return Poll::Ready(Some(Err(Box::new(IdleTimeout))));
                        }
                    } else {
                        let at = tokio::time::Instant::now() + i.every;
                        i.sleep.as_mut().reset(at);
                    }
                }
                let done = match &polled {
                    Poll::Ready(None) => true,
                    Poll::Ready(Some(Ok(_))) => body.is_end_stream(),
                    _ => false,
                };
                if done && let Some(l) = lease.take() {
                    l.release();
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Local(b) => b.is_end_stream(),
            ResponseBody::Upstream { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Local(b) => b.size_hint(),
            ResponseBody::Upstream { body, .. } => body.size_hint(),
        }
    }
}

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
            if self.done() {
                return Poll::Ready(());
            }
            self.on_done.register(cx.waker());
            if self.done() {
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

    fn moved(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    fn finish(&self) {
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

/// A request body on its way upstream: the downstream's, streamed and reporting its
/// progress, or bytes courier holds itself (its own requests to a cluster, and bodies
/// buffered for a retry).
#[derive(Debug)]
pub struct RequestBody {
    body: Source,
    progress: Option<std::sync::Arc<Progress>>,
}

#[derive(Debug)]
enum Source {
    Streamed(Incoming),
    /// Taken by the first poll.
    Held(Option<Bytes>),
    /// Bytes read ahead for a retry, then the trailers, or the rest of the
    /// downstream body when it was too long to hold whole.
    Replay {
        data: Option<Bytes>,
        trailers: Option<http::HeaderMap>,
        rest: Option<Box<crate::upstream::pool::UpstreamBody>>,
    },
    /// A body of unknown length, copied for a retry as it is sent.
    Teed {
        inner: Box<crate::upstream::pool::UpstreamBody>,
        tee: super::tee::Tee,
    },
}

impl RequestBody {
    /// `body`, reporting to `progress`.
    pub fn new(body: Incoming, progress: std::sync::Arc<Progress>) -> Self {
        if body.is_end_stream() {
            progress.finish();
        }
        RequestBody {
            body: Source::Streamed(body),
            progress: Some(progress),
        }
    }

    /// `data` (none when empty) then `trailers`, then what is left of `rest`.
    pub fn replay(
        data: Bytes,
        trailers: Option<http::HeaderMap>,
        rest: Option<Box<crate::upstream::pool::UpstreamBody>>,
    ) -> Self {
        RequestBody {
            body: Source::Replay {
                data: (!data.is_empty()).then_some(data),
                trailers,
                rest,
            },
            progress: None,
        }
    }

    /// `inner`, copied into `tee` as it is read.
    pub(crate) fn teed(inner: crate::upstream::pool::UpstreamBody, tee: super::tee::Tee) -> Self {
        RequestBody {
            body: Source::Teed {
                inner: Box::new(inner),
                tee,
            },
            progress: None,
        }
    }

    /// A body of `bytes` (none when empty), reporting nothing.
    pub fn full(bytes: Bytes) -> Self {
        RequestBody {
            body: Source::Held((!bytes.is_empty()).then_some(bytes)),
            progress: None,
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let body = match &mut this.body {
            Source::Streamed(b) => b,
            Source::Held(bytes) => return Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Source::Replay {
                data,
                trailers,
                rest,
            } => {
                if let Some(d) = data.take() {
                    return Poll::Ready(Some(Ok(Frame::data(d))));
                }
                if let Some(t) = trailers.take() {
                    return Poll::Ready(Some(Ok(Frame::trailers(t))));
                }
                return match rest {
                    Some(r) => Pin::new(&mut **r).poll_frame(cx),
                    None => Poll::Ready(None),
                };
            }
            Source::Teed { inner, tee } => {
                let polled = Pin::new(&mut **inner).poll_frame(cx);
                tee.observe(&polled, inner.is_end_stream());
                return polled;
            }
        };
        let polled = Pin::new(&mut *body).poll_frame(cx);
        if let Some(p) = &this.progress {
            match &polled {
                Poll::Ready(Some(Ok(_))) => {
                    p.moved();
                    if body.is_end_stream() {
                        p.finish();
                    }
                }
                Poll::Ready(None) => p.finish(),
                _ => {}
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.body {
            Source::Streamed(b) => b.is_end_stream(),
            Source::Held(b) => b.is_none(),
            Source::Replay {
                data,
                trailers,
                rest,
            } => {
                data.is_none()
                    && trailers.is_none()
                    && rest.as_ref().is_none_or(|r| r.is_end_stream())
            }
            Source::Teed { inner, .. } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.body {
            Source::Streamed(b) => b.size_hint(),
            Source::Held(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Source::Replay { data, rest, .. } => {
                let held = data.as_ref().map_or(0, |b| b.len() as u64);
                match rest {
                    None => SizeHint::with_exact(held),
                    Some(r) => {
                        let h = r.size_hint();
                        let mut out = SizeHint::new();
                        out.set_lower(h.lower() + held);
                        if let Some(u) = h.upper() {
                            out.set_upper(u + held);
                        }
                        out
                    }
                }
            }
            Source::Teed { inner, .. } => inner.size_hint(),
        }
    }
}
