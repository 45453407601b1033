//! The body of every response the connection manager sends: a local reply's bytes,
//! or an upstream response streamed through frame by frame (trailers included), either
//! possibly passed through the filters' body encoders.

use crate::upstream::pool::Lease;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A downstream response body.
// The upstream variant carries its lease inline: boxing it would allocate
// per response.
#[allow(clippy::large_enum_variant)]
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
        /// The cluster's `max_stream_duration`: the stream is reset when the
        /// body has not ended by then (boxed: rare, and every response body
        /// would otherwise carry its room).
        end: Option<Box<StreamEnd>>,
        /// Whether its trailers go on: not from an HTTP/1.1 connection of a
        /// cluster without `enable_trailers` (Envoy's codec drops them).
        keep_trailers: bool,
    },
    /// A body a filter transforms as it streams (boxed: only such responses pay for it).
    Encoded(Box<crate::request::encoded::Encoded<ResponseBody>>),
}

/// A per-try idle timer on a streaming response.
#[derive(Debug)]
pub struct Idle {
    every: std::time::Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

/// When an upstream stream's `max_stream_duration` ends, and the cluster
/// stats that count it (`upstream_rq_max_duration_reached`).
#[derive(Debug)]
pub struct StreamEnd {
    sleep: Pin<Box<tokio::time::Sleep>>,
    stats: std::sync::Arc<crate::stats::ClusterStats>,
}

impl StreamEnd {
    /// Ends the stream at `at`, counting it in `stats`.
    pub fn new(
        at: tokio::time::Instant,
        stats: std::sync::Arc<crate::stats::ClusterStats>,
    ) -> Self {
        Self {
            sleep: Box::pin(tokio::time::sleep_until(at)),
            stats,
        }
    }
}

/// The cluster's `max_stream_duration` passed while the response streamed:
/// the downstream stream is reset, as Envoy resets it once the response has
/// started.
#[derive(Debug, thiserror::Error)]
#[error("upstream max stream duration reached")]
pub struct MaxStreamDurationReached;

/// The upstream sent nothing for `per_try_idle_timeout`: the downstream stream
/// is reset, as Envoy resets it once the response has started.
#[derive(Debug, thiserror::Error)]
#[error("upstream per-try idle timeout")]
pub struct IdleTimeout;

/// A response body's error: the upstream's, or the per-try idle timeout.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl ResponseBody {
    /// An upstream body; releases the lease at once when there is nothing to read.
    pub fn upstream(
        body: Incoming,
        lease: Lease,
        idle: Option<std::time::Duration>,
        end: Option<StreamEnd>,
        keep_trailers: bool,
    ) -> Self {
        if body.is_end_stream() {
            lease.release();
            return ResponseBody::Upstream {
                body,
                lease: None,
                idle: None,
                end: None,
                keep_trailers,
            };
        }
        ResponseBody::Upstream {
            body,
            lease: Some(lease),
            idle: idle.map(|every| Idle {
                every,
                sleep: Box::pin(tokio::time::sleep(every)),
            }),
            end: end.map(Box::new),
            keep_trailers,
        }
    }
}

impl ResponseBody {
    /// Whether the body comes from an upstream (its stream idle timer runs while it
    /// streams).
    pub fn is_upstream(&self) -> bool {
        match self {
            ResponseBody::Local(_) => false,
            ResponseBody::Upstream { .. } => true,
            ResponseBody::Encoded(e) => e.inner().is_upstream(),
        }
    }

    /// Passes the body through `encoders` (unchanged when there are none).
    pub fn encode(self, encoders: courier_filters::BodyEncoders) -> Self {
        if encoders.is_empty() {
            return self;
        }
        ResponseBody::Encoded(Box::new(crate::request::encoded::Encoded::new(
            self, encoders,
        )))
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
            ResponseBody::Upstream {
                body,
                lease,
                idle,
                end,
                keep_trailers,
            } => {
                let mut polled = Pin::new(&mut *body)
                    .poll_frame(cx)
                    .map(|f| f.map(|r| r.map_err(BodyError::from)));
                if !*keep_trailers {
                    polled = crate::request::body::end_at_trailers(polled);
                }
                if polled.is_pending()
                    && let Some(e) = end
                    && e.sleep.as_mut().poll(cx).is_ready()
                {
                    e.stats.rq_max_duration_reached.inc();
                    // Dropping the lease closes an HTTP/1.1 connection mid-body.
                    lease.take();
                    *end = None;
                    return Poll::Ready(Some(Err(Box::new(MaxStreamDurationReached))));
                }
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
                if let (Poll::Ready(Some(Ok(f))), Some(l)) = (&polled, lease.as_mut())
                    && let Some(data) = f.data_ref()
                {
                    l.received(data.len());
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
            // The stream is reset: a half-encoded body cannot be finished.
            ResponseBody::Encoded(e) => e.poll(cx, |e| Some(Box::new(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Local(b) => b.is_end_stream(),
            ResponseBody::Upstream { body, .. } => body.is_end_stream(),
            ResponseBody::Encoded(e) => e.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Local(b) => b.size_hint(),
            ResponseBody::Upstream { body, .. } => body.size_hint(),
            // The encoded length is not known ahead.
            ResponseBody::Encoded(_) => SizeHint::default(),
        }
    }
}
