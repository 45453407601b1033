//! The connection manager's `common_http_protocol_options.max_stream_duration`
//! and `max_connection_duration` (downstream), and HTTP/2 outbound control-frame
//! floods, with real clients.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::net::SocketAddr;
use std::time::Duration;
use support::{Courier, H1, H2, stat};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ROUTES: &str = "- match: {prefix: /}\n  route: {cluster: up, timeout: 10s}\n";

async fn courier_with_limits(hcm: &str, up: SocketAddr) -> Courier {
    support::courier(hcm, ROUTES, &support::static_cluster("up", &[up], "")).await
}

/// Everything the peer sends until it closes (bounded at 10 s).
async fn read_all(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn max_stream_duration_answers_408_while_the_request_is_still_arriving() {
    let up = support::echo_upstream("up").await;
    let c = courier_with_limits(
        "common_http_protocol_options: {max_stream_duration: 0.5s}",
        up,
    )
    .await;
    let mut s = TcpStream::connect(c.listener).await.unwrap();
    // Ten bytes promised, two sent: the stream outlives its limit.
    s.write_all(b"POST /x HTTP/1.1\r\nhost: a\r\ncontent-length: 10\r\n\r\nab")
        .await
        .unwrap();
    let resp = read_all(&mut s).await;
    assert!(resp.starts_with("HTTP/1.1 408"), "{resp}");
    assert!(resp.ends_with("downstream duration timeout"), "{resp}");
    assert_eq!(
        stat(&c, "http.ingress.downstream_rq_max_duration_reached").await,
        1
    );
}

#[tokio::test]
async fn max_stream_duration_answers_504_when_the_upstream_is_slow() {
    let up = support::echo_upstream("up").await;
    let c = courier_with_limits(
        "common_http_protocol_options: {max_stream_duration: 0.5s}",
        up,
    )
    .await;
    let mut h1 = H1::connect(c.listener).await;
    let fast = h1.get("/fast", &[]).await;
    assert_eq!(fast.status, 200);
    // The echo upstream's `/slow` waits 2 s.
    let slow = h1.get("/slow", &[]).await;
    assert_eq!(slow.status, 504);
    assert_eq!(slow.body, "downstream duration timeout");
    // HTTP/2 the same.
    let mut h2 = H2::connect(c.listener).await;
    let req = http::Request::get("http://example.com/slow")
        .body(Default::default())
        .unwrap();
    let slow = h2.send(req).await;
    assert_eq!(slow.status, 504);
    assert_eq!(
        stat(&c, "http.ingress.downstream_rq_max_duration_reached").await,
        2
    );
}

/// An upstream that sends response headers and part of the body, then stalls.
async fn stalling_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nstarted")
                    .await;
                tokio::time::sleep(Duration::from_secs(30)).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn max_stream_duration_resets_a_response_already_started() {
    let up = stalling_upstream().await;
    let c = courier_with_limits(
        "common_http_protocol_options: {max_stream_duration: 0.5s}",
        up,
    )
    .await;
    let mut s = TcpStream::connect(c.listener).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n")
        .await
        .unwrap();
    // The connection ends (the HTTP/1 form of a reset) before the 100 bytes.
    let resp = read_all(&mut s).await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.ends_with("started"), "{resp}");
    assert_eq!(
        stat(&c, "http.ingress.downstream_rq_max_duration_reached").await,
        1
    );
}

