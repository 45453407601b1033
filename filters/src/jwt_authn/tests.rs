use super::*;
use crate::chain::Verdict;
use crate::test_support::{
    TestKey, ec_key, filter_config, head, now, per_route_config, plain_conn, reply, rsa_key, run,
    run_sync, state,
};
use courier_config::filters::HttpFilterConfig;
use courier_config::filters::http_uri::HttpUri;
use serde_json::json;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

const ISS: &str = "https://issuer.example";

fn jwks(keys: &[serde_json::Value]) -> String {
    json!({ "keys": keys }).to_string()
}

/// A jwt_authn filter from the YAML body of `JwtAuthentication` (`JWKS` is replaced by the
/// RSA key's JWKS).
fn jwt_with(body: &str, fetcher: Option<Arc<dyn JwksFetcher>>) -> JwtAuthnFilter {
    let body = body.replace("JWKS", &jwks(&[rsa_key().jwk.clone()]));
    let yaml = format!(
        "name: envoy.filters.http.jwt_authn\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication\n{}",
        body.lines().map(|l| format!("  {l}\n")).collect::<String>()
    );
    match filter_config(&yaml).config {
        HttpFilterConfig::JwtAuthn(c) => JwtAuthnFilter::new(Arc::new(*c), fetcher),
        other => panic!("not jwt_authn: {other:?}"),
    }
}

fn jwt(body: &str) -> JwtAuthnFilter {
    jwt_with(body, None)
}

const BASIC: &str = r#"
providers:
  a:
    issuer: https://issuer.example
    audiences: [api.example]
    local_jwks: {inline_string: 'JWKS'}
    payload_in_metadata: p
    forward_payload_header: x-jwt-payload
    claim_to_headers: [{header_name: x-sub, claim_name: sub}, {header_name: x-level, claim_name: ext.level}]
rules:
- match: {prefix: /public}
- match: {prefix: /}
  requires: {provider_name: a}
"#;

fn good_claims() -> serde_json::Value {
    json!({"iss": ISS, "sub": "alice", "aud": "https://api.example/", "exp": now() + 600, "ext": {"level": 3}})
}

fn rsa_token(claims: &serde_json::Value) -> String {
    rsa_key().mint(None, claims)
}

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

fn www(r: &crate::chain::LocalReply) -> &str {
    r.headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap())
        .unwrap_or("")
}

