//! The policy index (courier_config::filters::rbac_index) agrees with a linear scan and
//! evaluates only the candidates of the keys a request carries.

use super::eval::{evaluate, evaluate_counted, evaluate_linear};
use super::*;
use crate::chain::Verdict;
use crate::request::{ConnFacts, PeerCert, RequestState, TlsFacts};
use crate::test_support::{filter_config, head, plain_conn, reply, run_sync};
use courier_config::filters::HttpFilterConfig;
use courier_config::filters::rbac::RbacEngine;

fn config(body: &str) -> RbacConfig {
    let yaml = format!(
        "name: envoy.filters.http.rbac\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC\n{}",
        body.lines().map(|l| format!("  {l}\n")).collect::<String>()
    );
    match filter_config(&yaml).config {
        HttpFilterConfig::Rbac(c) => *c,
        other => panic!("not rbac: {other:?}"),
    }
}

/// An engine with these `(name, permissions, principals)` policies (JSON flow YAML).
fn engine(action: &str, policies: &[(String, String, String)]) -> RbacEngine {
    let mut body = format!("rules:\n  action: {action}\n  policies:\n");
    if policies.is_empty() {
        body = format!("rules:\n  action: {action}\n  policies: {{}}\n");
    }
    for (name, perms, princs) in policies {
        body.push_str(&format!(
            "    \"{name}\": {{permissions: [{perms}], principals: [{princs}]}}\n"
        ));
    }
    config(&body).rules.expect("rules")
}

/// A tiny deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One principal from a vocabulary mixing keyed and scanned kinds.
fn principal(rng: &mut Rng, depth: u32) -> String {
    let k = rng.below(4);
    let choice = rng.below(if depth < 2 { 16 } else { 12 });
    match choice {
        0 => format!("{{header: {{name: x-user, string_match: {{exact: u{k}}}}}}}"),
        1 => format!("{{header: {{name: x-user, string_match: {{prefix: u{k}}}}}}}"),
        2 => format!(
            "{{header: {{name: x-user, string_match: {{exact: u{k}}}, invert_match: true}}}}"
        ),
        3 => format!("{{authenticated: {{principal_name: {{exact: \"spiffe://u{k}\"}}}}}}"),
        4 => format!("{{direct_remote_ip: {{address_prefix: 10.0.0.{k}, prefix_len: 32}}}}"),
        5 => "{direct_remote_ip: {address_prefix: 10.0.0.0, prefix_len: 24}}".to_string(),
        6 => format!("{{remote_ip: {{address_prefix: 192.168.{k}.0, prefix_len: 24}}}}"),
        7 => format!("{{source_ip: {{address_prefix: 10.0.{k}.0, prefix_len: 24}}}}"),
        8 => format!(
            "{{metadata: {{filter: envoy.filters.http.jwt_authn, path: [{{key: p}}, {{key: sub}}], value: {{string_match: {{exact: u{k}}}}}}}}}"
        ),
        9 => "{any: true}".to_string(),
        10 => format!(
            "{{header: {{name: x-user, string_match: {{exact: u{k}, ignore_case: true}}}}}}"
        ),
        11 => "{header: {name: x-user, string_match: {exact: \"\"}, treat_missing_header_as_empty: true}}"
            .to_string(),
        12 => format!("{{not_id: {}}}", principal(rng, depth + 1)),
        13 => format!(
            "{{or_ids: {{ids: [{}, {}]}}}}",
            principal(rng, depth + 1),
            principal(rng, depth + 1)
        ),
        _ => format!(
            "{{and_ids: {{ids: [{}, {}]}}}}",
            principal(rng, depth + 1),
            principal(rng, depth + 1)
        ),
    }
}

fn permission(rng: &mut Rng) -> String {
    match rng.below(3) {
        0 => "{any: true}".to_string(),
        1 => "{header: {name: \":method\", string_match: {exact: GET}}}".to_string(),
        _ => "{url_path: {path: {prefix: /a}}}".to_string(),
    }
}

