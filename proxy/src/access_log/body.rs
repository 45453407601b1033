//! Body wrappers: the request body counts what it reads (`%BYTES_RECEIVED%`);
//! the response body counts what it sends, keeps the trailers, and writes the
//! request's log lines when it ends or is dropped.

use super::{Pending, RequestProgress, ResponseSide};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use tokio::time::Instant;

/// A downstream request body on its way upstream. The progress is shared with
/// the access log (an HTTP/2 upstream sends the body from another task); it is
/// there only when the connection manager logs.
#[derive(Debug)]
pub struct RequestBody {
    inner: crate::router::body::RequestBody,
    progress: Option<(Arc<RequestProgress>, Instant)>,
}

impl RequestBody {
    /// Wraps `inner`, recording into `progress` (from `started`) if given.
    pub fn new(
        inner: crate::router::body::RequestBody,
        progress: Option<(Arc<RequestProgress>, Instant)>,
    ) -> Self {
        Self { inner, progress }
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
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Some((p, started)) = &this.progress {
            if let Poll::Ready(Some(Ok(frame))) = &polled
                && let Some(data) = frame.data_ref()
            {
                p.received.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
            let ended = match &polled {
                Poll::Ready(None) => true,
                Poll::Ready(Some(Ok(_))) => this.inner.is_end_stream(),
                _ => false,
            };
            if ended {
                let ms = started.elapsed().as_millis() as u64;
                // The first end wins (a body may be polled once more after it).
                let _ =
                    p.done_ms
                        .compare_exchange(u64::MAX, ms, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that logs its request when it ends.
pub struct LoggedBody<B> {
    inner: B,
    log: Option<Box<(Pending, ResponseSide)>>,
}

impl<B> LoggedBody<B> {
    /// A body that logs nothing.
    pub fn plain(inner: B) -> Self {
        Self { inner, log: None }
    }

    /// A body that writes `pending`'s lines when it ends.
    pub fn logged(inner: B, pending: Pending, response: ResponseSide) -> Self {
        Self {
            inner,
            log: Some(Box::new((pending, response))),
        }
    }

    fn finish(&mut self) {
        if let Some(log) = self.log.take() {
            let (pending, response) = *log;
            pending.write(response);
        }
    }
}

impl<B> std::fmt::Debug for LoggedBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoggedBody")
            .field("logs", &self.log.is_some())
            .finish()
    }
}

impl<B> Drop for LoggedBody<B> {
    fn drop(&mut self) {
        // A body hyper never polled (HEAD, 204, a reset stream) still logs.
        self.finish();
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for LoggedBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Some(log) = &mut this.log {
            match &polled {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        log.1.bytes_sent += data.len() as u64;
                    } else if let Some(t) = frame.trailers_ref() {
                        log.1.trailers = Some(t.clone());
                    }
                }
                Poll::Ready(None) => {}
                _ => return polled,
            }
            if matches!(polled, Poll::Ready(None)) || this.inner.is_end_stream() {
                this.finish();
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
