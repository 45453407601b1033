//! A request body on its way upstream ([`RequestBody`]: the downstream's, streamed,
//! or bytes courier holds itself) and the same body counted for the access log
//! ([`UpstreamBody`], what the upstream pools send).

use super::progress::Progress;
use super::tee::Tee;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::time::Instant;

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
    /// The downstream's body; `bool`: whether its trailers go on (see [`RequestBody::new`]).
    Streamed(Incoming, bool),
    /// Taken by the first poll.
    Held(Option<Bytes>),
    /// Bytes read ahead for a retry, then the trailers, or the rest of the
    /// downstream body when it was too long to hold whole.
    Replay {
        data: Option<Bytes>,
        trailers: Option<http::HeaderMap>,
        rest: Option<Box<UpstreamBody>>,
    },
    /// A body through the filters' encoders (boxed: only such requests pay for it).
    Encoded(
        Box<super::encoded::Encoded<UpstreamBody>>,
        Option<std::sync::Arc<Progress>>,
    ),
    /// A body of unknown length, copied for a retry as it is sent.
    Teed { inner: Box<UpstreamBody>, tee: Tee },
}

impl RequestBody {
    /// `body`, reporting to `progress`. Without `keep_trailers` its trailers end
    /// it instead: what Envoy's HTTP/1 codec does without `enable_trailers`.
    pub fn new(body: Incoming, progress: std::sync::Arc<Progress>, keep_trailers: bool) -> Self {
        if body.is_end_stream() {
            progress.finish();
        }
        RequestBody {
            body: Source::Streamed(body, keep_trailers),
            progress: Some(progress),
        }
    }

