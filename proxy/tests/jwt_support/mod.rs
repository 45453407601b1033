//! Helpers for the remote-JWKS tests: keys generated in the test (RSA, P-256, Ed25519)
//! that mint tokens, and a JWKS server on loopback whose document, status and pace the
//! test controls, and which counts the fetches it serves.

#![allow(dead_code)]

use arc_swap::ArcSwap;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

/// The issuer every test token carries.
pub const ISS: &str = "https://issuer.test";

/// A signing key and its public JWK.
pub struct Key {
    encoding: EncodingKey,
    alg: Algorithm,
    /// The public JWK (with `kid` and `alg`).
    pub jwk: serde_json::Value,
    kid: String,
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Reads a DER length at `i`: (length, index after it).
fn der_len(d: &[u8], i: usize) -> (usize, usize) {
    let first = d[i];
    if first < 0x80 {
        return (first as usize, i + 1);
    }
    let n = (first & 0x7f) as usize;
    let len = (0..n).fold(0usize, |len, k| (len << 8) | d[i + 1 + k] as usize);
    (len, i + 1 + n)
}

/// `(n, e)` of a PKCS#1 `RSAPublicKey`, leading zeros stripped.
fn rsa_components(der: &[u8]) -> (Vec<u8>, Vec<u8>) {
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
    (ints[0].clone(), ints[1].clone())
}

/// The PKCS#1 `RSAPrivateKey` inside a PKCS#8 `PrivateKeyInfo`.
fn pkcs1_of_pkcs8(der: &[u8]) -> Vec<u8> {
    let (_, mut i) = der_len(der, 1);
    for _ in 0..2 {
        let (len, start) = der_len(der, i + 1);
        i = start + len;
    }
    assert_eq!(der[i], 0x04);
    let (len, start) = der_len(der, i + 1);
    der[start..start + len].to_vec()
}

impl Key {
    /// A 2048-bit RSA key (RS256).
    pub fn rsa(kid: &str) -> Self {
        let kp =
            rcgen::KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048)
                .unwrap();
        let (n, e) = rsa_components(kp.public_key_raw());
        Key {
            encoding: EncodingKey::from_rsa_der(&pkcs1_of_pkcs8(kp.serialized_der())),
            alg: Algorithm::RS256,
            jwk: serde_json::json!({"kty": "RSA", "kid": kid, "alg": "RS256", "n": b64(&n), "e": b64(&e)}),
            kid: kid.into(),
        }
    }

    /// A fresh 2048-bit RSA key for `alg` (RS*/PS*), its JWK naming that `alg`.
    pub fn rsa_for(kid: &str, alg: Algorithm) -> Self {
        let mut k = Self::rsa(kid);
        k.alg = alg;
        k.jwk["alg"] = format!("{alg:?}").into();
        k
    }

    /// A P-384 key (ES384).
    pub fn p384(kid: &str) -> Self {
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
        let raw = kp.public_key_raw();
        Key {
            encoding: EncodingKey::from_ec_der(kp.serialized_der()),
            alg: Algorithm::ES384,
            jwk: serde_json::json!({"kty": "EC", "crv": "P-384", "kid": kid, "alg": "ES384",
                "x": b64(&raw[1..49]), "y": b64(&raw[49..97])}),
            kid: kid.into(),
        }
    }

    /// A random HMAC secret (HS256).
    pub fn hmac(kid: &str) -> Self {
        let secret: Vec<u8> = (0..32).map(|_| fastrand::u8(..)).collect();
        Key {
            encoding: EncodingKey::from_secret(&secret).unwrap(),
            alg: Algorithm::HS256,
            jwk: serde_json::json!({"kty": "oct", "kid": kid, "alg": "HS256", "k": b64(&secret)}),
            kid: kid.into(),
        }
    }

    /// A P-256 key (ES256).
    pub fn p256(kid: &str) -> Self {
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let raw = kp.public_key_raw();
        Key {
            encoding: EncodingKey::from_ec_der(kp.serialized_der()),
            alg: Algorithm::ES256,
            jwk: serde_json::json!({"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256",
                "x": b64(&raw[1..33]), "y": b64(&raw[33..65])}),
            kid: kid.into(),
        }
    }

