use super::*;
use crate::filters::test_util::{errors, filter, per_route};
use crate::filters::{HttpFilterConfig, PerRouteFilterConfig};

fn rbac(yaml_body: &str) -> Result<RbacFilter, crate::ConfigError> {
    let yaml = format!(
        "name: envoy.filters.http.rbac\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC\n{}",
        indent(yaml_body, 2)
    );
    filter(&yaml).map(|f| match f.config {
        HttpFilterConfig::Rbac(r) => *r,
        other => panic!("not rbac: {other:?}"),
    })
}

fn indent(s: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    s.lines().map(|l| format!("{pad}{l}\n")).collect()
}

#[test]
fn policies_compiled_in_name_order() {
    let r = rbac(
        r#"
rules_stat_prefix: "p."
track_per_rule_stats: true
rules:
  action: DENY
  policies:
    zeta:
      permissions: [{any: true}]
      principals: [{direct_remote_ip: {address_prefix: 10.0.0.0, prefix_len: 8}}]
    alpha:
      permissions:
      - and_rules:
          rules:
          - header: {name: ":method", string_match: {exact: GET}}
          - url_path: {path: {prefix: /admin}}
      - destination_port_range: {start: 8000, end: 9000}
      - not_rule: {destination_port: 22}
      principals:
      - authenticated: {principal_name: {exact: "spiffe://a/b"}}
      - sourced_metadata:
          metadata_source: ROUTE
          metadata_matcher:
            filter: envoy.filters.http.jwt_authn
            path: [{key: payload}, {key: sub}]
            value: {string_match: {exact: alice}}
      - or_ids: {ids: [{any: true}, {remote_ip: {address_prefix: "::1", prefix_len: 128}}]}
shadow_rules:
  policies: {}
"#,
    )
    .unwrap();
    assert_eq!(r.rules_stat_prefix, "p.");
    assert!(r.track_per_rule_stats);
    let rules = r.rules.unwrap();
    assert_eq!(rules.action, RbacAction::Deny);
    let names: Vec<&str> = rules.policies.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["alpha", "zeta"]);
    let alpha = &rules.policies[0];
    assert!(matches!(&alpha.permissions[0], Permission::And(v) if v.len() == 2));
    assert!(matches!(
        alpha.permissions[1],
        Permission::DestinationPortRange {
            start: 8000,
            end: 9000
        }
    ));
    assert!(
        matches!(&alpha.permissions[2], Permission::Not(p) if matches!(**p, Permission::DestinationPort(22)))
    );
    assert!(
        matches!(&alpha.principals[0], Principal::Authenticated(Some(m)) if m.matches("spiffe://a/b"))
    );
    assert!(
        matches!(&alpha.principals[1], Principal::Metadata(m) if m.source == MetadataSource::Route)
    );
    let shadow = r.shadow_rules.unwrap();
    assert_eq!(shadow.action, RbacAction::Allow);
    assert!(shadow.policies.is_empty());
}

#[test]
fn absent_rules_mean_no_enforcement() {
    let r = rbac("rules_stat_prefix: \"\"").unwrap();
    assert!(r.rules.is_none());
    assert!(r.shadow_rules.is_none());
}

#[test]
fn errors_name_their_paths() {
    let e = errors(rbac(
        r#"
rules:
  policies:
    p:
      permissions:
      - header: {name: x, safe_regex_match: {regex: "(("}}
      - destination_ip: {address_prefix: "10.0.0.300", prefix_len: 8}
      - any: false
      principals: []
"#,
    ));
    assert_eq!(
        e,
        [
            "typed_config.rules.policies[\"p\"].permissions[0].header.safe_regex_match.regex: invalid regex: unclosed group",
            "typed_config.rules.policies[\"p\"].permissions[1].destination_ip.address_prefix: \"10.0.0.300\" is not an IP address",
            "typed_config.rules.policies[\"p\"].permissions[2].any: must be true",
            "typed_config.rules.policies[\"p\"].principals: at least one principal is required",
        ]
    );
}

