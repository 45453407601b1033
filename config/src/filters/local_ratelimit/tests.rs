use super::*;
use crate::filters::rate_limit_actions::{Action, FormatPart};
use crate::filters::test_util::{errors, filter, per_route};
use crate::filters::{HttpFilterConfig, PerRouteFilterConfig};

const TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit";

fn route(body: &str) -> Result<LocalRateLimit, crate::error::ConfigError> {
    per_route(
        "envoy.filters.http.local_ratelimit",
        &format!("\"@type\": {TYPE}\n{body}"),
    )
    .map(|c| match c.config {
        Some(PerRouteFilterConfig::LocalRateLimit(c)) => *c,
        other => panic!("{other:?}"),
    })
}

#[test]
fn filter_level_config_without_bucket_is_off_by_default() {
    let f = filter(&format!(
        "name: envoy.filters.http.local_ratelimit\ntyped_config:\n  \"@type\": {TYPE}\n  stat_prefix: rl\n  max_dynamic_descriptors: 7\n"
    ))
    .unwrap();
    let HttpFilterConfig::LocalRateLimit(c) = f.config else {
        panic!()
    };
    assert_eq!(c.stat_prefix, "rl");
    assert!(c.token_bucket.is_none());
    assert!(c.filter_enabled.is_none() && c.filter_enforced.is_none());
    assert_eq!(c.status, 429);
    assert_eq!(c.max_dynamic_descriptors, 7);
    assert!(c.always_consume_default_token_bucket);
}

