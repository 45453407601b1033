//! HTTP/2 outbound flood protection, as Envoy's `max_outbound_control_frames`
//! (1000) and `max_outbound_frames` (10000): a peer that sends PINGs, SETTINGS
//! or stream resets without reading what they make us answer has its answers
//! pile up; past the limit the connection is closed (after a GOAWAY
//! `ENHANCE_YOUR_CALM` when the socket takes it) and
//! `http2.outbound_control_flood` / `http2.outbound_flood` counts it.
//!
//! h2 itself stops reading when its write buffer is full, so a flood only ever
//! holds the socket's buffers: no unbounded memory, but no end either. This
//! wrapper gives h2 Envoy's shape of output buffer: writes the socket does not
//! take are queued here (up to [`QUEUE_CAP`] bytes, then backpressure), the
//! frames in the queue are counted by walking the 9-byte frame headers of what
//! h2 writes, and a queue over a limit is a flood. An HTTP/1 connection (its
//! first write is `HTTP/1.x ...`) passes through.
//!
//! On the read side, once the client's preface is seen, the frame headers of
//! what it sends are walked for Envoy's inbound limits: more than one
//! consecutive empty HEADERS/CONTINUATION/DATA frame without END_STREAM
//! (`http2.inbound_empty_frames_flood`), PRIORITY frames over 100 per stream
//! opened (`inbound_priority_frames_flood`), WINDOW_UPDATE frames over
//! `1 + 2 * (streams + 10 * DATA frames sent)` (`inbound_window_update_frames_flood`).

use courier_config::listener::http_options::H2FloodLimits;
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Envoy's default `max_outbound_control_frames`.
#[cfg(test)]
pub const MAX_OUTBOUND_CONTROL_FRAMES: usize =
    courier_config::listener::http_options::DEFAULT_MAX_OUTBOUND_CONTROL_FRAMES as usize;
/// Envoy's default `max_outbound_frames`.
#[cfg(test)]
pub const MAX_OUTBOUND_FRAMES: usize =
    courier_config::listener::http_options::DEFAULT_MAX_OUTBOUND_FRAMES as usize;
/// Most bytes queued before h2 is made to wait at Envoy's default limits:
/// room for either limit's worth of the smallest frames, so a flood trips a
/// limit before backpressure hides it.
pub const QUEUE_CAP: usize = 128 * 1024;

const FRAME_HEADER: usize = 9;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const RST_STREAM: u8 = 3;
const HEADERS: u8 = 1;
const DATA: u8 = 0;
const PRIORITY: u8 = 2;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;
const ACK: u8 = 1;
const END_STREAM: u8 = 1;
/// The smallest frame h2 answers a peer with (a PING ACK is 17 bytes, a
/// RST_STREAM 13): the queue must hold a limit's worth of them.
const SMALLEST_FRAME: usize = 13;
/// The queue never grows past this, whatever the limits: 16 MiB.
const MAX_QUEUE_CAP: usize = 16 * 1024 * 1024;

/// Room for `frames` + 1 of the smallest frames, so a flood trips its limit
/// before backpressure hides it ([`QUEUE_CAP`] at Envoy's defaults).
fn queue_cap(frames: usize) -> usize {
    (frames.saturating_add(1).saturating_mul(SMALLEST_FRAME)).clamp(QUEUE_CAP, MAX_QUEUE_CAP)
}

/// What a client sends first on an HTTP/2 connection (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const ENHANCE_YOUR_CALM: u32 = 0xb;

pub(crate) use crate::stats::h2_floods::{
    CONTROL_FLOODS, EMPTY_FLOODS, FLOODS, PRIORITY_FLOODS, WINDOW_UPDATE_FLOODS,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Nothing written yet.
    Unknown,
    /// HTTP/1: passes through.
    Http1,
    /// HTTP/2: frames counted.
    Http2,
    /// A flood closed the connection.
    Flooded,
}

