//! Envoy's replies to requests its HTTP/1.1 codec cannot parse. hyper answers a
//! malformed request (bad request line, invalid header, bad `content-length`,
//! headers over the limit) itself, before any service sees it, with an empty
//! `400`/`431`/`414`. Envoy answers the same requests with a local reply whose
//! body is the reason phrase (`Bad Request`), `content-type: text/plain`, its
//! `server` header and `connection: close`. This wrapper around the downstream
//! socket recognises hyper's automatic response among the bytes hyper writes
//! and writes Envoy's instead.
//!
//! On HTTP/1.1 it also checks the request bytes before hyper reads them
//! ([`H1Check`]: Envoy's framing and request-target rules hyper keeps
//! otherwise, obs-fold and bare CR cleaned), and writes the refused
//! request's reply in place of the 400 hyper answers to it.
//!
//! It also keeps `request_headers_timeout` as Envoy does: armed by the first
//! byte of a request (HTTP/1.1, no request in progress), disarmed when its
//! headers are complete; when it fires, `408 request header timeout` and the
//! connection is closed. (hyper's own header timer also runs while a keep-alive
//! connection waits for its next request, and closes silently.)

use crate::codec::h1_check::{H1Check, Refusal};
use crate::codec::idle::Activity;
use bytes::Bytes;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// What follows the status line in hyper's automatic error responses (and in
/// nothing courier sends: its responses start with their own headers and hyper
/// appends `connection: close` after them).
const HYPER_ERROR_HEADERS: &[u8] = b"connection: close\r\ncontent-length: 0\r\ndate: ";

/// A downstream socket whose codec-error responses take Envoy's shape.
pub struct CodecErrors<S> {
    inner: S,
    server: Bytes,
    /// Envoy's reply, still to be written in place of hyper's.
    pending: Bytes,
    headers_timer: Option<HeadersTimer>,
    /// The request headers timer fired: EOF once the 408 is out.
    timed_out: bool,
    /// HTTP/1.1's check of the request bytes (none on HTTP/2).
    check: Option<Box<Checking>>,
}

/// The request check and the bytes it holds (boxed: most connections
/// never hold any, and a parked connection keeps this wrapper).
struct Checking {
    check: H1Check,
    /// An incomplete head, held back from hyper.
    held: Vec<u8>,
    /// Checked bytes that did not fit hyper's buffer yet.
    out: Vec<u8>,
}

/// `request_headers_timeout` on an HTTP/1.1 connection.
struct HeadersTimer {
    timeout: Duration,
    activity: Arc<Activity>,
    /// `activity.heads()` when armed: a change means the headers arrived.
    heads_at_arm: u64,
    sleep: Option<Pin<Box<Sleep>>>,
    first_read: bool,
}

impl HeadersTimer {
    fn on_bytes(&mut self, bytes: &[u8]) {
        if std::mem::take(&mut self.first_read) && bytes.starts_with(b"PRI * HTTP/2") {
            // HTTP/2 (prior knowledge): streams, not this connection-wide timer.
            self.timeout = Duration::ZERO;
            return;
        }
        if self.timeout.is_zero() {
            return;
        }
        self.disarm_if_done();
        if self.sleep.is_none() && self.activity.active() == 0 {
            self.heads_at_arm = self.activity.heads();
            self.sleep = Some(Box::pin(tokio::time::sleep(self.timeout)));
        }
    }

    fn disarm_if_done(&mut self) {
        if self.sleep.is_some() && self.activity.heads() != self.heads_at_arm {
            self.sleep = None;
        }
    }

    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.disarm_if_done();
        self.sleep
            .as_mut()
            .is_some_and(|s| s.as_mut().poll(cx).is_ready())
    }
}

impl<S> CodecErrors<S> {
    /// Wraps `inner`; replies carry `server: <server>`; `request_headers_timeout`
    /// is kept with the help of the connection's `activity`.
    pub fn new(
        inner: S,
        server: Bytes,
        activity: &Arc<Activity>,
        request_headers_timeout: Option<Duration>,
        check: Option<H1Check>,
    ) -> Self {
        CodecErrors {
            inner,
            server,
            pending: Bytes::new(),
            headers_timer: request_headers_timeout.map(|timeout| HeadersTimer {
                timeout,
                activity: Arc::clone(activity),
                heads_at_arm: 0,
                sleep: None,
                first_read: true,
            }),
            timed_out: false,
            check: check.map(|check| {
                Box::new(Checking {
                    check,
                    held: Vec::new(),
                    out: Vec::new(),
                })
            }),
        }
    }
}

