//! The HTTP filter chain through the real binary: jwt_authn with a local JWKS (tokens
//! signed in the test with a key generated in the test) and RBAC, in front of an echo
//! upstream on loopback that reports what it received.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use support::*;

/// A P-256 signing key and its public JWKS.
struct Key {
    encoding: EncodingKey,
    jwks: String,
}

fn key() -> Key {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let raw = kp.public_key_raw();
    assert_eq!(raw.len(), 65);
    let jwk = serde_json::json!({
        "kty": "EC", "crv": "P-256", "alg": "ES256",
        "x": URL_SAFE_NO_PAD.encode(&raw[1..33]), "y": URL_SAFE_NO_PAD.encode(&raw[33..65]),
    });
    Key {
        encoding: EncodingKey::from_ec_der(kp.serialized_der()),
        jwks: serde_json::json!({ "keys": [jwk] }).to_string(),
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

impl Key {
    fn token(&self, sub: &str, exp: i64) -> String {
        let claims = serde_json::json!({"iss": "https://issuer.test", "sub": sub, "exp": exp});
        jsonwebtoken::encode(&Header::new(Algorithm::ES256), &claims, &self.encoding).unwrap()
    }
}

fn jwt_filter(key: &Key, forward: bool) -> String {
    format!(
        r#"- name: envoy.filters.http.jwt_authn
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
    providers:
      test:
        issuer: https://issuer.test
        forward: {forward}
        payload_in_metadata: jwt_payload
        claim_to_headers: [{{header_name: x-jwt-sub, claim_name: sub}}]
        local_jwks: {{inline_string: '{jwks}'}}
    rules:
    - match: {{prefix: "/"}}
      requires: {{provider_name: test}}
"#,
        jwks = key.jwks
    )
}

const ALICE_ONLY: &str = r#"- name: envoy.filters.http.rbac
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
    rules:
      action: ALLOW
      policies:
        alice:
          permissions: [{any: true}]
          principals:
          - metadata:
              filter: envoy.filters.http.jwt_authn
              path: [{key: jwt_payload}, {key: sub}]
              value: {string_match: {exact: alice}}
"#;

const DENY_ADMIN: &str = r#"- name: envoy.filters.http.rbac
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
    rules:
      action: DENY
      policies:
        no-admin:
          permissions: [{url_path: {path: {prefix: "/admin"}}}]
          principals: [{any: true}]
"#;

async fn start(filters: &str) -> Courier {
    start_routes(filters, "/").await
}

/// courier with one route, on `prefix`, to an echo upstream.
async fn start_routes(filters: &str, prefix: &str) -> Courier {
    let up = echo_upstream("up").await;
    let clusters = static_cluster("web", &[up], "");
    courier_filters(
        &["--concurrency", "1", "--drain-time-s", "1"],
        "",
        "",
        &format!("- match: {{prefix: \"{prefix}\"}}\n  route: {{cluster: web}}\n"),
        &clusters,
        filters,
    )
    .await
}

#[tokio::test]
async fn filters_run_before_the_router_also_without_a_route() {
    let k = key();
    let c = start_routes(&jwt_filter(&k, false), "/api").await;
    let mut h1 = H1::connect(c.listener).await;
    // No route matches /other, but jwt_authn answers first, as in Envoy.
    let r = h1.get("/other", &[]).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(r.body, "Jwt is missing");
    let good = format!("Bearer {}", k.token("alice", now() + 600));
    let r = h1.get("/other", &[("authorization", &good)]).await;
    assert_eq!(r.status, 404, "{r:?}");
    let r = h1.get("/api", &[("authorization", &good)]).await;
    assert_eq!(r.status, 200, "{r:?}");
}

#[tokio::test]
async fn jwt_authn_with_a_local_jwks_is_enforced() {
    let k = key();
    let c = start(&jwt_filter(&k, false)).await;
    let mut h1 = H1::connect(c.listener).await;

    let r = h1.get("/orders?x=1", &[]).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(r.body, "Jwt is missing");
    // Envoy's realm is the original URI, query included.
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"http://example.com/orders?x=1\"")
    );

    let good = format!("Bearer {}", k.token("alice", now() + 600));
    let r = h1.get("/orders", &[("authorization", &good)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-upstream"), Some("up"));
    assert_eq!(r.seen("x-jwt-sub"), Some("alice"));
    assert_eq!(r.seen("authorization"), None, "{}", r.body);

    let expired = format!("Bearer {}", k.token("alice", now() - 600));
    let r = h1.get("/orders", &[("authorization", &expired)]).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(r.body, "Jwt is expired");

    // A token signed by another key.
    let other = key();
    let foreign = format!("Bearer {}", other.token("alice", now() + 600));
    let r = h1.get("/orders", &[("authorization", &foreign)]).await;
    assert_eq!(r.status, 401, "{r:?}");

    assert_eq!(stat(&c, "http.ingress.jwt_authn.allowed").await, 1);
    assert_eq!(stat(&c, "http.ingress.jwt_authn.denied").await, 3);
}

#[tokio::test]
async fn jwt_authn_forward_keeps_the_authorization_header() {
    let k = key();
    let c = start(&jwt_filter(&k, true)).await;
    let mut h1 = H1::connect(c.listener).await;
    let good = format!("Bearer {}", k.token("bob", now() + 600));
    let r = h1.get("/", &[("authorization", &good)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.seen("authorization"), Some(good.as_str()));
    assert_eq!(r.seen("x-jwt-sub"), Some("bob"));
}

#[tokio::test]
async fn rbac_matches_the_jwt_payload_metadata() {
    let k = key();
    let c = start(&(jwt_filter(&k, false) + ALICE_ONLY)).await;
    let mut h1 = H1::connect(c.listener).await;
    let alice = format!("Bearer {}", k.token("alice", now() + 600));
    let r = h1.get("/x", &[("authorization", &alice)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.seen("x-jwt-sub"), Some("alice"));

    let bob = format!("Bearer {}", k.token("bob", now() + 600));
    let r = h1.get("/x", &[("authorization", &bob)]).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.body, "RBAC: access denied");
    assert_eq!(r.header("x-upstream"), None);
}

#[tokio::test]
async fn rbac_deny_on_a_path_prefix() {
    let c = start(DENY_ADMIN).await;
    let mut h1 = H1::connect(c.listener).await;
    let r = h1.get("/admin/users", &[]).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.body, "RBAC: access denied");
    let r = h1.get("/public", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-upstream"), Some("up"));
    assert_eq!(stat(&c, "http.ingress.rbac.denied").await, 1);
    assert_eq!(stat(&c, "http.ingress.rbac.allowed").await, 1);
}

#[tokio::test]
async fn per_route_configs_turn_filters_off_and_replace_rbac_rules() {
    let k = key();
    let up = echo_upstream("up").await;
    let routes = r#"- match: {prefix: "/open"}
  route: {cluster: web}
  typed_per_filter_config:
    envoy.filters.http.jwt_authn:
      "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig
      disabled: true
    envoy.filters.http.rbac:
      "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
      disabled: true
- match: {prefix: "/bob"}
  route: {cluster: web}
  typed_per_filter_config:
    envoy.filters.http.rbac:
      "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute
      rbac:
        rules:
          action: ALLOW
          policies:
            bob:
              permissions: [{any: true}]
              principals:
              - metadata:
                  filter: envoy.filters.http.jwt_authn
                  path: [{key: jwt_payload}, {key: sub}]
                  value: {string_match: {exact: bob}}
- match: {prefix: "/"}
  route: {cluster: web}
"#;
    let c = courier_filters(
        &["--concurrency", "1", "--drain-time-s", "1"],
        "",
        "",
        routes,
        &static_cluster("web", &[up], ""),
        &(jwt_filter(&k, false) + ALICE_ONLY),
    )
    .await;
    let mut h1 = H1::connect(c.listener).await;
    // Both filters are off on /open: no token needed, no RBAC.
    let r = h1.get("/open", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.seen("x-jwt-sub"), None);

    let alice = format!("Bearer {}", k.token("alice", now() + 600));
    let bob = format!("Bearer {}", k.token("bob", now() + 600));
    // The filter-level rules let only alice through...
    assert_eq!(h1.get("/x", &[("authorization", &alice)]).await.status, 200);
    assert_eq!(h1.get("/x", &[("authorization", &bob)]).await.status, 403);
    // ...the route's RBACPerRoute only bob.
    assert_eq!(h1.get("/bob", &[("authorization", &bob)]).await.status, 200);
    let r = h1.get("/bob", &[("authorization", &alice)]).await;
    assert_eq!(r.status, 403, "{r:?}");
    // jwt_authn still runs there.
    assert_eq!(h1.get("/bob", &[]).await.status, 401);
}

#[tokio::test]
async fn claim_to_headers_claim_path_selects_keys_with_dots() {
    let k = key();
    let filter = jwt_filter(&k, false).replace(
        "claim_to_headers: [{header_name: x-jwt-sub, claim_name: sub}]",
        r#"claim_to_headers:
        - {header_name: x-tenant, claim_path: [{key: "http://example.org/tenant"}]}
        - {header_name: x-deep, claim_path: [{key: a.b}, {key: c.d}]}
        - {header_name: x-split, claim_name: a.b}"#,
    );
    let c = start(&filter).await;
    let mut h1 = H1::connect(c.listener).await;
    let claims = serde_json::json!({
        "iss": "https://issuer.test", "sub": "alice", "exp": now() + 600,
        "http://example.org/tenant": "acme",
        "a.b": {"c.d": "x.y.z"},
        "a": {"b": "split-at-dot"},
    });
    let token = jsonwebtoken::encode(&Header::new(Algorithm::ES256), &claims, &k.encoding).unwrap();
    // A client's own copy of a claim header is replaced.
    let r = h1
        .get(
            "/",
            &[
                ("authorization", &format!("Bearer {token}")),
                ("x-deep", "spoofed"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.seen("x-tenant"), Some("acme"), "{}", r.body);
    assert_eq!(r.seen("x-deep"), Some("x.y.z"), "{}", r.body);
    assert_eq!(r.seen("x-split"), Some("split-at-dot"), "{}", r.body);
}