/// A downstream socket with Envoy's outbound frame limits for HTTP/2.
pub struct FloodGuard<S> {
    inner: S,
    mode: Mode,
    /// Bytes of the client preface matched so far; `PREFACE.len()` once it is
    /// HTTP/2, and [`NOT_HTTP2`] once it is not.
    preface: usize,
    limits: H2FloodLimits,
    /// What HTTP/2 is counted with, allocated once the connection speaks it
    /// (preface read or first frame written): an HTTP/1.1 connection, parked
    /// with this wrapper for its whole idle life, does not carry it.
    h2: Option<Box<Frames>>,
}

/// The frames of an HTTP/2 connection, both ways.
struct Frames {
    /// Bytes h2 has handed over (written or queued), from the first.
    accepted: u64,
    /// Bytes the socket has taken.
    written: u64,
    /// Where the frame being walked ends (in `accepted` terms), once its
    /// header is complete.
    frame_end: u64,
    /// The header of the frame being walked, as far as it has arrived.
    header: [u8; FRAME_HEADER],
    header_len: usize,
    /// Bytes not yet taken by the socket (a `Vec` allocated only on stalls).
    queue: Vec<u8>,
    /// Where the queue starts in `queue` (taken bytes are dropped in bulk).
    queue_head: usize,
    /// Frames not wholly written: where each ends, and whether it is a
    /// control frame.
    frames: VecDeque<(u64, bool)>,
    control: usize,
    /// The highest stream id we sent HEADERS on: the GOAWAY's last stream.
    last_stream: u32,
    /// DATA frames written (WINDOW_UPDATEs are allowed in proportion).
    data_frames: u64,
    /// What the client sends, walked frame by frame once its preface is seen.
    inbound: Inbound,
    /// Outbound frames allowed in the queue, of any kind and control frames.
    max_frames: usize,
    max_control: usize,
    /// Bytes queued before h2 is made to wait.
    queue_cap: usize,
}

/// [`FloodGuard::preface`] of a connection that is not HTTP/2.
const NOT_HTTP2: usize = usize::MAX;

impl Frames {
    fn new(limits: &H2FloodLimits) -> Box<Self> {
        let max_frames = limits.outbound_frames as usize;
        let max_control = limits.outbound_control_frames as usize;
        Box::new(Frames {
            accepted: 0,
            written: 0,
            frame_end: 0,
            header: [0; FRAME_HEADER],
            header_len: 0,
            queue: Vec::new(),
            queue_head: 0,
            frames: VecDeque::new(),
            control: 0,
            last_stream: 0,
            data_frames: 0,
            inbound: Inbound::new(limits),
            max_frames,
            max_control,
            queue_cap: queue_cap(max_frames.max(max_control)),
        })
    }

    fn queued(&self) -> usize {
        self.queue.len() - self.queue_head
    }

    /// Walks the frame headers in `bytes` (the next bytes accepted), noting
    /// the frames that are not wholly written.
    fn walk(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.accepted < self.frame_end {
                // Inside a payload: skip it.
                let skip = usize::try_from(self.frame_end - self.accepted)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                self.accepted += skip as u64;
                bytes = &bytes[skip..];
                continue;
            }
            let take = (FRAME_HEADER - self.header_len).min(bytes.len());
            self.header[self.header_len..self.header_len + take].copy_from_slice(&bytes[..take]);
            self.header_len += take;
            self.accepted += take as u64;
            bytes = &bytes[take..];
            if self.header_len < FRAME_HEADER {
                continue;
            }
            self.header_len = 0;
            let h = self.header;
            let len = u64::from(u32::from_be_bytes([0, h[0], h[1], h[2]]));
            let (kind, flags) = (h[3], h[4]);
            let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
            if kind == HEADERS {
                self.last_stream = self.last_stream.max(stream);
            } else if kind == DATA {
                self.data_frames += 1;
            }
            self.frame_end = self.accepted + len;
            if self.frame_end > self.written {
                let control =
                    matches!(kind, PING | SETTINGS) && flags & ACK != 0 || kind == RST_STREAM;
                self.frames.push_back((self.frame_end, control));
                self.control += usize::from(control);
            }
        }
    }

    /// Forgets the frames the socket has taken.
    fn retire(&mut self) {
        while let Some(&(end, control)) = self.frames.front() {
            if end > self.written {
                break;
            }
            self.frames.pop_front();
            self.control -= usize::from(control);
        }
    }

    /// The flood limit the queue is over, if any.
    fn flooded(&self) -> Option<&'static AtomicU64> {
        if self.control > self.max_control {
            Some(&CONTROL_FLOODS)
        } else if self.frames.len() > self.max_frames {
            Some(&FLOODS)
        } else {
            None
        }
    }
}

