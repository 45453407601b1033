//! Moving bytes both ways between two streams, with half-close and bounded
//! buffers.
//!
//! Each direction reads into the worker's scratch buffer and writes straight
//! to the other side; only what the other side does not take at once is
//! copied into a buffer of the connection's own, and while that buffer is not
//! empty the direction does not read. So a connection holds no buffer while
//! idle or while its peers keep up, and at most one read (`cap` bytes) per
//! direction while a peer is slow: a slow reader stops the other side's reads
//! (TCP flow control then stops the writer), nothing is buffered without bound.
//!
//! A read of end-of-stream is forwarded as a shutdown of the other side's
//! write half (FIN, or TLS close_notify then FIN); the other direction carries
//! on until it ends too, as Envoy's tcp_proxy with half-close enabled.

use super::stats::TcpStats;
use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// The most a direction reads at once (and so holds while its peer is slow).
pub const MAX_READ: usize = 64 * 1024;

thread_local! {
    /// The worker's read buffer, shared by its connections: a direction's
    /// bytes live here only within one poll.
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; MAX_READ].into_boxed_slice());
}

/// Which connection an I/O error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client's.
    Downstream,
    /// The upstream host's.
    Upstream,
}

/// One direction's state.
#[derive(Debug, Default)]
struct Half {
    /// Bytes read but not yet taken by the other side (empty, unallocated, normally).
    pending: Vec<u8>,
    /// How much of `pending` is written.
    pos: usize,
    /// The source ended; the end is forwarded once `pending` is written.
    eof: bool,
    /// The end was forwarded (the other side's write half shut down).
    done: bool,
    /// Written since the last flush.
    unflushed: bool,
    /// Bytes read from the source.
    read: u64,
    /// Bytes written to the other side.
    written: u64,
}

/// What happened on the last poll of a direction, for the stats.
#[derive(Debug, Default, Clone, Copy)]
struct Moved {
    read: u64,
    written: u64,
    /// Bytes left pending (+) or taken from pending (-).
    buffered: i64,
    paused: bool,
    resumed: bool,
}

impl Half {
    /// Moves bytes from `from` to `to` until neither can make progress.
    fn poll<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        from: &mut R,
        to: &mut W,
        cap: usize,
        m: &mut Moved,
    ) -> Poll<Result<(), Side>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        loop {
            // What the other side did not take first: no read until it has.
            while self.pos < self.pending.len() {
                match Pin::new(&mut *to).poll_write(cx, &self.pending[self.pos..]) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(Side::Upstream)),
                    Poll::Ready(Ok(n)) => {
                        self.pos += n;
                        self.written += n as u64;
                        self.unflushed = true;
                        m.written += n as u64;
                        m.buffered -= n as i64;
                    }
                    Poll::Ready(Err(_)) => return Poll::Ready(Err(Side::Upstream)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            if !self.pending.is_empty() {
                // Drained: the memory goes back until the peer is slow again.
                self.pending = Vec::new();
                self.pos = 0;
                m.resumed = true;
            }
            if self.eof {
                if self.unflushed {
                    ready!(Pin::new(&mut *to).poll_flush(cx)).map_err(|_| Side::Upstream)?;
                    self.unflushed = false;
                }
                if !self.done {
                    // The other side may already be gone: its end is what matters.
                    let _ = ready!(Pin::new(&mut *to).poll_shutdown(cx));
                    self.done = true;
                }
                return Poll::Ready(Ok(()));
            }
            let read = SCRATCH.with_borrow_mut(|buf| {
                let mut rb = ReadBuf::new(&mut buf[..cap]);
                match Pin::new(&mut *from).poll_read(cx, &mut rb) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Err(_)) => Poll::Ready(Err(Side::Downstream)),
                    Poll::Ready(Ok(())) => {
                        let data = rb.filled();
                        let mut off = 0;
                        // Straight through while the other side takes it.
                        while off < data.len() {
                            match Pin::new(&mut *to).poll_write(cx, &data[off..]) {
                                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                                    return Poll::Ready(Err(Side::Upstream));
                                }
                                Poll::Ready(Ok(n)) => off += n,
                                Poll::Pending => break,
                            }
                        }
                        if off < data.len() {
                            self.pending = data[off..].to_vec();
                        }
                        Poll::Ready(Ok((data.len(), off)))
                    }
                }
            });
            match read {
                Poll::Pending => {
                    if self.unflushed {
                        ready!(Pin::new(&mut *to).poll_flush(cx)).map_err(|_| Side::Upstream)?;
                        self.unflushed = false;
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Err(side)) => return Poll::Ready(Err(side)),
                Poll::Ready(Ok((0, _))) => self.eof = true,
                Poll::Ready(Ok((n, off))) => {
                    self.read += n as u64;
                    self.written += off as u64;
                    self.unflushed |= off > 0;
                    m.read += n as u64;
                    m.written += off as u64;
                    if off < n {
                        // The other side is full: stop reading until it drains
                        // (its write readiness wakes this task).
                        m.buffered += (n - off) as i64;
                        m.paused = true;
                        return Poll::Pending;
                    }
                }
            }
        }
    }
}