    /// An Ed25519 key (EdDSA).
    pub fn ed25519(kid: &str) -> Self {
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        Key {
            encoding: EncodingKey::from_ed_der(kp.serialized_der()),
            alg: Algorithm::EdDSA,
            jwk: serde_json::json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA",
                "x": b64(kp.public_key_raw())}),
            kid: kid.into(),
        }
    }

    /// A token for `sub`, valid for a minute, with this key's `kid`.
    pub fn token(&self, sub: &str) -> String {
        self.token_with(serde_json::json!({"sub": sub}))
    }

    /// A token with `claims` plus `iss` and (unless given) an `exp` a minute away;
    /// `"exp": null` leaves `exp` out.
    pub fn token_with(&self, mut claims: serde_json::Value) -> String {
        claims["iss"] = ISS.into();
        match claims.get("exp") {
            None => claims["exp"] = (now() + 60).into(),
            Some(serde_json::Value::Null) => {
                claims.as_object_mut().unwrap().remove("exp");
            }
            Some(_) => {}
        }
        let mut h = Header::new(self.alg);
        h.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&h, &claims, &self.encoding).unwrap()
    }
}

/// An unsigned token (`alg: none`) with `claims`.
pub fn unsigned_token(claims: &serde_json::Value) -> String {
    let header = b64(br#"{"alg":"none","typ":"JWT"}"#);
    format!("{header}.{}.", b64(claims.to_string().as_bytes()))
}

/// A JWKS document with `keys`.
pub fn jwks(keys: &[&Key]) -> String {
    let keys: Vec<_> = keys.iter().map(|k| k.jwk.clone()).collect();
    serde_json::json!({ "keys": keys }).to_string()
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// What the JWKS server answers, and how it paces answers.
pub struct JwksState {
    /// The document served with 200; empty => 503.
    pub body: ArcSwap<String>,
    /// Requests received.
    pub fetches: AtomicU64,
    /// Woken on every request received.
    pub arrived: Notify,
    /// Answers wait while this is false.
    open: watch::Sender<bool>,
}

impl JwksState {
    /// Lets answers go (or holds them).
    pub fn set_open(&self, open: bool) {
        self.open.send_replace(open);
    }

    /// Requests received so far.
    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::SeqCst)
    }

    /// Serves `body` from now on (empty: 503).
    pub fn serve(&self, body: String) {
        self.body.store(Arc::new(body));
    }
}

/// A JWKS server on loopback port 0 serving `body` (open).
pub async fn jwks_server(body: String) -> (SocketAddr, Arc<JwksState>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = new_state(body);
    spawn_server(listener, Arc::clone(&state));
    (addr, state)
}

/// A free loopback address for a JWKS server started later with [`jwks_server_at`].
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A JWKS server on `addr` (from [`free_addr`]).
pub async fn jwks_server_at(addr: SocketAddr, body: String) -> Arc<JwksState> {
    let listener = TcpListener::bind(addr).await.unwrap();
    let state = new_state(body);
    spawn_server(listener, Arc::clone(&state));
    state
}

fn new_state(body: String) -> Arc<JwksState> {
    Arc::new(JwksState {
        body: ArcSwap::from_pointee(body),
        fetches: AtomicU64::new(0),
        arrived: Notify::new(),
        open: watch::channel(true).0,
    })
}

fn spawn_server(listener: TcpListener, state: Arc<JwksState>) {
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                let service = service_fn(move |_req: Request<Incoming>| {
                    let state = Arc::clone(&state);
                    async move {
                        state.fetches.fetch_add(1, Ordering::SeqCst);
                        state.arrived.notify_one();
                        let mut open = state.open.subscribe();
                        let _ = open.wait_for(|o| *o).await;
                        let body = state.body.load_full();
                        let resp = if body.is_empty() {
                            Response::builder()
                                .status(503)
                                .body(Full::new(Bytes::new()))
                        } else {
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(body.as_str().to_owned())))
                        };
                        Ok::<_, hyper::Error>(resp.unwrap())
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}

/// A jwt_authn filter with provider `remote` (JWKS at `http://jwks.test/keys` through
/// cluster `jwks`), required on every route except those under `/free`. `remote_extra`
/// adds `remote_jwks` fields (YAML, indented as a map's fields).
pub fn remote_filter(remote_extra: &str) -> String {
    let extra: String = remote_extra
        .lines()
        .map(|l| format!("          {l}\n"))
        .collect();
    format!(
        r#"- name: envoy.filters.http.jwt_authn
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
    providers:
      remote:
        issuer: {ISS}
        claim_to_headers: [{{header_name: x-jwt-sub, claim_name: sub}}]
        remote_jwks:
          http_uri: {{uri: "http://jwks.test/keys", cluster: jwks, timeout: 5s}}
{extra}    rules:
    - match: {{prefix: "/free"}}
    - match: {{prefix: "/"}}
      requires: {{provider_name: remote}}
"#
    )
}