    /// `data` (none when empty) then `trailers`, then what is left of `rest`.
    pub fn replay(
        data: Bytes,
        trailers: Option<http::HeaderMap>,
        rest: Option<Box<UpstreamBody>>,
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
    pub(crate) fn teed(inner: UpstreamBody, tee: Tee) -> Self {
        RequestBody {
            body: Source::Teed {
                inner: Box::new(inner),
                tee,
            },
            progress: None,
        }
    }

    /// `inner` passed through `encoders` (a compressor's request direction, gRPC-Web's
    /// base64 decoding); an encoder's local reply on failure goes to `progress`.
    pub fn encoded(
        inner: UpstreamBody,
        encoders: courier_filters::BodyEncoders,
        progress: Option<std::sync::Arc<Progress>>,
    ) -> Self {
        RequestBody {
            body: Source::Encoded(
                Box::new(super::encoded::Encoded::new(inner, encoders)),
                progress,
            ),
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
        let (body, keep_trailers) = match &mut this.body {
            Source::Streamed(b, keep) => (b, *keep),
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
            // The body's error type is the downstream codec's, which an encoder
            // error cannot become: the body ends here, and the upstream's decoder
            // sees an unfinished stream (it cannot take it for a whole one).
            Source::Encoded(e, progress) => {
                let mut failed = None;
                let polled = e.poll(cx, |e| {
                    failed = Some(e);
                    None
                });
                let Some(error) = failed else {
                    return polled;
                };
                // A filter that answers such a failure (gRPC-Web's 400): the router
                // answers with its reply, and the body is held open until the request
                // is dropped (which resets the upstream stream, as Envoy's local reply
                // does).
                if let Some(p) = progress
                    && let Some(reply) = e.failure_reply()
                {
                    tracing::debug!("request body encoder failed: {error}");
                    e.stall();
                    p.fail_by_filter(reply);
                    return Poll::Pending;
                }
                tracing::warn!("request body encoder failed: {error}");
                return polled;
            }
            Source::Teed { inner, tee } => {
                let polled = Pin::new(&mut **inner).poll_frame(cx);
                tee.observe(&polled, inner.is_end_stream());
                return polled;
            }
        };
        let mut polled = Pin::new(&mut *body).poll_frame(cx);
        if !keep_trailers {
            polled = end_at_trailers(polled);
        }
        if let Some(p) = &this.progress {
            match &polled {
                Poll::Ready(Some(Ok(_))) => {
                    p.moved();
                    if body.is_end_stream() {
                        p.finish();
                    }
                }
                Poll::Ready(None) => p.finish(),
                // Not a client gone mid-body: that is no reply's business.
                Poll::Ready(Some(Err(e))) if !e.is_incomplete_message() => p.body_failed(),
                _ => {}
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.body {
            Source::Streamed(b, _) => b.is_end_stream(),
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
            Source::Encoded(e, _) => e.is_end_stream(),
            Source::Teed { inner, .. } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.body {
            Source::Streamed(b, _) => b.size_hint(),
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
            // The encoded length is not known ahead.
            Source::Encoded(..) => SizeHint::default(),
            Source::Teed { inner, .. } => inner.size_hint(),
        }
    }
}

/// A downstream request body on its way upstream. The progress is shared with
/// the access log (an HTTP/2 upstream sends the body from another task); it is
/// there only when the connection manager logs.
#[derive(Debug)]
pub struct UpstreamBody {
    inner: RequestBody,
    progress: Option<(Arc<RequestProgress>, Instant)>,
    /// Whether trailers go on to the upstream (see [`UpstreamBody::keep_trailers`]).
    keep_trailers: bool,
    /// What is sent and when it ends, for the cluster's `upstream_rq_time`
    /// and `upstream_rq_body_size`.
    sent: Option<Arc<crate::stats::upstream_rq::BodySent>>,
}

impl UpstreamBody {
    /// Wraps `inner`, recording into `progress` (from `started`) if given.
    pub fn new(inner: RequestBody, progress: Option<(Arc<RequestProgress>, Instant)>) -> Self {
        Self {
            inner,
            progress,
            keep_trailers: true,
            sent: None,
        }
    }

    /// Whether the connection it is sent on carries trailers: an HTTP/1.1
    /// connection of a cluster without `enable_trailers` does not, and its
    /// trailers end the body instead, as in Envoy's HTTP/1 codec.
    pub fn keep_trailers(&mut self, keep: bool) {
        self.keep_trailers = keep;
    }

    /// Reports the bytes sent from now on, and the end, to `sent`.
    pub fn count_sent(&mut self, sent: Arc<crate::stats::upstream_rq::BodySent>) {
        self.sent = Some(sent);
    }
}

/// `polled`, with a trailers frame turned into the body's end: Envoy's HTTP/1
/// codec without `enable_trailers` neither reads nor writes trailers.
pub(crate) fn end_at_trailers<E>(
    polled: Poll<Option<Result<Frame<Bytes>, E>>>,
) -> Poll<Option<Result<Frame<Bytes>, E>>> {
    match polled {
        Poll::Ready(Some(Ok(f))) if f.is_trailers() => Poll::Ready(None),
        other => other,
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let mut polled = Pin::new(&mut this.inner).poll_frame(cx);
        if !this.keep_trailers {
            polled = end_at_trailers(polled);
        }
        if let Some(sent) = &this.sent {
            match &polled {
                Poll::Ready(None) => sent.ended(),
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        sent.sent(data.len());
                    }
                    if this.inner.is_end_stream() {
                        sent.ended();
                    }
                }
                _ => {}
            }
        }
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

/// The request body's progress, written by [`UpstreamBody`] (which may run
/// on an upstream HTTP/2 connection's task, hence atomics).
#[derive(Debug)]
pub struct RequestProgress {
    /// Body bytes read.
    pub received: AtomicU64,
    /// Milliseconds from the start to the end of the body; `u64::MAX` until then.
    pub done_ms: AtomicU64,
}

impl RequestProgress {
    /// Progress of a request; one without a body is complete at once.
    pub fn new(end_stream: bool) -> Self {
        Self {
            received: AtomicU64::new(0),
            done_ms: AtomicU64::new(if end_stream { 0 } else { u64::MAX }),
        }
    }
}
