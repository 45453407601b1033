use super::super::test_util::{errors, hcm_filter, listener, load, merge};
use crate::filters::rbac::{Principal, RbacAction};
use serde_json::{Value, json};

const P: &str = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config";

fn rbac(config: Value) -> Value {
    let mut c =
        json!({"@type": "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC"});
    merge(&mut c, config);
    json!({"name": "envoy.filters.network.rbac", "typed_config": c})
}

fn tcp() -> Value {
    json!({"name": "envoy.filters.network.tcp_proxy", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
        "stat_prefix": "t", "cluster": "c"}})
}

fn chain_of(filters: Vec<Value>) -> Value {
    listener(json!({"filter_chains": [{"filters": filters}]}))
}

fn policy(principal: Value) -> Value {
    json!({"permissions": [{"any": true}], "principals": [principal]})
}

#[test]
fn rules_and_shadow_before_tcp_proxy() {
    let b = load(&chain_of(vec![
        rbac(json!({
            "stat_prefix": "net.",
            "rules": {"action": "DENY", "policies": {"lo": policy(json!({"source_ip": {"address_prefix": "127.0.0.0", "prefix_len": 8}}))}},
            "shadow_rules": {"policies": {"any": policy(json!({"any": true}))}},
            "shadow_rules_stat_prefix": "audit",
        })),
        tcp(),
    ]))
    .unwrap();
    let fc = &b.listeners[0].filter_chains[0];
    assert!(fc.tcp_proxy().is_some());
    let [r] = fc.network_rbacs.as_slice() else {
        panic!("one rbac filter expected");
    };
    assert_eq!(r.stat_prefix, "net.");
    assert_eq!(r.rbac.shadow_rules_stat_prefix, "audit");
    let rules = r.rbac.rules.as_ref().unwrap();
    assert_eq!(rules.action, RbacAction::Deny);
    assert!(matches!(
        rules.policies[0].principals[0],
        Principal::SourceIp(_)
    ));
    assert!(r.rbac.shadow_rules.is_some());
}

#[test]
fn envoy_gateway_matcher_form() {
    let b = load(&chain_of(vec![
        rbac(json!({"stat_prefix": "tcp-10080", "matcher": {
            "matcher_list": {"matchers": [{
                "predicate": {"single_predicate": {
                    "input": {"name": "client_ip", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.matching.common_inputs.network.v3.SourceIPInput"}},
                    "custom_match": {"name": "ip_matcher", "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.matching.input_matchers.ip.v3.Ip",
                        "cidr_ranges": [{"address_prefix": "10.0.0.0", "prefix_len": 24}], "stat_prefix": "client_ip"}}}},
                "on_match": {"action": {"name": "deny-office", "typed_config": {"@type": "type.googleapis.com/envoy.config.rbac.v3.Action", "name": "DENY", "action": "DENY"}}}}]},
            "on_no_match": {"action": {"name": "default", "typed_config": {"@type": "type.googleapis.com/envoy.config.rbac.v3.Action", "name": "ALLOW"}}}}})),
        tcp(),
    ]))
    .unwrap();
    let r = &b.listeners[0].filter_chains[0].network_rbacs[0];
    let m = r.rbac.matcher.as_ref().unwrap();
    assert_eq!(m.rules.len(), 1);
    assert_eq!(m.rules[0].1.action, RbacAction::Deny);
    assert_eq!(m.on_no_match.as_ref().unwrap().action, RbacAction::Allow);
}

#[test]
fn refusals_name_their_paths() {
    let mut e = errors(&chain_of(vec![
        rbac(json!({
            "enforcement_type": "CONTINUOUS",
            "delay_deny": "1s",
            "rules": {"policies": {
                "h": policy(json!({"header": {"name": "x", "present_match": true}})),
                "u": policy(json!({"url_path": {"path": {"exact": "/"}}})),
            }},
        })),
        tcp(),
    ]));
    e.sort();
    assert_eq!(
        e,
        [
            format!("{P}.delay_deny: delay_deny is not supported"),
            format!("{P}.enforcement_type: enforcement_type CONTINUOUS is not supported"),
            format!(
                "{P}.rules.policies[\"h\"]: Found header rule, not supported by RBAC network filter"
            ),
            format!("{P}.rules.policies[\"u\"]: url_path on a connection is not supported"),
            format!("{P}.stat_prefix: value length must be at least 1 characters"),
        ]
    );
}

#[test]
fn only_before_the_terminal_filter() {
    let e = errors(&chain_of(vec![tcp(), rbac(json!({"stat_prefix": "x"}))]));
    assert!(
        e.iter().any(|x| x.contains(
            "filters[1]: an rbac filter that is not before the terminal filter is not supported"
        )),
        "{e:?}"
    );
    let b = load(&chain_of(vec![
        rbac(json!({"stat_prefix": "x"})),
        hcm_filter(json!({})),
    ]))
    .unwrap();
    let fc = &b.listeners[0].filter_chains[0];
    assert!(fc.hcm().is_some());
    assert_eq!(fc.network_rbacs.len(), 1);
}

#[test]
fn http_inputs_of_the_matcher_are_refused() {
    let e = errors(&chain_of(vec![
        rbac(
            json!({"stat_prefix": "x", "matcher": {"matcher_list": {"matchers": [{
            "predicate": {"single_predicate": {
                "input": {"name": "h", "typed_config": {"@type": "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput", "header_name": "x"}},
                "value_match": {"exact": "y"}}},
            "on_match": {"action": {"name": "a", "typed_config": {"@type": "type.googleapis.com/envoy.config.rbac.v3.Action", "name": "a"}}}}]}}}),
        ),
        tcp(),
    ]));
    assert_eq!(
        e,
        [format!(
            "{P}.matcher.matcher_list: a request header, dynamic metadata or CEL input on a connection is not supported"
        )]
    );
}