fn random_policies(rng: &mut Rng, n: usize) -> Vec<(String, String, String)> {
    (0..n)
        .map(|i| {
            let princs: Vec<String> = (0..1 + rng.below(2)).map(|_| principal(rng, 0)).collect();
            (
                format!("p{:02}-{}", rng.below(100), i),
                permission(rng),
                princs.join(", "),
            )
        })
        .collect()
}

/// A connection from 10.0.<a>.<b> with, maybe, a client certificate.
fn conn(rng: &mut Rng) -> ConnFacts {
    let mut c = plain_conn();
    let ip = format!("10.0.{}.{}:5000", rng.below(2), rng.below(5));
    c.peer = ip.parse().unwrap();
    c.source = format!("10.0.{}.1:5000", rng.below(5)).parse().unwrap();
    if rng.below(2) == 0 {
        let k = rng.below(5);
        c.tls = Some(TlsFacts {
            sni: None,
            peer_cert: Some(PeerCert {
                uri_sans: vec![format!("spiffe://u{k}")],
                dns_sans: vec![format!("u{}.example", rng.below(4))],
                subject: format!("CN=spiffe://u{}", rng.below(5)),
            }),
        });
    }
    c
}

fn request<'c>(rng: &mut Rng, conn: &'c ConnFacts) -> RequestState<'c> {
    let method = if rng.below(2) == 0 { "GET" } else { "POST" };
    let path = if rng.below(2) == 0 { "/a/x" } else { "/b" };
    let users = [
        vec![],
        vec!["u0"],
        vec!["u1"],
        vec!["u2"],
        vec!["U3"],
        vec![""],
        vec!["u1", "u2"],
        vec!["u10"],
    ];
    let mut headers: Vec<(&str, &str)> = Vec::new();
    for u in &users[rng.below(users.len() as u64) as usize] {
        headers.push(("x-user", u));
    }
    let remote = format!("192.168.{}.7", rng.below(5)).parse().unwrap();
    let mut req = RequestState::new(head(method, path, &headers), conn, remote, None);
    if rng.below(3) != 0 {
        let sub = format!("u{}", rng.below(5));
        req.set_metadata(
            "envoy.filters.http.jwt_authn",
            "p",
            serde_json::json!({ "sub": sub }),
        );
    }
    req
}

fn same(engine: &RbacEngine, req: &RequestState<'_>) {
    let a = evaluate(engine, req);
    let b = evaluate_linear(engine, req);
    assert_eq!(a.allowed, b.allowed);
    assert_eq!(
        a.matched.map(|p| &p.name),
        b.matched.map(|p| &p.name),
        "policies: {:#?}",
        engine.policies
    );
}

/// Random engines mixing keyed principals (header/principal_name exact, CIDRs, metadata
/// exact, or_ids and and_ids of them) with scanned ones (prefix, ignore_case, inverted,
/// not_id, any, treat_missing_header_as_empty): the index reports the same first policy
/// as a linear scan for every request.
#[test]
fn index_agrees_with_linear_scan_on_random_mixed_policies() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut indexed = 0usize;
    for round in 0..300 {
        let n = 1 + rng.below(12) as usize;
        let policies = random_policies(&mut rng, n);
        let action = ["ALLOW", "DENY", "LOG"][round % 3];
        let e = engine(action, &policies);
        indexed += e.policies.len() - e.index.scan.len();
        for _ in 0..20 {
            let c = conn(&mut rng);
            let req = request(&mut rng, &c);
            same(&e, &req);
        }
    }
    // The vocabulary really exercised the index.
    assert!(indexed > 300, "only {indexed} policies were indexed");
}

