//! `common_http_protocol_options.idle_timeout`: a downstream connection with no
//! active stream for that long is closed (HTTP/1.1) or sent GOAWAY (HTTP/2). A
//! stream is active from its request headers until its response body has been
//! sent (or dropped).

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// Active streams of one connection and when the last one ended.
#[derive(Debug)]
pub struct Activity {
    start: Instant,
    active: AtomicUsize,
    /// Milliseconds from `start` to when the connection last became idle.
    idle_since_ms: AtomicU64,
}

impl Activity {
    /// A connection just opened (idle until its first request).
    pub fn new() -> Arc<Self> {
        Arc::new(Activity {
            start: Instant::now(),
            active: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
        })
    }

    /// A stream starts; it ends when the guard drops.
    pub fn stream(self: &Arc<Self>) -> StreamGuard {
        self.active.fetch_add(1, Ordering::Relaxed);
        StreamGuard(Arc::clone(self))
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

/// A response body that holds its stream active until it is sent or dropped.
#[derive(Debug)]
pub struct Tracked<B> {
    body: B,
    guard: Option<StreamGuard>,
}

impl<B> Tracked<B> {
    /// `body`, active while `guard` lives.
    pub fn new(body: B, guard: StreamGuard) -> Self {
        Tracked {
            body,
            guard: Some(guard),
        }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            this.guard = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
