//! Test helpers: configs from YAML through the config crate's translation, requests,
//! connections, and keys generated in the test to mint real tokens.

use crate::chain::{Decision, HttpFilter, LocalReply, Verdict};
use crate::request::{ConnFacts, RequestState};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use courier_config::envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use courier_config::envoy_types::pb::google::protobuf::Any;
use courier_config::filters::{HttpFilter as FilterConfig, PerRouteConfig};
use courier_config::load::{self, Format};
use courier_config::{Ctx, Path};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use std::sync::OnceLock;

/// Translates an `HttpFilter` written in YAML.
pub fn filter_config(yaml: &str) -> FilterConfig {
    let value = load::parse_text(yaml, Format::Yaml).unwrap();
    let dynamic = load::dynamic_from_json(
        value,
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter",
    )
    .unwrap();
    let typed: hcm::HttpFilter = load::typed_from_dynamic(&dynamic).unwrap();
    let mut ctx = Ctx::new();
    let out = courier_config::filters::http_filter(&typed, &Path::ROOT, &mut ctx);
    ctx.finish(out).unwrap().unwrap()
}

/// Translates a `typed_per_filter_config` value for filter `name`.
pub fn per_route_config(name: &str, yaml: &str) -> PerRouteConfig {
    let value = load::parse_text(yaml, Format::Yaml).unwrap();
    let dynamic = load::dynamic_from_json(value, "google.protobuf.Any").unwrap();
    let typed: Any = load::typed_from_dynamic(&dynamic).unwrap();
    let mut ctx = Ctx::new();
    let out = courier_config::filters::per_route_config(name, &typed, &Path::ROOT, &mut ctx);
    ctx.finish(out).unwrap().unwrap()
}

/// A plaintext connection from 10.0.0.1:5000 to 127.0.0.1:8080.
pub fn plain_conn() -> ConnFacts {
    ConnFacts {
        worker: 0,
        peer: "10.0.0.1:5000".parse().unwrap(),
        source: "10.0.0.1:5000".parse().unwrap(),
        local: "127.0.0.1:8080".parse().unwrap(),
        tls: None,
    }
}

/// A request head.
pub fn head(method: &str, uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    let mut b = http::Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap().into_parts().0
}

/// A request state on `conn` with no route.
pub fn state<'a>(conn: &'a ConnFacts, head: http::request::Parts) -> RequestState<'a> {
    let remote = conn.peer.ip();
    RequestState::new(head, conn, remote, None)
}

/// Runs one filter to its verdict.
pub async fn run(
    f: &dyn HttpFilter,
    req: &mut RequestState<'_>,
    per_route: Option<&courier_config::filters::PerRouteFilterConfig>,
) -> Verdict {
    match f.decode_headers(req, per_route) {
        Decision::Continue => Verdict::Continue,
        Decision::Respond(r) => Verdict::Respond(r),
        Decision::Pending(fut) => fut.await,
    }
}

/// Runs a filter that must answer without suspending.
pub fn run_sync(
    f: &dyn HttpFilter,
    req: &mut RequestState<'_>,
    per_route: Option<&courier_config::filters::PerRouteFilterConfig>,
) -> Verdict {
    match f.decode_headers(req, per_route) {
        Decision::Continue => Verdict::Continue,
        Decision::Respond(r) => Verdict::Respond(r),
        Decision::Pending(_) => panic!("the filter suspended"),
    }
}

/// The local reply of a verdict (panics on Continue).
pub fn reply(v: Verdict) -> LocalReply {
    match v {
        Verdict::Respond(r) => r,
        Verdict::Continue => panic!("expected a local reply, got Continue"),
    }
}

/// A signing key and its public JWK.
pub struct TestKey {
    /// The signing key.
    pub encoding: EncodingKey,
    /// The public JWK (no `kid`).
    pub jwk: serde_json::Value,
    /// The algorithm tokens are signed with.
    pub alg: Algorithm,
}

impl TestKey {
    /// The JWK with a `kid`.
    pub fn jwk_with_kid(&self, kid: &str) -> serde_json::Value {
        let mut j = self.jwk.clone();
        j["kid"] = kid.into();
        j
    }

    /// A token with these claims (and `kid`, if given).
    pub fn mint(&self, kid: Option<&str>, claims: &serde_json::Value) -> String {
        let mut h = Header::new(self.alg);
        h.kid = kid.map(str::to_string);
        jsonwebtoken::encode(&h, claims, &self.encoding).unwrap()
    }
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Reads a DER length at `i`, returning (length, index after it).
fn der_len(d: &[u8], i: usize) -> (usize, usize) {
    let first = d[i];
    if first < 0x80 {
        return (first as usize, i + 1);
    }
    let n = (first & 0x7f) as usize;
    let mut len = 0usize;
    for k in 0..n {
        len = (len << 8) | d[i + 1 + k] as usize;
    }
    (len, i + 1 + n)
}

/// `(n, e)` of a PKCS#1 `RSAPublicKey`.
fn rsa_components(der: &[u8]) -> (Vec<u8>, Vec<u8>) {
    assert_eq!(der[0], 0x30);
    let (_, mut i) = der_len(der, 1);
    let mut ints = Vec::new();
    for _ in 0..2 {
        assert_eq!(der[i], 0x02);
        let (len, start) = der_len(der, i + 1);
        let mut v = &der[start..start + len];
        while v.first() == Some(&0) {
            v = &v[1..];
        }
        ints.push(v.to_vec());
        i = start + len;
    }
    let e = ints.pop().unwrap();
    let n = ints.pop().unwrap();
    (n, e)
}

/// The PKCS#1 `RSAPrivateKey` inside a PKCS#8 `PrivateKeyInfo`.
fn pkcs1_of_pkcs8(der: &[u8]) -> Vec<u8> {
    assert_eq!(der[0], 0x30);
    let (_, mut i) = der_len(der, 1);
    // version INTEGER, then the AlgorithmIdentifier SEQUENCE: skip both.
    for _ in 0..2 {
        let (len, start) = der_len(der, i + 1);
        i = start + len;
    }
    assert_eq!(der[i], 0x04);
    let (len, start) = der_len(der, i + 1);
    der[start..start + len].to_vec()
}

/// A 2048-bit RSA key (RS256), generated once per test binary.
pub fn rsa_key() -> &'static TestKey {
    static KEY: OnceLock<TestKey> = OnceLock::new();
    KEY.get_or_init(|| {
        let kp =
            rcgen::KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048)
                .unwrap();
        let (n, e) = rsa_components(kp.public_key_raw());
        TestKey {
            encoding: EncodingKey::from_rsa_der(&pkcs1_of_pkcs8(kp.serialized_der())),
            jwk: serde_json::json!({"kty": "RSA", "n": b64(&n), "e": b64(&e), "alg": "RS256"}),
            alg: Algorithm::RS256,
        }
    })
}

/// A fresh P-256 key (ES256).
pub fn ec_key() -> TestKey {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let raw = kp.public_key_raw();
    assert_eq!(raw.len(), 65);
    TestKey {
        encoding: EncodingKey::from_ec_der(kp.serialized_der()),
        jwk: serde_json::json!({"kty": "EC", "crv": "P-256", "x": b64(&raw[1..33]), "y": b64(&raw[33..65])}),
        alg: Algorithm::ES256,
    }
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    crate::jwt_authn::now_secs()
}
