//! jwt_authn token verification per request, RS256 and ES256, cold (no
//! `jwt_cache_config`: every request checks the signature) and cached (a repeated token
//! costs a cache lookup), through the public filter API (config YAML → courier_config →
//! courier_filters::build_chain → decode_headers on a RequestState). See benches/README.md.

// A benchmark setup that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use courier_benches::{filters_bootstrap_yaml, http_filters_from_bootstrap, poll_once};
use courier_filters::{ConnFacts, FilterChain, RequestState, Verdict, build_chain};
use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;
use std::hint::black_box;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A DER length at `i`: (length, index after it).
fn der_len(d: &[u8], i: usize) -> (usize, usize) {
    let first = d[i];
    if first < 0x80 {
        return (first as usize, i + 1);
    }
    let n = (first & 0x7f) as usize;
    let len = d[i + 1..i + 1 + n]
        .iter()
        .fold(0usize, |acc, b| (acc << 8) | *b as usize);
    (len, i + 1 + n)
}

/// The INTEGERs of a DER SEQUENCE, leading zeros stripped.
fn der_ints(der: &[u8], count: usize) -> Vec<Vec<u8>> {
    let (_, mut i) = der_len(der, 1);
    let mut out = Vec::new();
    for _ in 0..count {
        let (len, start) = der_len(der, i + 1);
        let mut v = &der[start..start + len];
        while v.first() == Some(&0) {
            v = &v[1..];
        }
        out.push(v.to_vec());
        i = start + len;
    }
    out
}

/// A signing key and its JWKS, generated in the bench.
fn key(alg: Algorithm) -> (EncodingKey, serde_json::Value) {
    match alg {
        Algorithm::RS256 => {
            let kp =
                rcgen::KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048)
                    .unwrap();
            let ne = der_ints(kp.public_key_raw(), 2);
            // The PKCS#1 key inside the PKCS#8 wrapper: skip version and algorithm.
            let der = kp.serialized_der();
            let (_, mut i) = der_len(der, 1);
            for _ in 0..2 {
                let (len, start) = der_len(der, i + 1);
                i = start + len;
            }
            let (len, start) = der_len(der, i + 1);
            (
                EncodingKey::from_rsa_der(&der[start..start + len]),
                json!({"kty": "RSA", "alg": "RS256", "kid": "k", "n": b64(&ne[0]), "e": b64(&ne[1])}),
            )
        }
        Algorithm::ES256 => {
            let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
            let raw = kp.public_key_raw();
            (
                EncodingKey::from_ec_der(kp.serialized_der()),
                json!({"kty": "EC", "crv": "P-256", "alg": "ES256", "kid": "k", "x": b64(&raw[1..33]), "y": b64(&raw[33..65])}),
            )
        }
        other => panic!("no key for {other:?}"),
    }
}

fn jwt_yaml(jwks: &serde_json::Value, cached: bool) -> String {
    let cache = if cached {
        "                  jwt_cache_config: {jwt_cache_size: 100}\n"
    } else {
        ""
    };
    format!(
        r#"          - name: envoy.filters.http.jwt_authn
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
              providers:
                bench:
                  issuer: https://issuer.example
                  audiences: [bench]
                  payload_in_metadata: jwt
{cache}                  local_jwks: {{inline_string: '{}'}}
              rules:
              - match: {{prefix: "/"}}
                requires: {{provider_name: bench}}
"#,
        json!({ "keys": [jwks] })
    )
}

fn conn() -> ConnFacts {
    ConnFacts {
        worker: 0,
        peer: "10.0.0.1:5000".parse().unwrap(),
        source: "10.0.0.1:5000".parse().unwrap(),
        local: "127.0.0.1:8080".parse().unwrap(),
        tls: None,
    }
}

fn request<'c>(conn: &'c ConnFacts, auth: &str) -> RequestState<'c> {
    let head = http::Request::builder()
        .method("GET")
        .uri("/api/items")
        .header("host", "api.example.com")
        .header("user-agent", "bench/1.0")
        .header("authorization", auth)
        .body(())
        .unwrap()
        .into_parts()
        .0;
    RequestState::new(head, conn, conn.peer.ip(), None)
}

fn status(chain: &FilterChain, req: &mut RequestState<'_>) -> u16 {
    match poll_once(chain.decode_headers(req, |_| None)) {
        Some(Verdict::Continue) => 200,
        Some(Verdict::Respond(r)) => r.status.as_u16(),
        None => panic!("the chain suspended"),
    }
}

fn verify(c: &mut Criterion) {
    let mut group = c.benchmark_group("jwt/verify");
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    group.sample_size(30);
    let conn = conn();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for alg in [Algorithm::RS256, Algorithm::ES256] {
        let (enc, jwk) = key(alg);
        let mut header = Header::new(alg);
        header.kid = Some("k".into());
        let claims = json!({"iss": "https://issuer.example", "aud": "bench", "sub": "alice", "iat": now, "exp": now + 86_400});
        let auth = format!(
            "Bearer {}",
            jsonwebtoken::encode(&header, &claims, &enc).unwrap()
        );
        for cached in [false, true] {
            let filters =
                http_filters_from_bootstrap(&filters_bootstrap_yaml(&jwt_yaml(&jwk, cached)));
            let (chain, _) = build_chain(&filters, None).unwrap();
            assert_eq!(status(&chain, &mut request(&conn, &auth)), 200);
            assert_eq!(status(&chain, &mut request(&conn, "Bearer x.y.z")), 401);
            let label = format!("{alg:?}/{}", if cached { "cached" } else { "cold" });
            group.bench_function(BenchmarkId::from_parameter(label), |b| {
                b.iter_batched_ref(
                    || request(&conn, &auth),
                    |req| status(&chain, black_box(req)),
                    BatchSize::SmallInput,
                )
            });
        }
    }
    group.finish();
}

criterion_group!(benches, verify);
criterion_main!(benches);
