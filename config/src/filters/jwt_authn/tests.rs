use super::*;
use crate::filters::test_util::{errors, filter, per_route};
use crate::filters::{HttpFilterConfig, PerRouteFilterConfig};
use jsonwebtoken::Algorithm;

/// A 2048-bit RSA public key (generated with openssl for these tests).
const RSA_JWKS: &str = r#"{"keys": [{"kty": "RSA", "n": "6BN65aLzlkctC0O_qIEvZ4SsmCxoLscgqZ8fnVdoCj2dNkf34FBJHhG-Ljl7XTAII_yyYZOP5esf6TOk2fP7aQLCeiCaSS3_3qFQQMLL8RTItjOorF8aux5Sq4MUDKCtzbPtOE9p1vjyEhbJ5O-DsA3Qx3-AiR4WxJ3l5bCIs_vgsKKhv5z-KM8UWpCutaSiJFHL9ugm5EKSF6pik_Pq_f3FFutSXbSif8ji4-tThWlqYdLfZkZUfiFSYgAOwysVGp114ci78gdQzFemrSErJ6sIy49BzjbPc_cIn3i8W8rikqHIsDUCbREBIdjLOty7PE7GU-NgFFzoiMb_j2GWiQ", "e": "AQAB", "alg": "RS256", "kid": "k1"}]}"#;
/// The P-256 key of RFC 7517 appendix A.1, and the Ed25519 key of RFC 8037 appendix A.
const EC_ED_JWKS: &str = r#"{"keys": [
  {"kty": "EC", "crv": "P-256", "x": "MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4", "y": "4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM", "kid": "ec"},
  {"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
  {"kty": "oct", "k": "c2VjcmV0", "alg": "none"}
]}"#;

fn jwt(yaml_body: &str) -> Result<JwtAuthn, crate::ConfigError> {
    let body: String = yaml_body.lines().map(|l| format!("  {l}\n")).collect();
    let yaml = format!(
        "name: envoy.filters.http.jwt_authn\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication\n{body}"
    );
    filter(&yaml).map(|f| match f.config {
        HttpFilterConfig::JwtAuthn(j) => *j,
        other => panic!("not jwt_authn: {other:?}"),
    })
}

fn local(jwks: &str) -> String {
    format!(
        "local_jwks: {{inline_string: '{}'}}",
        jwks.replace('\n', " ")
    )
}

