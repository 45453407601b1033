use super::super::test_util::{errors, filter, per_route};
use super::super::{HttpFilterConfig, PerRouteFilterConfig};
use super::*;

const SKIP_ALL: &str = "{ request_header_mode: SKIP, response_header_mode: SKIP, \
                        request_trailer_mode: SKIP, response_trailer_mode: SKIP }";

fn ext_proc(body: &str) -> String {
    format!(
        r#"
name: envoy.filters.http.ext_proc/x
disabled: true
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
{body}
"#
    )
}

#[test]
fn envoy_gateway_config_all_skip() {
    let f = filter(&ext_proc(&format!(
        r#"  grpc_service:
    envoy_grpc: {{ authority: "grpc-backend.envoy-gateway:8000", cluster_name: not-loaded-yet }}
    timeout: 10s
    retry_policy:
      num_retries: 2
      retry_back_off: {{ base_interval: 0.2s, max_interval: 3s }}
      retry_on: "5xx,deadline-exceeded,internal,unavailable"
  processing_mode: {SKIP_ALL}
  stat_prefix: eg
  failure_mode_allow: true
  allow_mode_override: true"#
    )))
    .unwrap();
    assert!(f.disabled);
    let HttpFilterConfig::ExtProc(c) = f.config else {
        panic!("{f:?}")
    };
    assert_eq!(c.message_timeout, DEFAULT_MESSAGE_TIMEOUT);
    assert_eq!(c.stat_prefix, "eg");
    assert!(c.failure_mode_allow && c.allow_mode_override);
    assert!(c.grpc_service.retry_policy.is_some());
}

#[test]
fn trailer_modes_default_to_skip() {
    let f = filter(&ext_proc(
        r#"  grpc_service: { envoy_grpc: { cluster_name: proc } }
  message_timeout: 2s
  processing_mode: { request_header_mode: SKIP, response_header_mode: SKIP }"#,
    ))
    .unwrap();
    let HttpFilterConfig::ExtProc(c) = f.config else {
        panic!("{f:?}")
    };
    assert_eq!(c.message_timeout, Duration::from_secs(2));
}

#[test]
fn modes_that_call_the_processor_are_refused_with_their_paths() {
    let mut e = errors(filter(&ext_proc(
        r#"  grpc_service: { envoy_grpc: { cluster_name: proc } }
  processing_mode:
    request_header_mode: SEND
    response_header_mode: DEFAULT
    request_body_mode: BUFFERED
    response_body_mode: STREAMED
    request_trailer_mode: SEND
    response_trailer_mode: SKIP"#,
    )));
    e.sort();
    assert_eq!(
        e,
        [
            "typed_config.processing_mode.request_body_mode: BUFFERED is not supported (only NONE: courier never calls the processor)",
            "typed_config.processing_mode.request_header_mode: SEND is not supported (only SKIP: courier never calls the processor)",
            "typed_config.processing_mode.request_trailer_mode: SEND is not supported (only SKIP: courier never calls the processor)",
            "typed_config.processing_mode.response_body_mode: STREAMED is not supported (only NONE: courier never calls the processor)",
            "typed_config.processing_mode.response_header_mode: DEFAULT is not supported (only SKIP: courier never calls the processor)",
        ]
    );
    // Without processing_mode both header modes are SEND.
    let e = errors(filter(&ext_proc(
        "  grpc_service: { envoy_grpc: { cluster_name: proc } }",
    )));
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("typed_config.processing_mode: is required"),
        "{e:?}"
    );
}

#[test]
fn unimplemented_fields_and_envoys_own_errors() {
    let mut e = errors(filter(&ext_proc(&format!(
        r#"  grpc_service: {{ envoy_grpc: {{ cluster_name: proc }} }}
  processing_mode: {SKIP_ALL}
  observability_mode: true
  request_attributes: [request.path]
  mutation_rules: {{ disallow_all: true }}
  max_message_timeout: 1s
  message_timeout: 3601s"#
    ))));
    e.sort();
    assert_eq!(
        e,
        [
            "typed_config.max_message_timeout: max_message_timeout is not supported",
            "typed_config.message_timeout: value must be inside range [0s, 1h0m0s]",
            "typed_config.mutation_rules: mutation_rules is not supported",
            "typed_config.observability_mode: observability_mode is not supported",
            "typed_config.request_attributes: request_attributes is not supported",
        ]
    );
    let e = errors(filter(&ext_proc(&format!("  processing_mode: {SKIP_ALL}"))));
    assert_eq!(
        e,
        ["typed_config: One and only one of grpc_service or http_service must be configured"]
    );
}

const PER_ROUTE: &str =
    "\"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute";

#[test]
fn per_route_disabled_and_overrides() {
    let r = per_route("x", &format!("{PER_ROUTE}\ndisabled: true")).unwrap();
    assert!(matches!(
        r.config.as_ref(),
        Some(PerRouteFilterConfig::ExtProc(p)) if matches!(**p, ExtProcPerRoute::Disabled)
    ));
    let r = per_route(
        "x",
        &format!(
            "{PER_ROUTE}\noverrides:\n  processing_mode: {SKIP_ALL}\n  failure_mode_allow: true\n  grpc_service: {{ envoy_grpc: {{ cluster_name: other }} }}"
        ),
    )
    .unwrap();
    let Some(PerRouteFilterConfig::ExtProc(p)) = r.config else {
        panic!("{r:?}")
    };
    let ExtProcPerRoute::Overrides(o) = *p else {
        panic!("{p:?}")
    };
    assert_eq!(o.failure_mode_allow, Some(true));
    assert!(o.grpc_service.is_some());
    let mut e = errors(per_route(
        "x",
        &format!(
            "{PER_ROUTE}\noverrides:\n  processing_mode: {{ request_header_mode: SEND }}\n  request_attributes: [a]"
        ),
    ));
    e.sort();
    assert_eq!(
        e,
        [
            "overrides.processing_mode.request_header_mode: SEND is not supported (only SKIP: courier never calls the processor)",
            "overrides.processing_mode.response_header_mode: DEFAULT is not supported (only SKIP: courier never calls the processor)",
            "overrides.request_attributes: request_attributes is not supported",
        ]
    );
    let e = errors(per_route("x", &format!("{PER_ROUTE}\ndisabled: false")));
    assert_eq!(e, ["disabled: value must equal true"]);
}