/// 1000 policies, each on one exact header value: a request tests one policy, where a
/// linear scan tests all up to the match.
#[test]
fn exact_header_policies_are_looked_up_not_scanned() {
    let policies: Vec<_> = (0..1000)
        .map(|i| {
            (
                format!("user-{i:04}"),
                "{any: true}".to_string(),
                format!("{{header: {{name: x-user, string_match: {{exact: u{i}}}}}}}"),
            )
        })
        .collect();
    let e = engine("ALLOW", &policies);
    assert!(e.index.scan.is_empty());
    let c = plain_conn();
    let req = RequestState::new(
        head("GET", "/", &[("x-user", "u999")]),
        &c,
        c.peer.ip(),
        None,
    );
    let mut evaluated = 0;
    let r = evaluate_counted(&e, &req, &mut evaluated);
    assert_eq!(r.matched.map(|p| p.name.as_str()), Some("user-0999"));
    assert_eq!(evaluated, 1);
    // An unknown user tests nothing and is denied.
    let req = RequestState::new(
        head("GET", "/", &[("x-user", "nobody")]),
        &c,
        c.peer.ip(),
        None,
    );
    let mut evaluated = 0;
    assert!(!evaluate_counted(&e, &req, &mut evaluated).allowed);
    assert_eq!(evaluated, 0);
}

/// CIDR, principal_name and metadata keys are looked up too; scanned policies still run.
#[test]
fn cidr_name_and_metadata_policies_are_looked_up() {
    let mut policies = Vec::new();
    for i in 0..200 {
        policies.push((
            format!("net-{i:03}"),
            "{any: true}".to_string(),
            format!("{{direct_remote_ip: {{address_prefix: 10.{i}.0.0, prefix_len: 16}}}}"),
        ));
        policies.push((
            format!("san-{i:03}"),
            "{any: true}".to_string(),
            format!("{{authenticated: {{principal_name: {{exact: \"spiffe://s{i}\"}}}}}}"),
        ));
        policies.push((
            format!("sub-{i:03}"),
            "{any: true}".to_string(),
            format!(
                "{{metadata: {{filter: envoy.filters.http.jwt_authn, path: [{{key: p}}, {{key: sub}}], value: {{string_match: {{exact: s{i}}}}}}}}}"
            ),
        ));
    }
    policies.push((
        "zz-prefix".to_string(),
        "{any: true}".to_string(),
        "{header: {name: x-user, string_match: {prefix: adm}}}".to_string(),
    ));
    let e = engine("ALLOW", &policies);
    assert_eq!(e.index.scan.len(), 1);

    let mut c = plain_conn();
    c.peer = "10.150.3.4:1000".parse().unwrap();
    let req = RequestState::new(head("GET", "/", &[]), &c, c.peer.ip(), None);
    let mut n = 0;
    let r = evaluate_counted(&e, &req, &mut n);
    assert_eq!(r.matched.map(|p| p.name.as_str()), Some("net-150"));
    assert_eq!(n, 2); // the scanned policy and the one CIDR candidate

    let mut c = plain_conn();
    c.peer = "127.0.0.1:1000".parse().unwrap();
    c.tls = Some(TlsFacts {
        sni: None,
        peer_cert: Some(PeerCert {
            uri_sans: vec!["spiffe://s77".into()],
            dns_sans: vec![],
            subject: "CN=x".into(),
        }),
    });
    let mut req = RequestState::new(head("GET", "/", &[]), &c, c.peer.ip(), None);
    let mut n = 0;
    assert_eq!(
        evaluate_counted(&e, &req, &mut n)
            .matched
            .map(|p| p.name.as_str()),
        Some("san-077")
    );
    assert_eq!(n, 2);
    // With a JWT subject too, the lower name wins (san-077 < sub-010), as in a scan.
    req.set_metadata(
        "envoy.filters.http.jwt_authn",
        "p",
        serde_json::json!({"sub": "s10"}),
    );
    let r = evaluate(&e, &req);
    assert_eq!(r.matched.map(|p| p.name.as_str()), Some("san-077"));
    assert_eq!(
        evaluate_linear(&e, &req).matched.map(|p| p.name.as_str()),
        Some("san-077")
    );
}

