//! A downstream connection's counts for its listener's log line: the
//! plaintext bytes each way ([`Counted`] around the stream the codec reads)
//! and the HTTP version its requests spoke ([`Wire::saw`]).

use http::Version;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection's bytes both ways and the HTTP version it spoke.
#[derive(Debug, Default)]
pub struct Wire {
    received: AtomicU64,
    sent: AtomicU64,
    /// 0: no request yet; else 1 + the index in [`VERSIONS`].
    version: AtomicU8,
}

const VERSIONS: [Version; 4] = [
    Version::HTTP_10,
    Version::HTTP_11,
    Version::HTTP_2,
    Version::HTTP_3,
];

impl Wire {
    /// Bytes received and sent so far.
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.received.load(Ordering::Relaxed),
            self.sent.load(Ordering::Relaxed),
        )
    }

    /// Records a request's version (`%PROTOCOL%` of the connection's line).
    pub fn saw(&self, v: Version) {
        if let Some(i) = VERSIONS.iter().position(|k| *k == v) {
            self.version.store(i as u8 + 1, Ordering::Relaxed);
        }
    }

    /// The HTTP version the connection's last request spoke.
    pub fn version(&self) -> Option<Version> {
        let i = self.version.load(Ordering::Relaxed);
        VERSIONS.get(usize::from(i.checked_sub(1)?)).copied()
    }
}

/// A stream that counts what moves through it into a [`Wire`] (none: passes
/// through; every connection has the one stream type either way).
#[derive(Debug)]
pub struct Counted<S> {
    inner: S,
    wire: Option<Arc<Wire>>,
}

impl<S> Counted<S> {
    /// Wraps `inner`, counting into `wire` if given.
    pub fn new(inner: S, wire: Option<Arc<Wire>>) -> Self {
        Self { inner, wire }
    }

    fn add(counter: impl Fn(&Wire) -> &AtomicU64, wire: &Option<Arc<Wire>>, n: usize) {
        if let Some(w) = wire {
            counter(w).fetch_add(n as u64, Ordering::Relaxed);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            Self::add(|w| &w.received, &this.wire, buf.filled().len() - before);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            Self::add(|w| &w.sent, &this.wire, n);
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            Self::add(|w| &w.sent, &this.wire, n);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
