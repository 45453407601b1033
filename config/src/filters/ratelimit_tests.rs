use super::*;
use crate::filters::test_util::{errors, filter, per_route};
use crate::filters::{HttpFilterConfig, PerRouteFilterConfig};
use envoy_types::pb::envoy::config::route::v3 as pb_route;

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
    // apply_on_stream_done is served per route only.
    let e = errors(rl(&format!(
        "  domain: d\n{SERVICE}  rate_limits: [{{actions: [{{generic_key: {{descriptor_value: v}}}}], apply_on_stream_done: true}}]\n"
    )));
    assert!(
        e[0].starts_with("typed_config.rate_limits[0].apply_on_stream_done"),
        "{e:?}"
    );
}

const PER_ROUTE: &str =
    "\"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute\n";

fn per_route_limits(limits: &str) -> Result<Vec<RateLimitPolicy>, crate::error::ConfigError> {
    per_route(
        "envoy.filters.http.ratelimit",
        &format!("{PER_ROUTE}rate_limits: {limits}\n"),
    )
    .map(|p| match p.config {
        Some(PerRouteFilterConfig::RateLimit(p)) => p.rate_limits,
        other => panic!("{other:?}"),
    })
}

#[test]
fn hits_addend_and_apply_on_stream_done_per_route() {
    use crate::filters::rate_limit_actions::{HitsAddend, HitsAddendFormat};
    // Envoy Gateway's shape (ratelimit-global-shared).
    let p = per_route_limits(
        "[{actions: [{generic_key: {descriptor_value: v}}], hits_addend: {number: 0}}, {actions: [{generic_key: {descriptor_value: v}}], apply_on_stream_done: true, hits_addend: {format: '%DYNAMIC_METADATA(my.cost.ns:request_cost)%'}}]",
    )
    .unwrap();
    assert_eq!(p[0].hits_addend, Some(HitsAddend::Number(0)));
    assert!(!p[0].apply_on_stream_done);
    assert!(p[1].apply_on_stream_done);
    assert_eq!(
        p[1].hits_addend,
        Some(HitsAddend::Format(HitsAddendFormat::DynamicMetadata {
            namespace: "my.cost.ns".into(),
            path: vec!["request_cost".into()],
        }))
    );
    // The filter's own rate_limits take hits_addend.
    let c = rl(&format!(
        "  domain: d\n{SERVICE}  rate_limits: [{{actions: [{{generic_key: {{descriptor_value: v}}}}], hits_addend: {{number: 5}}}}]\n"
    ))
    .unwrap();
    assert_eq!(c.rate_limits[0].hits_addend, Some(HitsAddend::Number(5)));
}

#[test]
fn hits_addend_errors_and_refusals() {
    let e = |limits: &str| errors(per_route_limits(limits));
    // As Envoy's RateLimitPolicy: exactly one of number and format.
    let both = e(
        "[{actions: [{generic_key: {descriptor_value: v}}], hits_addend: {number: 1, format: '%DYNAMIC_METADATA(a:b)%'}}]",
    );
    assert!(
        both[0].starts_with("rate_limits[0].hits_addend: hits_addend must contain either"),
        "{both:?}"
    );
    let neither = e("[{actions: [{generic_key: {descriptor_value: v}}], hits_addend: {}}]");
    assert!(
        neither[0].starts_with("rate_limits[0].hits_addend: hits_addend must contain either"),
        "{neither:?}"
    );
    let two = e(
        "[{actions: [{generic_key: {descriptor_value: v}}], hits_addend: {format: '%DYNAMIC_METADATA(a:b)%n=%DYNAMIC_METADATA(a:c)%'}}]",
    );
    assert!(two[0].starts_with("rate_limits[0].hits_addend.format: hits_addend format must contain exactly one substitution"), "{two:?}");
    // The proto's rules: a format starts and ends with `%`.
    let lit = e("[{actions: [{generic_key: {descriptor_value: v}}], hits_addend: {format: '7'}}]");
    assert_eq!(
        lit,
        ["rate_limits[0].hits_addend.format: value does not have prefix \"%\""]
    );
    let tail = e(
        "[{actions: [{generic_key: {descriptor_value: v}}], hits_addend: {format: '%DYNAMIC_METADATA(a:b)'}}]",
    );
    assert!(tail[0].contains("does not have suffix"), "{tail:?}");
    let big =
        e("[{actions: [{generic_key: {descriptor_value: v}}], hits_addend: {number: 1000000001}}]");
    assert!(
        big[0].starts_with("rate_limits[0].hits_addend.number"),
        "{big:?}"
    );
    // Other commands are refused with the path.
    let other = e(
        "[{actions: [{generic_key: {descriptor_value: v}}], hits_addend: {format: '%BYTES_RECEIVED%'}}]",
    );
    assert!(
        other[0].starts_with("rate_limits[0].hits_addend.format"),
        "{other:?}"
    );
    assert!(other[0].contains("not supported"), "{other:?}");
}

#[test]
fn local_filter_and_routes_refuse_the_stream_fields() {
    let e = errors(filter(
        "name: l\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit\n  stat_prefix: s\n  rate_limits: [{actions: [{generic_key: {descriptor_value: v}}], hits_addend: {number: 2}}]\n",
    ));
    assert_eq!(
        e,
        [
            "typed_config.rate_limits[0].hits_addend: hits_addend in the local rate limit filter's rate_limits is not supported"
        ]
    );
    let mut ctx = Ctx::new();
    let rl: pb_route::RateLimit = pb_route::RateLimit {
        actions: vec![pb_route::rate_limit::Action {
            action_specifier: Some(
                pb_route::rate_limit::action::ActionSpecifier::RemoteAddress(Default::default()),
            ),
        }],
        apply_on_stream_done: true,
        ..Default::default()
    };
    assert!(
        rate_limit_actions::route_policies(&[rl], &Path::ROOT.field("rate_limits"), &mut ctx)
            .is_none()
    );
    let e = errors(ctx.finish(()));
    assert_eq!(
        e,
        [
            "rate_limits[0].apply_on_stream_done: apply_on_stream_done in a route's or virtual host's rate_limits is not supported"
        ]
    );
}
