use super::*;
use crate::filters::test_util::{errors, filter, per_route};
use crate::filters::{HttpFilterConfig, PerRouteFilterConfig};

const TYPE: &str = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit";
const SERVICE: &str = "  rate_limit_service: {grpc_service: {envoy_grpc: {cluster_name: rls}}, transport_api_version: V3}\n";

fn rl(body: &str) -> Result<RateLimitFilter, crate::error::ConfigError> {
    filter(&format!(
        "name: envoy.filters.http.ratelimit\ntyped_config:\n  \"@type\": {TYPE}\n{body}"
    ))
    .map(|f| match f.config {
        HttpFilterConfig::RateLimit(c) => *c,
        other => panic!("{other:?}"),
    })
}

#[test]
fn envoy_gateway_filter_and_per_route() {
    let c = rl(&format!(
        "  domain: first-listener\n{SERVICE}  enable_x_ratelimit_headers: DRAFT_VERSION_03\n  disable_x_envoy_ratelimited_header: true\n  failure_mode_deny: true\n  timeout: 1s\n  request_type: external\n  rate_limited_status: {{code: 200}}\n"
    ))
    .unwrap();
    assert_eq!(c.domain, "first-listener");
    assert!(c.x_ratelimit_headers && c.disable_x_envoy_ratelimited_header && c.failure_mode_deny);
    assert_eq!(c.timeout, Some(Duration::from_secs(1)));
    assert_eq!(c.request_type, RequestType::External);
    assert_eq!(c.rate_limited_status, 429);
    let c = rl(&format!("  domain: d\n{SERVICE}")).unwrap();
    assert_eq!(c.timeout, Some(DEFAULT_TIMEOUT));
    let p = per_route(
        "envoy.filters.http.ratelimit",
        "\"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute\ndomain: x\nrate_limits: [{actions: [{generic_key: {descriptor_key: k, descriptor_value: v}}]}]\n",
    )
    .unwrap();
    match p.config {
        Some(PerRouteFilterConfig::RateLimit(p)) => {
            assert_eq!(p.domain.as_deref(), Some("x"));
            assert_eq!(p.rate_limits.len(), 1);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn refusals_carry_their_paths() {
    let e = errors(rl(SERVICE));
    assert!(
        e.iter().any(|e| e.starts_with("typed_config.domain")),
        "{e:?}"
    );
    // As `envoy --mode validate`: an unset version is v3, v2 is refused.
    assert!(
        rl(
            "  domain: d\n  rate_limit_service: {grpc_service: {envoy_grpc: {cluster_name: rls}}}\n"
        )
        .is_ok()
    );
    let e = errors(rl(
        "  domain: d\n  rate_limit_service: {grpc_service: {envoy_grpc: {cluster_name: rls}}, transport_api_version: V2}\n",
    ));
    assert_eq!(
        e,
        [
            "typed_config.rate_limit_service.transport_api_version: the v2 xDS major version has been removed and is no longer supported"
        ]
    );
    let e = errors(rl(&format!(
        "  domain: d\n{SERVICE}  status_on_error: {{code: 503}}\n"
    )));
    assert!(e[0].starts_with("typed_config.status_on_error"), "{e:?}");
    let e = errors(rl(&format!(
        "  domain: d\n{SERVICE}  request_type: sometimes\n"
    )));
    assert!(e[0].starts_with("typed_config.request_type"), "{e:?}");
    // Envoy Gateway's hits_addend and apply_on_stream_done are not served.
    let e = errors(per_route(
        "envoy.filters.http.ratelimit",
        "\"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute\nrate_limits: [{actions: [{generic_key: {descriptor_value: v}}], apply_on_stream_done: true}]\n",
    ));
    assert!(
        e[0].starts_with("rate_limits[0].apply_on_stream_done"),
        "{e:?}"
    );
}
