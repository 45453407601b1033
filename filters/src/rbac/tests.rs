use super::*;
use crate::chain::Verdict;
use crate::request::{ConnFacts, PeerCert, SelectedRoute, TlsFacts};
use crate::test_support::{
    filter_config, head, per_route_config, plain_conn, reply, run_sync, state,
};
use courier_config::filters::HttpFilterConfig;
use std::sync::atomic::Ordering::Relaxed;

fn rbac(body: &str) -> RbacFilter {
    let yaml = format!(
        "name: envoy.filters.http.rbac\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC\n{}",
        body.lines().map(|l| format!("  {l}\n")).collect::<String>()
    );
    match filter_config(&yaml).config {
        HttpFilterConfig::Rbac(c) => RbacFilter::new(Arc::new(*c)),
        other => panic!("not rbac: {other:?}"),
    }
}

fn get(s: &RbacStats) -> [u64; 6] {
    [
        s.allowed.load(Relaxed),
        s.denied.load(Relaxed),
        s.shadow_allowed.load(Relaxed),
        s.shadow_denied.load(Relaxed),
        s.logged.load(Relaxed),
        s.not_logged.load(Relaxed),
    ]
}

/// envoy-reference 11 case 28.
#[test]
fn deny_admin_prefix_answers_403_with_policy_details() {
    let f = rbac(
        r#"
rules:
  action: DENY
  policies:
    "block admin":
      permissions: [{url_path: {path: {prefix: /admin}}}]
      principals: [{any: true}]
"#,
    );
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/admin?x", &[("host", "a")]));
    let r = reply(run_sync(&f, &mut req, None));
    assert_eq!(r.status, 403);
    assert_eq!(&r.body[..], b"RBAC: access denied");
    assert_eq!(r.details, "rbac_access_denied_matched_policy[block_admin]");
    let mut req = state(&conn, head("GET", "/public", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    // The query is not part of url_path: /public?/admin passes.
    let mut req = state(&conn, head("GET", "/public?/admin", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    assert_eq!(get(f.stats().get(0)), [2, 1, 0, 0, 0, 0]);
}

/// Each worker counts in its own copy of the counters (no cache line shared
/// by workers on the request path); the stat is their sum.
#[test]
fn workers_count_in_their_own_copies() {
    let f = rbac(
        r#"
rules:
  action: DENY
  policies:
    "block admin":
      permissions: [{url_path: {path: {prefix: /admin}}}]
      principals: [{any: true}]
"#,
    );
    let on_worker = |worker: usize| ConnFacts {
        worker,
        ..plain_conn()
    };
    let (w0, w1) = (on_worker(0), on_worker(1));
    let mut req = state(&w0, head("GET", "/public", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    for _ in 0..2 {
        let mut req = state(&w1, head("GET", "/admin", &[]));
        assert_eq!(reply(run_sync(&f, &mut req, None)).status, 403);
    }
    let stats = f.stats();
    if std::ptr::eq(stats.get(0), stats.get(1)) {
        // A one-core machine keeps one copy.
        assert_eq!(get(stats.get(0)), [1, 2, 0, 0, 0, 0]);
    } else {
        assert_eq!(get(stats.get(0)), [1, 0, 0, 0, 0, 0]);
        assert_eq!(get(stats.get(1)), [0, 2, 0, 0, 0, 0]);
    }
    assert_eq!(
        (stats.sum(|s| &s.allowed), stats.sum(|s| &s.denied)),
        (1, 2)
    );
}

/// envoy-reference 11 case 29.
#[test]
fn shadow_deny_with_enforced_allow_passes_and_reports() {
    let f = rbac(
        r#"
rules:
  action: ALLOW
  policies:
    all: {permissions: [{any: true}], principals: [{any: true}]}
shadow_rules:
  action: DENY
  policies:
    gets: {permissions: [{header: {name: ":method", string_match: {exact: GET}}}], principals: [{any: true}]}
"#,
    );
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/x", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let md = &req.metadata[METADATA_NAMESPACE];
    assert_eq!(md["shadow_engine_result"], "denied");
    assert_eq!(md["shadow_effective_policy_id"], "gets");
    let mut req = state(&conn, head("POST", "/x", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let md = &req.metadata[METADATA_NAMESPACE];
    assert_eq!(md["shadow_engine_result"], "allowed");
    assert!(md.get("shadow_effective_policy_id").is_none());
    assert_eq!(get(f.stats().get(0)), [2, 0, 1, 1, 0, 0]);
}

#[test]
fn shadow_prefix_applies_to_metadata_keys() {
    let f = rbac("shadow_rules_stat_prefix: \"p_\"\nshadow_rules: {action: ALLOW, policies: {}}\n");
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    assert_eq!(
        req.metadata[METADATA_NAMESPACE]["p_shadow_engine_result"],
        "denied"
    );
}

#[test]
fn no_rules_passes_and_empty_allow_denies() {
    let conn = plain_conn();
    let f = rbac("rules_stat_prefix: \"\"\n");
    let mut req = state(&conn, head("GET", "/", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let f = rbac("rules: {action: ALLOW, policies: {}}\n");
    let r = reply(run_sync(&f, &mut req, None));
    assert_eq!(r.details, "rbac_access_denied_matched_policy[none]");
    let f = rbac("rules: {action: DENY, policies: {}}\n");
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
}

#[test]
fn remote_ip_is_the_trusted_address_and_direct_remote_ip_the_peer() {
    let f = rbac(
        r#"
rules:
  action: ALLOW
  policies:
    office:
      permissions: [{any: true}]
      principals:
      - and_ids:
          ids:
          - remote_ip: {address_prefix: 192.168.0.0, prefix_len: 16}
          - direct_remote_ip: {address_prefix: 10.0.0.0, prefix_len: 8}
          - source_ip: {address_prefix: 10.0.0.1, prefix_len: 32}
"#,
    );
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/", &[]));
    // Trusted address = the socket peer (10.0.0.1): not in 192.168/16.
    assert_eq!(reply(run_sync(&f, &mut req, None)).status, 403);
    req.remote = "192.168.4.4".parse().unwrap();
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
}

fn tls_conn(
    sans_uri: &[&str],
    sans_dns: &[&str],
    subject: &str,
    sni: Option<&str>,
) -> ConnFactsOwned {
    let mut c = plain_conn();
    c.tls = Some(TlsFacts {
        sni: sni.map(str::to_string),
        peer_cert: Some(PeerCert {
            uri_sans: sans_uri.iter().map(|s| s.to_string()).collect(),
            dns_sans: sans_dns.iter().map(|s| s.to_string()).collect(),
            subject: subject.into(),
        }),
    });
    c
}
type ConnFactsOwned = crate::request::ConnFacts;

#[test]
fn authenticated_matches_uri_then_dns_sans_then_subject() {
    let f = rbac(
        r#"
rules:
  action: ALLOW
  policies:
    mtls:
      permissions: [{any: true}]
      principals: [{authenticated: {principal_name: {exact: "spiffe://td/ns/a"}}}]
    any_tls:
      permissions: [{url_path: {path: {exact: /open}}}]
      principals: [{authenticated: {}}]
    by_subject:
      permissions: [{url_path: {path: {exact: /subj}}}]
      principals: [{authenticated: {principal_name: {prefix: "CN=client"}}}]
"#,
    );
    let ok = tls_conn(&["spiffe://td/ns/a"], &["b.example"], "CN=other", None);
    let mut req = state(&ok, head("GET", "/x", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let other = tls_conn(
        &["spiffe://td/ns/b"],
        &["spiffe://td/ns/a"],
        "CN=client,O=x",
        None,
    );
    let mut req = state(&other, head("GET", "/x", &[]));
    // A DNS SAN equal to the name also matches (Envoy checks both lists).
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let mut req = state(&other, head("GET", "/subj", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let plain = plain_conn();
    let mut req = state(&plain, head("GET", "/open", &[]));
    assert_eq!(reply(run_sync(&f, &mut req, None)).status, 403);
    let none = tls_conn(&[], &[], "CN=z", None);
    let mut req = state(&none, head("GET", "/open", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let mut req = state(&none, head("GET", "/x", &[]));
    assert_eq!(reply(run_sync(&f, &mut req, None)).status, 403);
}

#[test]
fn destination_sni_header_and_not_rules() {
    let f = rbac(
        r#"
rules:
  action: ALLOW
  policies:
    p:
      permissions:
      - and_rules:
          rules:
          - destination_port_range: {start: 8000, end: 8081}
          - destination_ip: {address_prefix: 127.0.0.0, prefix_len: 8}
          - requested_server_name: {exact: api.example}
          - not_rule: {header: {name: x-block, present_match: true}}
          - header: {name: x-team, string_match: {exact: "a,b"}}
      principals: [{any: true}]
"#,
    );
    let conn = tls_conn(&[], &[], "", Some("api.example"));
    let mut req = state(&conn, head("GET", "/", &[("x-team", "a"), ("x-team", "b")]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let mut req = state(
        &conn,
        head(
            "GET",
            "/",
            &[("x-team", "a"), ("x-team", "b"), ("x-block", "1")],
        ),
    );
    assert_eq!(reply(run_sync(&f, &mut req, None)).status, 403);
    let wrong_sni = tls_conn(&[], &[], "", Some("other"));
    let mut req = state(
        &wrong_sni,
        head("GET", "/", &[("x-team", "a"), ("x-team", "b")]),
    );
    assert_eq!(reply(run_sync(&f, &mut req, None)).status, 403);
}

#[test]
fn inverted_header_matcher_does_not_match_a_missing_header() {
    let f = rbac(
        r#"
rules:
  action: DENY
  policies:
    not_prod:
      permissions: [{header: {name: x-env, string_match: {exact: prod}, invert_match: true}}]
      principals: [{any: true}]
"#,
    );
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let mut req = state(&conn, head("GET", "/", &[("x-env", "dev")]));
    assert_eq!(reply(run_sync(&f, &mut req, None)).status, 403);
}

#[test]
fn metadata_principal_reads_dynamic_and_route_metadata() {
    let f = rbac(
        r#"
rules:
  action: ALLOW
  policies:
    alice:
      permissions: [{any: true}]
      principals:
      - metadata: {filter: envoy.filters.http.jwt_authn, path: [{key: payload}, {key: sub}], value: {string_match: {exact: alice}}}
    route_flag:
      permissions: [{any: true}]
      principals:
      - sourced_metadata:
          metadata_source: ROUTE
          metadata_matcher: {filter: acme, path: [{key: open}], value: {bool_match: true}}
"#,
    );
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/", &[]));
    assert_eq!(reply(run_sync(&f, &mut req, None)).status, 403);
    req.set_metadata(
        "envoy.filters.http.jwt_authn",
        "payload",
        serde_json::json!({"sub": "alice"}),
    );
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let mut route_md = courier_config::core::MetadataMap::new();
    route_md.insert(
        "acme".into(),
        serde_json::json!({"open": true})
            .as_object()
            .unwrap()
            .clone(),
    );
    let mut req = state(&conn, head("GET", "/", &[]));
    req.route = Some(SelectedRoute {
        per_filter: [None; 4],
        metadata: Some(&route_md),
        cluster: None,
        ..Default::default()
    });
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
}

#[test]
fn log_action_always_allows_and_sets_the_hint() {
    let f = rbac(
        r#"
rules:
  action: LOG
  policies:
    admin: {permissions: [{url_path: {path: {prefix: /admin}}}], principals: [{any: true}]}
"#,
    );
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/admin", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    assert_eq!(req.metadata[COMMON_NAMESPACE]["access_log_hint"], true);
    let mut req = state(&conn, head("GET", "/x", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    assert_eq!(req.metadata[COMMON_NAMESPACE]["access_log_hint"], false);
    assert_eq!(get(f.stats().get(0)), [0, 0, 0, 0, 1, 1]);
}

#[test]
fn per_route_override_replaces_or_disables() {
    let f = rbac("rules: {action: ALLOW, policies: {}}\n");
    let conn = plain_conn();
    let disabled = per_route_config(
        "envoy.filters.http.rbac",
        "\"@type\": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute\n",
    );
    let mut req = state(&conn, head("GET", "/", &[]));
    assert!(matches!(
        run_sync(&f, &mut req, disabled.config.as_ref()),
        Verdict::Continue
    ));
    let deny_all = per_route_config(
        "envoy.filters.http.rbac",
        r#""@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute
rbac:
  rules:
    action: DENY
    policies:
      everything: {permissions: [{any: true}], principals: [{any: true}]}
"#,
    );
    let r = reply(run_sync(&f, &mut req, deny_all.config.as_ref()));
    assert_eq!(r.details, "rbac_access_denied_matched_policy[everything]");
}

#[test]
fn per_rule_stats_count_the_effective_policy() {
    let f = rbac(
        r#"
track_per_rule_stats: true
rules:
  action: ALLOW
  policies:
    gets: {permissions: [{header: {name: ":method", string_match: {exact: GET}}}], principals: [{any: true}]}
"#,
    );
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let p = &f.stats().get(0).per_policy[0];
    assert_eq!((p.name.as_str(), p.allowed.load(Relaxed)), ("gets", 1));
}

#[test]
fn authority_is_matched_as_a_pseudo_header_never_as_host() {
    let f = rbac(
        r#"
rules:
  action: ALLOW
  policies:
    by_authority:
      permissions: [{header: {name: ":authority", string_match: {exact: api.example}}}]
      principals: [{any: true}]
    by_host:
      permissions: [{header: {name: host, present_match: true}}]
      principals: [{any: true}]
"#,
    );
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/", &[("host", "api.example")]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let mut req = state(&conn, head("GET", "/", &[("host", "other")]));
    assert_eq!(reply(run_sync(&f, &mut req, None)).status, 403);
}