#[tokio::test]
async fn max_connection_duration_closes_http1_after_the_next_response() {
    let up = support::echo_upstream("up").await;
    let c = courier_with_limits(
        "common_http_protocol_options: {max_connection_duration: 0.5s}",
        up,
    )
    .await;
    let mut s = TcpStream::connect(c.listener).await.unwrap();
    let mut buf = vec![0u8; 8192];
    s.write_all(b"GET /one HTTP/1.1\r\nhost: a\r\n\r\n")
        .await
        .unwrap();
    let n = s.read(&mut buf).await.unwrap();
    let first = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(!first.contains("connection: close"), "{first}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    // Draining (within drain_timeout, 5 s): answered, with `connection: close`,
    // then closed.
    s.write_all(b"GET /two HTTP/1.1\r\nhost: a\r\n\r\n")
        .await
        .unwrap();
    let second = read_all(&mut s).await;
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    assert!(second.contains("connection: close\r\n"), "{second}");
    assert_eq!(
        stat(&c, "http.ingress.downstream_cx_max_duration_reached").await,
        1
    );
}

#[tokio::test]
async fn max_connection_duration_closes_an_idle_http1_connection_after_drain_timeout() {
    let up = support::echo_upstream("up").await;
    let c = courier_with_limits(
        "drain_timeout: 0.2s\ncommon_http_protocol_options: {max_connection_duration: 0.3s}",
        up,
    )
    .await;
    let mut s = TcpStream::connect(c.listener).await.unwrap();
    // Nothing sent: the connection is closed without a word.
    assert_eq!(read_all(&mut s).await, "");
    assert_eq!(
        stat(&c, "http.ingress.downstream_cx_max_duration_reached").await,
        1
    );
}

/// Reads HTTP/2 frames until a GOAWAY; its error code, or None if the
/// connection ends (or 10 s pass) first.
async fn goaway_code(s: &mut TcpStream) -> Option<u32> {
    let read = async {
        loop {
            let mut head = [0u8; 9];
            s.read_exact(&mut head).await.ok()?;
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            s.read_exact(&mut payload).await.ok()?;
            if head[3] == 7 {
                return Some(u32::from_be_bytes([
                    payload[4], payload[5], payload[6], payload[7],
                ]));
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .ok()
        .flatten()
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

#[tokio::test]
async fn max_connection_duration_sends_goaway_on_http2() {
    let up = support::echo_upstream("up").await;
    let c = courier_with_limits(
        "common_http_protocol_options: {max_connection_duration: 0.5s}",
        up,
    )
    .await;
    let mut s = TcpStream::connect(c.listener).await.unwrap();
    s.write_all(PREFACE).await.unwrap();
    // GOAWAY with NO_ERROR: a graceful drain.
    assert_eq!(goaway_code(&mut s).await, Some(0));
    assert_eq!(
        stat(&c, "http.ingress.downstream_cx_max_duration_reached").await,
        1
    );
}

#[tokio::test]
async fn a_ping_flood_that_is_never_read_closes_the_connection() {
    let up = support::echo_upstream("up").await;
    let c = courier_with_limits("", up).await;
    // A small receive window on the flooder: courier's answers back up soon.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut s = socket.connect(c.listener).await.unwrap();
    s.write_all(PREFACE).await.unwrap();
    let ping = [0u8, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    let burst: Vec<u8> = ping.iter().copied().cycle().take(17 * 1000).collect();
    for _ in 0..2_000 {
        let sent = tokio::time::timeout(Duration::from_secs(5), s.write_all(&burst)).await;
        match sent {
            Ok(Ok(())) => {}
            // Reset or broken pipe: courier closed the connection.
            Ok(Err(_)) => break,
            // Blocked: courier stopped reading; it must have closed by now.
            Err(_) => break,
        }
    }
    // Courier counts the flood, and the connection ends (reading drains the
    // backed-up answers, maybe a GOAWAY, then EOF or a reset).
    let mut flood = 0;
    for _ in 0..100 {
        flood = stat(&c, "http2.outbound_control_flood").await;
        if flood > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(flood, 1);
    let mut buf = vec![0u8; 64 * 1024];
    let ended = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(10), ended)
            .await
            .is_ok()
    );
    // A normal HTTP/2 client is served meanwhile.
    let mut h2 = H2::connect(c.listener).await;
    let req = http::Request::get("http://example.com/ok")
        .body(Default::default())
        .unwrap();
    assert_eq!(h2.send(req).await.status, 200);
    assert_eq!(stat(&c, "http2.outbound_control_flood").await, 1);
}
