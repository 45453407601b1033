//! A response body on its way through the filters' body encoders (the compressor):
//! every chunk and the trailers are passed through them as they stream, so the body is
//! never held whole. Only responses a filter transforms are wrapped.

use crate::router::body::{BodyError, ResponseBody};
use bytes::Bytes;
use courier_filters::BodyEncoders;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

/// A response body and the encoders it flows through.
#[derive(Debug)]
pub struct Encoded {
    inner: ResponseBody,
    encoders: BodyEncoders,
    /// Trailers held back while the encoders' last bytes go first.
    trailers: Option<HeaderMap>,
    /// The encoders have seen the end of the stream.
    finished: bool,
    /// Nothing more to send.
    done: bool,
}

impl Encoded {
    /// `inner` passed through `encoders` (not empty).
    pub fn new(inner: ResponseBody, encoders: BodyEncoders) -> Self {
        Self {
            inner,
            encoders,
            trailers: None,
            finished: false,
            done: false,
        }
    }

    /// Whether the body comes from an upstream (its stream idle timer runs).
    pub fn is_upstream(&self) -> bool {
        self.inner.is_upstream()
    }

    fn failed(
        &mut self,
        e: courier_filters::EncodeError,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        // The stream is reset: a half-encoded body cannot be finished.
        self.done = true;
        Poll::Ready(Some(Err(Box::new(e))))
    }

    /// Polls the next frame to send.
    pub fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            if let Some(t) = self.trailers.take() {
                self.done = true;
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
                        Err(e) => self.failed(e),
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
                Err(e) => return self.failed(e),
            }
        }
    }

    /// Whether nothing more will be sent.
    pub fn is_end_stream(&self) -> bool {
        self.done
    }

    /// The encoded length is not known ahead.
    pub fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
