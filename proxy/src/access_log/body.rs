//! Body wrappers: the request body counts what it reads (`%BYTES_RECEIVED%`);
//! the response body counts what it sends, keeps the trailers, and writes the
//! request's log lines when it ends or is dropped.

use super::{Pending, ResponseSide};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

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

/// What a response body's error tells the access log: Envoy's response flag
/// and details when the proxy itself reset the stream mid-body.
pub trait EndedBy {
    /// The flag and details, for an error the proxy raised.
    fn flag_and_details(&self) -> Option<(&'static str, &'static str)>;
}

impl EndedBy for std::convert::Infallible {
    fn flag_and_details(&self) -> Option<(&'static str, &'static str)> {
        match *self {}
    }
}

impl EndedBy for crate::router::body::BodyError {
    fn flag_and_details(&self) -> Option<(&'static str, &'static str)> {
        self.downcast_ref::<crate::router::body::MaxStreamDurationReached>()
            .map(|_| ("UMSDR", "upstream_max_stream_duration_reached"))
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for LoggedBody<B>
where
    B::Error: EndedBy,
{
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
                Poll::Ready(Some(Err(e))) => {
                    if let Some((flag, details)) = e.flag_and_details() {
                        log.1.flag = Some(flag);
                        log.1.details = Some(details.to_string());
                    }
                    return polled;
                }
                Poll::Pending => return polled,
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
