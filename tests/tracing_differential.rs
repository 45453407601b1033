//! HCM `tracing` with the `envoy.tracers.opentelemetry` provider, beside real Envoy.
//!
//! Each proxy runs from the same bootstrap with its own OTLP collector (a real tonic
//! `TraceService` on loopback) and its own upstream; the same requests go through
//! both. courier's spans are checked on their own (ids, parent/child shape, the
//! `traceparent` the upstream got, the attributes), then against Envoy's: names,
//! kinds, attribute keys and values (ids, timestamps, addresses and ports aside),
//! parent/child shape, the trace reason packed in `x-request-id`, the upstream's
//! `traceparent` shape, the export calls' `:authority` and `initial_metadata`, and
//! the `tracing.*` stats. Without Envoy (`COURIER_ENVOY`) only courier is checked.
//!
//! Intended differences, named where they are compared:
//! - resource `telemetry.sdk.*`: courier says `courier` / `rust` / its version
//!   (Envoy: `envoy` / `cpp` / its build).
//!
//! Not compared here (README): with retries Envoy sends one CLIENT span per attempt,
//! courier one per request.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test tracing_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "otlp_support.rs"]
mod otlp;

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::net::SocketAddr;
use std::time::Duration;

fn cluster(name: &str, addr: SocketAddr, h2: bool) -> String {
    let h2 = if h2 {
        "  typed_extension_protocol_options:\n    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n      \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n      explicit_http_config: { http2_protocol_options: {} }\n"
    } else {
        ""
    };
    format!(
        "- name: {name}\n  connect_timeout: 2s\n{h2}  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
        addr.port()
    )
}

const VHOSTS: &str = r#"- name: traced
  domains: ["*"]
  routes:
  - match: { prefix: "/direct" }
    direct_response: { status: 202 }
  - name: rt
    match: { prefix: "/rt" }
    route: { cluster: up }
    tracing:
      random_sampling: { numerator: 0 }
      custom_tags:
      - { tag: route-tag, literal: { value: rv } }
      - { tag: literal1, literal: { value: from-route } }
  - name: r1
    match: { prefix: "/" }
    route: { cluster: up }
"#;

fn tracing_hcm(extra: &str) -> String {
    format!(
        r#"generate_request_id: true
internal_address_config:
  cidr_ranges: [{{ address_prefix: 10.0.0.0, prefix_len: 8 }}]
tracing:
  random_sampling: {{ value: 100 }}
  spawn_upstream_span: true
  custom_tags:
  - {{ tag: literal1, literal: {{ value: value1 }} }}
  - {{ tag: req1, request_header: {{ name: x-custom, default_value: "-" }} }}
  provider:
    name: envoy.tracers.opentelemetry
    typed_config:
      "@type": type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig
      grpc_service:
        envoy_grpc: {{ cluster_name: otel, authority: otel-collector.example }}
        initial_metadata:
        - {{ key: authorization, value: Bearer k }}
      service_name: svc
      resource_detectors:
      - name: envoy.tracers.opentelemetry.resource_detectors.static_config
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.tracers.opentelemetry.resource_detectors.v3.StaticConfigResourceDetectorConfig
          attributes: {{ deployment.environment: test }}
{extra}"#
    )
}

fn yaml(hcm: &str, up: SocketAddr, otel: SocketAddr) -> String {
    let clusters = [cluster("up", up, false), cluster("otel", otel, true)].concat();
    format!(
        "node: {{ id: node-1, locality: {{ zone: zone-1 }} }}\n{}  clusters:\n{}\nlayered_runtime:\n  layers:\n  - name: s\n    static_layer:\n      tracing.opentelemetry.min_flush_spans: 1\n",
        bootstrap(&[hcm_listener("traced", hcm, VHOSTS)]),
        indent(&clusters, 2)
    )
}

