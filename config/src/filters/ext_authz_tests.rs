use super::*;
use crate::config_source::GrpcTarget;
use crate::filters::http_uri::CallRetryPolicy;
use crate::filters::test_util::{errors, filter, per_route};
use crate::filters::{HttpFilterConfig, PerRouteFilterConfig};

fn authz(yaml_body: &str) -> Result<ExtAuthz, crate::ConfigError> {
    let body: String = yaml_body.lines().map(|l| format!("  {l}\n")).collect();
    let yaml = format!(
        "name: envoy.filters.http.ext_authz\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz\n{body}"
    );
    filter(&yaml).map(|f| match f.config {
        HttpFilterConfig::ExtAuthz(e) => *e,
        other => panic!("not ext_authz: {other:?}"),
    })
}

#[test]
fn grpc_defaults() {
    let e = authz("grpc_service: {envoy_grpc: {cluster_name: authz}}").unwrap();
    let AuthzService::Grpc { service, timeout } = &e.service else {
        panic!("{e:?}")
    };
    assert!(
        matches!(&service.target, GrpcTarget::EnvoyGrpc { cluster_name, .. } if cluster_name == "authz")
    );
    assert_eq!(*timeout, Some(Duration::from_millis(200)));
    assert_eq!(e.status_on_error, 403);
    assert!(!e.failure_mode_allow);
    assert!(e.with_request_body.is_none());
    assert!(e.allowed_headers.is_none());
}

#[test]
fn regression_config_of_the_corpus() {
    let e = authz(
        r#"
failure_mode_allow: false
transport_api_version: V3
status_on_error: {code: 503}
grpc_service:
  envoy_grpc: {cluster_name: ext_authz-service}
  timeout: 0.5s
with_request_body: {max_request_bytes: 10240, allow_partial_message: true, pack_as_bytes: false}
"#,
    )
    .unwrap();
    assert_eq!(e.status_on_error, 503);
    assert!(
        matches!(e.service, AuthzService::Grpc { timeout: Some(t), .. } if t == Duration::from_millis(500))
    );
    assert_eq!(
        e.with_request_body,
        Some(BufferSettings {
            max_request_bytes: 10240,
            allow_partial_message: true,
            pack_as_bytes: false
        })
    );
}

#[test]
fn http_service_full() {
    let e = authz(
        r#"
failure_mode_allow: true
failure_mode_allow_header_add: true
clear_route_cache: true
metadata_context_namespaces: [envoy.filters.http.jwt_authn]
include_peer_certificate: true
stat_prefix: front
allowed_headers: {patterns: [{exact: x-user}, {prefix: x-b3-}]}
http_service:
  server_uri: {uri: "http://authz:9000/check", cluster: authz, timeout: 0.25s}
  path_prefix: /auth
  authorization_request:
    headers_to_add: [{key: X-From, value: courier}]
  authorization_response:
    allowed_upstream_headers: {patterns: [{exact: x-current-user}]}
    allowed_client_headers: {patterns: [{exact: www-authenticate}]}
"#,
    )
    .unwrap();
    let AuthzService::Http(h) = &e.service else {
        panic!("{e:?}")
    };
    assert_eq!(h.server_uri.cluster, "authz");
    assert_eq!(h.server_uri.host, "authz:9000");
    assert_eq!(h.server_uri.path, "/check");
    assert_eq!(h.server_uri.timeout, Some(Duration::from_millis(250)));
    assert_eq!(h.path_prefix, "/auth");
    assert_eq!(
        h.authorization_request.headers_to_add,
        [("x-from".to_string(), "courier".to_string())]
    );
    let up = h
        .authorization_response
        .allowed_upstream_headers
        .as_ref()
        .unwrap();
    assert!(up[0].matches("x-current-user"));
    assert!(
        h.authorization_response
            .allowed_client_headers_on_success
            .is_none()
    );
    assert!(e.failure_mode_allow && e.failure_mode_allow_header_add && e.clear_route_cache);
    assert_eq!(
        e.metadata_context_namespaces,
        ["envoy.filters.http.jwt_authn"]
    );
    assert_eq!(e.allowed_headers.as_ref().map(Vec::len), Some(2));
}