/// envoy-reference 11 case 17.
#[test]
fn missing_token_is_401_with_realm_and_no_error() {
    let f = jwt(BASIC);
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/api?q=1", &[("host", "h.example")]));
    let r = reply(run_sync(&f, &mut req, None));
    assert_eq!(r.status, 401);
    assert_eq!(&r.body[..], b"Jwt is missing");
    assert_eq!(www(&r), r#"Bearer realm="http://h.example/api?q=1""#);
    assert_eq!(r.details, "jwt_authn_access_denied{Jwt_is_missing}");
    assert_eq!(f.stats().sum(|s| &s.denied), 1);
}

/// envoy-reference 11 case 18 (clock skew 60 s by default).
#[test]
fn expired_beyond_skew_is_401_within_skew_passes() {
    let f = jwt(BASIC);
    let conn = plain_conn();
    let mut c = good_claims();
    c["exp"] = json!(now() - 61);
    let t = rsa_token(&c);
    let mut req = state(
        &conn,
        head(
            "GET",
            "/x",
            &[("host", "h"), ("authorization", &bearer(&t))],
        ),
    );
    let r = reply(run_sync(&f, &mut req, None));
    assert_eq!(
        (r.status.as_u16(), &r.body[..]),
        (401, &b"Jwt is expired"[..])
    );
    assert_eq!(
        www(&r),
        r#"Bearer realm="http://h/x", error="invalid_token""#
    );
    c["exp"] = json!(now() - 30);
    let t = rsa_token(&c);
    let mut req = state(&conn, head("GET", "/x", &[("authorization", &bearer(&t))]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
}

/// envoy-reference 11 case 19.
#[test]
fn wrong_audience_is_403() {
    let f = jwt(BASIC);
    let conn = plain_conn();
    let mut c = good_claims();
    c["aud"] = json!(["other", "http://else/"]);
    let t = rsa_token(&c);
    let mut req = state(
        &conn,
        head(
            "GET",
            "/x",
            &[("host", "h"), ("authorization", &bearer(&t))],
        ),
    );
    let r = reply(run_sync(&f, &mut req, None));
    assert_eq!(r.status, 403);
    assert_eq!(&r.body[..], b"Audiences in Jwt are not allowed");
    assert_eq!(
        www(&r),
        r#"Bearer realm="http://h/x", error="invalid_token""#
    );
}

#[test]
fn good_rs256_token_yields_headers_metadata_and_is_removed() {
    let f = jwt(BASIC);
    let conn = plain_conn();
    let t = rsa_token(&good_claims());
    let mut req = state(
        &conn,
        head(
            "GET",
            "/x",
            &[
                ("authorization", &bearer(&t)),
                ("x-sub", "mallory"),
                ("x-jwt-payload", "forged"),
            ],
        ),
    );
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let h = &req.head.headers;
    assert!(h.get("authorization").is_none());
    assert_eq!(h.get_all("x-sub").iter().count(), 1);
    assert_eq!(h["x-sub"], "alice");
    assert_eq!(h["x-level"], "3");
    assert_eq!(h["x-jwt-payload"], t.split('.').nth(1).unwrap());
    assert_eq!(req.metadata[METADATA_NAMESPACE]["p"]["sub"], "alice");
    assert_eq!(f.stats().sum(|s| &s.allowed), 1);
}

#[test]
fn rule_without_requires_lets_requests_through() {
    let f = jwt(BASIC);
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/public/x", &[("x-sub", "kept")]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    // Not checked => the filter's own headers are not touched either.
    assert_eq!(req.head.headers["x-sub"], "kept");
}

#[test]
fn bad_tokens_report_envoys_strings() {
    let f = jwt(BASIC);
    let conn = plain_conn();
    let mut cases: Vec<(String, &str)> = vec![
        (
            "abc".into(),
            "Jwt is not in the form of Header.Payload.Signature with two dots and 3 sections",
        ),
        (
            "e30.e30.c2ln".into(),
            "Jwt header [alg] field is required and must be a string",
        ),
        (
            "eyJhbGciOiJub25lIn0.e30.c2ln".into(),
            "Jwt header [alg] is not supported",
        ),
    ];
    let mut c = good_claims();
    c["iss"] = json!("https://evil");
    cases.push((rsa_token(&c), "Jwt issuer is not configured"));
    let mut c = good_claims();
    c["nbf"] = json!(now() + 3600);
    cases.push((rsa_token(&c), "Jwt not yet valid"));
    // Signed by a key the JWKS does not have.
    let other = ec_key();
    cases.push((
        other.mint(None, &good_claims()),
        "Jwks doesn't have key to match kid or alg from Jwt",
    ));
    let good = rsa_token(&good_claims());
    let (msg, _) = good.rsplit_once('.').unwrap();
    let forged = format!("{msg}.{}", "A".repeat(342));
    cases.push((forged, "Jwt verification fails"));
    for (token, want) in cases {
        let mut req = state(
            &conn,
            head("GET", "/x", &[("authorization", &bearer(&token))]),
        );
        let r = reply(run_sync(&f, &mut req, None));
        assert_eq!(
            (r.status.as_u16(), std::str::from_utf8(&r.body).unwrap()),
            (401, want),
            "{token}"
        );
    }
}

#[test]
fn es256_kid_selection() {
    let k1 = ec_key();
    let k2 = ec_key();
    let body = format!(
        "providers:\n  a:\n    local_jwks: {{inline_string: '{}'}}\n    forward: true\nrules:\n- match: {{prefix: /}}\n  requires: {{provider_name: a}}\n",
        jwks(&[k1.jwk_with_kid("k1"), k2.jwk_with_kid("k2")])
    );
    let f = jwt(&body);
    let conn = plain_conn();
    let claims = json!({"sub": "x", "exp": now() + 60});
    let check = |key: &TestKey, kid: Option<&str>| {
        let t = key.mint(kid, &claims);
        let mut req = state(&conn, head("GET", "/", &[("authorization", &bearer(&t))]));
        match run_sync(&f, &mut req, None) {
            Verdict::Continue => {
                // forward: true keeps the token.
                assert!(req.head.headers.contains_key("authorization"));
                "ok".to_string()
            }
            Verdict::Respond(r) => String::from_utf8(r.body.to_vec()).unwrap(),
        }
    };
    assert_eq!(check(&k2, Some("k2")), "ok");
    assert_eq!(check(&k1, None), "ok");
    assert_eq!(check(&k1, Some("k2")), "Jwt verification fails");
    assert_eq!(
        check(&k1, Some("k3")),
        "Jwks doesn't have key to match kid or alg from Jwt"
    );
}

/// envoy-reference 11 case 21.
#[test]
fn requires_any_with_allow_missing() {
    let body = BASIC.replace(
        "requires: {provider_name: a}",
        "requires: {requires_any: {requirements: [{provider_name: a}, {allow_missing: {}}]}}",
    );
    let f = jwt(&body);
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/x", &[]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let mut c = good_claims();
    c["exp"] = json!(now() - 3600);
    let t = rsa_token(&c);
    let mut req = state(&conn, head("GET", "/x", &[("authorization", &bearer(&t))]));
    let r = reply(run_sync(&f, &mut req, None));
    assert_eq!(
        (r.status.as_u16(), &r.body[..]),
        (401, &b"Jwt is expired"[..])
    );
    let t = rsa_token(&good_claims());
    let mut req = state(&conn, head("GET", "/x", &[("authorization", &bearer(&t))]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    assert_eq!(req.head.headers["x-sub"], "alice");
}

#[test]
fn allow_missing_or_failed_always_passes_but_keeps_good_tokens_effects() {
    let body = BASIC.replace(
        "requires: {provider_name: a}",
        "requires: {allow_missing_or_failed: {}}",
    );
    let f = jwt(&body);
    let conn = plain_conn();
    let mut req = state(
        &conn,
        head("GET", "/x", &[("authorization", "Bearer bad.bad.bad")]),
    );
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let t = rsa_token(&good_claims());
    let mut req = state(&conn, head("GET", "/x", &[("authorization", &bearer(&t))]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    assert_eq!(req.metadata[METADATA_NAMESPACE]["p"]["sub"], "alice");
}

#[test]
fn requires_all_and_provider_and_audiences_and_locations() {
    let k = ec_key();
    let body = format!(
        r#"providers:
  a:
    issuer: https://issuer.example
    local_jwks: {{inline_string: 'JWKS'}}
    from_params: [token]
  b:
    issuer: https://b.example
    local_jwks: {{inline_string: '{}'}}
    from_headers: [{{name: x-b, value_prefix: "Token "}}]
    from_cookies: [bc]
rules:
- match: {{prefix: /}}
  requires:
    requires_all:
      requirements:
      - provider_and_audiences: {{provider_name: a, audiences: [special]}}
      - provider_name: b
"#,
        jwks(std::slice::from_ref(&k.jwk))
    );
    let f = jwt(&body);
    let conn = plain_conn();
    let ta = rsa_token(&json!({"iss": ISS, "aud": "special", "exp": now() + 60}));
    let tb = k.mint(
        None,
        &json!({"iss": "https://b.example", "exp": now() + 60}),
    );
    let mut req = state(
        &conn,
        head(
            "GET",
            &format!("/x?token={ta}"),
            &[("x-b", &format!("a=1, Token {tb}"))],
        ),
    );
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    assert!(!req.head.headers.contains_key("x-b"));
    let mut req = state(
        &conn,
        head(
            "GET",
            &format!("/x?token={ta}"),
            &[("cookie", &format!("z=1; bc={tb}"))],
        ),
    );
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    // The cookie is never removed.
    assert!(req.head.headers.contains_key("cookie"));
    let mut req = state(&conn, head("GET", &format!("/x?token={ta}"), &[]));
    assert_eq!(
        &reply(run_sync(&f, &mut req, None)).body[..],
        b"Jwt is missing"
    );
    let ta = rsa_token(&json!({"iss": ISS, "aud": "api.example", "exp": now() + 60}));
    let mut req = state(
        &conn,
        head(
            "GET",
            &format!("/x?token={ta}"),
            &[("x-b", &format!("Token {tb}"))],
        ),
    );
    assert_eq!(reply(run_sync(&f, &mut req, None)).status, 403);
}

/// envoy-reference 11 case 22, plus per-route `disabled` and a named requirement.
#[test]
fn per_route_requirement_name_and_disabled() {
    let body = format!(
        "{BASIC}requirement_map:\n  zed: {{provider_name: a}}\n  alpha: {{allow_missing: {{}}}}\n"
    );
    let f = jwt(&body);
    let conn = plain_conn();
    let cfg = |yaml: &str| {
        per_route_config(
            "jwt",
            &format!(
                "\"@type\": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig\n{yaml}\n"
            ),
        )
    };
    let nope = cfg("requirement_name: nope");
    let mut req = state(&conn, head("GET", "/x", &[]));
    let r = reply(run_sync(&f, &mut req, nope.config.as_ref()));
    assert_eq!(r.status, 403);
    assert_eq!(
        std::str::from_utf8(&r.body).unwrap(),
        "Failed JWT authentication: Wrong requirement_name: nope. It should be one of [alpha,zed]"
    );
    let alpha = cfg("requirement_name: alpha");
    let mut req = state(&conn, head("GET", "/x", &[]));
    assert!(matches!(
        run_sync(&f, &mut req, alpha.config.as_ref()),
        Verdict::Continue
    ));
    let off = cfg("disabled: true");
    let mut req = state(&conn, head("GET", "/x", &[]));
    assert!(matches!(
        run_sync(&f, &mut req, off.config.as_ref()),
        Verdict::Continue
    ));
}

#[test]
fn cors_preflight_bypass_and_stripped_failure() {
    let body = format!("{BASIC}bypass_cors_preflight: true\nstrip_failure_response: true\n");
    let f = jwt(&body);
    let conn = plain_conn();
    let mut req = state(
        &conn,
        head(
            "OPTIONS",
            "/x",
            &[("origin", "o"), ("access-control-request-method", "GET")],
        ),
    );
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    assert_eq!(f.stats().sum(|s| &s.cors_preflight_bypassed), 1);
    let mut req = state(&conn, head("GET", "/x", &[]));
    let r = reply(run_sync(&f, &mut req, None));
    assert_eq!(r.status, 401);
    assert!(r.body.is_empty());
    assert!(r.headers.get("www-authenticate").is_none());
}

#[test]
fn jwt_cache_turns_a_repeated_token_into_a_hit() {
    let body = BASIC.replace(
        "payload_in_metadata: p",
        "payload_in_metadata: p\n    jwt_cache_config: {jwt_cache_size: 4}",
    );
    let f = jwt(&body);
    let conn = plain_conn();
    let t = rsa_token(&good_claims());
    for _ in 0..3 {
        let mut req = state(&conn, head("GET", "/x", &[("authorization", &bearer(&t))]));
        assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
        assert_eq!(req.head.headers["x-sub"], "alice");
    }
    assert_eq!(f.stats().sum(|s| &s.jwt_cache_miss), 1);
    assert_eq!(f.stats().sum(|s| &s.jwt_cache_hit), 2);
    // A cached token is still subject to the audience check of the requirement.
    let mut c = good_claims();
    c["aud"] = json!("nope");
    let bad = rsa_token(&c);
    for _ in 0..2 {
        let mut req = state(
            &conn,
            head("GET", "/x", &[("authorization", &bearer(&bad))]),
        );
        assert_eq!(reply(run_sync(&f, &mut req, None)).status, 403);
    }
}

#[path = "tests_remote.rs"]
mod remote;

/// `failed_status_in_metadata`: a passing `allow_missing_or_failed` still records why a
/// token failed, with Envoy's status number; a refused request records it too.
#[test]
fn failed_status_in_metadata_records_each_failed_token() {
    let body = BASIC
        .replace(
            "    payload_in_metadata: p",
            "    payload_in_metadata: p\n    failed_status_in_metadata: fs",
        )
        .replace(
            "requires: {provider_name: a}",
            "requires: {allow_missing_or_failed: {}}",
        );
    let f = jwt(&body);
    let conn = plain_conn();
    let mut c = good_claims();
    c["exp"] = json!(now() - 3600);
    let t = rsa_token(&c);
    let mut req = state(&conn, head("GET", "/x", &[("authorization", &bearer(&t))]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    assert_eq!(
        req.metadata[METADATA_NAMESPACE]["fs"],
        json!({"code": 3, "message": "Jwt is expired"})
    );
    // Refused (provider requirement): missing token, the single provider's key.
    let f = jwt(&BASIC.replace(
        "    payload_in_metadata: p",
        "    failed_status_in_metadata: fs",
    ));
    let mut req = state(&conn, head("GET", "/x", &[]));
    let r = reply(run_sync(&f, &mut req, None));
    assert_eq!(r.status.as_u16(), 401);
    assert_eq!(
        req.metadata[METADATA_NAMESPACE]["fs"],
        json!({"code": 1, "message": "Jwt is missing"})
    );
}

/// `normalize_payload_in_metadata.space_delimited_claims`: a listed string claim reaches
/// the payload metadata as the list of its words (empty words dropped, as Envoy's
/// `StrSplit(.., SkipEmpty)`); a listed claim that is not a string, or has no word, and
/// every claim not listed, stay as the token has them.
#[test]
fn normalize_payload_in_metadata_splits_listed_claims() {
    let f = jwt(&BASIC.replace(
        "    payload_in_metadata: p",
        "    payload_in_metadata: p\n    normalize_payload_in_metadata: {space_delimited_claims: [scope, roles, blank, absent]}",
    ));
    let conn = plain_conn();
    let mut c = good_claims();
    c["scope"] = json!(" read  write admin ");
    c["roles"] = json!(["x y"]);
    c["blank"] = json!("   ");
    c["other"] = json!("a b");
    let t = rsa_token(&c);
    let mut req = state(&conn, head("GET", "/x", &[("authorization", &bearer(&t))]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
    let p = &req.metadata[METADATA_NAMESPACE]["p"];
    assert_eq!(p["scope"], json!(["read", "write", "admin"]));
    assert_eq!(p["roles"], json!(["x y"]));
    assert_eq!(p["blank"], json!("   "));
    assert_eq!(p["other"], json!("a b"));
    assert!(p.get("absent").is_none());
    // The header forwarded is the token's own payload, untouched by the normalization.
    let fwd = req.head.headers["x-jwt-payload"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(fwd, t.split('.').nth(1).unwrap());
}
