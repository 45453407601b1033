//! The body of every response the connection manager sends: a local reply's bytes,
//! or an upstream response streamed through frame by frame (trailers included).

use crate::upstream::pool::Lease;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
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
    },
}

impl ResponseBody {
    /// An upstream body; releases the lease at once when there is nothing to read.
    pub fn upstream(body: Incoming, lease: Lease) -> Self {
        if body.is_end_stream() {
            lease.release();
            return ResponseBody::Upstream { body, lease: None };
        }
        ResponseBody::Upstream {
            body,
            lease: Some(lease),
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
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ResponseBody::Local(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(|never| match never {}))),
            ResponseBody::Upstream { body, lease } => {
                let polled = Pin::new(&mut *body).poll_frame(cx);
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
