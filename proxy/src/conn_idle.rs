//! `common_http_protocol_options.idle_timeout`: a downstream connection with no
//! active stream for that long is closed (HTTP/1.1) or sent GOAWAY (HTTP/2). A
//! stream is active from its request headers until its response body has been
//! sent (or dropped). Also `stream_idle_timeout` once the response has started:
//! a response body that stalls that long resets the stream (Envoy's behaviour
//! when the response headers are already out).

use crate::router::body::Progress;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
}

impl Activity {
    /// A connection just opened (idle until its first request).
    pub fn new() -> Arc<Self> {
        Arc::new(Activity {
            start: Instant::now(),
            active: AtomicUsize::new(0),
            heads: AtomicU64::new(0),
            idle_since_ms: AtomicU64::new(0),
        })
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

    /// Resolves once the connection has had no active stream for `timeout`.
    pub async fn idle_for(&self, timeout: Duration) {
        loop {
            let since =
                self.start + Duration::from_millis(self.idle_since_ms.load(Ordering::Relaxed));
            let deadline = since + timeout;
            if self.active.load(Ordering::Relaxed) == 0 && Instant::now() >= deadline {
                return;
            }
            // Busy: check again a full timeout later (an idle period starting
            // meanwhile ends no sooner than that).
            let next = if self.active.load(Ordering::Relaxed) == 0 {
                deadline
            } else {
                Instant::now() + timeout
            };
            tokio::time::sleep_until(next).await;
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
}

impl<B> Tracked<B> {
    /// `body`, active while `guard` lives, reset after `idle_timeout` without a
    /// frame of it or of the request (`request`).
    pub fn new(
        body: B,
        guard: StreamGuard,
        idle_timeout: Option<Duration>,
        request: Option<Arc<Progress>>,
    ) -> Self {
        // The route's `idle_timeout`, when it set one, replaces the connection manager's.
        let idle_timeout = match &request {
            Some(p) => p.idle_timeout(idle_timeout),
            None => idle_timeout,
        };
        Tracked {
            body,
            guard: Some(guard),
            idle_timeout,
            idle: None,
            request,
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

type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.guard = None,
            Poll::Ready(Some(Ok(_))) => {
                if let (Some(t), Some(idle)) = (this.idle_timeout, this.idle.as_mut()) {
                    idle.as_mut().reset(Instant::now() + t);
                }
            }
            Poll::Pending => {
                if let Some(t) = this.idle_timeout {
                    let idle = this
                        .idle
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(t)));
                    if idle.as_mut().poll(cx).is_ready() {
                        let moved = this.request.as_ref().map(|p| p.last_activity() + t);
                        match moved {
                            Some(later) if later > Instant::now() => {
                                idle.as_mut().reset(later);
                                // Registers the waker for the new deadline.
                                let _ = idle.as_mut().poll(cx);
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
