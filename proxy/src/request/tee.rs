//! A request body of unknown length (chunked, or HTTP/2 without
//! `content-length`) copied as it goes upstream, so that a retry can send it
//! again — Envoy buffers the body while the first attempt streams it, up to the
//! buffer limit; past the limit the copy is dropped and the request is not
//! retried.

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::Frame;
use std::task::Poll;
use tokio::sync::oneshot;

/// The whole body as sent: its data and its trailers.
pub type Teed = (Bytes, Option<HeaderMap>);

/// The copy being made. The body lives in the upstream connection's task
/// (HTTP/2 sends it from another task), so the finished copy is handed back
/// through a one-shot channel on the same worker; it arrives only when the
/// body ended within the limit.
#[derive(Debug)]
pub struct Tee {
    buf: BytesMut,
    limit: u64,
    tx: Option<oneshot::Sender<Teed>>,
}

impl Tee {
    /// A copy of at most `limit` bytes and where it will arrive.
    pub fn new(limit: u64) -> (Self, oneshot::Receiver<Teed>) {
        let (tx, rx) = oneshot::channel();
        (
            Tee {
                buf: BytesMut::new(),
                limit,
                tx: Some(tx),
            },
            rx,
        )
    }

    /// Records what the body yielded; `end` says the body has ended after it.
    pub fn observe(
        &mut self,
        polled: &Poll<Option<Result<Frame<Bytes>, hyper::Error>>>,
        end: bool,
    ) {
        if self.tx.is_none() {
            return;
        }
        match polled {
            Poll::Pending => {}
            Poll::Ready(None) => self.finish(None),
            // A downstream failure mid-body: nothing to replay.
            Poll::Ready(Some(Err(_))) => self.abandon(),
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    if (self.buf.len() + d.len()) as u64 > self.limit {
                        return self.abandon();
                    }
                    self.buf.extend_from_slice(d);
                    if end {
                        self.finish(None);
                    }
                } else if let Some(t) = frame.trailers_ref() {
                    self.finish(Some(t.clone()));
                }
            }
        }
    }

    fn finish(&mut self, trailers: Option<HeaderMap>) {
        if let Some(tx) = self.tx.take() {
            let data = std::mem::take(&mut self.buf).freeze();
            // The receiver is gone once the request is done: nothing to do.
            let _ = tx.send((data, trailers));
        }
    }

    fn abandon(&mut self) {
        self.tx = None;
        self.buf = BytesMut::new();
    }
}