#[test]
fn errors_name_their_paths() {
    let e = errors(authz(
        r#"
with_request_body: {max_request_bytes: 0}
status_on_error: {code: 0}
allowed_headers: {patterns: []}
http_service:
  server_uri: {uri: "", cluster: authz}
"#,
    ));
    assert_eq!(
        e,
        [
            "typed_config.http_service.server_uri.uri: must not be empty",
            "typed_config.http_service.server_uri.timeout: is required",
            "typed_config.with_request_body.max_request_bytes: must be greater than 0",
            "typed_config.status_on_error.code: 0 is not an HTTP status code known to Envoy",
            "typed_config.allowed_headers.patterns: at least one pattern is required",
        ]
    );
    assert_eq!(
        errors(authz("failure_mode_allow: true")),
        ["typed_config: one of grpc_service or http_service is required"]
    );
}

#[test]
fn runtime_switches_take_their_default_and_refuse_runtime_keys() {
    let e = errors(authz(
        r#"
grpc_service: {envoy_grpc: {cluster_name: authz}}
filter_enabled: {default_value: {numerator: 50}, runtime_key: k}
deny_at_disable: {default_value: true, runtime_key: d}
"#,
    ));
    assert_eq!(
        e,
        [
            "typed_config.filter_enabled.runtime_key: runtime_key is not supported",
            "typed_config.deny_at_disable.runtime_key: runtime_key is not supported",
        ]
    );
}

#[test]
fn per_route_forms() {
    let name = "envoy.filters.http.ext_authz";
    let r = per_route(
        name,
        r#"
"@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute
check_settings:
  context_extensions: {virtual_host: local}
  disable_request_body_buffering: true
"#,
    )
    .unwrap();
    let Some(PerRouteFilterConfig::ExtAuthz(ExtAuthzPerRoute::CheckSettings(c))) = r.config else {
        panic!("{r:?}")
    };
    assert_eq!(
        c.context_extensions.get("virtual_host").map(String::as_str),
        Some("local")
    );
    assert!(c.disable_request_body_buffering);
    let wrapped = per_route(
        name,
        r#"
"@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
disabled: true
"#,
    )
    .unwrap();
    assert!(wrapped.disabled && wrapped.config.is_none());
    let e = errors(per_route(
        name,
        "\"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute\n",
    ));
    assert_eq!(e, ["one of disabled or check_settings is required"]);
    let e = errors(per_route(
        name,
        "\"@type\": type.googleapis.com/envoy.config.route.v3.FilterConfig\nis_optional: true\n",
    ));
    assert_eq!(e, ["config: is required unless disabled is true"]);
    // The empty Any enables the filter with its HCM config (Envoy's "enabled explicitly").
    let enabled = per_route(
        name,
        "\"@type\": type.googleapis.com/envoy.config.route.v3.FilterConfig\nconfig: {}\n",
    )
    .unwrap();
    assert!(!enabled.disabled && enabled.config.is_none());
}

#[test]
fn runtime_switches_translate() {
    let e = authz(
        r#"
grpc_service: {envoy_grpc: {cluster_name: authz}}
filter_enabled: {default_value: {numerator: 25}}
filter_enabled_metadata: {filter: f, path: [{key: k}], value: {string_match: {exact: v}}}
deny_at_disable: {default_value: true}
"#,
    )
    .unwrap();
    assert_eq!(e.filter_enabled, Some(0.25));
    assert!(e.deny_at_disable);
    assert_eq!(e.filter_enabled_metadata.unwrap().filter, "f");
}

/// The Envoy Gateway corpus case `ext-auth-retry`: a retry policy on the HTTP service and
/// on the gRPC service.
#[test]
fn retry_policies_of_both_services() {
    use crate::route::{RetryBackOff, RetryOn};
    let expected = CallRetryPolicy {
        retry_on: RetryOn::FIVE_XX
            | RetryOn::GRPC_DEADLINE_EXCEEDED
            | RetryOn::GRPC_INTERNAL
            | RetryOn::GRPC_UNAVAILABLE,
        num_retries: 2,
        back_off: RetryBackOff {
            base_interval: Duration::from_millis(200),
            max_interval: Duration::from_secs(3),
        },
    };
    let rp = r#"retryPolicy: {numRetries: 2, retryBackOff: {baseInterval: 0.200s, maxInterval: 3s}, retryOn: "5xx,deadline-exceeded,internal,unavailable"}"#;
    let e = authz(&format!(
        "httpService:\n  serverUri: {{uri: \"http://authz/auth\", cluster: authz, timeout: 10s}}\n  pathPrefix: /auth\n  {rp}"
    ))
    .unwrap();
    let AuthzService::Http(h) = &e.service else {
        panic!("{e:?}")
    };
    assert_eq!(h.retry_policy, Some(expected));
    assert_eq!(expected.per_try_timeout(), Duration::from_secs(3));
    let e = authz(&format!(
        "grpcService:\n  envoyGrpc: {{clusterName: authz, authority: \"grpc-backend.default:9000\"}}\n  timeout: 10s\n  {rp}"
    ))
    .unwrap();
    let AuthzService::Grpc { service, .. } = &e.service else {
        panic!("{e:?}")
    };
    assert_eq!(service.retry_policy, Some(expected));
}

