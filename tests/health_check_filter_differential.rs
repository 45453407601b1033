//! The health check filter (`envoy.filters.http.health_check`, Envoy Gateway's
//! ready listener) beside real Envoy: one bootstrap with an answering and a
//! pass-through listener, the same requests through both proxies before, while
//! and after the server fails its health checks (admin `/healthcheck/fail`,
//! `/healthcheck/ok`), comparing status, body, the health-check headers, what
//! reached the upstream, and two access logs (one with
//! `not_health_check_filter`).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test health_check_filter_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "otlp_support.rs"]
#[allow(dead_code)]
mod otlp;

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent};
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::{courier_bin, envoy_bin};
use std::net::SocketAddr;
use std::time::Duration;

fn filters(pass_through: bool) -> String {
    format!(
        r#"- name: envoy.filters.http.health_check
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck
    pass_through_mode: {pass_through}
    headers:
    - name: ":path"
      string_match: {{ exact: /ready }}
"#
    )
}

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

fn logs(name: &str) -> String {
    let log = |file: &str, filter: &str| {
        format!(
            r#"- name: envoy.access_loggers.file
  {filter}
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: {file}
    log_format: {{ text_format_source: {{ inline_string: "%REQ(:PATH)% %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_FLAGS_LONG% %RESPONSE_CODE_DETAILS% %UPSTREAM_CLUSTER%\n" }} }}
"#
        )
    };
    format!(
        "access_log:\n{}{}",
        log(&format!("{name}.log"), ""),
        log(
            &format!("{name}-not-hc.log"),
            "filter: { not_health_check_filter: {} }"
        )
    )
}

fn yaml(up: SocketAddr) -> String {
    format!(
        "node: {{ id: node-a, cluster: edge-cluster }}\n{}  clusters:\n{}",
        bootstrap(&[
            hcm_listener_filters("answer", &logs("answer"), &filters(false), VHOSTS),
            hcm_listener_filters("pass", &logs("pass"), &filters(true), VHOSTS),
        ]),
        indent(
            &format!(
                "- name: up\n  connect_timeout: 2s\n  load_assignment:\n    cluster_name: up\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
                up.port()
            ),
            2
        )
    )
}

fn request(method: &str, path: &str) -> Request {
    Request {
        method: method.into(),
        path: path.into(),
        authority: "example.com".into(),
        headers: Vec::new(),
        body: Vec::new(),
    }
}

/// What a proxy showed: one line per request, then the log files' lines.
fn run(kind: Kind, bin: &std::path::Path) -> Vec<String> {
    let (up, seen) = otlp::upstream();
    let p = Proxy::start(kind, bin, &yaml(up), &["answer", "pass"]).unwrap();
    let mut out = Vec::new();
    let mut send = |listener: &str, path: &str, protocol: Protocol| {
        let r = client::send(
            p.listener(listener).unwrap(),
            protocol,
            &request("GET", path),
        )
        .unwrap();
        let upstream = seen
            .recv_timeout(Duration::from_millis(300))
            .map(|s| s.path)
            .unwrap_or_else(|_| "-".into());
        out.push(format!(
            "{listener} {protocol} {path} -> {} {:?} cluster={:?} fail={:?} length={:?} type={:?} upstream={upstream}",
            r.status,
            String::from_utf8_lossy(&r.body),
            r.header("x-envoy-upstream-healthchecked-cluster"),
            r.header("x-envoy-immediate-health-check-fail"),
            r.header("content-length"),
            r.header("content-type"),
        ));
    };
    let round = |send: &mut dyn FnMut(&str, &str, Protocol)| {
        for listener in ["answer", "pass"] {
            send(listener, "/ready", Protocol::Http1);
            send(listener, "/ready", Protocol::H2c);
            send(listener, "/ready?probe=1", Protocol::Http1);
            send(listener, "/other", Protocol::Http1);
        }
    };
    round(&mut send);
    let admin =
        |path: &str| client::send(&p.admin, Protocol::Http1, &request("POST", path)).unwrap();
    let failed = admin("/healthcheck/fail");
    round(&mut send);
    let ok = admin("/healthcheck/ok");
    send("answer", "/ready", Protocol::Http1);
    out.push(format!(
        "admin fail -> {} {:?}; ok -> {} {:?}",
        failed.status,
        String::from_utf8_lossy(&failed.body),
        ok.status,
        String::from_utf8_lossy(&ok.body)
    ));
    for (file, n) in [
        ("answer.log", 9),
        ("answer-not-hc.log", 4),
        ("pass.log", 8),
        ("pass-not-hc.log", 4),
    ] {
        let path = p.dir().join(file);
        let lines = poll(1000, || {
            let text = std::fs::read_to_string(&path).ok()?;
            let lines: Vec<String> = text.lines().map(|l| format!("{file}: {l}")).collect();
            (lines.len() >= n).then_some(lines)
        })
        .unwrap_or_else(|| panic!("{kind}: {file} has fewer than {n} lines"));
        out.extend(lines);
    }
    out
}

#[test]
fn health_check_filter_as_envoy() {
    let c = run(Kind::Courier, &courier_bin());
    println!("courier:\n{}", c.join("\n"));
    assert!(
        c[0].starts_with("answer HTTP/1.1 /ready -> 200 \"\" cluster=Some(\"edge-cluster\")"),
        "{}",
        c[0]
    );
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED the Envoy comparison: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let e = run(Kind::Envoy, &envoy);
    println!("envoy:\n{}", e.join("\n"));
    for (c, e) in c.iter().zip(&e) {
        assert_eq!(c, e);
    }
    assert_eq!(c.len(), e.len());
}
