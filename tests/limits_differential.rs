//! Downstream `max_stream_duration` and `max_connection_duration`, and an HTTP/2
//! PING flood that is never read and a run of empty DATA frames, against real
//! Envoy and courier from one bootstrap: the replies, how the connection ends
//! and the stats must agree.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
#[path = "hostile/h2.rs"]
mod h2;

use courier_tests::client;
use courier_tests::differential::{bootstrap, hcm_listener};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes: [{ match: { prefix: "/" }, route: { cluster: up, timeout: 10s } }]
"#;

/// Routes with their own `max_stream_duration` (the upstream's `slow` paths take 2 s).
const ROUTED_VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes:
  - { match: { prefix: "/r/" }, route: { cluster: up, timeout: 10s, max_stream_duration: { max_stream_duration: 0.3s } } }
  - { match: { prefix: "/off/" }, route: { cluster: up, timeout: 10s, max_stream_duration: { max_stream_duration: 0s } } }
  - { match: { prefix: "/grpc/" }, route: { cluster: up, timeout: 10s, max_stream_duration: { grpc_timeout_header_max: 0s } } }
  - { match: { prefix: "/grpccap/" }, route: { cluster: up, timeout: 10s, max_stream_duration: { grpc_timeout_header_max: 0.3s } } }
  - { match: { prefix: "/grpcoff/" }, route: { cluster: up, timeout: 10s, max_stream_duration: { grpc_timeout_header_max: 0s, grpc_timeout_header_offset: 5s } } }
  - { match: { prefix: "/" }, route: { cluster: up, timeout: 10s } }
"#;

/// An HTTP/1.1 upstream: `200 ok` at once, or after 2 s for paths with `slow`.
fn upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut w = s;
                // Bounded by count: at most 100 requests per connection.
                for _ in 0..100 {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let slow = line.contains("slow");
                    // Headers (requests here have no body).
                    for _ in 0..200 {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                    }
                    if slow {
                        std::thread::sleep(Duration::from_secs(2));
                    }
                    if w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn config(up: SocketAddr) -> String {
    let mut yaml = bootstrap(&[
        hcm_listener(
            "stream",
            "common_http_protocol_options: {max_stream_duration: 0.5s}",
            VHOSTS,
        ),
        hcm_listener(
            "conn",
            "common_http_protocol_options: {max_connection_duration: 0.5s}",
            VHOSTS,
        ),
        hcm_listener("plain", "", VHOSTS),
        hcm_listener("routed", "", ROUTED_VHOSTS),
        hcm_listener(
            "routed_hcm",
            "common_http_protocol_options: {max_stream_duration: 0.5s}",
            ROUTED_VHOSTS,
        ),
        hcm_listener(
            "lenient",
            "http2_protocol_options: {max_consecutive_inbound_frames_with_empty_payload: 5}",
            VHOSTS,
        ),
    ]);
    yaml.push_str(&format!(
        "  clusters:
  - name: up
    connect_timeout: 2s
    load_assignment:
      cluster_name: up
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}}}]}}]
",
        up.port()
    ));
    yaml
}