#[test]
fn refused_forms_are_reported_once_at_their_path() {
    let mut e = errors(rbac(
        r#"
rules:
  policies:
    p:
      permissions: [{any: true}]
      principals: [{any: true}]
      cel_config: {enable_string_conversion: true}
    q:
      permissions: [{any: true}]
      principals: [{filter_state: {key: k, string_match: {exact: v}}}]
"#,
    ));
    e.sort();
    assert_eq!(
        e,
        [
            "typed_config.rules.policies[\"p\"].cel_config: cel_config is not supported",
            "typed_config.rules.policies[\"q\"].principals[0].filter_state: filter_state is not supported",
        ]
    );
}

#[test]
fn port_range_and_empty_sets() {
    let e = errors(rbac(
        r#"
rules:
  policies:
    p:
      permissions:
      - destination_port_range: {start: 90, end: 80}
      - or_rules: {rules: []}
      - destination_port: 70000
      principals: [{and_ids: {ids: []}}]
"#,
    ));
    assert_eq!(
        e,
        [
            "typed_config.rules.policies[\"p\"].permissions[0].destination_port_range: start must be below end",
            "typed_config.rules.policies[\"p\"].permissions[1].or_rules.rules: at least one rule is required",
            "typed_config.rules.policies[\"p\"].permissions[2].destination_port: 70000 is not a port (0..=65535)",
            "typed_config.rules.policies[\"p\"].principals[0].and_ids.ids: at least one principal is required",
        ]
    );
}

#[test]
fn per_route_override_and_disable() {
    let on = per_route(
        "envoy.filters.http.rbac",
        r#"
"@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute
rbac:
  rules:
    action: ALLOW
    policies:
      p: {permissions: [{any: true}], principals: [{any: true}]}
"#,
    )
    .unwrap();
    let Some(PerRouteFilterConfig::Rbac(r)) = on.config else {
        panic!("{on:?}")
    };
    assert_eq!(r.rbac.unwrap().rules.unwrap().policies.len(), 1);
    let off = per_route(
        "envoy.filters.http.rbac",
        "\"@type\": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute\n",
    )
    .unwrap();
    assert!(matches!(off.config, Some(PerRouteFilterConfig::Rbac(r)) if r.rbac.is_none()));
}