/// When several policies match, the reported one is the first in name order (Envoy keeps
/// policies in a std::map), whether it is indexed or scanned.
#[test]
fn first_policy_in_name_order_is_reported_when_several_match() {
    let rules = r#"
rules:
  action: DENY
  policies:
    "b exact": {permissions: [{any: true}], principals: [{header: {name: x-user, string_match: {exact: bob}}}]}
    "a prefix": {permissions: [{any: true}], principals: [{header: {name: x-user, string_match: {prefix: bo}}}]}
    "c exact": {permissions: [{any: true}], principals: [{header: {name: x-user, string_match: {exact: bo}}}]}
    "d prefix": {permissions: [{any: true}], principals: [{header: {name: x-user, string_match: {prefix: b}}}]}
"#;
    let f = RbacFilter::new(Arc::new(config(rules)));
    let c = plain_conn();
    let details = |user: &str| {
        let mut req =
            RequestState::new(head("GET", "/", &[("x-user", user)]), &c, c.peer.ip(), None);
        reply(run_sync(&f, &mut req, None)).details
    };
    assert_eq!(
        details("bob"),
        "rbac_access_denied_matched_policy[a_prefix]"
    );
    assert_eq!(details("bo"), "rbac_access_denied_matched_policy[a_prefix]");
    assert_eq!(details("bx"), "rbac_access_denied_matched_policy[d_prefix]");
    let mut req = RequestState::new(head("GET", "/", &[("x-user", "x")]), &c, c.peer.ip(), None);
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
}

/// not_id, or_ids and and_ids through the index, in enforced and shadow rules.
#[test]
fn compound_principals_and_shadow_rules_agree_with_scan() {
    let policies = r#"
    "a-and": {permissions: [{any: true}], principals: [{and_ids: {ids: [{header: {name: x-user, string_match: {exact: alice}}}, {not_id: {direct_remote_ip: {address_prefix: 10.0.0.0, prefix_len: 24}}}]}}]}
    "b-or": {permissions: [{any: true}], principals: [{or_ids: {ids: [{header: {name: x-user, string_match: {exact: bob}}}, {remote_ip: {address_prefix: 192.168.0.0, prefix_len: 16}}]}}]}
    "c-not": {permissions: [{any: true}], principals: [{not_id: {header: {name: x-user, string_match: {exact: carol}}}}]}
"#;
    let rules = format!(
        "rules:\n  action: ALLOW\n  policies:{policies}shadow_rules:\n  action: DENY\n  policies:{policies}"
    );
    let cfg = config(&rules);
    let enforced = cfg.rules.as_ref().unwrap();
    let shadow = cfg.shadow_rules.as_ref().unwrap();
    // a-and is keyed by its header member, b-or by both members, c-not is scanned.
    assert_eq!(enforced.index.scan, vec![2]);
    assert_eq!(shadow.index.scan, vec![2]);
    let f = RbacFilter::new(Arc::new(cfg.clone()));
    let cases: [(&str, &str, &str, Option<&str>); 6] = [
        ("alice", "10.0.0.1:1", "10.0.0.1", Some("c-not")),
        ("alice", "10.9.0.1:1", "10.9.0.1", Some("a-and")),
        ("bob", "10.0.0.1:1", "10.0.0.1", Some("b-or")),
        ("carol", "10.0.0.1:1", "192.168.3.3", Some("b-or")),
        ("carol", "10.0.0.1:1", "10.0.0.1", None),
        ("dave", "10.0.0.1:1", "10.0.0.1", Some("c-not")),
    ];
    for (user, peer, remote, want) in cases {
        let mut c = plain_conn();
        c.peer = peer.parse().unwrap();
        let mut req = RequestState::new(
            head("GET", "/", &[("x-user", user)]),
            &c,
            remote.parse().unwrap(),
            None,
        );
        for e in [enforced, shadow] {
            same(e, &req);
            assert_eq!(evaluate(e, &req).matched.map(|p| p.name.as_str()), want);
        }
        let v = run_sync(&f, &mut req, None);
        assert_eq!(matches!(v, Verdict::Continue), want.is_some(), "{user}");
        let md = &req.metadata[METADATA_NAMESPACE];
        match want {
            Some(name) => {
                assert_eq!(md["shadow_effective_policy_id"], name);
                assert_eq!(md["shadow_engine_result"], "denied");
            }
            None => {
                assert!(md.get("shadow_effective_policy_id").is_none());
                assert_eq!(md["shadow_engine_result"], "allowed");
            }
        }
    }
}