/// Both directions between a downstream `D` and an upstream `U`.
pub struct Pump<'s, D, U> {
    down: D,
    up: U,
    /// Downstream to upstream.
    d2u: Half,
    /// Upstream to downstream.
    u2d: Half,
    cap: usize,
    stats: &'s TcpStats,
    /// When bytes last moved either way (the idle timer's reference).
    pub last_activity: Instant,
}

impl<'s, D, U> Pump<'s, D, U>
where
    D: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    /// A pump reading at most `cap` bytes at once (clamped to 1 ..= [`MAX_READ`]).
    pub fn new(down: D, up: U, cap: usize, stats: &'s TcpStats) -> Self {
        Self {
            down,
            up,
            d2u: Half::default(),
            u2d: Half::default(),
            cap: cap.clamp(1, MAX_READ),
            stats,
            last_activity: Instant::now(),
        }
    }

    /// Bytes read from downstream (`%BYTES_RECEIVED%`).
    pub fn received(&self) -> u64 {
        self.d2u.read
    }

    /// Bytes written to downstream (`%BYTES_SENT%`).
    pub fn sent(&self) -> u64 {
        self.u2d.written
    }

    /// Bytes read from downstream that upstream has not taken yet.
    pub fn upstream_backlog(&self) -> usize {
        self.d2u.pending.len() - self.d2u.pos
    }

    /// Writes what downstream sent and upstream has not taken yet, then
    /// shuts upstream's write half: Envoy's upstream flush after the
    /// downstream went away.
    pub async fn flush_upstream(&mut self) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        let rest = std::mem::take(&mut self.d2u.pending);
        let pos = std::mem::take(&mut self.d2u.pos);
        let left = rest.len().saturating_sub(pos);
        let r = self.up.write_all(&rest[pos.min(rest.len())..]).await;
        self.stats.rx_bytes_buffered.sub(left as u64);
        r?;
        self.up.shutdown().await
    }

    fn account(&mut self, d2u: Moved, u2d: Moved) {
        let s = self.stats;
        let moved = d2u.read + d2u.written + u2d.read + u2d.written;
        if moved > 0 {
            self.last_activity = Instant::now();
        }
        s.rx_bytes_total.add(d2u.read);
        s.tx_bytes_total.add(u2d.written);
        shift(&s.rx_bytes_buffered, d2u.buffered);
        shift(&s.tx_bytes_buffered, u2d.buffered);
        // Flow control as Envoy counts it: downstream reads paused because
        // upstream's buffer filled, resumed when it drained.
        if d2u.paused {
            s.paused_reading.inc();
        }
        if d2u.resumed {
            s.resumed_reading.inc();
        }
    }
}

/// Moves a gauge by `d`.
fn shift(gauge: &crate::stats::Counter, d: i64) {
    if d >= 0 {
        gauge.add(d as u64);
    } else {
        gauge.sub(d.unsigned_abs());
    }
}

impl<D, U> Drop for Pump<'_, D, U> {
    fn drop(&mut self) {
        // Bytes still pending when the connection goes leave the gauges.
        let left = |h: &Half| (h.pending.len() - h.pos.min(h.pending.len())) as u64;
        self.stats.rx_bytes_buffered.sub(left(&self.d2u));
        self.stats.tx_bytes_buffered.sub(left(&self.u2d));
    }
}

impl<D, U> Future for Pump<'_, D, U>
where
    D: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    type Output = Result<(), Side>;

    /// Ready when both directions ended (`Ok`), or at the first I/O error,
    /// with the side it came from.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (mut m1, mut m2) = (Moved::default(), Moved::default());
        let cap = this.cap;
        let a = if this.d2u.done {
            Poll::Ready(Ok(()))
        } else {
            this.d2u
                .poll(cx, &mut this.down, &mut this.up, cap, &mut m1)
        };
        // Errors of the upstream-to-downstream direction name the sides the
        // other way round.
        let b = if this.u2d.done {
            Poll::Ready(Ok(()))
        } else {
            this.u2d
                .poll(cx, &mut this.up, &mut this.down, cap, &mut m2)
                .map_err(|s| match s {
                    Side::Downstream => Side::Upstream,
                    Side::Upstream => Side::Downstream,
                })
        };
        this.account(m1, m2);
        match (a, b) {
            (Poll::Ready(Err(s)), _) | (_, Poll::Ready(Err(s))) => Poll::Ready(Err(s)),
            (Poll::Ready(Ok(())), Poll::Ready(Ok(()))) => Poll::Ready(Ok(())),
            _ => Poll::Pending,
        }
    }
}
