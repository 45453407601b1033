//! Rough per-request costs, for the report (the criterion benches belong to the benches
//! crate). Run: `cargo test --release -p courier-filters timing -- --ignored --nocapture`.

use crate::build::build_chain;
use crate::chain::{Decision, FilterChain};
use crate::test_support::{TestKey, ec_key, filter_config, head, now, plain_conn, rsa_key, state};
use serde_json::json;
use tokio::time::Instant;

const N: u32 = 2000;

fn jwt_chain(key: &TestKey, cache: bool) -> FilterChain {
    let cache = if cache {
        "\n      jwt_cache_config: {jwt_cache_size: 100}"
    } else {
        ""
    };
    let f = filter_config(&format!(
        r#"name: jwt
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
  providers:
    a:
      issuer: https://issuer.example
      audiences: [api]
      local_jwks: {{inline_string: '{}'}}
      payload_in_metadata: p{cache}
  rules:
  - match: {{prefix: /}}
    requires: {{provider_name: a}}
"#,
        json!({"keys": [key.jwk.clone()]})
    ));
    build_chain(&[f], None).unwrap().0
}

fn per_request(chain: &FilterChain, headers: &[(&str, &str)]) -> f64 {
    let conn = plain_conn();
    let start = Instant::now();
    for _ in 0..N {
        let mut req = state(&conn, head("GET", "/x", headers));
        for e in chain.entries() {
            match e.filter.decode_headers(&mut req, None) {
                Decision::Continue => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(N)
}

#[test]
#[ignore = "timing, run by hand in release mode"]
fn timing() {
    let claims =
        json!({"iss": "https://issuer.example", "aud": "api", "sub": "alice", "exp": now() + 600});
    let baseline = per_request(&FilterChain::default(), &[("authorization", "Bearer x")]);
    println!("request state only: {baseline:.2} us/request");
    let ec = ec_key();
    for (name, key) in [("ES256", &ec), ("RS256", rsa_key()), ("ES256", &ec)] {
        let auth = format!("Bearer {}", key.mint(None, &claims));
        for cache in [false, true] {
            let us = per_request(&jwt_chain(key, cache), &[("authorization", &auth)]);
            println!("jwt_authn {name} cache={cache}: {us:.2} us/request");
        }
    }
    let mut policies = String::new();
    for i in 0..50 {
        policies.push_str(&format!(
            "      p{i:02}: {{permissions: [{{url_path: {{path: {{prefix: /api{i}}}}}}}], principals: [{{header: {{name: x-user, string_match: {{exact: user{i}}}}}}}]}}\n"
        ));
    }
    policies.push_str("      zz: {permissions: [{any: true}], principals: [{any: true}]}\n");
    let rbac = filter_config(&format!(
        "name: rbac\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC\n  rules:\n    action: ALLOW\n    policies:\n{policies}"
    ));
    let chain = build_chain(&[rbac], None).unwrap().0;
    let us = per_request(&chain, &[("x-user", "nobody")]);
    println!("rbac 51 policies (last matches): {us:.2} us/request");
}