#[test]
fn per_route_config_as_envoy_gateway_writes_it() {
    let c = route(
        r#"stat_prefix: rl
token_bucket: {max_tokens: 10, tokens_per_fill: 10, fill_interval: 60s}
filter_enabled: {default_value: {numerator: 100}}
filter_enforced: {default_value: {numerator: 100}}
enable_x_ratelimit_headers: DRAFT_VERSION_03
always_consume_default_token_bucket: false
status: {code: 200}
descriptors:
- entries: [{key: a, value: x}, {key: ip}]
  token_bucket: {max_tokens: 2, fill_interval: 1s}
  shadow_mode: true
rate_limits:
- actions:
  - header_value_match: {descriptor_value: x, descriptor_key: a, expect_match: false, headers: [{name: X-User, string_match: {exact: one}}]}
  - remote_address_match: {descriptor_key: ip, descriptor_value: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%", address_matcher: {ranges: [{address_prefix: 10.1.2.3, prefix_len: 8}]}}
  - query_parameter_value_match: {descriptor_value: q, query_parameters: [{name: user, string_match: {exact: alice}}]}
  - masked_remote_address: {v4_prefix_mask_len: 16}
  - generic_key: {descriptor_value: g}
"#,
    )
    .unwrap();
    // A status below 400 becomes 429, as Envoy's toErrorCode.
    assert_eq!(c.status, 429);
    assert!(c.x_ratelimit_headers && !c.always_consume_default_token_bucket);
    assert_eq!(
        c.token_bucket,
        Some(TokenBucket {
            max_tokens: 10,
            tokens_per_fill: 10,
            fill_interval: Duration::from_secs(60)
        })
    );
    assert_eq!(c.descriptors.len(), 1);
    assert!(c.descriptors[0].is_dynamic() && c.descriptors[0].shadow_mode);
    assert_eq!(c.descriptors[0].token_bucket.tokens_per_fill, 1);
    let actions = &c.rate_limits[0].actions;
    assert!(
        matches!(&actions[0], Action::HeaderValueMatch { expect_match: false, headers, .. } if headers[0].name == "x-user")
    );
    match &actions[1] {
        Action::RemoteAddressMatch {
            descriptor_value,
            ranges: Some((r, false)),
            ..
        } => {
            assert_eq!(descriptor_value, &[FormatPart::RemoteAddressWithoutPort]);
            assert_eq!(r[0].0.to_string(), "10.0.0.0/8");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(&actions[2], Action::QueryParameterValueMatch { descriptor_key, .. } if descriptor_key == "query_match")
    );
    assert!(matches!(
        &actions[3],
        Action::MaskedRemoteAddress {
            v4_prefix_len: 16,
            v6_prefix_len: 128
        }
    ));
    assert!(
        matches!(&actions[4], Action::GenericKey { descriptor_key, .. } if descriptor_key == "generic_key")
    );
}

#[test]
fn refusals_carry_their_paths() {
    // Envoy: "local rate limit token bucket must be set for per filter configs".
    assert_eq!(
        errors(route("stat_prefix: rl\n")),
        ["token_bucket: local rate limit token bucket must be set for per filter configs"]
    );
    // Envoy: "local rate limit token bucket fill timer must be >= 50ms".
    let e = errors(route(
        "stat_prefix: rl\ntoken_bucket: {max_tokens: 1, fill_interval: 0.01s}\n",
    ));
    assert_eq!(
        e,
        ["token_bucket.fill_interval: local rate limit token bucket fill timer must be >= 50ms"]
    );
    let e = errors(route(
        "stat_prefix: rl\ntoken_bucket: {max_tokens: 1, fill_interval: 1s}\ndescriptors:\n- {entries: [{key: a, value: b}], token_bucket: {max_tokens: 1, fill_interval: 1s}}\n- {entries: [{key: a, value: b}], token_bucket: {max_tokens: 2, fill_interval: 1s}}\n",
    ));
    assert_eq!(
        e,
        ["descriptors[1]: duplicate descriptor in the local rate descriptor"]
    );
    // Not served: refused where they are written.
    let e = errors(route(
        "stat_prefix: rl\ntoken_bucket: {max_tokens: 1, fill_interval: 1s}\nresponse_headers_to_add: [{header: {key: a, value: b}}]\n",
    ));
    assert!(e[0].starts_with("response_headers_to_add"), "{e:?}");
    let e = errors(route(
        "stat_prefix: rl\ntoken_bucket: {max_tokens: 1, fill_interval: 1s}\nlocal_rate_limit_per_downstream_connection: true\n",
    ));
    assert!(
        e[0].starts_with("local_rate_limit_per_downstream_connection"),
        "{e:?}"
    );
    let e = errors(route(
        "stat_prefix: rl\ntoken_bucket: {max_tokens: 1, fill_interval: 1s}\nfilter_enabled: {runtime_key: k, default_value: {numerator: 1}}\n",
    ));
    assert!(e[0].starts_with("filter_enabled.runtime_key"), "{e:?}");
    let e = errors(route(
        "stat_prefix: rl\ntoken_bucket: {max_tokens: 1, fill_interval: 1s}\nrate_limits: [{actions: [{metadata: {descriptor_key: k, metadata_key: {key: a, path: [{key: b}]}}}]}]\n",
    ));
    assert!(
        e[0].starts_with("rate_limits[0].actions[0].metadata"),
        "{e:?}"
    );
    let e = errors(route(
        "stat_prefix: rl\ntoken_bucket: {max_tokens: 1, fill_interval: 1s}\nrate_limits: [{actions: [{remote_address_match: {descriptor_value: \"%REQ(x-a)%\"}}]}]\n",
    ));
    assert!(
        e[0].starts_with("rate_limits[0].actions[0].remote_address_match.descriptor_value"),
        "{e:?}"
    );
}

#[test]
fn a_filters_own_rate_limits_take_no_stage_or_disable_key() {
    // Envoy: not supported in the filter's rate_limits (only route and virtual host ones).
    let e = errors(route(
        "stat_prefix: rl\ntoken_bucket: {max_tokens: 1, fill_interval: 1s}\nrate_limits: [{stage: 1, disable_key: k, actions: [{generic_key: {descriptor_value: v}}]}]\n",
    ));
    assert_eq!(
        e,
        [
            "rate_limits[0].stage: stage in a filter's rate_limits is not supported",
            "rate_limits[0].disable_key: disable_key in a filter's rate_limits is not supported"
        ]
    );
    let c = route(
        "stat_prefix: rl\ntoken_bucket: {max_tokens: 1, fill_interval: 1s}\nstage: 3\nvh_rate_limits: INCLUDE\n",
    )
    .unwrap();
    assert_eq!((c.stage, c.vh_rate_limits), (3, VhRateLimits::Include));
    assert!(
        errors(route(
            "stat_prefix: rl\ntoken_bucket: {max_tokens: 1, fill_interval: 1s}\nstage: 11\n"
        ))[0]
            .starts_with("stage")
    );
}