impl Checking {
    /// Checks the bytes just read into `buf` (after `before`): what may go to
    /// hyper stays in `buf`, the rest is held or queued. False when nothing
    /// is left in `buf` to return.
    fn on_read(&mut self, buf: &mut ReadBuf<'_>, before: usize) -> bool {
        if self.held.is_empty() {
            let region = &mut buf.filled_mut()[before..];
            let c = self.check.check(region);
            self.held.extend_from_slice(&region[c.held..]);
            buf.set_filled(before + c.deliver);
        } else {
            // The rest of a held head: checked from the head's start.
            self.held.extend_from_slice(&buf.filled()[before..]);
            buf.set_filled(before);
            let c = self.check.check(&mut self.held);
            let n = c.deliver.min(buf.remaining());
            buf.put_slice(&self.held[..n]);
            self.out.extend_from_slice(&self.held[n..c.deliver]);
            self.held.drain(..c.held);
        }
        buf.filled().len() > before
    }

    /// Puts queued bytes into `buf`; false when there were none.
    fn drain_out(&mut self, buf: &mut ReadBuf<'_>) -> bool {
        if self.out.is_empty() {
            return false;
        }
        let n = self.out.len().min(buf.remaining());
        buf.put_slice(&self.out[..n]);
        self.out.drain(..n);
        true
    }

    /// The connection ended: hyper gets a held head as it is.
    fn on_eof(&mut self) {
        self.out.append(&mut self.held);
    }
}

/// Envoy's local reply that closes the connection.
fn closing_reply(status_line: &str, body: &str, server: &[u8]) -> Vec<u8> {
    let date = httpdate::fmt_http_date(std::time::SystemTime::now());
    let content_type = if body.is_empty() {
        ""
    } else {
        "content-type: text/plain\r\n"
    };
    let mut out = format!(
        "HTTP/1.1 {status_line}\r\ncontent-length: {}\r\n{content_type}date: {date}\r\n",
        body.len()
    )
    .into_bytes();
    server_line(&mut out, server);
    out.extend_from_slice(b"connection: close\r\n\r\n");
    out.extend_from_slice(body.as_bytes());
    out
}

/// `server: <server>\r\n`; nothing for an empty name (`PASS_THROUGH` adds no
/// `server` header to local replies).
fn server_line(out: &mut Vec<u8>, server: &[u8]) {
    if !server.is_empty() {
        out.extend_from_slice(b"server: ");
        out.extend_from_slice(server);
        out.extend_from_slice(b"\r\n");
    }
}

/// Envoy's reply for hyper's automatic response `head`, when `head` is one.
fn rewrite(head: &[u8], server: &[u8]) -> Option<Vec<u8>> {
    let line_end = head.windows(2).position(|w| w == b"\r\n")?;
    let status_line = &head[..line_end];
    let rest = &head[line_end + 2..];
    if !status_line.starts_with(b"HTTP/1.") || !rest.starts_with(HYPER_ERROR_HEADERS) {
        return None;
    }
    // `HTTP/1.1 400 Bad Request`: the reason phrase is Envoy's body.
    let mut words = status_line.splitn(3, |&b| b == b' ');
    let (_, code, reason) = (words.next()?, words.next()?, words.next()?);
    // Only the statuses hyper's server answers a parse error with: a reply of
    // courier's own (a `direct_response` 500 with no body under
    // `PASS_THROUGH`, so without `server`, on a closing connection) can have
    // the same head otherwise.
    if !matches!(code, b"400" | b"414" | b"431") {
        return None;
    }
    // hyper's 414 is a request line over its buffer: Envoy counts the request
    // line in the header size, and answers 431.
    let (code, reason): (&[u8], &[u8]) = if code == b"414" {
        (b"431", b"Request Header Fields Too Large")
    } else {
        (code, reason)
    };
    let date_start = HYPER_ERROR_HEADERS.len();
    let date_len = rest[date_start..].windows(2).position(|w| w == b"\r\n")?;
    let date = &rest[date_start..date_start + date_len];
    // Only a whole head, nothing after it: anything else is not hyper's reply.
    if rest.get(date_start + date_len..) != Some(b"\r\n\r\n".as_slice()) {
        return None;
    }
    let mut out = Vec::with_capacity(160 + reason.len() * 2);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(code);
    out.push(b' ');
    out.extend_from_slice(reason);
    out.extend_from_slice(format!("\r\ncontent-length: {}\r\n", reason.len()).as_bytes());
    out.extend_from_slice(b"content-type: text/plain\r\ndate: ");
    out.extend_from_slice(date);
    out.extend_from_slice(b"\r\n");
    server_line(&mut out, server);
    out.extend_from_slice(b"connection: close\r\n\r\n");
    out.extend_from_slice(reason);
    Some(out)
}

