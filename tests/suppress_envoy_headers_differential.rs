//! The router's `suppress_envoy_headers` (set by Envoy Gateway on every
//! connection manager) against real Envoy: two listeners, the router with and
//! without it, a route with a prefix rewrite and a timeout to an upstream that
//! reports the `x-envoy-*` headers it received; both proxies must forward and
//! answer the same, and courier's lines are checked against what each router
//! adds: with the flag, no `x-envoy-expected-rq-timeout-ms`, no
//! `x-envoy-original-path`, no `x-envoy-upstream-service-time`.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test suppress_envoy_headers_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{bootstrap, same_lines, with_clusters};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::raw_http1;
use std::path::Path;

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: {prefix: /old/}
    route: {cluster: echo, prefix_rewrite: /new/, timeout: 7s}"#;

/// A listener whose router has `suppress_envoy_headers: suppress`.
fn listener(name: &str, suppress: bool) -> String {
    format!(
        r#"- name: {name}
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
  filter_chains:
  - filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: {name}
        http_filters:
        - name: envoy.filters.http.router
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
            suppress_envoy_headers: {suppress}
        route_config:
          virtual_hosts:
{}"#,
        courier_tests::differential::indent(VHOSTS, 10)
    )
}

fn observe(kind: Kind, bin: &Path, echo: u16) -> Vec<String> {
    let yaml = with_clusters(
        &bootstrap(&[listener("plain", false), listener("quiet", true)]),
        &[courier_tests::differential::loopback_cluster(
            "echo", echo, "",
        )],
    );
    let p = Proxy::start(kind, bin, &yaml, &["plain", "quiet"]).unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::new();
    for name in ["plain", "quiet"] {
        let a = raw_http1::exchange(
            p.listener(name).unwrap(),
            "GET /old/x HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
        );
        let envoy_headers: Vec<String> = a
            .headers
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .filter(|h| h.starts_with("x-envoy-"))
            .map(|h| h.split(':').next().unwrap_or("").to_string())
            .collect();
        out.push(format!(
            "{name}: {} upstream got [{}] response x-envoy headers {envoy_headers:?}",
            a.status_line,
            a.body.trim_end().replace('\n', " | ")
        ));
    }
    out
}

#[test]
fn suppress_envoy_headers_as_envoy() {
    let echo = courier_tests::echo_upstream::start(&[
        "x-envoy-expected-rq-timeout-ms",
        "x-envoy-original-path",
    ]);
    let Some(lines) = same_lines(|kind, bin| observe(kind, bin, echo.port())) else {
        return;
    };
    assert_eq!(
        lines,
        [
            "plain: HTTP/1.1 200 OK upstream got [/new/x | x-envoy-expected-rq-timeout-ms: 7000 | x-envoy-original-path: /old/x] response x-envoy headers [\"x-envoy-upstream-service-time\"]",
            "quiet: HTTP/1.1 200 OK upstream got [/new/x] response x-envoy headers []",
        ]
    );
}
