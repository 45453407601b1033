//! A bounded slow-loris attack: 500 connections trickle their request headers
//! while normal clients keep getting answers, and `request_headers_timeout`
//! closes the trickling connections (408) instead of holding them forever.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod tls_support;

use std::time::Duration;
use tls_support::start_file;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ATTACKERS: usize = 500;

fn config(dir: &std::path::Path, up: std::net::SocketAddr) -> std::path::PathBuf {
    let yaml = format!(
        r#"
admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}}}
static_resources:
  listeners:
  - name: edge
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    per_connection_buffer_limit_bytes: 32768
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: edge
          request_headers_timeout: 2s
          http_filters: [{{name: envoy.filters.http.router, typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}}}]
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{{match: {{prefix: "/"}}, route: {{cluster: up}}}}]
  clusters:
  - name: up
    load_assignment:
      cluster_name: up
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}}}]}}]
"#,
        port = up.port()
    );
    let path = dir.join("courier.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Opens a connection and sends a request line and one header, then one more
/// header byte every 200 ms; returns what courier answered before closing.
async fn trickle(addr: String) -> String {
    let Ok(mut s) = TcpStream::connect(&addr).await else {
        return "connect failed".into();
    };
    let _ = s
        .write_all(b"GET / HTTP/1.1\r\nhost: edge\r\nx-slow: ")
        .await;
    let mut out = Vec::new();
    // Bounded: at most 100 trickled bytes (20 s), far past the 2 s timeout.
    for _ in 0..100 {
        let mut buf = [0u8; 512];
        tokio::select! {
            r = s.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            },
            () = tokio::time::sleep(Duration::from_millis(200)) => {
                if s.write_all(b"a").await.is_err() {
                    break;
                }
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_connections_time_out_and_normal_clients_are_answered() {
    let dir = tempfile::tempdir().unwrap();
    let up = support::echo_upstream("up").await;
    let c = start_file(dir.path(), &config(dir.path(), up));
    let addr = c.addr("edge").to_string();

    let attackers: Vec<_> = (0..ATTACKERS)
        .map(|_| tokio::spawn(trickle(addr.clone())))
        .collect();
    // Normal clients while the attack is on: each gets its answer.
    for _ in 0..20 {
        let mut h = support::H1::connect(addr.parse().unwrap()).await;
        let r = h.get("/", &[("host", "edge")]).await;
        assert_eq!(r.status, 200);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every trickling connection is ended by courier with a 408.
    let mut timed_out = 0;
    for a in attackers {
        let answer = a.await.unwrap();
        if answer.starts_with("HTTP/1.1 408") {
            timed_out += 1;
        }
    }
    assert_eq!(timed_out, ATTACKERS);
}