impl Frames {
    /// Writes queued bytes until the socket stops taking them.
    fn poll_drain<S: AsyncWrite + Unpin>(
        &mut self,
        inner: &mut S,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while self.queued() > 0 {
            let n = match Pin::new(&mut *inner).poll_write(cx, &self.queue[self.queue_head..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            self.queue_head += n;
            self.written += n as u64;
            self.retire();
        }
        // All out: the allocations go too (a stall is rare); the frame list
        // keeps a small one (a frame split over writes passes through it).
        self.queue = Vec::new();
        self.queue_head = 0;
        if self.frames.capacity() > 64 && self.frames.is_empty() {
            self.frames = VecDeque::new();
        }
        Poll::Ready(Ok(()))
    }

    /// Closes the connection for a flood: what is queued past the frame being
    /// written is dropped, a GOAWAY goes in its place, and the socket gets
    /// one chance to take it.
    fn flood<S: AsyncWrite + Unpin>(
        &mut self,
        inner: &mut S,
        cx: &mut Context<'_>,
        counter: &AtomicU64,
    ) -> io::Error {
        counter.fetch_add(1, Ordering::Relaxed);
        tracing::debug!("http2 outbound flood: closing the connection");
        // The first frame not wholly written ends where the queue may be cut.
        let keep = self.frames.front().map_or(self.written, |&(end, _)| end);
        let keep = usize::try_from(keep.saturating_sub(self.written)).unwrap_or(usize::MAX);
        let end = (self.queue_head + keep).min(self.queue.len());
        self.queue.truncate(end);
        let mut goaway = [0u8; FRAME_HEADER + 8];
        goaway[2] = 8;
        goaway[3] = 7;
        goaway[FRAME_HEADER..FRAME_HEADER + 4].copy_from_slice(&self.last_stream.to_be_bytes());
        goaway[FRAME_HEADER + 4..].copy_from_slice(&ENHANCE_YOUR_CALM.to_be_bytes());
        self.queue.extend_from_slice(&goaway);
        self.frames.clear();
        self.control = 0;
        let _ = self.poll_drain(inner, cx);
        io::Error::other("http2 outbound flood")
    }
}

impl<S> FloodGuard<S> {
    /// Wraps a downstream socket with Envoy's default limits.
    #[cfg(test)]
    pub fn new(inner: S) -> Self {
        Self::with_limits(inner, &H2FloodLimits::default())
    }

    /// Wraps a downstream socket with the connection manager's limits.
    pub fn with_limits(inner: S, limits: &H2FloodLimits) -> Self {
        FloodGuard {
            inner,
            mode: Mode::Unknown,
            preface: 0,
            limits: *limits,
            h2: None,
        }
    }

    /// Bytes queued for the socket.
    fn queued(&self) -> usize {
        self.h2.as_ref().map_or(0, |f| f.queued())
    }

    /// Writes queued bytes until the socket stops taking them.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>
    where
        S: AsyncWrite + Unpin,
    {
        match self.h2.as_mut() {
            Some(f) => f.poll_drain(&mut self.inner, cx),
            None => Poll::Ready(Ok(())),
        }
    }

    /// Matches what was just read against the client preface; the rest (if
    /// it was the whole preface) is walked frame by frame.
    fn walk_read(&mut self, mut bytes: &[u8]) -> Option<&'static AtomicU64> {
        while self.preface < PREFACE.len() {
            let (&b, rest) = bytes.split_first()?;
            if PREFACE.get(self.preface) != Some(&b) {
                self.preface = NOT_HTTP2;
                return None;
            }
            self.preface += 1;
            bytes = rest;
        }
        if self.preface == NOT_HTTP2 || bytes.is_empty() {
            return None;
        }
        let limits = &self.limits;
        let f = self.h2.get_or_insert_with(|| Frames::new(limits));
        f.inbound.walk(bytes, f.data_frames)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for FloodGuard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.mode == Mode::Flooded {
            return Poll::Ready(Err(io::Error::other("http2 outbound flood")));
        }
        // h2 reads whenever it is woken: queued output drains from here too,
        // whatever h2 has left to write (an error shows on the next write).
        if this.queued() > 0 {
            let _ = this.poll_drain(cx);
        }
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if this.preface != NOT_HTTP2
            && let Some(counter) = this.walk_read(&buf.filled()[before..])
        {
            // What was just read is not handed on: the connection ends here.
            buf.set_filled(before);
            this.mode = Mode::Flooded;
            let error = match this.h2.as_mut() {
                Some(f) => f.flood(&mut this.inner, cx, counter),
                None => io::Error::other("http2 outbound flood"),
            };
            return Poll::Ready(Err(error));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FloodGuard<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match this.mode {
            Mode::Http1 => return Pin::new(&mut this.inner).poll_write(cx, buf),
            Mode::Flooded => return Poll::Ready(Err(io::Error::other("http2 outbound flood"))),
            Mode::Unknown => {
                let Some(&first) = buf.first() else {
                    return Poll::Ready(Ok(0));
                };
                // A server's HTTP/2 output starts with a frame header (its
                // SETTINGS, length < 2^16); HTTP/1 with `HTTP/`.
                this.mode = if first == b'H' {
                    Mode::Http1
                } else {
                    Mode::Http2
                };
                if this.mode == Mode::Http1 {
                    return Pin::new(&mut this.inner).poll_write(cx, buf);
                }
            }
            Mode::Http2 => {}
        }
        let limits = &this.limits;
        let f = this.h2.get_or_insert_with(|| Frames::new(limits));
        let inner = &mut this.inner;
        // Earlier bytes go first.
        if f.queued() > 0
            && let Poll::Ready(Err(e)) = f.poll_drain(inner, cx)
        {
            return Poll::Ready(Err(e));
        }
        let n = if f.queued() == 0 {
            match Pin::new(&mut *inner).poll_write(cx, buf) {
                Poll::Ready(Ok(n)) => {
                    f.written += n as u64;
                    f.walk(&buf[..n]);
                    f.retire();
                    return Poll::Ready(Ok(n));
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                // The socket is full: queue it, as Envoy's output buffer does.
                Poll::Pending => buf.len().min(f.queue_cap),
            }
        } else {
            let room = f.queue_cap.saturating_sub(f.queued());
            if room == 0 {
                // Backpressure; the drain above registered the waker.
                return Poll::Pending;
            }
            buf.len().min(room)
        };
        f.queue.extend_from_slice(&buf[..n]);
        f.walk(&buf[..n]);
        if let Some(counter) = f.flooded() {
            this.mode = Mode::Flooded;
            return Poll::Ready(Err(f.flood(inner, cx, counter)));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.queued() == 0 {
            return Pin::new(&mut this.inner).poll_flush(cx);
        }
        match this.poll_drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.inner).poll_flush(cx),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            // The queue is the connection's output buffer, as Envoy's: h2
            // carries on (and can be seen flooding it) while it drains; the
            // socket's readiness wakes the connection to drain more.
            Poll::Pending => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[path = "h2_flood_inbound.rs"]
mod inbound;
use inbound::Inbound;

#[cfg(test)]
#[path = "h2_flood_tests.rs"]
mod tests;