/// Writes `bytes`, then reads until the peer closes (bounded: 10 s).
fn exchange(addr: &str, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Status line and body of a raw HTTP/1.1 response.
fn status_and_body(resp: &str) -> (String, String) {
    let status = resp.lines().next().unwrap_or("").to_string();
    let body = resp
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

fn stat(p: &Proxy, name: &str) -> u64 {
    let text = client::get(&p.admin, "/stats").unwrap();
    String::from_utf8_lossy(&text.body)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Reads HTTP/2 frames until a GOAWAY; its error code (None: the connection
/// ended or 10 s passed first).
fn goaway_code(s: &mut TcpStream) -> Option<u32> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Bounded by count.
    for _ in 0..1000 {
        let mut head = [0u8; 9];
        s.read_exact(&mut head).ok()?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).ok()?;
        if head[3] == 7 {
            return Some(u32::from_be_bytes([
                payload[4], payload[5], payload[6], payload[7],
            ]));
        }
    }
    None
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// What one proxy did in every scenario.
#[derive(Debug, PartialEq)]
struct Observed {
    slow_upstream: (String, String),
    partial_body: (String, String),
    second_request: (String, bool),
    h2_goaway: Option<u32>,
    rq_max_duration: u64,
    cx_max_duration: u64,
    flood_closed: bool,
    flood_counted: bool,
    empty_frames_closed: bool,
    empty_frames_flood: u64,
    /// With `max_consecutive_inbound_frames_with_empty_payload: 5`.
    lenient_empty_frames_closed: bool,
    /// Routes' `max_stream_duration`: (listener, path, grpc-timeout) → status and body.
    route_limits: Vec<(&'static str, &'static str, &'static str, (String, String))>,
}

/// Each request to a route with its own `max_stream_duration`, at once (each
/// slow one takes up to 2 s).
fn route_limits(p: &Proxy) -> Vec<(&'static str, &'static str, &'static str, (String, String))> {
    let cases: [(&str, &str, &str); 9] = [
        ("routed", "/r/slow", ""),
        ("routed", "/grpc/slow", "300m"),
        ("routed", "/grpc/slow", ""),
        ("routed", "/grpccap/slow", "10S"),
        ("routed", "/grpcoff/slow", "3S"),
        ("routed", "/grpc/slow", "bogus"),
        ("routed", "/grpc/slow", "0S"),
        // The route's 0s lifts the connection manager's 0.5 s.
        ("routed_hcm", "/off/slow", ""),
        ("routed_hcm", "/r/slow", ""),
    ];
    let handles: Vec<_> = cases
        .into_iter()
        .map(|(listener, path, grpc)| {
            let addr = p.listener(listener).unwrap().to_string();
            std::thread::spawn(move || {
                let header = if grpc.is_empty() {
                    String::new()
                } else {
                    format!("grpc-timeout: {grpc}\r\n")
                };
                let req =
                    format!("GET {path} HTTP/1.1\r\nhost: a\r\n{header}connection: close\r\n\r\n");
                (
                    listener,
                    path,
                    grpc,
                    status_and_body(&exchange(&addr, req.as_bytes())),
                )
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn observe(p: &Proxy) -> Observed {
    let stream = p.listener("stream").unwrap();
    let slow = exchange(
        stream,
        b"GET /slow HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
    );
    let partial = exchange(
        stream,
        b"POST /slow-body HTTP/1.1\r\nhost: a\r\ncontent-length: 10\r\n\r\nab",
    );

    // A second request after the connection's duration: answered, closing.
    let conn = p.listener("conn").unwrap();
    let mut s = TcpStream::connect(conn).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /one HTTP/1.1\r\nhost: a\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 4096];
    let _ = s.read(&mut buf).unwrap();
    std::thread::sleep(Duration::from_millis(800));
    s.write_all(b"GET /two HTTP/1.1\r\nhost: a\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let second = String::from_utf8_lossy(&out).into_owned();
    let second_request = (
        second.lines().next().unwrap_or("").to_string(),
        second
            .to_ascii_lowercase()
            .contains("connection: close\r\n"),
    );

    let mut h2 = TcpStream::connect(conn).unwrap();
    h2.write_all(PREFACE).unwrap();
    let h2_goaway = goaway_code(&mut h2);

    // A PING flood whose answers are never read.
    let plain: SocketAddr = p.listener("plain").unwrap().parse().unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&plain.into()).unwrap();
    let mut f: TcpStream = socket.into();
    f.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = f.write_all(PREFACE);
    let ping = [0u8, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    let burst: Vec<u8> = ping.iter().copied().cycle().take(17 * 1000).collect();
    let mut flood_closed = false;
    for _ in 0..2_000 {
        if f.write_all(&burst).is_err() {
            // Reset, broken pipe, or blocked for 5 s.
            break;
        }
    }
    f.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..100_000 {
        match f.read(&mut buf) {
            Ok(0) => {
                flood_closed = true;
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                flood_closed = true;
                break;
            }
            Err(_) => break,
            Ok(_) => {}
        }
    }
    // Empty DATA frames without END_STREAM, one after another.
    let mut bytes = h2::start();
    bytes.extend(h2::frame(
        h2::HEADERS,
        h2::END_HEADERS,
        1,
        &h2::request("empty", &[]),
    ));
    for _ in 0..3 {
        bytes.extend(h2::frame(h2::DATA, 0, 1, &[]));
    }
    let mut e = TcpStream::connect(plain).unwrap();
    e.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    e.write_all(&bytes).unwrap();
    let mut out = Vec::new();
    let empty_frames_closed = match e.read_to_end(&mut out) {
        Ok(_) => true,
        Err(err) => err.kind() == std::io::ErrorKind::ConnectionReset,
    };
    // The same three empty frames where five are allowed, then the body's
    // end: the connection stays open (the read times out).
    bytes.extend(h2::frame(h2::DATA, h2::END_STREAM, 1, b"x"));
    let lenient: SocketAddr = p.listener("lenient").unwrap().parse().unwrap();
    let mut l = TcpStream::connect(lenient).unwrap();
    l.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    l.write_all(&bytes).unwrap();
    let mut out = Vec::new();
    let lenient_empty_frames_closed = match l.read_to_end(&mut out) {
        Ok(_) => true,
        Err(err) => err.kind() == std::io::ErrorKind::ConnectionReset,
    };
    std::thread::sleep(Duration::from_millis(300));
    Observed {
        slow_upstream: status_and_body(&slow),
        partial_body: status_and_body(&partial),
        second_request,
        h2_goaway,
        rq_max_duration: stat(p, "http.stream.downstream_rq_max_duration_reached"),
        cx_max_duration: stat(p, "http.conn.downstream_cx_max_duration_reached"),
        flood_closed,
        flood_counted: stat(p, "http2.outbound_control_flood") > 0,
        empty_frames_closed,
        empty_frames_flood: stat(p, "http2.inbound_empty_frames_flood"),
        lenient_empty_frames_closed,
        route_limits: route_limits(p),
    }
}

#[test]
fn duration_limits_and_ping_flood_match_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let yaml = config(upstream());
    let names = ["stream", "conn", "plain", "lenient", "routed", "routed_hcm"];
    let e = observe(&Proxy::start(Kind::Envoy, &envoy, &yaml, &names).unwrap());
    let c = observe(&Proxy::start(Kind::Courier, &courier_bin(), &yaml, &names).unwrap());
    println!("envoy:   {e:?}\ncourier: {c:?}");
    // What Envoy does, stated, so a change on either side shows.
    assert_eq!(
        e.slow_upstream,
        (
            "HTTP/1.1 504 Gateway Timeout".to_string(),
            "downstream duration timeout".to_string()
        )
    );
    // Both close the flooding connection. Envoy 1.40 (nghttp2) stops at its
    // 1 MiB read buffer, its codec refuses the queued acks and it closes with
    // `downstream_cx_destroy_local` and no flood stat; courier counts
    // `http2.outbound_control_flood`, the stat Envoy documents for it.
    assert!(c.flood_counted);
    assert!(e.empty_frames_closed && e.empty_frames_flood == 1, "{e:?}");
    assert!(!e.lenient_empty_frames_closed, "{e:?}");
    let timed_out = (
        "HTTP/1.1 504 Gateway Timeout".to_string(),
        "downstream duration timeout".to_string(),
    );
    let answered = ("HTTP/1.1 200 OK".to_string(), "ok".to_string());
    let expected = [
        &timed_out, &timed_out, &answered, &timed_out, &timed_out, &answered, &timed_out,
        &answered, &timed_out,
    ];
    for (got, want) in e.route_limits.iter().zip(expected) {
        assert_eq!(&got.3, want, "envoy {got:?}");
    }
    assert_eq!(
        Observed {
            flood_counted: false,
            ..e
        },
        Observed {
            flood_counted: false,
            ..c
        }
    );
}
