//! A cluster's `common_http_protocol_options.max_connection_duration` (upstream
//! connections; Envoy Gateway's OIDC cases set it) beside real Envoy 1.40: two
//! requests in a row share one upstream HTTP/1.1 connection; past the lifetime
//! the idle connection has been closed by the proxy, and the next request opens
//! another. An upstream of the test's own numbers its connections and notes
//! which ones the proxy closed.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test upstream_lifetime_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::courier_bin;
use courier_tests::differential::{bootstrap, hcm_listener, indent, same_lines};
use courier_tests::proxies::{Kind, Proxy};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

/// Connections accepted so far, and which of them the peer closed.
#[derive(Default)]
struct Seen {
    accepted: AtomicUsize,
    closed: [AtomicBool; 8],
}

/// An HTTP/1.1 upstream answering each request with its connection's number.
fn upstream(seen: Arc<Seen>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let n = seen.accepted.fetch_add(1, Ordering::SeqCst) + 1;
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                'conn: loop {
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            break 'conn;
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let body = format!("conn{n}");
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(resp.as_bytes()).is_err() {
                        break;
                    }
                }
                if let Some(c) = seen.closed.get(n) {
                    c.store(true, Ordering::SeqCst);
                }
            });
        }
    });
    addr
}

fn yaml(up: SocketAddr) -> String {
    format!(
        "{}  clusters:\n{}",
        bootstrap(&[hcm_listener("lt", "", VHOSTS)]),
        indent(
            &format!(
                r#"- name: up
  connect_timeout: 1s
  typed_extension_protocol_options:
    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
      "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
      explicit_http_config: {{ http_protocol_options: {{}} }}
      common_http_protocol_options: {{ max_connection_duration: 1s }}
  load_assignment:
    cluster_name: up
    endpoints:
    - lb_endpoints:
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}
"#,
                up.port()
            ),
            2
        )
    )
}

fn observe(kind: Kind, bin: &Path) -> Vec<String> {
    let seen = Arc::new(Seen::default());
    let up = upstream(Arc::clone(&seen));
    let p = Proxy::start(kind, bin, &yaml(up), &["lt"]).unwrap();
    let addr = p.listener("lt").unwrap();
    let get = || {
        let r = client::send(
            addr,
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
        format!("{} {}", r.status, String::from_utf8_lossy(&r.body))
    };
    let mut out = vec![get(), get()];
    out.push(format!(
        "conn1 closed before the lifetime: {}",
        seen.closed[1].load(Ordering::SeqCst)
    ));
    std::thread::sleep(Duration::from_millis(2500));
    out.push(format!(
        "conn1 closed after the lifetime: {}",
        seen.closed[1].load(Ordering::SeqCst)
    ));
    out.push(get());
    out.push(format!(
        "connections: {}",
        seen.accepted.load(Ordering::SeqCst)
    ));
    out
}

#[test]
fn upstream_max_connection_duration_as_envoy() {
    let lines = same_lines(observe).unwrap_or_else(|| observe(Kind::Courier, &courier_bin()));
    assert_eq!(
        lines,
        [
            "200 conn1",
            "200 conn1",
            "conn1 closed before the lifetime: false",
            "conn1 closed after the lifetime: true",
            "200 conn2",
            "connections: 2",
        ]
    );
}
