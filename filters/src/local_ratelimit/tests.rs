use super::*;
use crate::chain::Verdict;
use crate::test_support::{
    filter_config, head, per_route_config, plain_conn, reply, run_sync, state,
};
use courier_config::filters::HttpFilterConfig;
use std::time::Duration;

const TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit";

fn filter(body: &str) -> LocalRateLimitFilter {
    let f = filter_config(&format!(
        "name: envoy.filters.http.local_ratelimit\ntyped_config:\n  \"@type\": {TYPE}\n{body}"
    ));
    let HttpFilterConfig::LocalRateLimit(c) = f.config else {
        panic!()
    };
    LocalRateLimitFilter::new(Arc::new(*c))
}

fn count(
    f: &LocalRateLimitFilter,
    prefix: &str,
    field: fn(&LocalRateLimitStats) -> &AtomicU64,
) -> u64 {
    f.stats().get(prefix).sum(field)
}

const ON: &str = "  filter_enabled: {default_value: {numerator: 100}}\n  filter_enforced: {default_value: {numerator: 100}}\n";

#[tokio::test(start_paused = true)]
async fn default_bucket_limits_then_refills() {
    let f = filter(&format!(
        "  stat_prefix: rl\n  token_bucket: {{max_tokens: 2, tokens_per_fill: 1, fill_interval: 1s}}\n{ON}  status: {{code: 503}}\n  enable_x_ratelimit_headers: DRAFT_VERSION_03\n"
    ));
    let conn = plain_conn();
    let mut allowed = 0;
    for _ in 0..2 {
        let mut req = state(&conn, head("GET", "/", &[]));
        assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
        allowed += 1;
    }
    let mut req = state(&conn, head("GET", "/", &[]));
    let r = reply(run_sync(&f, &mut req, None));
    assert_eq!(r.status, 503);
    assert_eq!(&r.body[..], b"local_rate_limited");
    assert_eq!(r.response_flag, Some("RL"));
    let mut h = HeaderMap::new();
    f.encode_headers(&req, &mut h);
    assert_eq!(h["x-ratelimit-limit"], "2");
    assert_eq!(h["x-ratelimit-remaining"], "0");
    assert_eq!(h["x-ratelimit-reset"], "1");
    // One token back after a fill interval.
    tokio::time::advance(Duration::from_millis(1001)).await;
    let mut req = state(&conn, head("GET", "/", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    assert_eq!(allowed, 2);
    assert_eq!(count(&f, "rl", |s| &s.enabled), 4);
    assert_eq!(count(&f, "rl", |s| &s.ok), 3);
    assert_eq!(count(&f, "rl", |s| &s.rate_limited), 1);
    assert_eq!(count(&f, "rl", |s| &s.enforced), 1);
}

#[test]
fn absent_filter_enabled_is_off_and_absent_enforced_only_counts() {
    let f = filter("  stat_prefix: rl\n  token_bucket: {max_tokens: 1, fill_interval: 60s}\n");
    let conn = plain_conn();
    for _ in 0..3 {
        let mut req = state(&conn, head("GET", "/", &[]));
        assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    }
    assert_eq!(count(&f, "rl", |s| &s.enabled), 0);
    let f = filter(
        "  stat_prefix: rl\n  token_bucket: {max_tokens: 1, fill_interval: 60s}\n  filter_enabled: {default_value: {numerator: 100}}\n",
    );
    for _ in 0..3 {
        let mut req = state(&conn, head("GET", "/", &[]));
        assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    }
    assert_eq!(count(&f, "rl", |s| &s.rate_limited), 2);
    assert_eq!(count(&f, "rl", |s| &s.enforced), 0);
}

/// The per-route config as Envoy Gateway writes it: descriptors by header and by
/// query parameter, a wildcard per client address, the default bucket not consumed.
#[test]
fn per_route_descriptors_by_header_query_and_address() {
    let f = filter("  stat_prefix: rl\n");
    let per_route = per_route_config(
        "envoy.filters.http.local_ratelimit",
        &format!(
            r#""@type": {TYPE}
stat_prefix: route
token_bucket: {{max_tokens: 100, tokens_per_fill: 100, fill_interval: 60s}}
filter_enabled: {{default_value: {{numerator: 100}}}}
filter_enforced: {{default_value: {{numerator: 100}}}}
always_consume_default_token_bucket: false
descriptors:
- entries: [{{key: user, value: one}}, {{key: q, value: alice}}]
  token_bucket: {{max_tokens: 1, fill_interval: 60s}}
- entries: [{{key: net, value: all}}, {{key: ip}}]
  token_bucket: {{max_tokens: 2, fill_interval: 60s}}
rate_limits:
- actions:
  - header_value_match: {{descriptor_key: user, descriptor_value: one, headers: [{{name: x-user, string_match: {{exact: one}}}}]}}
  - query_parameter_value_match: {{descriptor_key: q, descriptor_value: alice, query_parameters: [{{name: user, string_match: {{exact: alice}}}}]}}
- actions:
  - remote_address_match: {{descriptor_key: net, descriptor_value: all, address_matcher: {{ranges: [{{address_prefix: 0.0.0.0, prefix_len: 0}}]}}}}
  - remote_address_match: {{descriptor_key: ip, descriptor_value: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%", address_matcher: {{ranges: [{{address_prefix: 0.0.0.0, prefix_len: 0}}]}}}}
"#
        ),
    );
    let pr = per_route.config.as_ref();
    let conn = plain_conn();
    let go = |uri: &str, user: Option<&str>, remote: &str| {
        let mut h = vec![];
        if let Some(u) = user {
            h.push(("x-user", u));
        }
        let mut req = state(&conn, head("GET", uri, &h));
        req.remote = remote.parse().unwrap();
        matches!(run_sync(&f, &mut req, pr), Verdict::Continue)
    };
    // The header+query descriptor allows one; 10.0.0.1's address bucket two.
    assert!(go("/?user=alice", Some("one"), "10.0.0.1"));
    assert!(
        !go("/?user=alice", Some("one"), "10.0.0.2"),
        "header+query bucket empty"
    );
    // Not the header: only the address descriptor applies.
    assert!(go("/?user=alice", Some("two"), "10.0.0.1"));
    assert!(
        !go("/?user=bob", None, "10.0.0.1"),
        "10.0.0.1's bucket empty"
    );
    // Another address has its own bucket.
    assert!(go("/", None, "10.0.0.3"));
    assert_eq!(count(&f, "route", |s| &s.rate_limited), 2);
    assert_eq!(count(&f, "rl", |s| &s.enabled), 0);
}

#[test]
fn shadow_mode_counts_but_lets_through() {
    let f = filter("  stat_prefix: rl\n");
    let per_route = per_route_config(
        "envoy.filters.http.local_ratelimit",
        &format!(
            "\"@type\": {TYPE}\nstat_prefix: rl\ntoken_bucket: {{max_tokens: 5, fill_interval: 60s}}\nfilter_enabled: {{default_value: {{numerator: 100}}}}\nfilter_enforced: {{default_value: {{numerator: 100}}}}\nalways_consume_default_token_bucket: false\ndescriptors: [{{entries: [{{key: generic_key, value: k}}], token_bucket: {{max_tokens: 1, fill_interval: 60s}}, shadow_mode: true}}]\nrate_limits: [{{actions: [{{generic_key: {{descriptor_value: k}}}}]}}]\n"
        ),
    );
    let conn = plain_conn();
    for _ in 0..3 {
        let mut req = state(&conn, head("GET", "/", &[]));
        assert!(matches!(
            run_sync(&f, &mut req, per_route.config.as_ref()),
            Verdict::Continue
        ));
    }
    assert_eq!(count(&f, "rl", |s| &s.ok), 1);
    assert_eq!(count(&f, "rl", |s| &s.rate_limited), 2);
    assert_eq!(count(&f, "rl", |s| &s.shadow_mode), 2);
    assert_eq!(count(&f, "rl", |s| &s.enforced), 0);
}

#[test]
fn masked_address_and_headers_actions_make_descriptors() {
    use courier_config::filters::rate_limit_actions::RateLimitPolicy;
    let c = per_route_config(
        "x",
        &format!(
            "\"@type\": {TYPE}\nstat_prefix: rl\ntoken_bucket: {{max_tokens: 5, fill_interval: 60s}}\nrate_limits:\n- actions: [{{masked_remote_address: {{v4_prefix_mask_len: 16}}}}, {{request_headers: {{header_name: x-a, descriptor_key: a}}}}]\n- actions: [{{request_headers: {{header_name: x-b, descriptor_key: b, skip_if_absent: true}}}}, {{remote_address: {{}}}}]\n- actions: [{{header_value_match: {{descriptor_value: nope, expect_match: false, headers: [{{name: x-a, present_match: true}}]}}}}]\n"
        ),
    );
    let Some(PerRouteFilterConfig::LocalRateLimit(c)) = c.config else {
        panic!()
    };
    let policies: &[RateLimitPolicy] = &c.rate_limits;
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/", &[("x-a", "1")]));
    req.remote = "192.168.7.9".parse().unwrap();
    let d = descriptors::populate(policies, &req);
    let e = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        d,
        vec![
            e(&[("masked_remote_address", "192.168.0.0/16"), ("a", "1")]),
            e(&[("remote_address", "192.168.7.9")]),
        ]
    );
    let req = state(&conn, head("GET", "/", &[]));
    let d = descriptors::populate(policies, &req);
    assert_eq!(
        d,
        vec![
            e(&[("remote_address", "10.0.0.1")]),
            e(&[("header_match", "nope")])
        ]
    );
}
