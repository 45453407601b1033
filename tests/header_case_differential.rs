//! `header_key_format` with the `preserve_case` stateful formatter: real Envoy
//! and courier from one bootstrap, the same raw HTTP/1.1 bytes in, comparing
//! the header names (case and all) the upstream received and the client got
//! back, and the reason phrase.
//!
//! Envoy's rule: a codec configured with `preserve_case` records the case of
//! the names it reads, and whichever codec writes those headers on uses it.
//! So the connection manager's setting shapes the request the upstream gets,
//! the cluster's the response the client gets; names the proxy adds stay
//! lower case. `forward_reason_phrase` (the cluster's) passes the upstream's
//! reason phrase on.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{bootstrap, hcm_listener, same_lines};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::raw_http1::{RawUpstream, Received, exchange};
use std::net::SocketAddr;

const PRESERVE: &str = r#"header_key_format:
  stateful_formatter:
    name: preserve_case
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.http.header_formatters.preserve_case.v3.PreserveCaseFormatterConfig"#;

/// Routes by exact path: one per cluster.
const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes:
  - { match: { path: "/lower" }, route: { cluster: lower } }
  - { match: { path: "/preserve" }, route: { cluster: preserve } }
  - { match: { path: "/reason" }, route: { cluster: reason } }
"#;

fn cluster(name: &str, addr: SocketAddr, h1_options: &str) -> String {
    let options = if h1_options.is_empty() {
        String::new()
    } else {
        format!(
            "    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http_protocol_options:
{}
",
            courier_tests::differential::indent(h1_options, 12)
        )
    };
    format!(
        "  - name: {name}
    connect_timeout: 2s
{options}    load_assignment:
      cluster_name: {name}
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}}}]}}]
",
        port = addr.port()
    )
}

fn config(up: SocketAddr) -> String {
    let mut yaml = bootstrap(&[
        hcm_listener("plain", "", VHOSTS),
        hcm_listener(
            "preserve",
            &format!(
                "http_protocol_options:\n{}",
                courier_tests::differential::indent(PRESERVE, 2)
            ),
            VHOSTS,
        ),
    ]);
    yaml.push_str("  clusters:\n");
    yaml.push_str(&cluster("lower", up, ""));
    yaml.push_str(&cluster("preserve", up, PRESERVE));
    yaml.push_str(&cluster(
        "reason",
        up,
        &format!("{PRESERVE}\n      forward_reason_phrase: true"),
    ));
    yaml
}

/// The upstream's answer: mixed-case names and a reason phrase of its own.
fn reply(_: &Received) -> String {
    "HTTP/1.1 200 Fine Thanks\r\nX-Upstream-Mixed: u\r\nContent-Type: text/plain\r\n\
     Content-Length: 2\r\n\r\nok"
        .to_string()
}

/// Header names each proxy adds its own way, or with values of its own: only
/// their presence (and case) is compared.
const VARYING: &[&str] = &[
    "date",
    "x-request-id",
    "x-envoy-expected-rq-timeout-ms",
    "x-envoy-upstream-service-time",
];

/// Header lines with varying values masked, sorted (each proxy orders its own).
fn comparable<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = lines
        .map(|l| match l.split_once(':') {
            Some((name, _)) if VARYING.contains(&name.to_ascii_lowercase().as_str()) => {
                format!("{name}: *")
            }
            _ => l.to_string(),
        })
        .collect();
    out.sort_unstable();
    out
}

/// One proxy's view, one line per listener and route.
fn observe(kind: Kind, bin: &std::path::Path) -> Vec<String> {
    let up = RawUpstream::start(reply);
    let proxy = Proxy::start(kind, bin, &config(up.addr), &["plain", "preserve"])
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
    let mut lines = Vec::new();
    for listener in ["plain", "preserve"] {
        for path in ["/lower", "/preserve", "/reason"] {
            let answer = exchange(
                proxy.listener(listener).unwrap(),
                &format!(
                    "GET {path} HTTP/1.1\r\nHost: t\r\nX-Client-Mixed: c\r\nUser-Agent: raw\r\n\
                     Connection: close\r\n\r\n"
                ),
            );
            let got = up.next().unwrap();
            assert_eq!(got.path, path, "{kind}: the upstream saw another request");
            lines.push(format!(
                "{listener} {path}: upstream got {:?}; client got {:?} {:?}",
                comparable(got.head.lines().skip(1)),
                answer.status_line,
                comparable(answer.headers.iter().map(String::as_str)),
            ));
        }
    }
    lines
}

#[test]
fn preserve_case_keeps_header_name_case_as_envoy_does() {
    let Some(courier_lines) = same_lines(observe) else {
        return;
    };
    // What Envoy does, spelled out, so the comparison cannot pass on two wrong answers.
    let line = |listener: &str, path: &str| {
        courier_lines
            .iter()
            .find(|l| l.starts_with(&format!("{listener} {path}:")))
            .unwrap()
            .clone()
    };
    let plain = line("plain", "/lower");
    let (upstream, client) = plain.split_once("; client got ").unwrap();
    assert!(upstream.contains("x-client-mixed: c"), "{upstream}");
    assert!(client.contains("x-upstream-mixed: u"), "{client}");
    assert!(client.starts_with("\"HTTP/1.1 200 OK\""), "{client}");
    // The connection manager's setting: the request keeps the client's case.
    assert!(line("preserve", "/lower").contains("X-Client-Mixed: c"));
    assert!(line("preserve", "/lower").contains("x-upstream-mixed: u"));
    // The cluster's: the response keeps the upstream's.
    assert!(line("plain", "/preserve").contains("x-client-mixed: c"));
    assert!(line("plain", "/preserve").contains("X-Upstream-Mixed: u"));
    assert!(line("plain", "/preserve").contains("\"HTTP/1.1 200 OK\""));
    assert!(line("plain", "/reason").contains("\"HTTP/1.1 200 Fine Thanks\""));
}