impl<S: AsyncWrite + Unpin> CodecErrors<S> {
    /// Writes what is pending of a replacement reply.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.pending.is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            let _ = self.pending.split_to(n);
        }
        Poll::Ready(Ok(()))
    }

    /// Takes `buf` whole when it is hyper's automatic error response.
    fn intercept(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Option<Poll<io::Result<usize>>> {
        if let Some(refusal) = self.check.as_ref().and_then(|c| c.check.refusal())
            && buf.starts_with(b"HTTP/1.1 400 ")
            && rewrite(buf, b"").is_some()
        {
            // hyper's 400 to the head the check refused (it refuses nothing
            // after it): Envoy's reply to that request.
            return Some(self.replace(cx, buf.len(), refusal));
        }
        // Cheap tests first: every response hyper writes starts with a status
        // line, and its own replies are 4xx or 5xx (`HTTP/1.1 400 ...`).
        if buf.len() > 200
            || !buf.starts_with(b"HTTP/1.")
            || !matches!(buf.get(9), Some(b'4' | b'5'))
        {
            return None;
        }
        let reply = rewrite(buf, &self.server)?;
        self.pending = Bytes::from(reply);
        Some(self.flush_replaced(cx, buf.len()))
    }

    /// Writes `refusal` in place of hyper's `len` bytes.
    fn replace(
        &mut self,
        cx: &mut Context<'_>,
        len: usize,
        refusal: Refusal,
    ) -> Poll<io::Result<usize>> {
        self.pending = Bytes::from(closing_reply(refusal.status, refusal.body, &self.server));
        self.flush_replaced(cx, len)
    }

    fn flush_replaced(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<usize>> {
        // hyper's bytes count as written; ours are flushed now or on the next call.
        match self.poll_pending(cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(len)),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for CodecErrors<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.timed_out {
            // The 408 goes out first; then hyper sees the connection end.
            ready!(this.poll_pending(cx))?;
            return Poll::Ready(Ok(()));
        }
        if let Some(c) = this.check.as_mut()
            && c.drain_out(buf)
        {
            return Poll::Ready(Ok(()));
        }
        loop {
            let before = buf.filled().len();
            let polled = this.read_timed(cx, buf);
            let Some(c) = this.check.as_mut() else {
                return polled;
            };
            if !matches!(polled, Poll::Ready(Ok(()))) || !c.check.active() && c.held.is_empty() {
                return polled;
            }
            if buf.filled().len() == before {
                if buf.remaining() > 0 {
                    // The end: a held head goes to hyper as it is, then the end.
                    c.on_eof();
                    c.drain_out(buf);
                }
                return polled;
            }
            if c.on_read(buf, before) {
                return polled;
            }
            // All of it held back: read on (until the socket has no more).
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> CodecErrors<S> {
    /// Reads from the socket, keeping `request_headers_timeout`.
    fn read_timed(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self;
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let Some(timer) = this.headers_timer.as_mut() else {
            return polled;
        };
        match &polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                timer.on_bytes(&buf.filled()[before..]);
            }
            Poll::Pending if timer.expired(cx) => {
                this.headers_timer = None;
                this.timed_out = true;
                let reply = closing_reply(
                    "408 Request Timeout",
                    "request header timeout",
                    &this.server,
                );
                this.pending = Bytes::from(reply);
                ready!(this.poll_pending(cx))?;
                return Poll::Ready(Ok(()));
            }
            _ => {}
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for CodecErrors<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        if let Some(p) = this.intercept(cx, buf) {
            return p;
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        // hyper queues a response head as its own slice, first.
        if let Some(first) = bufs.iter().find(|b| !b.is_empty())
            && let Some(p) = this.intercept(cx, first)
        {
            return p;
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::{closing_reply, rewrite};

    /// `PASS_THROUGH` (an empty server name): the codec's replies carry no
    /// `server` header, as Envoy's local replies then do not.
    #[test]
    fn an_empty_server_name_writes_no_server_header() {
        let with = String::from_utf8(closing_reply("400 Bad Request", "", b"envoy")).unwrap();
        assert!(with.contains("\r\nserver: envoy\r\nconnection: close\r\n\r\n"));
        let without = String::from_utf8(closing_reply("400 Bad Request", "", b"")).unwrap();
        assert!(!without.contains("server"), "{without}");
        assert!(without.ends_with("\r\nconnection: close\r\n\r\n"));
    }

    #[test]
    fn hyper_errors_become_envoy_replies() {
        let hyper = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: Wed, 02 Dec 2026 16:45:55 GMT\r\n\r\n";
        let out = rewrite(hyper, b"envoy").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 31\r\ncontent-type: text/plain\r\ndate: Wed, 02 Dec 2026 16:45:55 GMT\r\nserver: envoy\r\nconnection: close\r\n\r\nRequest Header Fields Too Large"
        );
        // Courier's own responses are left alone.
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nserver: envoy\r\nconnection: close\r\ndate: x\r\n\r\n";
        assert!(rewrite(ours, b"envoy").is_none());
        let with_body = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\nabc";
        assert!(rewrite(with_body, b"envoy").is_none());
        // A reply of courier's own with the same head (no `server` under
        // `PASS_THROUGH`, a closing connection, an empty body) keeps its status
        // and empty body: hyper answers parse errors with 400, 414 or 431 only.
        for status in ["403 Forbidden", "500 Internal Server Error"] {
            let ours = format!(
                "HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\n"
            );
            assert!(rewrite(ours.as_bytes(), b"").is_none(), "{status}");
        }
    }
}
