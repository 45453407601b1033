//! The downstream socket of an HTTP/1.1 connection that can be *parked*: once
//! idle, its hyper codec (with its 8 KiB read buffer, its header write buffer
//! and its dispatcher state) is ended and dropped, and only this wrapper is
//! kept until the client sends again. The bytes hyper had read but not parsed,
//! and the bytes read while parked, are replayed to the next codec first.
//!
//! The wrapper also counts the reads that hand bytes to the codec (parking
//! looks for a quiet socket) and, while a park is under way, keeps hyper from
//! shutting the socket down when it ends its codec.

use crate::codec::h2_flood::PREFACE as H2_PREFACE;
use crate::codec::idle::Activity;
use bytes::Bytes;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What one read while parked takes at most (on the stack, then copied to
/// the replay buffer): a short request head fits whole.
const PARKED_READ: usize = 512;

/// A socket whose codec can be ended and rebuilt without losing bytes.
pub(crate) struct Parkable<S> {
    inner: S,
    /// Read from the socket but not yet given to the codec.
    replay: Bytes,
    activity: Arc<Activity>,
}

/// What a read while parked found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// Bytes, now waiting in the replay buffer.
    Bytes,
    /// The client closed its side (or the socket ended, e.g. a request
    /// headers timeout's 408 went out).
    Closed,
}

impl<S> Parkable<S> {
    /// Wraps `inner`; `activity` counts the reads.
    pub(crate) fn new(inner: S, activity: Arc<Activity>) -> Self {
        Parkable {
            inner,
            replay: Bytes::new(),
            activity,
        }
    }

    /// Puts back bytes the last codec had read but not parsed (they come
    /// before anything read since).
    pub(crate) fn unread(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        self.replay = if self.replay.is_empty() {
            bytes
        } else {
            joined(&bytes, &self.replay)
        };
    }

    /// Bytes waiting to be replayed to the next codec.
    pub(crate) fn replay(&self) -> &[u8] {
        &self.replay
    }

    /// Whether what has arrived so far could still be the HTTP/2 preface
    /// (and is not all of it yet): HTTP/1.1 or HTTP/2 is not decided.
    pub(crate) fn undecided(&self) -> bool {
        self.replay.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(&self.replay)
    }

    /// Whether the connection opened with the HTTP/2 preface.
    pub(crate) fn is_h2(&self) -> bool {
        self.replay.starts_with(H2_PREFACE)
    }
}

/// `first` then `second`, in one buffer.
fn joined(first: &[u8], second: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(first.len() + second.len());
    v.extend_from_slice(first);
    v.extend_from_slice(second);
    Bytes::from(v)
}

impl<S: AsyncRead + Unpin> Parkable<S> {
    /// Waits, parked, for the client to send: the bytes go to the replay
    /// buffer (after what is there).
    pub(crate) async fn wait(&mut self) -> io::Result<Woken> {
        std::future::poll_fn(|cx| self.poll_wait(cx)).await
    }

    fn poll_wait(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Woken>> {
        // The buffer lives only during this poll: the parked future stays small.
        let mut buf = [0u8; PARKED_READ];
        let mut rb = ReadBuf::new(&mut buf);
        ready!(Pin::new(&mut self.inner).poll_read(cx, &mut rb))?;
        let got = rb.filled();
        if got.is_empty() {
            return Poll::Ready(Ok(Woken::Closed));
        }
        self.replay = joined(&self.replay, got);
        Poll::Ready(Ok(Woken::Bytes))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Parkable<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.replay.is_empty() {
            let n = this.replay.len().min(buf.remaining());
            buf.put_slice(&this.replay.split_to(n));
            if this.replay.is_empty() {
                // Frees the replay allocation.
                this.replay = Bytes::new();
            }
            this.activity.note_read();
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            this.activity.note_read();
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Parkable<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.activity.parking() {
            // hyper ends its codec for a park: flushed (hyper flushes before
            // it shuts down), and the socket stays open.
            return Pin::new(&mut this.inner).poll_flush(cx);
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn replays_unread_bytes_before_the_socket() {
        let (mut client, server) = tokio::io::duplex(64);
        let activity = Activity::new();
        let mut p = Parkable::new(server, Arc::clone(&activity));
        client.write_all(b"T / HTTP/1.1\r\n").await.unwrap();
        assert_eq!(p.wait().await.unwrap(), Woken::Bytes);
        p.unread(Bytes::from_static(b"GE"));
        assert_eq!(p.replay(), b"GET / HTTP/1.1\r\n");
        client.write_all(b"\r\n").await.unwrap();
        let mut got = vec![0u8; 18];
        p.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(activity.reads(), 2);
        drop(client);
        assert_eq!(p.wait().await.unwrap(), Woken::Closed);
    }

    #[tokio::test]
    async fn tells_the_h2_preface_apart() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut p = Parkable::new(server, Activity::new());
        client.write_all(&H2_PREFACE[..5]).await.unwrap();
        p.wait().await.unwrap();
        assert!(p.undecided());
        client.write_all(&H2_PREFACE[5..]).await.unwrap();
        while p.undecided() {
            p.wait().await.unwrap();
        }
        assert!(p.is_h2());
        let (mut client, server) = tokio::io::duplex(64);
        let mut p = Parkable::new(server, Activity::new());
        client.write_all(b"PUT").await.unwrap();
        p.wait().await.unwrap();
        assert!(!p.undecided() && !p.is_h2());
    }

    #[tokio::test]
    async fn a_park_does_not_shut_the_socket_down() {
        let (mut client, server) = tokio::io::duplex(64);
        let activity = Activity::new();
        let mut p = Parkable::new(server, Arc::clone(&activity));
        activity.set_parking(true);
        p.write_all(b"x").await.unwrap();
        p.shutdown().await.unwrap();
        activity.set_parking(false);
        p.write_all(b"y").await.unwrap();
        p.shutdown().await.unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"xy");
    }
}
