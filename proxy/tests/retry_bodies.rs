//! Retries of requests whose body has no known length (HTTP/1.1 chunked,
//! HTTP/2 without `content-length`): the body is copied as the first attempt
//! sends it, up to the buffer limit, and sent again whole on a retry.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::Bytes;
use http::Request;
use http_body::{Body, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;
use support::programmable::{Act, upstream};
use support::{courier_with, stat, static_cluster};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn routes(limit: u32) -> String {
    format!(
        "- match: {{prefix: \"/\"}}\n  per_request_buffer_limit_bytes: {limit}\n  route:\n    cluster: u\n    retry_policy: {{retry_on: 5xx, num_retries: 2, retry_back_off: {{base_interval: 0.001s}}}}\n"
    )
}

/// Sends a chunked POST over a fresh connection and returns the status.
async fn chunked_post(addr: SocketAddr, chunks: &[&str]) -> u16 {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = String::from(
        "POST / HTTP/1.1\r\nhost: example.com\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
    );
    for c in chunks {
        req.push_str(&format!("{:x}\r\n{c}\r\n", c.len()));
    }
    req.push_str("0\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out);
    text.split(' ').nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_chunked_body_is_sent_again_whole_on_a_retry() {
    let (addr, log) = upstream(|n, _| Act::Status(if n < 2 { 503 } else { 200 })).await;
    let c = courier_with("", "", &routes(1024), &static_cluster("u", &[addr], "")).await;
    assert_eq!(
        chunked_post(c.listener, &["hello ", "chunked ", "world"]).await,
        200
    );
    assert_eq!(log.count.load(Ordering::SeqCst), 3);
    let seen = log.seen.lock().await;
    for s in seen.iter() {
        assert_eq!(&s.body[..], b"hello chunked world");
    }
    assert_eq!(stat(&c, "cluster.u.upstream_rq_retry").await, 2);
}

#[tokio::test]
async fn a_chunked_body_past_the_limit_is_not_retried() {
    let (addr, log) = upstream(|_, _| Act::Status(503)).await;
    let c = courier_with("", "", &routes(8), &static_cluster("u", &[addr], "")).await;
    assert_eq!(
        chunked_post(c.listener, &["0123456", "789abcdef"]).await,
        503
    );
    assert_eq!(log.count.load(Ordering::SeqCst), 1);
    assert_eq!(&log.seen.lock().await[0].body[..], b"0123456789abcdef");
    // Within it, the same request is retried.
    assert_eq!(chunked_post(c.listener, &["0123", "4567"]).await, 503);
    assert_eq!(log.count.load(Ordering::SeqCst), 4);
}

/// A body of unknown length: its frames, then trailers.
struct Frames(VecDeque<Frame<Bytes>>);

impl Body for Frames {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.get_mut().0.pop_front().map(Ok))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::new()
    }
}

#[tokio::test]
async fn an_h2_body_without_content_length_is_sent_again_on_a_retry() {
    let (addr, log) = upstream(|n, _| Act::Status(if n == 0 { 502 } else { 200 })).await;
    let c = courier_with("", "", &routes(1024), &static_cluster("u", &[addr], "")).await;
    let s = TcpStream::connect(c.listener).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(s))
            .await
            .unwrap();
    tokio::spawn(conn);
    let body = Frames(VecDeque::from([
        Frame::data(Bytes::from_static(b"part one, ")),
        Frame::data(Bytes::from_static(b"part two")),
    ]));
    let req = Request::post("http://example.com/").body(body).unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(log.count.load(Ordering::SeqCst), 2);
    let seen = log.seen.lock().await;
    assert!(seen[0].headers.get("content-length").is_none());
    for s in seen.iter() {
        assert_eq!(&s.body[..], b"part one, part two");
    }
}