/// Envoy 1.40 accepts a CIDR with host bits and masks them (`envoy --mode validate` says
/// OK); courier follows: the range is the masked one.
#[test]
fn cidr_with_host_bits_is_masked_as_envoy_does() {
    let f = rbac(
        r#"
rules:
  policies:
    p:
      permissions: [{destination_ip: {address_prefix: 10.0.0.0, prefix_len: 8}}]
      principals: [{source_ip: {address_prefix: 10.1.2.3, prefix_len: 8}}, {remote_ip: {address_prefix: "::1"}}]
"#,
    )
    .unwrap();
    let p = &f.rules.as_ref().unwrap().policies[0];
    let ranges: Vec<String> = p
        .principals
        .iter()
        .map(|x| match x {
            Principal::SourceIp(c) | Principal::RemoteIp(c) => c.0.to_string(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ranges, ["10.0.0.0/8", "::/0"]);
}

/// The unified matcher: what courier does not implement of it is refused at
/// its path (a tree, nested matchers, `keep_matching`, LOG, other inputs and
/// input matchers); an empty list is an error, as in Envoy.
#[test]
fn matcher_forms_courier_lacks_are_refused_at_their_path() {
    let action = r#"{action: {name: a, typed_config: {"@type": type.googleapis.com/envoy.config.rbac.v3.Action, name: a, action: LOG}}}"#;
    let header = r#"{single_predicate: {input: {name: h, typed_config: {"@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput, header_name: x}}, value_match: {exact: 'v'}}}"#;
    let server_name = r#"{single_predicate: {input: {name: s, typed_config: {"@type": type.googleapis.com/envoy.extensions.matching.common_inputs.network.v3.ServerNameInput}}, value_match: {exact: 'v'}}}"#;
    let e = errors(rbac(&format!(
        r#"
matcher:
  matcher_list:
    matchers:
    - {{predicate: {header}, on_match: {action}}}
    - {{predicate: {server_name}, on_match: {{keep_matching: true}}}}
shadow_matcher:
  matcher_list: {{matchers: []}}
"#
    )));
    assert_eq!(
        e,
        [
            "typed_config.matcher.matcher_list.matchers[0].on_match.action.typed_config.action: LOG in a matcher is not supported",
            "typed_config.matcher.matcher_list.matchers[1].predicate.single_predicate.input.typed_config: matcher input envoy.extensions.matching.common_inputs.network.v3.ServerNameInput is not supported",
            "typed_config.matcher.matcher_list.matchers[1].on_match.keep_matching: keep_matching is not supported",
            "typed_config.shadow_matcher.matcher_list.matchers: needs at least one matcher",
        ]
    );
}

/// A matcher compiles to predicates over the same tests as `rules`.
#[test]
fn matcher_compiles_to_rbac_predicates() {
    let r = rbac(
        r#"
matcher:
  matcher_list:
    matchers:
    - predicate:
        not_matcher:
          single_predicate:
            input: {name: ip, typed_config: {"@type": type.googleapis.com/envoy.extensions.matching.common_inputs.network.v3.SourceIPInput}}
            custom_match: {name: m, typed_config: {"@type": type.googleapis.com/envoy.extensions.matching.input_matchers.ip.v3.Ip, cidr_ranges: [{address_prefix: 10.0.0.0, prefix_len: 8}, {address_prefix: 192.168.0.0, prefix_len: 16}], stat_prefix: ip}}
      on_match: {action: {name: allow, typed_config: {"@type": type.googleapis.com/envoy.config.rbac.v3.Action, name: allow-outside}}}
  on_no_match: {action: {name: d, typed_config: {"@type": type.googleapis.com/envoy.config.rbac.v3.Action, name: fallback, action: DENY}}}
"#,
    )
    .unwrap();
    let m = r.matcher.expect("matcher");
    assert!(r.rules.is_none());
    let (pred, action) = &m.rules[0];
    assert_eq!(
        (action.name.as_str(), action.action),
        ("allow-outside", RbacAction::Allow)
    );
    let crate::filters::rbac_matcher::Predicate::Not(inner) = pred else {
        panic!("{pred:?}");
    };
    let crate::filters::rbac_matcher::Predicate::Or(cidrs) = &**inner else {
        panic!("{inner:?}");
    };
    assert_eq!(cidrs.len(), 2);
    assert!(matches!(
        cidrs[0],
        crate::filters::rbac_matcher::Predicate::Principal(Principal::RemoteIp(_))
    ));
    let fallback = m.on_no_match.expect("on_no_match");
    assert_eq!(
        (fallback.name.as_str(), fallback.action),
        ("fallback", RbacAction::Deny)
    );
}

#[test]
fn a_policy_condition_compiles_and_a_malformed_one_is_refused_at_its_path() {
    let f = rbac(
        r#"
rules:
  policies:
    p:
      permissions: [{any: true}]
      principals: [{any: true}]
      checked_condition: {expr: {const_expr: {bool_value: true}}}
      condition: {const_expr: {bool_value: false}}
"#,
    );
    let cond = f.expect("valid").rules.expect("rules").policies[0]
        .condition
        .clone()
        .expect("a condition");
    // `checked_condition` wins, as in Envoy.
    assert_eq!(cond.source(), "<condition>");
    assert!(cond.matches(&NoAttributes));
    let e = errors(rbac(
        r#"
rules:
  policies:
    p:
      permissions: [{any: true}]
      principals: [{any: true}]
      condition: {select_expr: {field: path}}
"#,
    ));
    assert_eq!(
        e,
        ["typed_config.rules.policies[\"p\"].condition.select_expr.operand: is required"]
    );
}

struct NoAttributes;

impl crate::cel::Attributes for NoAttributes {
    fn root(&self, _: &str) -> Option<crate::cel::Value> {
        None
    }
}
