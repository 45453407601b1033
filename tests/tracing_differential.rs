//! HCM `tracing` with the `envoy.tracers.opentelemetry` provider, beside real Envoy.
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
  - name: r1
    match: { prefix: "/" }
    route: { cluster: up }
"#;

fn tracing_hcm(extra: &str) -> String {
    format!(
        r#"generate_request_id: true
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
        "{}  clusters:\n{}\nlayered_runtime:\n  layers:\n  - name: s\n    static_layer:\n      tracing.opentelemetry.min_flush_spans: 1\n",
        bootstrap(&[hcm_listener("traced", hcm, VHOSTS)]),
        indent(&clusters, 2)
    )
}

fn get(p: &Proxy, path: &str, headers: &[(&str, &str)]) -> client::Response {
    client::send(
        p.listener("traced").unwrap(),
        Protocol::Http1,
        &Request {
            method: "GET".into(),
            path: path.into(),
            authority: "example.com".into(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: Vec::new(),
        },
    )
    .unwrap()
}

#[test]
fn probe_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy");
        return;
    };
    let _ = courier_bin;
    let (up, up_rx) = otlp::upstream();
    let (otel, otel_rx) = otlp::collector();
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
    let y = yaml(&tracing_hcm(""), up, otel);
    let p = Proxy::start(Kind::Envoy, &envoy, &y, &["traced"]).unwrap();
    get(
        &p,
        "/r100-parent-unsampled",
        &[(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        )],
    );
    drop(p);
    let y = yaml(&tracing_hcm(sampler), up, otel)
        .replace("value: 100 }", "value: 0 }")
        .replace(
            "sampling_percentage: {}",
            "sampling_percentage: { numerator: 100 }",
        );
    let p = Proxy::start(Kind::Envoy, &envoy, &y, &["traced"]).unwrap();
    get(&p, "/s-none", &[]);
    get(
        &p,
        "/s-parent-sampled",
        &[(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )],
    );
    get(
        &p,
        "/s-parent-unsampled",
        &[(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        )],
    );
    get(
        &p,
        "/s-parent-sampled-rid-no",
        &[
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            ("x-request-id", "11111111-2222-4333-8444-555555555555"),
        ],
    );
    for s in otlp::seen(&up_rx, Duration::from_millis(300)) {
        println!("upstream {s:?}");
    }
    let ex = otlp::exports(&otel_rx, Duration::from_millis(1500));
    for e in &ex {
        println!("export authority={} metadata={:?}", e.authority, e.metadata);
    }
    for (res, s) in otlp::spans(&ex) {
        println!(
            "span name={:?} kind={} trace={} id={} parent={} state={:?} flags={} res={res:?}\n  attrs={:?}",
            s.name,
            s.kind,
            otlp::hex(&s.trace_id),
            otlp::hex(&s.span_id),
            otlp::hex(&s.parent_span_id),
            s.trace_state,
            s.flags,
            otlp::attributes(&s.attributes)
        );
    }
    let stats = client::get(&p.admin, "/stats").unwrap();
    for l in String::from_utf8_lossy(&stats.body).lines() {
        if l.contains("tracing") {
            println!("{l}");
        }
    }
}