#[test]
fn retry_policy_defaults_follow_envoy_s_conversion() {
    use crate::route::RetryOn;
    let http = |rp: &str| {
        let e = authz(&format!(
            "http_service:\n  server_uri: {{uri: \"http://authz\", cluster: authz, timeout: 1s}}\n  retry_policy: {rp}"
        ))
        .unwrap();
        match e.service {
            AuthzService::Http(h) => h.retry_policy.unwrap(),
            other => panic!("{other:?}"),
        }
    };
    // No retry_on: no condition, so no retries (as Envoy 1.40 does); 1 retry, 1 s / 10 s.
    let p = http("{}");
    assert!(p.retry_on.is_empty());
    assert_eq!(p.num_retries, 1);
    assert_eq!(p.back_off.base_interval, Duration::from_secs(1));
    assert_eq!(p.back_off.max_interval, Duration::from_secs(10));
    // max_interval defaults to 10 × base; below base, the base becomes max / 2.
    let p = http("{retry_back_off: {base_interval: 0.05s}, retry_on: \" 5xx , reset\"}");
    assert_eq!(p.retry_on, RetryOn::FIVE_XX | RetryOn::RESET);
    assert_eq!(p.back_off.max_interval, Duration::from_millis(500));
    let p = http("{retry_back_off: {base_interval: 2s, max_interval: 1s}, num_retries: 0}");
    assert_eq!(p.num_retries, 0);
    assert_eq!(p.back_off.base_interval, Duration::from_millis(500));
    assert_eq!(p.back_off.max_interval, Duration::from_secs(1));
    // google_grpc: Envoy's Google gRPC client ignores the field.
    let e = authz(
        "grpc_service: {google_grpc: {target_uri: \"127.0.0.1:1\", stat_prefix: a}, retry_policy: {retry_on: unavailable}}",
    )
    .unwrap();
    assert!(
        matches!(&e.service, AuthzService::Grpc { service, .. } if service.retry_policy.is_none())
    );
}

#[test]
fn retry_policy_errors_name_their_paths() {
    let e = errors(authz(
        r#"
http_service:
  server_uri: {uri: "http://authz", cluster: authz, timeout: 1s}
  retry_policy: {retry_on: "5xx,sometimes", retry_priority: {name: p}}
"#,
    ));
    assert_eq!(
        e,
        [
            "typed_config.http_service.retry_policy.retry_priority: retry_priority is not supported",
            "typed_config.http_service.retry_policy.retry_on: unknown retry_on value 'sometimes'",
        ],
        "{e:?}"
    );
    let e = errors(authz(
        "grpc_service: {envoy_grpc: {cluster_name: authz}, retry_policy: {retry_back_off: {max_interval: 1s}}}",
    ));
    assert_eq!(
        e,
        ["typed_config.grpc_service.retry_policy.retry_back_off.base_interval: is required"],
    );
}

/// Only ext_authz's gRPC service retries; the other users of a `GrpcService` refuse it,
/// and a remote JWKS fetch refuses `retry_on` (Envoy's fetcher ignores it).
#[test]
fn retry_policy_is_refused_where_nothing_retries() {
    let e = errors(filter(
        "name: envoy.filters.http.ratelimit\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit\n  domain: d\n  rate_limit_service: {grpc_service: {envoy_grpc: {cluster_name: rls}, retry_policy: {retry_on: unavailable}}, transport_api_version: V3}\n",
    ));
    assert_eq!(
        e,
        [
            "typed_config.rate_limit_service.grpc_service.retry_policy: retry_policy on this gRPC service (ext_authz's retries) is not supported"
        ],
    );
    let e = errors(filter(
        "name: envoy.filters.http.jwt_authn\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication\n  providers:\n    a:\n      remote_jwks:\n        http_uri: {uri: \"http://idp/keys\", cluster: idp, timeout: 1s}\n        retry_policy: {retry_on: 5xx}\n",
    ));
    assert_eq!(
        e,
        [
            "typed_config.providers[\"a\"].remote_jwks.retry_policy.retry_on: retry_on on a remote JWKS fetch (Envoy's fetcher ignores it) is not supported"
        ],
    );
}
