//! A body on its way through the filters' body encoders (a compressor, either
//! direction), frame by frame as it streams: every chunk and the trailers pass
//! through them, so the body is never held whole. Only bodies a filter
//! transforms are wrapped.

use bytes::Bytes;
use courier_filters::{BodyEncoders, EncodeError};
use http::HeaderMap;
use http_body::{Body, Frame};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

/// A body and the encoders it flows through.
#[derive(Debug)]
pub struct Encoded<B> {
    inner: B,
    encoders: BodyEncoders,
    /// Trailers held back while the encoders' last bytes go first.
    trailers: Option<HeaderMap>,
    /// The encoders have seen the end of the stream.
    finished: bool,
    /// Nothing more to send.
    done: bool,
    /// A filter answers instead (its encoder failed): the body never ends, so the
    /// upstream cannot take it for a whole one, until the request is dropped.
    stalled: bool,
}

impl<B: Body<Data = Bytes> + Unpin> Encoded<B> {
    /// `inner` through `encoders` (not empty).
    pub fn new(inner: B, encoders: BodyEncoders) -> Self {
        Self {
            inner,
            encoders,
            trailers: None,
            finished: false,
            done: false,
            stalled: false,
        }
    }

    /// The local reply of the encoder that failed, if it has one.
    pub fn failure_reply(&self) -> Option<courier_filters::LocalReply> {
        self.encoders.failure_reply()
    }

    /// Sends nothing more, and never ends (a filter answers the request instead).
    pub fn stall(&mut self) {
        self.stalled = true;
    }

    /// The body being encoded.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// An encoder failed: the body ends, with the error `failure` makes of it
    /// (none: it just ends) — a half-encoded body cannot be finished.
    fn failed(
        &mut self,
        e: EncodeError,
        failure: impl FnOnce(EncodeError) -> Option<B::Error>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        self.done = true;
        Poll::Ready(failure(e).map(Err))
    }

    /// Polls the next frame to send; `failure` says what an encoder's error
    /// becomes in this direction.
    pub fn poll(
        &mut self,
        cx: &mut Context<'_>,
        failure: impl FnOnce(EncodeError) -> Option<B::Error>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if self.stalled {
            return Poll::Pending;
        }
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            if let Some(t) = self.trailers.take() {
                self.done = true;
                // An encoder that moved them all into the body (gRPC-Web's trailers
                // frame) leaves none: the stream just ends, as Envoy's codec skips
                // empty trailers.
                if t.is_empty() {
                    return Poll::Ready(None);
                }
                return Poll::Ready(Some(Ok(Frame::trailers(t))));
            }
            let frame = match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(e)) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    self.done = true;
                    if self.finished {
                        return Poll::Ready(None);
                    }
                    self.finished = true;
                    return match self.encoders.data(Bytes::new(), true) {
                        Ok(out) if out.is_empty() => Poll::Ready(None),
                        Ok(out) => Poll::Ready(Some(Ok(Frame::data(out)))),
                        Err(e) => self.failed(e, failure),
                    };
                }
            };
            let out = match frame.into_data() {
                Ok(data) => {
                    let end = self.inner.is_end_stream();
                    self.finished |= end;
                    self.encoders.data(data, end)
                }
                Err(frame) => match frame.into_trailers() {
                    Ok(mut t) => {
                        let out = self.encoders.trailers(&mut t);
                        self.finished = true;
                        self.trailers = Some(t);
                        out
                    }
                    // A frame kind http-body may add later: nothing to encode.
                    Err(_) => continue,
                },
            };
            match out {
                Ok(out) if out.is_empty() => continue,
                Ok(out) => return Poll::Ready(Some(Ok(Frame::data(out)))),
                Err(e) => return self.failed(e, failure),
            }
        }
    }

    /// Whether nothing more will be sent.
    pub fn is_end_stream(&self) -> bool {
        self.done && !self.stalled
    }
}
