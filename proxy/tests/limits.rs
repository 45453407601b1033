//! The edges of a request through the real binary: header size and count limits
//! (431), malformed HTTP/1.1 (400 in Envoy's shape), HTTP/1.0 (426), the request,
//! stream idle, request headers and connection idle timeouts. Replies were
//! compared with Envoy 1.40 on the same configs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::net::SocketAddr;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

const DIRECT: &str =
    "- match: {prefix: \"/\"}\n  direct_response: {status: 200, body: {inline_string: ok}}\n";

/// What came back on a raw connection: the bytes, whether the peer closed, and
/// how long it took.
struct Raw {
    text: String,
    closed: bool,
    took: Duration,
}

/// Sends `data` and reads until the peer closes or `wait` passes.
async fn raw(addr: SocketAddr, data: &[u8], wait: Duration) -> Raw {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let start = Instant::now();
    s.write_all(data).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    let deadline = start + wait;
    let mut closed = false;
    for _ in 0..10_000 {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    Raw {
        text: String::from_utf8_lossy(&out).into_owned(),
        closed,
        took: start.elapsed(),
    }
}

/// The status line and body of a raw HTTP/1.1 response; panics unless the head
/// has `content-type: text/plain` when there is a body, `server: envoy`.
fn status_and_body(r: &Raw) -> (String, String) {
    let (head, body) = r.text.split_once("\r\n\r\n").unwrap_or((&r.text, ""));
    let status = head.lines().next().unwrap_or("").to_string();
    let head_lc = head.to_ascii_lowercase();
    assert!(head_lc.contains("\r\nserver: envoy"), "{}", r.text);
    if !body.is_empty() {
        assert!(
            head_lc.contains("\r\ncontent-type: text/plain"),
            "{}",
            r.text
        );
        assert!(
            head_lc.contains(&format!("\r\ncontent-length: {}", body.len())),
            "{}",
            r.text
        );
    }
    (status, body.to_string())
}

/// A cluster nothing routes to (the config needs one).
fn unused_cluster() -> String {
    static_cluster("unused", &["127.0.0.1:1".parse().unwrap()], "")
}

const WAIT: Duration = Duration::from_secs(3);

#[tokio::test]
async fn header_size_and_count_limits_answer_431_and_close() {
    let c = courier(
        "max_request_headers_kb: 1\ncommon_http_protocol_options: {max_headers_count: 5}",
        DIRECT,
        &unused_cluster(),
    )
    .await;
    let ok = raw(
        c.listener,
        b"GET / HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
        WAIT,
    )
    .await;
    assert_eq!(
        status_and_body(&ok),
        ("HTTP/1.1 200 OK".into(), "ok".into())
    );

    let big = format!(
        "GET / HTTP/1.1\r\nhost: a\r\nx-big: {}\r\n\r\n",
        "a".repeat(2000)
    );
    let many: String = (0..10).map(|i| format!("x-{i}: 1\r\n")).collect();
    let many = format!("GET / HTTP/1.1\r\nhost: a\r\n{many}\r\n");
    for req in [big, many] {
        let r = raw(c.listener, req.as_bytes(), WAIT).await;
        assert_eq!(
            status_and_body(&r),
            (
                "HTTP/1.1 431 Request Header Fields Too Large".into(),
                "Request Header Fields Too Large".into()
            )
        );
        assert!(r.closed, "{}", r.text);
        assert!(r.text.contains("connection: close"));
    }

    // HTTP/2: the stream is reset; the connection lives on.
    let mut h2 = H2Raw::connect(c.listener).await;
    let req = http::Request::get("http://a/")
        .header("x-big", "a".repeat(2000))
        .body(http_body_util::Full::default())
        .unwrap();
    let refused = h2.0.send_request(req).await;
    assert!(refused.is_err(), "{:?}", refused.map(|r| r.status()));
    let req = http::Request::get("http://a/")
        .body(http_body_util::Full::default())
        .unwrap();
    let resp = h2.0.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn default_header_limit_is_60_kib() {
    let c = courier("", DIRECT, &unused_cluster()).await;
    let fits = format!(
        "GET / HTTP/1.1\r\nhost: a\r\nconnection: close\r\nx-big: {}\r\n\r\n",
        "a".repeat(50 * 1024)
    );
    let r = raw(c.listener, fits.as_bytes(), WAIT).await;
    assert_eq!(status_and_body(&r).0, "HTTP/1.1 200 OK");
    // Over the limit but inside hyper's read buffer: the connection manager's 431.
    let over = format!(
        "GET / HTTP/1.1\r\nhost: a\r\nx-big: {}\r\n\r\n",
        "a".repeat(62 * 1024)
    );
    // Beyond hyper's read buffer: hyper's own 431, rewritten to Envoy's shape.
    let far_over = format!(
        "GET / HTTP/1.1\r\nhost: a\r\nx-big: {}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    for req in [over, far_over] {
        let r = raw(c.listener, req.as_bytes(), WAIT).await;
        assert_eq!(
            status_and_body(&r),
            (
                "HTTP/1.1 431 Request Header Fields Too Large".into(),
                "Request Header Fields Too Large".into()
            )
        );
        assert!(r.closed);
    }
}

#[tokio::test]
async fn malformed_requests_get_envoys_400_and_close() {
    let c = courier("", DIRECT, &unused_cluster()).await;
    let cases: [(&[u8], &str, &str); 7] = [
        (b"GET\r\n\r\n", "HTTP/1.1 400 Bad Request", "Bad Request"),
        (
            b"GET / FOO/1.1\r\nhost: a\r\n\r\n",
            "HTTP/1.1 400 Bad Request",
            "Bad Request",
        ),
        (
            b"GET / HTTP/1.1\r\nhost: a\r\nx y: 1\r\n\r\n",
            "HTTP/1.1 400 Bad Request",
            "Bad Request",
        ),
        (
            b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: abc\r\n\r\n",
            "HTTP/1.1 400 Bad Request",
            "Bad Request",
        ),
        (
            b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
            "HTTP/1.1 400 Bad Request",
            "Bad Request",
        ),
        (b"GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request", ""),
        (
            b"\x00\x01 garbage\r\n\r\n",
            "HTTP/1.1 400 Bad Request",
            "Bad Request",
        ),
    ];
    for (req, status, body) in cases {
        let r = raw(c.listener, req, WAIT).await;
        assert_eq!(status_and_body(&r), (status.into(), body.into()), "{req:?}");
        assert!(r.closed, "{req:?}");
    }
    // HTTP/1.0 without accept_http_10: 426.
    let r = raw(c.listener, b"GET / HTTP/1.0\r\nhost: a\r\n\r\n", WAIT).await;
    assert_eq!(status_and_body(&r).1, "Upgrade Required");
    assert!(
        r.text.starts_with("HTTP/1.0 426 Upgrade Required"),
        "{}",
        r.text
    );
    assert!(r.closed);
}

/// An upstream that reads requests and never answers.
async fn stalling_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        for _ in 0..100 {
            let Ok((mut s, _)) = l.accept().await else {
                continue;
            };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            held.push(s);
        }
    });
    addr
}