#[test]
fn corpus_remote_jwks_provider_and_defaults() {
    let j = jwt(r#"
providers:
  provider_name1:
    issuer: https://example.com
    audiences:
    - bookstore_android.apps.googleusercontent.com
    - https://bookstore_web.apps.googleusercontent.com/
    remote_jwks:
      http_uri: {uri: "https://example.com/jwks.json", cluster: example_jwks_cluster, timeout: 1s}
      cache_duration: {seconds: 300}
"#)
    .unwrap();
    assert!(j.rules.is_empty());
    let p = &j.providers[0];
    assert_eq!(p.name, "provider_name1");
    assert_eq!(
        p.audiences,
        [
            "bookstore_android.apps.googleusercontent.com",
            "bookstore_web.apps.googleusercontent.com"
        ]
    );
    assert_eq!(p.clock_skew, Duration::from_secs(60));
    assert_eq!(
        p.from_headers,
        [JwtHeader {
            name: "authorization".into(),
            value_prefix: "Bearer ".into()
        }]
    );
    assert_eq!(p.from_params, ["access_token"]);
    assert!(p.jwt_cache.is_none() && !p.forward && p.payload_in_metadata.is_none());
    let JwksSource::Remote(r) = &p.jwks else {
        panic!("{p:?}")
    };
    assert_eq!(r.cache_duration, Duration::from_secs(300));
    assert_eq!(r.http_uri.host, "example.com");
    assert_eq!(r.http_uri.path, "/jwks.json");
    assert!(r.async_fetch.is_none() && r.retry_policy.is_none());
}

#[test]
fn full_provider_and_requirements() {
    let j = jwt(&format!(
        r#"
providers:
  b:
    {}
    from_headers: [{{name: X-Jwt, value_prefix: "Token "}}]
    from_cookies: [session]
    forward: true
    forward_payload_header: X-Payload
    payload_in_metadata: payload
    clock_skew_seconds: 5
    max_lifetime: 3600s
    subjects: {{prefix: "spiffe://"}}
    jwt_cache_config: {{}}
    claim_to_headers: [{{header_name: X-Sub, claim_name: user.sub}}]
  a:
    remote_jwks:
      http_uri: {{uri: "http://idp/keys", cluster: idp, timeout: 0s}}
      async_fetch: {{fast_listener: true}}
      retry_policy: {{num_retries: 3}}
requirement_map:
  either:
    requires_any:
      requirements: [{{provider_name: a}}, {{provider_and_audiences: {{provider_name: b, audiences: ["http://api/"]}}}}]
rules:
- match: {{prefix: /public}}
- match: {{path_separated_prefix: /api, headers: [{{name: x-env, string_match: {{exact: prod}}}}]}}
  requirement_name: either
- match: {{safe_regex: {{regex: "/v[0-9]+/.*"}}, query_parameters: [{{name: debug}}]}}
  requires: {{allow_missing_or_failed: {{}}}}
"#,
        local(EC_ED_JWKS)
    ))
    .unwrap();
    assert_eq!(j.provider_index("a"), Some(0));
    assert_eq!(j.provider_index("b"), Some(1));
    let b = &j.providers[1];
    let JwksSource::Local(keys) = &b.jwks else {
        panic!("{b:?}")
    };
    // The `alg: none` key is skipped; the other two are usable.
    assert_eq!(keys.keys.len(), 2);
    assert_eq!(keys.keys[0].algorithms, [Algorithm::ES256]);
    assert_eq!(keys.keys[0].kid.as_deref(), Some("ec"));
    assert_eq!(keys.keys[1].algorithms, [Algorithm::EdDSA]);
    assert_eq!(b.from_headers[0].name, "x-jwt");
    assert!(
        b.from_params.is_empty(),
        "no default once a location is set"
    );
    assert_eq!(b.from_cookies, ["session"]);
    assert_eq!(b.forward_payload_header.as_deref(), Some("x-payload"));
    assert_eq!(b.clock_skew, Duration::from_secs(5));
    assert_eq!(b.max_lifetime, Some(Duration::from_secs(3600)));
    assert_eq!(
        b.jwt_cache,
        Some(JwtCacheConfig {
            jwt_cache_size: 100,
            jwt_max_token_size: 4096
        })
    );
    assert_eq!(b.claim_to_headers[0].claim_path, ["user", "sub"]);
    let JwksSource::Remote(r) = &j.providers[0].jwks else {
        panic!()
    };
    assert_eq!(r.http_uri.timeout, None);
    assert_eq!(
        r.async_fetch,
        Some(AsyncFetch {
            fast_listener: true,
            failed_refetch_duration: Duration::from_secs(1)
        })
    );
    assert_eq!(r.retry_policy.map(|p| p.num_retries), Some(3));
    let either = JwtRequirement::RequiresAny(vec![
        JwtRequirement::Provider {
            provider: 0,
            audiences: None,
        },
        JwtRequirement::Provider {
            provider: 1,
            audiences: Some(vec!["api".into()]),
        },
    ]);
    assert_eq!(j.requirement_map.get("either"), Some(&either));
    assert_eq!(j.rules.len(), 3);
    assert!(j.rules[0].requires.is_none());
    assert_eq!(j.rules[1].requires.as_ref(), Some(&either));
    let h = |name: &str| (name == "x-env").then_some("prod");
    assert!(j.rules[1].matcher.matches("/api/x?y", h));
    assert!(j.rules[1].matcher.matches("/api", h));
    assert!(!j.rules[1].matcher.matches("/apix", h));
    assert!(!j.rules[1].matcher.matches("/api", |_| None));
    assert!(j.rules[2].matcher.matches("/v2/a?debug=1", |_| None));
    assert!(!j.rules[2].matcher.matches("/v2/a", |_| None));
    assert_eq!(
        j.rules[2].requires,
        Some(JwtRequirement::AllowMissingOrFailed)
    );
}

#[test]
fn rsa_jwks_parses() {
    let jwks = parse_jwks(RSA_JWKS.as_bytes()).unwrap();
    assert_eq!(jwks.keys[0].algorithms, [Algorithm::RS256]);
    assert_eq!(jwks.keys[0].kid.as_deref(), Some("k1"));
}

#[test]
fn oct_secret_with_leftover_bits_loads_as_envoy_reads_it() {
    use jsonwebtoken::{EncodingKey, Header, Validation, decode, encode};
    // "1234567890": ten symbols, the last with four bits left over (Envoy
    // Gateway's JWT cases); the secret is the seven whole bytes.
    let jwks = parse_jwks(br#"{"keys": [{"kty": "oct", "k": "1234567890"}]}"#).unwrap();
    let secret = [0xd7, 0x6d, 0xf8, 0xe7, 0xae, 0xfc, 0xf7];
    let token = encode(
        &Header::default(),
        &serde_json::json!({"sub": "a", "exp": 4_000_000_000u64}),
        &EncodingKey::from_secret(&secret).unwrap(),
    )
    .unwrap();
    let mut v = Validation::new(Algorithm::HS256);
    v.validate_aud = false;
    decode::<serde_json::Value>(&token, &jwks.keys[0].key, &v).unwrap();
    let other = encode(
        &Header::default(),
        &serde_json::json!({"sub": "a", "exp": 4_000_000_000u64}),
        &EncodingKey::from_secret(b"1234567890").unwrap(),
    )
    .unwrap();
    assert!(decode::<serde_json::Value>(&other, &jwks.keys[0].key, &v).is_err());
}

#[test]
fn bad_jwks_are_refused() {
    assert_eq!(
        parse_jwks(br#"{"keys": []}"#).unwrap_err(),
        "the JWKS has no usable public key"
    );
    assert_eq!(
        parse_jwks(b"{}").unwrap_err(),
        "the JWKS has no \"keys\" list"
    );
    assert!(
        parse_jwks(b"-----BEGIN PUBLIC KEY-----")
            .unwrap_err()
            .starts_with("the JWKS is not valid JSON")
    );
    assert_eq!(
        parse_jwks(br#"{"keys": [{"kty": "oct", "k": "c2VjcmV0", "alg": "none"}]}"#).unwrap_err(),
        "the JWKS has no usable public key (keys[0]: alg \"none\" is never accepted)"
    );
    let short_rsa = r#"{"keys": [{"kty": "RSA", "n": "AQAB", "e": "AQAB"}]}"#;
    assert_eq!(
        parse_jwks(short_rsa.as_bytes()).unwrap_err(),
        "the JWKS has no usable public key (keys[0]: an RSA modulus of 17 bits is outside 2048..=8192)"
    );
    let wrong_alg = RSA_JWKS.replace("RS256", "ES256");
    assert!(
        parse_jwks(wrong_alg.as_bytes())
            .unwrap_err()
            .contains("does not fit the key type")
    );
}

#[test]
fn errors_name_their_paths() {
    let mut e = errors(jwt(&format!(
        r#"
providers:
  p:
    {}
    from_headers: [{{name: ""}}]
    claim_to_headers: [{{header_name: "bad header", claim_name: sub}}]
  empty:
    local_jwks: {{inline_string: '{{"keys": []}}'}}
  none:
    issuer: x
requirement_map:
  one:
    requires_any: {{requirements: [{{provider_name: p}}]}}
  ghost:
    requires_all: {{requirements: [{{provider_name: p}}, {{provider_name: q}}]}}
rules:
- match: {{prefix: /}}
  requirement_name: missing
- match: {{path_separated_prefix: /a/}}
  requires: {{provider_name: p}}
"#,
        local(RSA_JWKS)
    )));
    e.sort();
    assert_eq!(
        e,
        [
            "typed_config.providers[\"empty\"].local_jwks: the JWKS has no usable public key",
            "typed_config.providers[\"none\"]: one of remote_jwks or local_jwks is required",
            "typed_config.providers[\"p\"].claim_to_headers[0].header_name: \"bad header\" is not a valid header name",
            "typed_config.providers[\"p\"].from_headers[0].name: must not be empty",
            "typed_config.requirement_map[\"ghost\"].requires_all.requirements[1].provider_name: unknown provider 'q'",
            "typed_config.requirement_map[\"one\"].requires_any.requirements: at least two requirements are required",
            "typed_config.rules[0].requirement_name: 'missing' is not in requirement_map",
            "typed_config.rules[1].match.path_separated_prefix: must be non-empty, without '?' or '#', and must not end with '/'",
        ]
    );
}

#[test]
fn claim_path_segments_are_whole_keys() {
    let j = jwt(&format!(
        r#"
providers:
  p:
    {}
    claim_to_headers:
    - {{header_name: x-parent, claim_path: [{{key: "http://example.org/parent_token"}}]}}
    - {{header_name: x-nested, claim_path: [{{key: a.b}}, {{key: c.d}}]}}
    - {{header_name: x-dotted, claim_name: a.b}}
"#,
        local(RSA_JWKS)
    ))
    .unwrap();
    let c = &j.providers[0].claim_to_headers;
    assert_eq!(c[0].claim_path, ["http://example.org/parent_token"]);
    assert_eq!(c[1].claim_path, ["a.b", "c.d"]);
    assert_eq!(c[2].claim_path, ["a", "b"]);
}

#[test]
fn claim_name_and_claim_path_exactly_one() {
    let mut e = errors(jwt(&format!(
        r#"
providers:
  p:
    {}
    claim_to_headers:
    - {{header_name: x-both, claim_name: a, claim_path: [{{key: a}}]}}
    - {{header_name: x-none}}
    - {{header_name: x-empty, claim_name: ""}}
    - {{header_name: x-blank, claim_path: [{{key: a}}, {{key: ""}}]}}
"#,
        local(RSA_JWKS)
    )));
    e.sort();
    assert_eq!(
        e,
        [
            "typed_config.providers[\"p\"].claim_to_headers[0]: exactly one of claim_name and claim_path must be set",
            "typed_config.providers[\"p\"].claim_to_headers[1]: exactly one of claim_name and claim_path must be set",
            "typed_config.providers[\"p\"].claim_to_headers[2]: exactly one of claim_name and claim_path must be set",
            "typed_config.providers[\"p\"].claim_to_headers[3].claim_path[1].key: must not be empty",
        ]
    );
}

#[test]
fn refused_fields() {
    let mut e = errors(jwt(&format!(
        r#"
providers:
  p:
    {}
filter_state_rules: {{name: state}}
requirement_map:
  x: {{extract_only_without_validation: {{}}}}
"#,
        local(RSA_JWKS)
    )));
    e.sort();
    assert_eq!(
        e,
        [
            "typed_config.filter_state_rules: filter_state_rules is not supported",
            "typed_config.requirement_map[\"x\"].extract_only_without_validation: extract_only_without_validation is not supported",
        ]
    );
}

#[test]
fn per_route_forms() {
    let name = "envoy.filters.http.jwt_authn";
    let url = "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig";
    let r = per_route(
        name,
        &format!("\"@type\": {url}\nrequirement_name: either\n"),
    )
    .unwrap();
    assert!(matches!(
        r.config,
        Some(PerRouteFilterConfig::JwtAuthn(JwtPerRoute::RequirementName(ref n))) if n == "either"
    ));
    let r = per_route(name, &format!("\"@type\": {url}\ndisabled: true\n")).unwrap();
    assert!(matches!(
        r.config,
        Some(PerRouteFilterConfig::JwtAuthn(JwtPerRoute::Disabled))
    ));
    assert_eq!(
        errors(per_route(
            name,
            &format!("\"@type\": {url}\ndisabled: false\n")
        )),
        ["disabled: must be true"]
    );
    let wrapped = per_route(
        name,
        &format!(
            "\"@type\": type.googleapis.com/envoy.config.route.v3.FilterConfig\nis_optional: true\nconfig:\n  \"@type\": {url}\n  disabled: true\n"
        ),
    )
    .unwrap();
    assert!(wrapped.is_optional && !wrapped.disabled);
    assert_eq!(
        errors(per_route(
            name,
            "\"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n"
        )),
        [
            "per-route config envoy.extensions.filters.http.router.v3.Router for envoy.filters.http.jwt_authn is not supported"
        ]
    );
}
