//! The fault injection filter (`envoy.filters.http.fault`, Envoy Gateway's
//! `fault-injection` case) beside real Envoy: the same requests through both
//! proxies from one bootstrap — routes whose per-route `HTTPFault` aborts with an
//! HTTP status or a gRPC status (HTTP/1.1, h2c and gRPC requests), delays (short,
//! so the run stays quick; the delay is seen in the `DI` flag and the counters,
//! not timed), delays then aborts, a 0 % abort, the filter's own empty config, and
//! an HCM-disabled fault filter a route enables with `FilterConfig.config: {}` —
//! comparing status, body, `grpc-status`, the response flags (in a response
//! header) and the `http.fault.fault.*` stats. Without Envoy (`COURIER_ENVOY`) only
//! courier is checked.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test fault_differential -- --nocapture
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

/// The filter under test, and a second one the HCM disables that a route turns on with a
/// `FilterConfig` whose `config` is the empty `Any` (Envoy Gateway's form for "this
/// route's extension"): it then runs with its HCM config.
const FILTERS: &str = r#"- name: envoy.filters.http.fault
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault
- name: envoy.filters.http.fault/enabled-per-route
  disabled: true
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault
    abort: { http_status: 418, percentage: { numerator: 100 } }
"#;

fn route(path: &str, fault: &str) -> String {
    format!(
        "  - match: {{ prefix: \"{path}\" }}\n    route: {{ cluster: up }}\n    typed_per_filter_config:\n      envoy.filters.http.fault:\n        \"@type\": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault\n{}\n",
        indent(fault, 8)
    )
}

fn vhosts() -> String {
    let routes = [
        route(
            "/abort",
            "abort: { http_status: 500, percentage: { numerator: 1000000, denominator: MILLION } }\n",
        ),
        route("/body-abort", "abort: { http_status: 429, response_body: slow down }\n"),
        route(
            "/grpc-abort",
            "abort: { grpc_status: 14, percentage: { numerator: 100 } }\n",
        ),
        route(
            "/delay",
            "delay: { fixed_delay: 0.05s, percentage: { numerator: 100 } }\n",
        ),
        route(
            "/both",
            "delay: { fixed_delay: 0.05s, percentage: { numerator: 100 } }\nabort: { http_status: 503, percentage: { numerator: 100 } }\n",
        ),
        route(
            "/never",
            "abort: { http_status: 500, percentage: { numerator: 0 } }\n",
        ),
    ]
    .concat();
    let enabled = "  - match: { prefix: \"/enabled\" }\n    route: { cluster: up }\n    typed_per_filter_config:\n      envoy.filters.http.fault/enabled-per-route:\n        \"@type\": type.googleapis.com/envoy.config.route.v3.FilterConfig\n        config: {}\n";
    let routes = format!("{routes}{enabled}");
    format!(
        "- name: all\n  domains: [\"*\"]\n  routes:\n{routes}  - match: {{ prefix: \"/\" }}\n    route: {{ cluster: up }}\n"
    )
}

/// The bootstrap; the access log (path and response flags) goes to `log`.
fn yaml(up: SocketAddr, log: &std::path::Path) -> String {
    let access_log = format!(
        "access_log:\n- name: envoy.access_loggers.file\n  typed_config:\n    \"@type\": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog\n    path: {}\n    log_format: {{ text_format_source: {{ inline_string: \"%REQ(:PATH)% %PROTOCOL% %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_FLAGS_LONG% %RESPONSE_CODE_DETAILS%\\n\" }} }}\n",
        log.display()
    );
    format!(
        "{}  clusters:\n{}",
        bootstrap(&[hcm_listener_filters(
            "fault",
            &access_log,
            FILTERS,
            &vhosts()
        )]),
        indent(
            &format!(
                "- name: up\n  connect_timeout: 2s\n  load_assignment:\n    cluster_name: up\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
                up.port()
            ),
            2
        )
    )
}

const PATHS: &[&str] = &[
    "/abort",
    "/body-abort",
    "/grpc-abort",
    "/delay",
    "/both",
    "/never",
    "/enabled",
    "/plain",
];

fn run(kind: Kind, bin: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let (up, _seen) = otlp::upstream();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let p = Proxy::start(kind, bin, &yaml(up, &log), &["fault"]).unwrap();
    let mut out = Vec::new();
    let grpc = [("content-type", "application/grpc"), ("te", "trailers")];
    for path in PATHS {
        for (protocol, headers) in [
            (Protocol::Http1, &[][..]),
            (Protocol::H2c, &[][..]),
            (Protocol::H2c, &grpc[..]),
        ] {
            let r = client::send(
                p.listener("fault").unwrap(),
                protocol,
                &Request {
                    method: "GET".into(),
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
                "{protocol} {path} grpc={} -> {} {:?} grpc-status={:?}",
                !headers.is_empty(),
                r.status,
                String::from_utf8_lossy(&r.body),
                r.header("grpc-status").or_else(|| r
                    .trailers
                    .iter()
                    .find(|(k, _)| k == "grpc-status")
                    .map(|(_, v)| v.clone())),
            ));
        }
    }
    let stats = client::get(&p.admin, "/stats").unwrap();
    let mut stats: Vec<String> = String::from_utf8_lossy(&stats.body)
        .lines()
        .filter(|l| l.starts_with("http.fault.fault."))
        .map(str::to_string)
        .collect();
    // Envoy flushes log files every 10 s, and on exit.
    let quit = Request {
        method: "POST".into(),
        path: "/quitquitquit".into(),
        authority: p.admin.clone(),
        headers: Vec::new(),
        body: Vec::new(),
    };
    client::send(&p.admin, Protocol::Http1, &quit).unwrap();
    let want = out.len();
    let mut lines: Vec<String> = poll(500, || {
        let text = std::fs::read_to_string(&log).ok()?;
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        (lines.len() >= want).then_some(lines)
    })
    .unwrap_or_else(|| panic!("{kind:?}: fewer than {want} log lines"));
    lines.sort();
    stats.extend(lines);
    (out, stats)
}

#[test]
fn faults_as_envoy() {
    let (c, c_stats) = run(Kind::Courier, &courier_bin());
    println!("courier:\n{}\n{c_stats:#?}", c.join("\n"));
    assert!(c[0].contains("-> 500 \"fault filter abort\""), "{}", c[0]);
    // The HCM-disabled filter runs, with its HCM config, only where the route enables it.
    let enabled = PATHS.iter().position(|p| *p == "/enabled").unwrap() * 3;
    assert!(c[enabled].contains("-> 418 "), "{}", c[enabled]);
    assert!(c[enabled + 3].contains("-> 200 "), "{}", c[enabled + 3]);
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