/// No policies: ALLOW denies everything, DENY allows everything (envoy-reference 4.1).
#[test]
fn empty_engine_through_the_index() {
    let c = plain_conn();
    let req = RequestState::new(head("GET", "/", &[]), &c, c.peer.ip(), None);
    assert!(!evaluate(&engine("ALLOW", &[]), &req).allowed);
    assert!(evaluate(&engine("DENY", &[]), &req).allowed);
}

/// track_per_rule_stats counts the effective policy found through the index (by its
/// position in name order), for allowed and denied requests.
#[test]
fn per_rule_stats_follow_indexed_policies() {
    let rules = r#"
track_per_rule_stats: true
rules:
  action: DENY
  policies:
    "c": {permissions: [{any: true}], principals: [{header: {name: x-user, string_match: {exact: carol}}}]}
    "a": {permissions: [{any: true}], principals: [{header: {name: x-user, string_match: {exact: alice}}}]}
    "b": {permissions: [{any: true}], principals: [{header: {name: x-user, string_match: {prefix: bo}}}]}
"#;
    let f = RbacFilter::new(Arc::new(config(rules)));
    let c = plain_conn();
    for user in ["carol", "carol", "alice", "bob", "dave"] {
        let mut req =
            RequestState::new(head("GET", "/", &[("x-user", user)]), &c, c.peer.ip(), None);
        let _ = run_sync(&f, &mut req, None);
    }
    let got: Vec<(&str, u64)> = f
        .stats()
        .get(0)
        .per_policy
        .iter()
        .map(|p| {
            (
                p.name.as_str(),
                p.denied.load(std::sync::atomic::Ordering::Relaxed),
            )
        })
        .collect();
    assert_eq!(got, [("a", 1), ("b", 1), ("c", 2)]);
    assert_eq!(f.stats().sum(|s| &s.allowed), 1);
}

/// A route's RBACPerRoute override is compiled with its own index, and answers through it.
#[test]
fn per_route_override_is_indexed_too() {
    let f = RbacFilter::new(Arc::new(config(
        "rules:\n  action: ALLOW\n  policies: {}\n",
    )));
    let over = crate::test_support::per_route_config(
        "envoy.filters.http.rbac",
        r#""@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute
rbac:
  rules:
    action: ALLOW
    policies:
      alice: {permissions: [{any: true}], principals: [{header: {name: x-user, string_match: {exact: alice}}}]}
      bob: {permissions: [{any: true}], principals: [{header: {name: x-user, string_match: {exact: bob}}}]}
"#,
    );
    let Some(courier_config::filters::PerRouteFilterConfig::Rbac(r)) = over.config.as_ref() else {
        panic!("not an RBAC override");
    };
    let engine = r.rbac.as_ref().and_then(|c| c.rules.as_ref()).unwrap();
    assert!(engine.index.scan.is_empty());
    assert_eq!(engine.index.headers.len(), 1);
    let c = plain_conn();
    let mut req = RequestState::new(
        head("GET", "/", &[("x-user", "bob")]),
        &c,
        c.peer.ip(),
        None,
    );
    let mut n = 0;
    assert_eq!(
        evaluate_counted(engine, &req, &mut n)
            .matched
            .map(|p| p.name.as_str()),
        Some("bob")
    );
    assert_eq!(n, 1);
    assert!(matches!(
        run_sync(&f, &mut req, over.config.as_ref()),
        Verdict::Continue
    ));
    let mut req = RequestState::new(
        head("GET", "/", &[("x-user", "eve")]),
        &c,
        c.peer.ip(),
        None,
    );
    assert_eq!(
        reply(run_sync(&f, &mut req, over.config.as_ref())).status,
        403
    );
}