fn get(p: &Proxy, path: &str, headers: &[(&str, &str)]) -> client::Response {
    // `/post` carries a body (`request_size`); `/h2` goes over h2c.
    let post = path == "/post";
    let protocol = if path == "/h2" || path.starts_with("/grpc") {
        Protocol::H2c
    } else {
        Protocol::Http1
    };
    client::send(
        p.listener("traced").unwrap(),
        protocol,
        &Request {
            method: if post { "POST" } else { "GET" }.into(),
            path: path.into(),
            authority: "example.com".into(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: if post {
                b"payload".to_vec()
            } else {
                Vec::new()
            },
        },
    )
    .unwrap()
}

/// What one request produced: the upstream's view and the spans exported for it.
#[derive(Debug)]
struct Outcome {
    path: &'static str,
    status: u16,
    /// Whether the response carried `x-request-id` (`x-envoy-force-trace` asks for it).
    response_rid: bool,
    upstream: Option<otlp::Seen>,
    /// (resource, span) with the request's `http.url`-matched trace.
    spans: Vec<(std::collections::BTreeMap<String, String>, otlp::Span)>,
}

/// The requests: path, headers.
const REQUESTS: &[(&str, &[(&str, &str)])] = &[
    ("/a?b=c", &[("x-custom", "cv"), ("user-agent", "ua/1")]),
    (
        "/fail",
        &[
            ("x-status", "503"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            ("tracestate", "a=b"),
        ],
    ),
    ("/client", &[("x-client-trace-id", "abc")]),
    // External (stripped), then internal (an RFC 1918 client in x-forwarded-for).
    ("/forced", &[("x-envoy-force-trace", "1")]),
    (
        "/forced-internal",
        &[
            ("x-envoy-force-trace", "1"),
            ("x-forwarded-for", "10.0.0.1"),
        ],
    ),
    (
        "/unsampled-parent",
        &[(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        )],
    ),
    ("/bad-parent", &[("traceparent", "zz")]),
    (
        "/rid-sampled",
        &[("x-request-id", "11111111-2222-9333-8444-555555555555")],
    ),
    // Answered by the route: a span, no upstream one.
    ("/direct", &[]),
    ("/post", &[("x-client-trace-id", "p")]),
    ("/h2", &[]),
    // gRPC: Envoy's `grpc.*` tags from the request and the answer.
    (
        "/grpc.Svc/Call",
        &[
            ("content-type", "application/grpc"),
            ("grpc-timeout", "1S"),
            ("te", "trailers"),
            ("x-grpc-status", "7"),
        ],
    ),
    // The route's `tracing`: its random_sampling (0) replaces the manager's; its tags
    // add to the manager's (and win by name).
    ("/rt-random", &[]),
    ("/rt-client", &[("x-client-trace-id", "c")]),
];

struct Run {
    outcomes: Vec<Outcome>,
    exports: Vec<otlp::Export>,
    stats: Vec<String>,
}

fn run(kind: Kind, bin: &std::path::Path, hcm: &str, outbound: bool) -> Run {
    let (up, up_rx) = otlp::upstream();
    let (otel, otel_rx) = otlp::collector();
    let mut y = yaml(hcm, up, otel);
    if outbound {
        y = y.replace(
            "- name: traced\n    address:",
            "- name: traced\n    traffic_direction: OUTBOUND\n    address:",
        );
        assert!(y.contains("OUTBOUND"), "{y}");
    }
    let p = Proxy::start(kind, bin, &y, &["traced"]).unwrap();
    let mut outcomes = Vec::new();
    for (path, headers) in REQUESTS {
        let r = get(&p, path, headers);
        let upstream = if path.starts_with("/direct") {
            None
        } else {
            up_rx.recv_timeout(Duration::from_secs(5)).ok()
        };
        if let Some(u) = &upstream {
            assert_eq!(u.path, path.split('?').next().unwrap());
        }
        outcomes.push(Outcome {
            path,
            status: r.status,
            response_rid: r.header("x-request-id").is_some(),
            upstream,
            spans: Vec::new(),
        });
    }
    // min_flush_spans is 1: every span is its own export, sent as it ends.
    let exports = otlp::exports(&otel_rx, Duration::from_millis(1000));
    let spans = otlp::spans(&exports);
    // A request's spans: its SERVER span by `http.url`, and that span's children.
    for o in &mut outcomes {
        let url_path = o.path;
        let server: Vec<_> = spans
            .iter()
            .filter(|(_, s)| {
                otlp::attributes(&s.attributes)
                    .get("http.url")
                    .is_some_and(|u| u == &format!("http://example.com{url_path}"))
            })
            .cloned()
            .collect();
        let children: Vec<_> = spans
            .iter()
            .filter(|(_, s)| server.iter().any(|(_, p)| p.span_id == s.parent_span_id))
            .cloned()
            .collect();
        o.spans = server.into_iter().chain(children).collect();
    }
    let stats = client::get(&p.admin, "/stats").unwrap();
    let stats = String::from_utf8_lossy(&stats.body)
        .lines()
        .filter(|l| {
            l.starts_with("http.traced.tracing.") || l.starts_with("tracing.opentelemetry.")
        })
        .map(str::to_string)
        .collect();
    Run {
        outcomes,
        exports,
        stats,
    }
}

/// A span as compared across proxies: name, kind, attributes without volatile
/// values, whether it has a parent and whether that parent is the incoming one.
fn shape(s: &otlp::Span, incoming_parent: Option<&str>) -> String {
    let mut attrs = otlp::attributes(&s.attributes);
    for k in ["guid:x-request-id", "upstream_address"] {
        if let Some(v) = attrs.get_mut(k) {
            *v = "<id>".into();
        }
    }
    if let Some(v) = attrs.get_mut("peer.address")
        && v.contains(':')
    {
        // The upstream's address and port.
        *v = "<upstream>".into();
    }
    let parent = otlp::hex(&s.parent_span_id);
    let parent = match incoming_parent {
        _ if parent.is_empty() => "root".to_string(),
        Some(p) if p == parent => "incoming".to_string(),
        _ => "local".to_string(),
    };
    format!(
        "{:?} kind={} flags={:#x} parent={parent} state={:?} attrs={attrs:?}",
        s.name, s.kind, s.flags, s.trace_state
    )
}

/// Checks courier's own outcomes: ids consistent, the upstream's `traceparent` names
/// the span sent there, parents right. Returns the comparable view.
fn check(run: &Run, spawn: bool) -> Vec<String> {
    let mut view = Vec::new();
    for o in &run.outcomes {
        let incoming = REQUESTS
            .iter()
            .find(|(p, _)| *p == o.path)
            .and_then(|(_, h)| h.iter().find(|(k, _)| *k == "traceparent"))
            .map(|(_, v)| *v);
        let incoming_parent = incoming.and_then(|v| v.split('-').nth(2));
        let none = otlp::Seen::default();
        let up = match &o.upstream {
            Some(up) => up,
            None => {
                assert!(
                    o.path.starts_with("/direct"),
                    "{} reached no upstream",
                    o.path
                );
                &none
            }
        };
        let rid = up.request_id.clone().unwrap_or_default();
        let mut line = format!(
            "{} status={} response-rid={} rid-reason={} traceparent-shape={} tracestate={:?}",
            o.path,
            o.status,
            o.response_rid,
            rid.chars().nth(14).unwrap_or('-'),
            up.traceparent.as_deref().map_or("none".to_string(), |t| {
                let parts: Vec<_> = t.split('-').collect();
                if parts.len() == 4 {
                    format!(
                        "{}-<{}>-<{}>-{}",
                        parts[0],
                        parts[1].len(),
                        parts[2].len(),
                        parts[3]
                    )
                } else {
                    t.to_string()
                }
            }),
            up.tracestate,
        );
        for (res, s) in &o.spans {
            let mut res = res.clone();
            for k in [
                "telemetry.sdk.language",
                "telemetry.sdk.name",
                "telemetry.sdk.version",
            ] {
                // Intended difference: each proxy names its own SDK.
                assert!(res.remove(k).is_some(), "{k} in {res:?}");
            }
            line.push_str(&format!(
                "\n  {} resource={res:?}",
                shape(s, incoming_parent)
            ));
        }
        // Structure: the server span's trace id is the incoming one (if valid) and
        // the upstream's traceparent names the span sent there.
        if let Some((_, server)) = o.spans.iter().find(|(_, s)| s.kind == 2) {
            let trace = otlp::hex(&server.trace_id);
            if let Some(p) = incoming.filter(|p| p.len() == 55) {
                assert_eq!(trace, p.split('-').nth(1).unwrap(), "{}", o.path);
            }
            let Some(tp) = up.traceparent.clone() else {
                view.push(line);
                continue;
            };
            let parts: Vec<_> = tp.split('-').collect();
            assert_eq!(parts[1], trace, "{}", o.path);
            let sent = if spawn {
                let child = o
                    .spans
                    .iter()
                    .find(|(_, s)| s.kind == 3)
                    .expect("client span");
                assert_eq!(child.1.parent_span_id, server.span_id, "{}", o.path);
                assert_eq!(child.1.trace_id, server.trace_id);
                otlp::hex(&child.1.span_id)
            } else {
                otlp::hex(&server.span_id)
            };
            assert_eq!(parts[2], sent, "{}", o.path);
            assert_eq!(parts[3], "01", "{}", o.path);
            assert_eq!(
                rid,
                otlp::attributes(&server.attributes)["guid:x-request-id"]
            );
        }
        view.push(line);
    }
    for e in &run.exports {
        assert_eq!(
            e.metadata.get("authorization").map(String::as_str),
            Some("Bearer k")
        );
        assert_eq!(e.authority, "otel-collector.example");
    }
    view
}

fn compare(hcm: &str, spawn: bool, expect: impl Fn(&Run)) {
    compare_on(hcm, spawn, false, expect);
}

fn compare_on(hcm: &str, spawn: bool, outbound: bool, expect: impl Fn(&Run)) {
    let courier = run(Kind::Courier, &courier_bin(), hcm, outbound);
    let c = check(&courier, spawn);
    println!("courier:\n{}\n{:#?}", c.join("\n"), courier.stats);
    expect(&courier);
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED the Envoy comparison: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let envoy = run(Kind::Envoy, &envoy, hcm, outbound);
    let e = check(&envoy, spawn);
    println!("envoy:\n{}\n{:#?}", e.join("\n"), envoy.stats);
    for (c, e) in c.iter().zip(&e) {
        assert_eq!(c, e);
    }
    assert_eq!(courier.stats, envoy.stats);
}

fn spans_of<'a>(
    run: &'a Run,
    path: &str,
) -> &'a [(std::collections::BTreeMap<String, String>, otlp::Span)] {
    &run.outcomes.iter().find(|o| o.path == path).unwrap().spans
}