fn stalled_route(up: SocketAddr) -> (String, String) {
    (
        "- match: {prefix: \"/\"}\n  route: {cluster: stall}\n".to_string(),
        static_cluster("stall", &[up], ""),
    )
}

#[tokio::test]
async fn request_timeout_answers_408_until_the_request_is_whole() {
    let (routes, clusters) = stalled_route(stalling_upstream().await);
    let c = courier("request_timeout: 0.3s", &routes, &clusters).await;
    let r = raw(
        c.listener,
        b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 10\r\n\r\nab",
        WAIT,
    )
    .await;
    assert_eq!(
        status_and_body(&r),
        (
            "HTTP/1.1 408 Request Timeout".into(),
            "request timeout".into()
        )
    );
    assert!(r.closed);
    assert!(r.took >= Duration::from_millis(250), "{:?}", r.took);
    // A whole request disarms it: the stalled upstream gets the route timeout.
    let r = raw(
        c.listener,
        b"GET / HTTP/1.1\r\nhost: a\r\n\r\n",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        r.text, "",
        "request_timeout must not fire once the request is whole"
    );
}

#[tokio::test]
async fn stream_idle_timeout_answers_408_or_504() {
    let (routes, clusters) = stalled_route(stalling_upstream().await);
    let c = courier("stream_idle_timeout: 0.3s", &routes, &clusters).await;
    let r = raw(
        c.listener,
        b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 10\r\n\r\nab",
        WAIT,
    )
    .await;
    assert_eq!(
        status_and_body(&r),
        (
            "HTTP/1.1 408 Request Timeout".into(),
            "stream timeout".into()
        )
    );
    assert!(r.closed);
    // The request went upstream whole and nothing came back: 504, connection kept.
    let r = raw(
        c.listener,
        b"GET / HTTP/1.1\r\nhost: a\r\n\r\n",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        status_and_body(&r),
        (
            "HTTP/1.1 504 Gateway Timeout".into(),
            "stream timeout".into()
        )
    );
    assert!(!r.closed);
}

