//! A request body on its way upstream through the filters' body encoders (a
//! compressor's request direction), frame by frame as it streams.

use crate::request::body::UpstreamBody;
use bytes::Bytes;
use courier_filters::BodyEncoders;
use http::HeaderMap;
use http_body::{Body, Frame};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

/// A request body and the encoders it flows through.
#[derive(Debug)]
pub struct EncodedRequest {
    inner: UpstreamBody,
    encoders: BodyEncoders,
    /// Trailers held back while the encoders' last bytes go first.
    trailers: Option<HeaderMap>,
    /// The encoders have seen the end of the stream.
    finished: bool,
    /// Nothing more to send.
    done: bool,
}

impl EncodedRequest {
    /// `inner` through `encoders`.
    pub fn new(inner: UpstreamBody, encoders: BodyEncoders) -> Self {
        Self {
            inner,
            encoders,
            trailers: None,
            finished: false,
            done: false,
        }
    }

    /// An encoder failed. The body's error type is the downstream codec's, which an
    /// encoder error cannot become: the body ends here, and the upstream's decoder sees an
    /// unfinished stream (it cannot take it for a whole one).
    fn failed(
        &mut self,
        e: &courier_filters::EncodeError,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        tracing::warn!("request body encoder failed: {e}");
        self.done = true;
        Poll::Ready(None)
    }

    /// Polls the next frame to send upstream.
    pub fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
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
                        Err(e) => self.failed(&e),
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
                    Err(_) => continue,
                },
            };
            match out {
                Ok(out) if out.is_empty() => continue,
                Ok(out) => return Poll::Ready(Some(Ok(Frame::data(out)))),
                Err(e) => return self.failed(&e),
            }
        }
    }

    /// Whether nothing more will be sent.
    pub fn is_end_stream(&self) -> bool {
        self.done
    }
}
