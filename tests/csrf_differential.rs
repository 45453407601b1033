//! The CSRF filter (`envoy.filters.http.csrf`, Envoy Gateway's `csrf` case) beside
//! real Envoy: the same requests through both proxies from one bootstrap —
//! mutating and safe methods, `origin` / `referer` matching the host or not,
//! `additional_origins`, a route whose per-route policy only shadows, a route
//! with the filter disabled — comparing status, body and the
//! `http.csrf.csrf.*` counters. Without Envoy (`COURIER_ENVOY`) only courier is
//! checked.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test csrf_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "otlp_support.rs"]
#[allow(dead_code)]
mod otlp;

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::net::SocketAddr;

const FILTERS: &str = r#"- name: envoy.filters.http.csrf
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.csrf.v3.CsrfPolicy
    filter_enabled: { default_value: { numerator: 100 } }
    additional_origins:
    - exact: trusted.example
    - safe_regex: { regex: ".*\\.partner\\.test" }
"#;

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/shadow" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.csrf:
        "@type": type.googleapis.com/envoy.extensions.filters.http.csrf.v3.CsrfPolicy
        filter_enabled: { default_value: { numerator: 0 } }
        shadow_enabled: { default_value: { numerator: 100 } }
  - match: { prefix: "/off" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.csrf:
        "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
        disabled: true
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

fn yaml(up: SocketAddr) -> String {
    format!(
        "{}  clusters:\n{}",
        bootstrap(&[hcm_listener_filters("csrf", "", FILTERS, VHOSTS)]),
        indent(
            &format!(
                "- name: up\n  connect_timeout: 2s\n  load_assignment:\n    cluster_name: up\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
                up.port()
            ),
            2
        )
    )
}

/// A request: method, path, headers.
type Case = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const CASES: &[Case] = &[
    ("POST", "/a", &[("origin", "http://example.com")]),
    ("POST", "/a", &[("origin", "https://example.com:443")]),
    ("POST", "/a", &[("origin", "https://evil.test")]),
    ("PUT", "/a", &[("origin", "https://trusted.example")]),
    ("PATCH", "/a", &[("origin", "http://api.partner.test/x")]),
    ("DELETE", "/a", &[]),
    ("POST", "/a", &[("referer", "https://example.com/page?q=1")]),
    ("POST", "/a", &[("referer", "https://other.test/page")]),
    ("POST", "/a", &[("origin", "null")]),
    ("GET", "/a", &[("origin", "https://evil.test")]),
    ("OPTIONS", "/a", &[("origin", "https://evil.test")]),
    ("POST", "/shadow", &[("origin", "https://evil.test")]),
    ("POST", "/shadow", &[("origin", "http://example.com")]),
    ("POST", "/off", &[("origin", "https://evil.test")]),
];

fn run(kind: Kind, bin: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let (up, _seen) = otlp::upstream();
    let p = Proxy::start(kind, bin, &yaml(up), &["csrf"]).unwrap();
    let mut out = Vec::new();
    for (protocol, (method, path, headers)) in CASES
        .iter()
        .map(|c| (Protocol::Http1, c))
        .chain(CASES.iter().take(3).map(|c| (Protocol::H2c, c)))
    {
        let r = client::send(
            p.listener("csrf").unwrap(),
            protocol,
            &Request {
                method: (*method).into(),
                path: (*path).into(),
                authority: "example.com".into(),
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                body: Vec::new(),
            },
        )
        .unwrap();
        out.push(format!(
            "{protocol} {method} {path} {headers:?} -> {} {:?}",
            r.status,
            String::from_utf8_lossy(&r.body)
        ));
    }
    let stats = client::get(&p.admin, "/stats").unwrap();
    let stats = String::from_utf8_lossy(&stats.body)
        .lines()
        .filter(|l| l.starts_with("http.csrf.csrf."))
        .map(str::to_string)
        .collect();
    (out, stats)
}

#[test]
fn csrf_as_envoy() {
    let (c, c_stats) = run(Kind::Courier, &courier_bin());
    println!("courier:\n{}\n{c_stats:#?}", c.join("\n"));
    assert!(c[2].ends_with("-> 403 \"Invalid origin\""), "{}", c[2]);
    assert!(c[0].contains("-> 200"), "{}", c[0]);
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED the Envoy comparison: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let (e, e_stats) = run(Kind::Envoy, &envoy);
    println!("envoy:\n{}\n{e_stats:#?}", e.join("\n"));
    for (c, e) in c.iter().zip(&e) {
        assert_eq!(c, e);
    }
    assert_eq!(c_stats, e_stats);
}
