use super::*;
use crate::listener::test_util::{errors, hcm, load};
use serde_json::{Value, json};

const HCM: &str = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config";
const OTEL: &str = "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig";

/// A bootstrap with a connection manager whose `tracing` is `tracing`, and the
/// collector cluster `otel` (HTTP/2).
fn with_tracing(tracing: Value) -> Value {
    let mut b = hcm(json!({ "tracing": tracing }));
    b["static_resources"]["clusters"] = json!([{
        "name": "otel",
        "connect_timeout": "1s",
        "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}}}},
        "load_assignment": {"cluster_name": "otel", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 4317}}}}]}]},
    }]);
    b
}

fn otel(config: Value) -> Value {
    let mut c = json!({"@type": OTEL, "grpc_service": {"envoy_grpc": {"cluster_name": "otel"}}});
    crate::listener::test_util::merge(&mut c, config);
    json!({"name": "envoy.tracers.opentelemetry", "typed_config": c})
}

fn otel_of(p: Option<Provider>) -> Arc<OpenTelemetry> {
    match p {
        Some(Provider::OpenTelemetry(o)) => o,
        other => panic!("an OpenTelemetry provider: {other:?}"),
    }
}

fn zipkin(config: Value) -> Value {
    let mut c = json!({"@type": "type.googleapis.com/envoy.config.trace.v3.ZipkinConfig",
        "collector_cluster": "otel", "collector_endpoint": "/api/v2/spans",
        "collector_endpoint_version": "HTTP_JSON"});
    crate::listener::test_util::merge(&mut c, config);
    // Envoy Gateway's (misspelt) name: the factory is found by the config's type.
    json!({"name": "envoy.traces.zipkin", "typed_config": c})
}

fn datadog(config: Value) -> Value {
    let mut c = json!({"@type": "type.googleapis.com/envoy.config.trace.v3.DatadogConfig",
        "collector_cluster": "otel"});
    crate::listener::test_util::merge(&mut c, config);
    json!({"name": "envoy.tracers.datadog", "typed_config": c})
}

#[test]
fn datadog_provider_with_defaults() {
    let t = tracing_of(&with_tracing(json!({"provider": datadog(json!({}))})));
    let Some(Provider::Datadog(d)) = t.provider else {
        panic!("a Datadog provider");
    };
    assert_eq!(
        *d,
        Datadog {
            cluster: "otel".into(),
            hostname: "otel".into(),
            service: "envoy".into(),
        }
    );
    let t = tracing_of(&with_tracing(json!({"provider": datadog(json!({
        "collector_hostname": "agent.example", "service_name": "edge"}))})));
    let Some(Provider::Datadog(d)) = t.provider else {
        panic!("a Datadog provider");
    };
    assert_eq!(
        (d.hostname.as_str(), d.service.as_str()),
        ("agent.example", "edge")
    );
}

#[test]
fn zipkin_provider_with_defaults_and_the_bootstrap_default() {
    let t = tracing_of(&with_tracing(json!({"provider": zipkin(json!({}))})));
    let Some(Provider::Zipkin(z)) = t.provider else {
        panic!("a Zipkin provider");
    };
    assert_eq!(
        *z,
        Zipkin {
            cluster: "otel".into(),
            endpoint: "/api/v2/spans".into(),
            hostname: "otel".into(),
            trace_id_128bit: false,
            shared_span_context: true,
        }
    );
    let t = tracing_of(&with_tracing(json!({"provider": zipkin(json!({
        "collector_hostname": "zipkin.example", "trace_id_128bit": true, "shared_span_context": false}))})));
    let Some(Provider::Zipkin(z)) = t.provider else {
        panic!("a Zipkin provider");
    };
    assert_eq!(z.hostname, "zipkin.example");
    assert!(z.trace_id_128bit && !z.shared_span_context);
    // The bootstrap's `tracing.http` is kept for managers without a provider.
    let mut b = with_tracing(json!({}));
    b["tracing"] = json!({"http": zipkin(json!({}))});
    let bs = load(&b).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(bs.tracing, Some(Provider::Zipkin(_))));
    assert!(
        bs.listeners[0].filter_chains[0]
            .hcm()
            .unwrap()
            .tracing
            .as_ref()
            .unwrap()
            .provider
            .is_none()
    );
    b["tracing"] = json!({"http": zipkin(json!({"collector_endpoint_version": "GRPC"}))});
    assert_eq!(
        errors(&b),
        vec!["tracing.http.typed_config.collector_endpoint_version: collector_endpoint_version GRPC (HTTP_JSON is) is not supported".to_string()]
    );
}

