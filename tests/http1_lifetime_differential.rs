//! `max_connection_duration` on HTTP/1.1 connections, with and without
//! `http1_safe_max_connection_duration`, beside real Envoy: a keep-alive
//! client asks once, stays quiet past the lifetime and the drain timeout, then
//! asks again. By default the proxy has closed the connection (Envoy's drain
//! sequence); with the option it is still open, the second request is
//! answered `connection: close` and the connection then closes. Both proxies
//! count `downstream_cx_max_duration_reached`.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=$PWD/.venv/bin/envoy cargo test -p courier-tests --test http1_lifetime_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "otlp_support.rs"]
#[allow(dead_code)]
mod otlp;

use courier_tests::client;
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

fn yaml(up: SocketAddr) -> String {
    let common =
        "drain_timeout: 0.5s\ncommon_http_protocol_options: { max_connection_duration: 1s }\n";
    format!(
        "{}  clusters:\n{}",
        bootstrap(&[
            hcm_listener("plain", common, VHOSTS),
            hcm_listener(
                "safe",
                &format!("{common}http1_safe_max_connection_duration: true\n"),
                VHOSTS
            ),
        ]),
        indent(
            &format!(
                "- name: up\n  connect_timeout: 1s\n  load_assignment:\n    cluster_name: up\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
                up.port()
            ),
            2
        )
    )
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nhost: example.com\r\n\r\n";

/// One response (headers and its 5-byte body), or `None` at end of stream.
fn response(s: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut b = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n")
            && buf.len() >= end + 4 + 5
        {
            return Some(String::from_utf8_lossy(&buf[..end + 4]).to_lowercase());
        }
        match s.read(&mut b) {
            Ok(0) | Err(_) => {
                return (!buf.is_empty()).then(|| String::from_utf8_lossy(&buf).to_lowercase());
            }
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
}

/// What one listener did: the first answer's status line, whether the
/// connection was open after the quiet time, the second answer's status and
/// `connection` header, and whether it closed after that.
fn exchange(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.write_all(GET).unwrap();
    let first = response(&mut s).unwrap_or_default();
    let first = first.lines().next().unwrap_or_default().to_string();
    // Past the lifetime (1 s) and the drain timeout (0.5 s more).
    std::thread::sleep(Duration::from_millis(2500));
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut probe = [0u8; 1];
    let open = match s.read(&mut probe) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    };
    if !open {
        return format!("{first} | closed while quiet");
    }
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.write_all(GET).unwrap();
    let second = response(&mut s).unwrap_or_default();
    let status = second.lines().next().unwrap_or_default().to_string();
    let connection = second
        .lines()
        .find_map(|l| l.strip_prefix("connection: "))
        .unwrap_or("-")
        .to_string();
    let closed = matches!(s.read(&mut probe), Ok(0));
    format!("{first} | open while quiet | {status} connection={connection} closed={closed}")
}

fn run(kind: Kind, bin: &std::path::Path) -> Vec<String> {
    let (up, _seen) = otlp::upstream();
    let p = Proxy::start(kind, bin, &yaml(up), &["plain", "safe"]).unwrap();
    let mut out = Vec::new();
    for name in ["plain", "safe"] {
        out.push(format!("{name}: {}", exchange(p.listener(name).unwrap())));
    }
    let stats = client::get(&p.admin, "/stats?filter=downstream_cx_max_duration_reached").unwrap();
    let mut stats: Vec<String> = String::from_utf8_lossy(&stats.body)
        .lines()
        // The listeners' connection managers (admin's are not compared).
        .filter(|l| l.starts_with("http.") && !l.starts_with("http.admin."))
        .map(String::from)
        .collect();
    stats.sort();
    out.extend(stats);
    out
}

#[test]
fn http1_max_connection_duration_as_envoy() {
    let courier = run(Kind::Courier, &courier_bin());
    println!("courier: {courier:#?}");
    assert_eq!(
        courier,
        [
            "plain: http/1.1 200 ok | closed while quiet",
            "safe: http/1.1 200 ok | open while quiet | http/1.1 200 ok connection=close closed=true",
            "http.plain.downstream_cx_max_duration_reached: 1",
            "http.safe.downstream_cx_max_duration_reached: 1",
        ]
    );
    let Some(envoy) = envoy_bin() else {
        eprintln!("COURIER_ENVOY not set: Envoy comparison skipped");
        return;
    };
    let envoy = run(Kind::Envoy, &envoy);
    println!("envoy: {envoy:#?}");
    assert_eq!(courier, envoy);
}