/// The route timeout and the stream idle timeout share one timer per request:
/// whichever is due first answers.
#[tokio::test]
async fn a_route_timeout_before_the_stream_idle_timeout_answers_first() {
    let up = stalling_upstream().await;
    let routes = "- match: {prefix: \"/\"}\n  route: {cluster: stall, timeout: 0.2s}\n";
    let clusters = static_cluster("stall", &[up], "");
    let c = courier("stream_idle_timeout: 0.6s", routes, &clusters).await;
    let r = raw(
        c.listener,
        b"GET / HTTP/1.1\r\nhost: a\r\n\r\n",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        status_and_body(&r),
        (
            "HTTP/1.1 504 Gateway Timeout".into(),
            "upstream request timeout".into()
        )
    );
}

/// Envoy's route timeout starts once the downstream request is complete
/// ("between the point at which the entire downstream request has been
/// processed and when the upstream response has been completely processed"):
/// an upload slower than the route timeout is not cut off while it arrives.
#[tokio::test]
async fn the_route_timeout_starts_when_the_request_is_complete() {
    let up = echo_upstream("up").await;
    let routes = "- match: {prefix: \"/\"}\n  route: {cluster: up, timeout: 0.4s}\n";
    let clusters = static_cluster("up", &[up], "");
    let c = courier("", routes, &clusters).await;
    let mut s = TcpStream::connect(c.listener).await.unwrap();
    s.write_all(b"POST /upload HTTP/1.1\r\nhost: a\r\ncontent-length: 10\r\n\r\nab")
        .await
        .unwrap();
    // Twice the route timeout with the body still arriving.
    tokio::time::sleep(Duration::from_millis(800)).await;
    s.write_all(b"cdefghij").await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(3);
    while !String::from_utf8_lossy(&out).contains("body: abcdefghij") {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("body: abcdefghij"), "{text}");
    // Once the request is whole the timeout runs: a slow upstream (2 s) gets 504
    // (read for 1.5 s: the connection stays open after it).
    let r = raw(
        c.listener,
        b"POST /slow HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\n\r\nab",
        Duration::from_millis(1500),
    )
    .await;
    assert_eq!(
        status_and_body(&r),
        (
            "HTTP/1.1 504 Gateway Timeout".into(),
            "upstream request timeout".into()
        )
    );
}

#[tokio::test]
async fn request_headers_and_idle_timeouts_close_connections() {
    let c = courier("request_headers_timeout: 0.3s", DIRECT, &unused_cluster()).await;
    let r = raw(c.listener, b"GET / HTTP/1.1\r\nhost: a\r\n", WAIT).await;
    assert_eq!(
        status_and_body(&r),
        (
            "HTTP/1.1 408 Request Timeout".into(),
            "request header timeout".into()
        )
    );
    assert!(r.closed, "{}", r.text);
    assert!(r.took >= Duration::from_millis(250), "{:?}", r.took);
    assert!(r.took < Duration::from_secs(2), "{:?}", r.took);
    // The timer starts with a request's first byte: an idle keep-alive
    // connection stays open (Envoy's idle_timeout is 1 h here).
    let r = raw(
        c.listener,
        b"GET / HTTP/1.1\r\nhost: a\r\n\r\n",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(status_and_body(&r).1, "ok");
    assert!(!r.closed, "{}", r.text);

    let c = courier(
        "common_http_protocol_options: {idle_timeout: 0.5s}\ndrain_timeout: 0.2s",
        DIRECT,
        &unused_cluster(),
    )
    .await;
    // An idle keep-alive connection is closed after idle_timeout and
    // drain_timeout (Envoy's drain sequence), not before.
    let r = raw(c.listener, b"GET / HTTP/1.1\r\nhost: a\r\n\r\n", WAIT).await;
    assert_eq!(status_and_body(&r).1, "ok");
    assert!(r.closed);
    assert!(r.took >= Duration::from_millis(600), "{:?}", r.took);
    assert!(r.took < Duration::from_millis(2500), "{:?}", r.took);
}

/// A raw h2c client.
struct H2Raw(hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>);

impl H2Raw {
    async fn connect(addr: SocketAddr) -> Self {
        let s = TcpStream::connect(addr).await.unwrap();
        let (send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(s),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        H2Raw(send)
    }
}

/// An upstream that sends response headers and part of the body, then stalls.
async fn stalling_body_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        for _ in 0..100 {
            let Ok((mut s, _)) = l.accept().await else {
                continue;
            };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
                .await;
            held.push(s);
        }
    });
    addr
}