fn tracing_of(v: &Value) -> Tracing {
    let b = load(v).unwrap_or_else(|e| panic!("{e}"));
    b.listeners[0].filter_chains[0]
        .hcm()
        .expect("a connection manager")
        .tracing
        .clone()
        .expect("tracing")
}

#[test]
fn envoy_gateway_form_with_percent_rounding_and_defaults() {
    let path = std::env::var("PATH").expect("PATH is set");
    let t = tracing_of(&with_tracing(json!({
        "client_sampling": {"value": 20},
        "random_sampling": {"value": 90.55},
        "overall_sampling": {"value": 30},
        "spawn_upstream_span": true,
        "custom_tags": [
            {"tag": "env1", "environment": {"name": "PATH", "default_value": "-"}},
            {"tag": "env2", "environment": {"name": "COURIER_TRACING_TEST_UNSET", "default_value": "-"}},
            {"tag": "literal1", "literal": {"value": "value1"}},
            {"tag": "req1", "request_header": {"name": "X-Request-Id", "default_value": "-"}},
        ],
        "provider": otel(json!({
            "grpc_service": {"envoy_grpc": {"cluster_name": "otel", "authority": "collector.example"},
                "initial_metadata": [{"key": "Authorization", "value": "Bearer k"}]},
            "service_name": "svc",
            "resource_detectors": [{
                "name": "envoy.tracers.opentelemetry.resource_detectors.static_config",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.tracers.opentelemetry.resource_detectors.v3.StaticConfigResourceDetectorConfig",
                    "attributes": {"service.version": "v1", "deployment.environment": "test"}}}],
            "sampler": {
                "name": "envoy.tracers.opentelemetry.samplers.parent_based",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.tracers.opentelemetry.samplers.v3.ParentBasedSamplerConfig",
                    "wrapped_sampler": {
                        "name": "envoy.tracers.opentelemetry.samplers.trace_id_ratio_based",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.tracers.opentelemetry.samplers.v3.TraceIdRatioBasedSamplerConfig",
                            "sampling_percentage": {"numerator": 25}}}}},
        })),
    })));
    assert_eq!(
        t.client_sampling,
        Fraction {
            numerator: 20,
            denominator: 100
        }
    );
    assert_eq!(
        t.random_sampling,
        Fraction {
            numerator: 9055,
            denominator: 10_000
        }
    );
    assert_eq!(
        t.overall_sampling,
        Fraction {
            numerator: 3000,
            denominator: 10_000
        }
    );
    assert!(t.spawn_upstream_span);
    assert_eq!(t.max_path_tag_length, 256);
    let lit = |s: &str| TagValue::Literal(s.into());
    let values: Vec<_> = t
        .custom_tags
        .iter()
        .map(|c| (c.tag.as_str(), c.value.clone()))
        .collect();
    assert_eq!(
        values,
        [
            ("env1", lit(&path)),
            ("env2", lit("-")),
            ("literal1", lit("value1")),
            (
                "req1",
                TagValue::RequestHeader {
                    name: "x-request-id".into(),
                    default: "-".into()
                }
            ),
        ]
    );
    let p = otel_of(t.provider);
    assert_eq!(p.cluster, "otel");
    assert_eq!(p.authority, "collector.example");
    assert_eq!(
        p.initial_metadata,
        [("authorization".to_string(), "Bearer k".to_string())]
    );
    assert_eq!(
        p.resource,
        [
            ("service.name".to_string(), "svc".to_string()),
            ("deployment.environment".to_string(), "test".to_string()),
            ("service.version".to_string(), "v1".to_string()),
        ]
    );
    assert_eq!(
        p.sampler,
        Some(Sampler::ParentBased(Box::new(Sampler::TraceIdRatio(
            Fraction {
                numerator: 25,
                denominator: 100
            }
        ))))
    );
}