#[test]
fn sampled_requests_with_upstream_spans() {
    compare(&tracing_hcm(""), true, |r| {
        assert_eq!(spans_of(r, "/a?b=c").len(), 2);
        assert_eq!(spans_of(r, "/fail").len(), 2);
        // An unsampled parent is followed; an unreadable one means no span.
        assert!(spans_of(r, "/unsampled-parent").is_empty());
        assert!(spans_of(r, "/bad-parent").is_empty());
        let a = &spans_of(r, "/a?b=c")[0];
        assert_eq!(a.1.name, "ingress");
        assert_eq!(a.0["service.name"], "svc");
        assert_eq!(a.0["deployment.environment"], "test");
        let attrs = otlp::attributes(&a.1.attributes);
        assert_eq!(attrs["req1"], "cv");
        assert_eq!(attrs["literal1"], "value1");
        assert_eq!(attrs["user_agent"], "ua/1");
    });
}

#[test]
fn without_upstream_spans() {
    let hcm = tracing_hcm("").replace("spawn_upstream_span: true", "spawn_upstream_span: false");
    compare(&hcm, false, |r| {
        assert_eq!(spans_of(r, "/a?b=c").len(), 1);
    });
}

#[test]
fn random_sampling_zero_and_a_parent_based_sampler() {
    let hcm = tracing_hcm("").replace(
        "random_sampling: { value: 100 }",
        "random_sampling: { value: 0 }",
    );
    compare(&hcm, true, |r| {
        // Not sampled: no span, not even for a sampled parent; the client's
        // x-client-trace-id and a sampled request id are.
        assert!(spans_of(r, "/a?b=c").is_empty());
        assert!(spans_of(r, "/fail").is_empty());
        assert_eq!(spans_of(r, "/client").len(), 2);
        assert_eq!(spans_of(r, "/rid-sampled").len(), 2);
    });
    let sampler = r#"      sampler:
        name: envoy.tracers.opentelemetry.samplers.parent_based
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.tracers.opentelemetry.samplers.v3.ParentBasedSamplerConfig
          wrapped_sampler:
            name: envoy.tracers.opentelemetry.samplers.trace_id_ratio_based
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.tracers.opentelemetry.samplers.v3.TraceIdRatioBasedSamplerConfig
              sampling_percentage: {}
"#;
    compare(&tracing_hcm(sampler), true, |r| {
        // Roots at 0 %: none; a sampled parent is followed.
        assert!(spans_of(r, "/a?b=c").is_empty());
        assert_eq!(spans_of(r, "/fail").len(), 2);
    });
}

