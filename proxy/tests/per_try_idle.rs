//! `retry_policy.per_try_idle_timeout`: an attempt that gets no response event
//! for that long ends — retriably before its headers, by a reset of the
//! downstream stream once its body streams.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::programmable::{Act, upstream};
use support::{H1, courier_with, stat, static_cluster};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn routes(policy: &str) -> String {
    format!("- match: {{prefix: \"/\"}}\n  route:\n    cluster: u\n    retry_policy: {policy}\n")
}

#[tokio::test]
async fn no_headers_within_the_idle_timeout_is_retried() {
    let (addr, log) = upstream(|n, _| {
        if n == 0 {
            Act::Stall(Duration::from_secs(5))
        } else {
            Act::Status(200)
        }
    })
    .await;
    let c = courier_with(
        "",
        "",
        &routes("{retry_on: 5xx, num_retries: 1, per_try_idle_timeout: 0.2s, retry_back_off: {base_interval: 0.001s}}"),
        &static_cluster("u", &[addr], ""),
    )
    .await;
    let r = H1::connect(c.listener).await.get("/", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "");
    assert_eq!(log.count.load(Ordering::SeqCst), 2);
    assert_eq!(
        stat(&c, "cluster.u.upstream_rq_per_try_idle_timeout").await,
        1
    );
    assert_eq!(stat(&c, "cluster.u.upstream_rq_per_try_timeout").await, 0);
}

/// An upstream that sends headers and 5 of 10 body bytes, then nothing (for 30 s).
async fn stalling_body() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        for _ in 0..16 {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello")
                    .await;
                tokio::time::sleep(Duration::from_secs(30)).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_body_stalling_past_the_idle_timeout_is_reset() {
    let addr = stalling_body().await;
    let c = courier_with(
        "",
        "",
        &routes("{retry_on: 5xx, per_try_idle_timeout: 0.3s}"),
        &static_cluster("u", &[addr], ""),
    )
    .await;
    let s = TcpStream::connect(c.listener).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::get("/")
        .header("host", "example.com")
        .body(Full::<Bytes>::default())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    // The body ends in an error long before the upstream's 30 s are up.
    let body = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect())
        .await
        .expect("the stalled body is reset");
    assert!(body.is_err());
}