#[test]
fn defaults_no_provider_and_detector_overriding_service_name() {
    let t = tracing_of(&with_tracing(json!({})));
    assert_eq!(t.client_sampling, Fraction::ALL);
    assert_eq!(
        t.random_sampling,
        Fraction {
            numerator: 10_000,
            denominator: 10_000
        }
    );
    assert_eq!(
        t.overall_sampling,
        Fraction {
            numerator: 10_000,
            denominator: 10_000
        }
    );
    assert!(!t.spawn_upstream_span);
    assert!(t.provider.is_none());
    let t = tracing_of(&with_tracing(json!({
        "max_path_tag_length": 10,
        "provider": otel(json!({"resource_detectors": [{
            "name": "x",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.tracers.opentelemetry.resource_detectors.v3.StaticConfigResourceDetectorConfig",
                "attributes": {"service.name": "detected"}}}]})),
    })));
    assert_eq!(t.max_path_tag_length, 10);
    let p = otel_of(t.provider);
    assert_eq!(
        p.resource,
        [("service.name".to_string(), "detected".to_string())]
    );
    assert_eq!(p.authority, "otel");
    let t = tracing_of(&with_tracing(json!({"provider": otel(json!({}))})));
    assert_eq!(
        otel_of(t.provider).resource,
        [("service.name".to_string(), DEFAULT_SERVICE_NAME.to_string())]
    );
}

#[test]
fn route_tracing_overrides_with_full_defaults() {
    let mut b = with_tracing(json!({}));
    b["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]["route_config"] = json!({
        "name": "r",
        "virtual_hosts": [{"name": "v", "domains": ["*"], "routes": [{
            "match": {"prefix": "/"},
            "direct_response": {"status": 200},
            "tracing": {"random_sampling": {"numerator": 1}, "custom_tags": [{"tag": "a", "literal": {"value": "b"}}]},
        }]}],
    });
    let bs = load(&b).unwrap_or_else(|e| panic!("{e}"));
    let hcm = bs.listeners[0].filter_chains[0].hcm().unwrap();
    let crate::listener::hcm::RouteSpecifier::Inline(rc) = &hcm.route_specifier else {
        panic!("inline routes")
    };
    let rt = rc.virtual_hosts[0].routes[0]
        .tracing
        .clone()
        .expect("route tracing");
    assert_eq!(
        rt.random_sampling,
        Fraction {
            numerator: 1,
            denominator: 100
        }
    );
    assert_eq!(rt.client_sampling, Fraction::ALL);
    assert_eq!(rt.overall_sampling, Fraction::ALL);
    assert_eq!(rt.custom_tags.len(), 1);
}