#[test]
fn outbound_listeners_name_egress_spans() {
    // Without upstream spans the request's span is the CLIENT one; with them, SERVER.
    let plain = tracing_hcm("").replace("spawn_upstream_span: true", "spawn_upstream_span: false");
    compare_on(&plain, false, true, |r| {
        let s = &spans_of(r, "/a?b=c")[0].1;
        assert_eq!(s.name, "egress example.com");
        assert_eq!(s.kind, 3);
    });
    compare_on(&tracing_hcm(""), true, true, |r| {
        let s = &spans_of(r, "/a?b=c")[0].1;
        assert_eq!(s.name, "egress example.com");
        assert_eq!(s.kind, 2);
    });
}

#[test]
fn a_collector_that_is_down_loses_spans_not_requests() {
    let (up, up_rx) = otlp::upstream();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let y = yaml(&tracing_hcm(""), up, closed);
    let p = Proxy::start(Kind::Courier, &courier_bin(), &y, &["traced"]).unwrap();
    for _ in 0..5 {
        assert_eq!(get(&p, "/a", &[]).status, 200);
        assert!(up_rx.recv_timeout(Duration::from_secs(5)).is_ok());
    }
    let stats = client::get(&p.admin, "/stats").unwrap();
    let text = String::from_utf8_lossy(&stats.body).into_owned();
    // Handed to the exporter (as Envoy counts them), then lost with the call.
    assert!(
        text.contains("tracing.opentelemetry.spans_sent: 10"),
        "{text}"
    );
    assert!(
        text.contains("http.traced.tracing.random_sampling: 5"),
        "{text}"
    );
}