#[tokio::test]
async fn stream_idle_timeout_after_the_response_started_cuts_the_stream() {
    let up = stalling_body_upstream().await;
    let c = courier(
        "stream_idle_timeout: 0.3s",
        "- match: {prefix: \"/\"}\n  route: {cluster: stall}\n",
        &static_cluster("stall", &[up], ""),
    )
    .await;
    let r = raw(c.listener, b"GET / HTTP/1.1\r\nhost: a\r\n\r\n", WAIT).await;
    assert!(r.text.starts_with("HTTP/1.1 200 OK\r\n"), "{}", r.text);
    assert!(r.text.ends_with("\r\n\r\npartial"), "{}", r.text);
    assert!(r.closed, "the connection must be closed mid-body");
    assert!(r.took >= Duration::from_millis(250), "{:?}", r.took);
    assert!(r.took < Duration::from_secs(2), "{:?}", r.took);

    // HTTP/2: the stream is reset; the body read fails.
    let mut h2 = H2Raw::connect(c.listener).await;
    let req = http::Request::get("http://a/")
        .body(http_body_util::Full::default())
        .unwrap();
    let resp = h2.0.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = tokio::time::timeout(
        Duration::from_secs(3),
        http_body_util::BodyExt::collect(resp.into_body()),
    )
    .await
    .unwrap();
    assert!(body.is_err());
}

type Frames = tonic::codegen::tokio_stream::wrappers::ReceiverStream<
    Result<hyper::body::Frame<bytes::Bytes>, std::convert::Infallible>,
>;

/// An h2c upstream that answers with headers and one `hello` frame, then reads
/// the request body to its end without sending anything more.
async fn quiet_h2_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        for _ in 0..10 {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let service = hyper::service::service_fn(
                |req: http::Request<hyper::body::Incoming>| async move {
                    let (tx, rx) = tokio::sync::mpsc::channel(4);
                    tx.send(Ok(hyper::body::Frame::data(bytes::Bytes::from_static(
                        b"hello",
                    ))))
                    .await
                    .unwrap();
                    tokio::spawn(async move {
                        let _ = http_body_util::BodyExt::collect(req.into_body()).await;
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        drop(tx);
                    });
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        http_body_util::StreamBody::new(Frames::new(rx)),
                    ))
                },
            );
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(s), service),
            );
        }
    });
    addr
}

#[tokio::test]
async fn stream_idle_timer_is_kept_alive_by_request_data_and_resets_after() {
    let up = quiet_h2_upstream().await;
    let h2_cluster = "typed_extension_protocol_options:\n  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n    \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n    explicit_http_config:\n      http2_protocol_options: {}\n";
    let c = courier(
        "stream_idle_timeout: 0.4s",
        "- match: {prefix: \"/\"}\n  route: {cluster: quiet}\n",
        &static_cluster("quiet", &[up], h2_cluster),
    )
    .await;
    let s = TcpStream::connect(c.listener).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(s),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let req = http::Request::post("http://a/")
        .body(http_body_util::StreamBody::new(Frames::new(rx)))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let first = http_body_util::BodyExt::frame(&mut body)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), "hello");
    // The client talks every 150 ms for 1.2 s: the stream stays up.
    let talking = async {
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            tx.send(Ok(hyper::body::Frame::data(bytes::Bytes::from_static(
                b"x",
            ))))
            .await
            .unwrap();
        }
    };
    let early = tokio::select! {
        f = http_body_util::BodyExt::frame(&mut body) => Some(f.map(|r| r.is_ok())),
        () = talking => None,
    };
    assert_eq!(early, None, "the stream ended while the client was talking");
    // Silence both ways: reset after the stream idle timeout.
    let start = Instant::now();
    let end = tokio::time::timeout(
        Duration::from_secs(3),
        http_body_util::BodyExt::frame(&mut body),
    )
    .await
    .unwrap();
    assert!(matches!(end, Some(Err(_))), "{end:?}");
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "{:?}",
        start.elapsed()
    );
    drop(tx);
}
