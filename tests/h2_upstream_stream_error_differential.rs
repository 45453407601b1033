//! A malformed response on an upstream HTTP/2 connection whose cluster sets
//! `override_stream_error_on_invalid_http_message: true`: real Envoy and
//! courier from one bootstrap, the same two requests in turn, comparing what
//! the client got and which upstream connection and stream carried each.
//!
//! Envoy's rule with the override: the malformed response resets only its
//! stream (the client gets the local reply for the reset) and the connection
//! stays pooled, so the next request goes on it as the next stream.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{Protocol, Request, send};
use courier_tests::differential::{bootstrap, hcm_listener, same_lines};
use courier_tests::proxies::{Kind, Proxy};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes: [{ match: { prefix: "/" }, route: { cluster: up } }]
"#;

fn config(up: SocketAddr) -> String {
    let mut yaml = bootstrap(&[hcm_listener("h", "", VHOSTS)]);
    yaml.push_str(&format!(
        "  clusters:
  - name: up
    connect_timeout: 2s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {{ override_stream_error_on_invalid_http_message: true }}
    load_assignment:
      cluster_name: up
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}}}]}}]
",
        up.port()
    ));
    yaml
}

/// An HTTP/2 frame header.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An h2c upstream written frame by frame: the first request it gets (over
/// all connections) is answered with a connection-specific header (malformed
/// in HTTP/2), every later one `200`. Reports (connection, stream) per request.
fn upstream() -> (SocketAddr, mpsc::Receiver<(usize, u32)>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    let requests = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for (conn, s) in l.incoming().flatten().enumerate() {
            let (tx, requests) = (tx.clone(), Arc::clone(&requests));
            std::thread::spawn(move || serve(conn, s, &tx, &requests));
        }
    });
    (addr, rx)
}

fn serve(conn: usize, mut s: TcpStream, tx: &mpsc::Sender<(usize, u32)>, requests: &AtomicUsize) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut preface = [0u8; 24];
    if s.read_exact(&mut preface).is_err() {
        return;
    }
    let _ = s.write_all(&frame(4, 0, 0, &[]));
    loop {
        let mut head = [0u8; 9];
        if s.read_exact(&mut head).is_err() {
            return;
        }
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        if s.read_exact(&mut payload).is_err() {
            return;
        }
        let reply = match kind {
            // SETTINGS (not an ACK): acknowledged.
            4 if flags & 1 == 0 => frame(4, 1, 0, &[]),
            // PING: answered.
            6 if flags & 1 == 0 => frame(6, 1, 0, &payload),
            // HEADERS: a request (bodies are not sent here).
            1 => {
                let _ = tx.send((conn, stream));
                let block: &[u8] = if requests.fetch_add(1, Ordering::Relaxed) == 0 {
                    // :status 200, then a literal `connection: close` (new
                    // name, not indexed). (An upper-case name would do too,
                    // but h2 takes that for a connection error.)
                    b"\x88\x00\x0aconnection\x05close"
                } else {
                    b"\x88"
                };
                // END_STREAM | END_HEADERS.
                frame(1, 0x5, stream, block)
            }
            // GOAWAY: the proxy is done with the connection.
            7 => return,
            _ => continue,
        };
        if s.write_all(&reply).is_err() {
            return;
        }
    }
}

/// Two GETs in turn: each answer (status and body) and where the upstream got it.
fn observe(kind: Kind, bin: &std::path::Path) -> Vec<String> {
    let (up, rx) = upstream();
    let proxy =
        Proxy::start(kind, bin, &config(up), &["h"]).unwrap_or_else(|e| panic!("{kind}: {e}"));
    let addr = proxy.listener("h").unwrap();
    let mut lines: Vec<String> = (1..=2)
        .map(|n| {
            let r = send(
                addr,
                Protocol::Http1,
                &Request {
                    method: "GET".into(),
                    path: format!("/{n}"),
                    authority: "t".into(),
                    headers: Vec::new(),
                    body: Vec::new(),
                },
            )
            .unwrap();
            let (conn, stream) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            format!(
                "request {n}: {} {:?} on upstream connection {conn} stream {stream}",
                r.status,
                String::from_utf8_lossy(&r.body)
            )
        })
        .collect();
    // The codes charged: Envoy's router charges the local reply's.
    let stats =
        courier_tests::client::get(&proxy.admin, "/stats?filter=^cluster.up.upstream_rq_").unwrap();
    lines.extend(
        String::from_utf8_lossy(&stats.body)
            .lines()
            .filter(|l| ["_502:", "_200:", "_5xx:"].iter().any(|k| l.contains(k)))
            .map(str::to_string),
    );
    lines
}

#[test]
fn a_malformed_upstream_response_resets_only_its_stream_as_envoy_does() {
    let Some(courier_lines) = same_lines(observe) else {
        return;
    };
    assert!(courier_lines.contains(&"cluster.up.upstream_rq_502: 1".to_string()));
    // The second request reuses the connection, as the next stream.
    assert!(
        courier_lines[1].starts_with("request 2: 200")
            && courier_lines[1].ends_with("upstream connection 0 stream 3"),
        "{courier_lines:?}"
    );
}
