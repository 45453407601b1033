//! A cluster's `common_http_protocol_options.max_stream_duration` (upstream
//! streams; Envoy Gateway's `accesslog` case sets it) beside real Envoy 1.40:
//! an upstream slow to answer is cut off with 504 `upstream max stream
//! duration reached` (408 while the request is still arriving), a response
//! whose body stalls is reset mid-body, a `retry_on: reset` policy retries
//! it, and each counts in `upstream_rq_max_duration_reached` with the
//! response flag `UMSDR`.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test upstream_max_stream_duration_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::courier_bin;
use courier_tests::differential::{
    bootstrap, hcm_listener, loopback_cluster, same_lines, with_clusters,
};
use courier_tests::proxies::{Kind, Proxy, poll};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/retried" }
    route:
      cluster: up
      timeout: 10s
      retry_policy: { retry_on: reset, num_retries: 1 }
  - match: { prefix: "/" }
    route: { cluster: up, timeout: 10s }
"#;

const LOG: &str = r#"upgrade_configs: [{ upgrade_type: websocket }]
access_log:
    - name: envoy.access_loggers.file
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
        path: access.log
        log_format:
          text_format_source:
            inline_string: "%REQ(:PATH)% %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS%\n""#;

/// An HTTP/1.1 upstream: `/slow-head` answers after 2 s; `/slow-body` sends
/// its headers and 2 of 10 body bytes, then the rest after 2 s;
/// `/retried` is slow the first time and quick after; a request with a body
/// it waits for (`/upload`) is answered once the whole body came; anything
/// else at once.
fn upstream(retried: Arc<AtomicUsize>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let retried = Arc::clone(&retried);
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut w = s;
                // Bounded by count: at most 20 requests per connection.
                for _ in 0..20 {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut length = 0usize;
                    for _ in 0..100 {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0u8; length];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    let sent = if line.contains("/ws") {
                        // Upgraded; the upstream itself closes after 3 s.
                        let _ = w.write_all(
                            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
                        );
                        std::thread::sleep(Duration::from_secs(3));
                        return;
                    } else if line.contains("/slow-head") {
                        std::thread::sleep(Duration::from_secs(2));
                        w.write_all(ok)
                    } else if line.contains("/slow-body") {
                        let _ = w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nab");
                        std::thread::sleep(Duration::from_secs(2));
                        w.write_all(b"cdefghij")
                    } else if line.contains("/retried") {
                        if retried.fetch_add(1, Ordering::SeqCst) == 0 {
                            std::thread::sleep(Duration::from_secs(2));
                        }
                        w.write_all(ok)
                    } else {
                        w.write_all(ok)
                    };
                    if sent.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn yaml(up: SocketAddr) -> String {
    with_clusters(
        &bootstrap(&[hcm_listener("msd", LOG, VHOSTS)]),
        &[loopback_cluster(
            "up",
            up.port(),
            r#"  typed_extension_protocol_options:
    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
      "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
      explicit_http_config: { http_protocol_options: {} }
      common_http_protocol_options: { max_stream_duration: 0.4s }
"#,
        )],
    )
}

/// Writes `bytes` (keeping the connection open for writing), then reads until
/// the peer closes or 5 s pass; the status line, and the body received.
fn exchange(addr: &str, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let status = text.lines().next().unwrap_or("").to_string();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    format!("{status} | {body}")
}

fn stat(p: &Proxy, name: &str) -> String {
    let r = courier_tests::client::get(&p.admin, &format!("/stats?filter=^{name}$")).unwrap();
    String::from_utf8_lossy(&r.body).trim().to_string()
}

fn observe(kind: Kind, bin: &Path) -> Vec<String> {
    let retried = Arc::new(AtomicUsize::new(0));
    let up = upstream(Arc::clone(&retried));
    let p = Proxy::start(kind, bin, &yaml(up), &["msd"]).unwrap();
    let addr = p.listener("msd").unwrap().to_string();
    let get = |path: &str| {
        exchange(
            &addr,
            format!("GET {path} HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n").as_bytes(),
        )
    };
    let mut out = vec![
        format!("quick: {}", get("/quick")),
        format!("slow-head: {}", get("/slow-head")),
        // The response started: the stream is reset, the connection closed.
        format!("slow-body: {}", get("/slow-body")),
        format!("retried: {}", get("/retried")),
        format!(
            "retried upstream requests: {}",
            retried.load(Ordering::SeqCst)
        ),
    ];
    // The request's body is still arriving when the duration passes.
    out.push(format!(
        "upload: {}",
        exchange(
            &addr,
            b"POST /upload HTTP/1.1\r\nhost: a\r\ncontent-length: 10\r\n\r\nab"
        )
    ));
    // An upgraded stream is cut off too: the proxy closes the tunnel before
    // the upstream's own close at 3 s.
    let ws = std::time::SystemTime::now();
    let answer = exchange(
        &addr,
        b"GET /ws HTTP/1.1\r\nhost: a\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n",
    );
    out.push(format!(
        "ws: {} | closed by the proxy: {}",
        answer.split(" | ").next().unwrap_or(""),
        ws.elapsed().unwrap() < Duration::from_secs(2)
    ));
    out.push(stat(&p, "cluster.up.upstream_rq_max_duration_reached"));
    out.push(stat(&p, "cluster.up.upstream_rq_retry"));
    // Envoy writes its access logs every 10 s (`--file-flush-interval-msec`).
    let log = poll(750, || {
        let text = std::fs::read_to_string(p.dir().join("access.log")).ok()?;
        (text.lines().count() >= 6).then_some(text)
    })
    .unwrap_or_default();
    // Differs: courier writes an upgrade's line when the 101 is sent (`-
    // via_upstream`), Envoy when the tunnel ends (with `UMSDR` here); the
    // tunnel's end is compared above instead.
    let mut lines: Vec<String> = log
        .lines()
        .filter(|l| !l.starts_with("/ws "))
        .map(str::to_string)
        .collect();
    lines.sort();
    out.extend(lines);
    out
}

#[test]
fn upstream_max_stream_duration_as_envoy() {
    let lines = same_lines(observe).unwrap_or_else(|| observe(Kind::Courier, &courier_bin()));
    assert_eq!(
        lines,
        [
            "quick: HTTP/1.1 200 OK | ok",
            "slow-head: HTTP/1.1 504 Gateway Timeout | upstream max stream duration reached",
            "slow-body: HTTP/1.1 200 OK | ab",
            "retried: HTTP/1.1 200 OK | ok",
            "retried upstream requests: 2",
            "upload: HTTP/1.1 408 Request Timeout | upstream max stream duration reached",
            "ws: HTTP/1.1 101 Switching Protocols | closed by the proxy: true",
            "cluster.up.upstream_rq_max_duration_reached: 5",
            "cluster.up.upstream_rq_retry: 1",
            "/quick 200 - via_upstream",
            "/retried 200 - via_upstream",
            "/slow-body 200 UMSDR upstream_max_stream_duration_reached",
            "/slow-head 504 UMSDR upstream_max_stream_duration_reached",
            "/upload 408 UMSDR upstream_max_stream_duration_reached",
        ]
    );
}