#[test]
fn the_timer_flushes_what_min_flush_spans_has_not() {
    let (up, _up_rx) = otlp::upstream();
    let (otel, otel_rx) = otlp::collector();
    let y = yaml(&tracing_hcm(""), up, otel).replace(
        "tracing.opentelemetry.min_flush_spans: 1\n",
        "tracing.opentelemetry.min_flush_spans: 100\n      tracing.opentelemetry.flush_interval_ms: 200\n",
    );
    let p = Proxy::start(Kind::Courier, &courier_bin(), &y, &["traced"]).unwrap();
    assert_eq!(get(&p, "/a", &[]).status, 200);
    // Both spans of the request arrive together, in one export, by the timer.
    let first = otel_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("an export");
    assert_eq!(otlp::spans(std::slice::from_ref(&first)).len(), 2);
    let stats = client::get(&p.admin, "/stats").unwrap();
    let text = String::from_utf8_lossy(&stats.body).into_owned();
    let flushed: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("tracing.opentelemetry.timer_flushed: "))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(flushed >= 1, "{text}");
}

#[test]
fn tracing_without_a_provider_is_the_null_tracer() {
    // Decisions and x-request-id marks, no span and no traceparent.
    compare(
        "generate_request_id: true\ntracing: { random_sampling: { value: 100 } }\n",
        false,
        |r| {
            assert!(r.exports.is_empty());
            let up = r.outcomes[0].upstream.as_ref().unwrap();
            assert!(up.traceparent.is_none());
            assert_eq!(
                up.request_id.as_deref().and_then(|id| id.get(14..15)),
                Some("9")
            );
        },
    );
}