#[test]
fn refusals_name_their_paths() {
    let t = format!("{HCM}.tracing");
    let cases: Vec<(Value, String)> = vec![
        (
            json!({"verbose": true}),
            format!("{t}.verbose: verbose is not supported"),
        ),
        (
            json!({"random_sampling": {"value": 101}}),
            format!("{t}.random_sampling.value: 101 is out of range 0..=100"),
        ),
        (
            json!({"operation": "%REQ(:path)%"}),
            format!("{t}.operation: operation is not supported"),
        ),
        (
            json!({"custom_tags": [{"tag": "m", "metadata": {"kind": {"request": {}}, "metadata_key": {"key": "k", "path": [{"key": "a"}]}}}]}),
            format!("{t}.custom_tags[0].metadata: metadata is not supported"),
        ),
        (
            json!({"provider": {"name": "envoy.tracers.other", "typed_config": {"@type": "type.googleapis.com/google.protobuf.Struct", "value": {}}}}),
            format!(
                "{t}.provider.name: tracer envoy.tracers.other (only envoy.tracers.opentelemetry, envoy.tracers.zipkin and envoy.tracers.datadog are implemented) is not supported"
            ),
        ),
        (
            json!({"provider": datadog(json!({"remote_config": {"polling_interval": "5s"}}))}),
            format!("{t}.provider.typed_config.remote_config: remote_config is not supported"),
        ),
        (
            json!({"provider": datadog(json!({"collector_cluster": ""}))}),
            format!("{t}.provider.typed_config.collector_cluster: must not be empty"),
        ),
        (
            json!({"provider": datadog(json!({"collector_cluster": "nope"}))}),
            format!("{t}.provider.typed_config.collector_cluster: unknown cluster 'nope'"),
        ),
        (
            json!({"provider": zipkin(json!({"collector_endpoint_version": "HTTP_PROTO"}))}),
            format!(
                "{t}.provider.typed_config.collector_endpoint_version: collector_endpoint_version HTTP_PROTO (HTTP_JSON is) is not supported"
            ),
        ),
        (
            json!({"provider": zipkin(json!({"split_spans_for_request": true}))}),
            format!(
                "{t}.provider.typed_config.split_spans_for_request: split_spans_for_request is not supported"
            ),
        ),
        (
            json!({"provider": zipkin(json!({"collector_endpoint": ""}))}),
            format!(
                "{t}.provider.typed_config.collector_endpoint: must not be empty when collector_cluster is set"
            ),
        ),
        (
            json!({"provider": zipkin(json!({"collector_endpoint_version": "DEPRECATED_AND_UNAVAILABLE_DO_NOT_USE"}))}),
            format!(
                "{t}.provider.typed_config.collector_endpoint_version: HTTP_JSON_V1 has been deprecated; use a non-default collector_endpoint_version"
            ),
        ),
        (
            json!({"provider": otel(json!({"http_service": {"http_uri": {"uri": "http://x/v1/traces", "cluster": "otel", "timeout": "1s"}}}))}),
            format!("{t}.provider.typed_config.http_service: http_service is not supported"),
        ),
        (
            json!({"provider": otel(json!({"grpc_service": {"envoy_grpc": {"cluster_name": "otel"}, "timeout": "1s"}}))}),
            format!(
                "{t}.provider.typed_config.grpc_service.timeout: timeout on the OpenTelemetry exporter is not supported"
            ),
        ),
        (
            json!({"provider": {"name": "envoy.tracers.opentelemetry", "typed_config": {"@type": OTEL, "grpc_service": {"google_grpc": {"target_uri": "x:1", "stat_prefix": "s"}}}}}),
            format!(
                "{t}.provider.typed_config.grpc_service.google_grpc: google_grpc for the OpenTelemetry exporter (envoy_grpc is) is not supported"
            ),
        ),
        (
            json!({"provider": otel(json!({"set_telemetry_sdk_resource_attributes": true}))}),
            format!(
                "{t}.provider.typed_config.set_telemetry_sdk_resource_attributes: set_telemetry_sdk_resource_attributes is not supported"
            ),
        ),
        (
            json!({"provider": otel(json!({"sampler": {"name": "envoy.tracers.opentelemetry.samplers.always_on", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.tracers.opentelemetry.samplers.v3.AlwaysOnSamplerConfig"}}}))}),
            format!(
                "{t}.provider.typed_config.sampler.typed_config: sampler envoy.tracers.opentelemetry.samplers.always_on (type.googleapis.com/envoy.extensions.tracers.opentelemetry.samplers.v3.AlwaysOnSamplerConfig; only envoy.tracers.opentelemetry.samplers.parent_based and envoy.tracers.opentelemetry.samplers.trace_id_ratio_based are implemented) is not supported"
            ),
        ),
        (
            json!({"provider": otel(json!({"resource_detectors": [{"name": "envoy.tracers.opentelemetry.resource_detectors.environment", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.tracers.opentelemetry.resource_detectors.v3.EnvironmentResourceDetectorConfig"}}]}))}),
            format!(
                "{t}.provider.typed_config.resource_detectors[0].typed_config: resource detector envoy.tracers.opentelemetry.resource_detectors.environment (type.googleapis.com/envoy.extensions.tracers.opentelemetry.resource_detectors.v3.EnvironmentResourceDetectorConfig; only envoy.tracers.opentelemetry.resource_detectors.static_config is implemented) is not supported"
            ),
        ),
        (
            json!({"provider": otel(json!({"grpc_service": {"envoy_grpc": {"cluster_name": "nope"}}}))}),
            format!(
                "{t}.provider.typed_config.grpc_service.envoy_grpc.cluster_name: unknown cluster 'nope'"
            ),
        ),
    ];
    for (tracing, want) in cases {
        let e = errors(&with_tracing(tracing.clone()));
        assert!(e.contains(&want), "{tracing}: {e:#?}\nwant {want}");
    }
}
