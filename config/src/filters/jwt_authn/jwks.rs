//! JWKS parsing, shared by `local_jwks` (at load time) and remote JWKS fetches (at run time,
//! by the filters crate), so both accept exactly the same key sets.

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey};

/// A parsed JWKS: the keys courier can verify signatures with.
#[derive(Debug, Clone)]
pub struct Jwks {
    /// Usable keys, in document order.
    pub keys: Vec<JwksKey>,
}

/// One usable key.
#[derive(Debug, Clone)]
pub struct JwksKey {
    /// `kid`, if the key has one (a token's `kid` must equal it when both are present).
    pub kid: Option<String>,
    /// The algorithms this key may verify: the JWK's `alg` alone when it has one, else every
    /// algorithm of its type and curve. Never `none`.
    pub algorithms: Vec<Algorithm>,
    /// The verification key.
    pub key: DecodingKey,
}

/// Parses a JWKS document. As in Envoy (jwt_verify_lib), keys that cannot be used are
/// skipped as long as one usable key remains; a document with no usable key is an error,
/// naming the first unusable key's fault.
pub fn parse_jwks(bytes: &[u8]) -> Result<Jwks, String> {
    let doc: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("the JWKS is not valid JSON: {e}"))?;
    let Some(list) = doc.get("keys").and_then(serde_json::Value::as_array) else {
        return Err("the JWKS has no \"keys\" list".into());
    };
    let mut keys = Vec::with_capacity(list.len());
    let mut first_fault = None;
    for (i, value) in list.iter().enumerate() {
        match key(value) {
            Ok(k) => keys.push(k),
            Err(e) => {
                first_fault.get_or_insert_with(|| format!("keys[{i}]: {e}"));
            }
        }
    }
    if keys.is_empty() {
        return Err(match first_fault {
            Some(f) => format!("the JWKS has no usable public key ({f})"),
            None => "the JWKS has no usable public key".into(),
        });
    }
    Ok(Jwks { keys })
}

fn key(value: &serde_json::Value) -> Result<JwksKey, String> {
    if let Some(alg) = value.get("alg").and_then(serde_json::Value::as_str)
        && alg.eq_ignore_ascii_case("none")
    {
        return Err("alg \"none\" is never accepted".into());
    }
    let jwk: Jwk = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    let declared = match jwk.common.key_algorithm {
        None => None,
        Some(a) => Some(signature_algorithm(a)?),
    };
    let family: Vec<Algorithm> = match &jwk.algorithm {
        AlgorithmParameters::RSA(p) => {
            let n = b64(&p.n, "n")?;
            b64(&p.e, "e")?;
            let bits = modulus_bits(&n);
            // aws-lc verifies RSA signatures with 2048..=8192-bit moduli only.
            if !(2048..=8192).contains(&bits) {
                return Err(format!(
                    "an RSA modulus of {bits} bits is outside 2048..=8192"
                ));
            }
            vec![
                Algorithm::RS256,
                Algorithm::RS384,
                Algorithm::RS512,
                Algorithm::PS256,
                Algorithm::PS384,
                Algorithm::PS512,
            ]
        }
        AlgorithmParameters::EllipticCurve(p) => {
            let (len, alg) = match p.curve {
                EllipticCurve::P256 => (32, Algorithm::ES256),
                EllipticCurve::P384 => (48, Algorithm::ES384),
                ref other => return Err(format!("EC curve {other:?} is not supported")),
            };
            if b64(&p.x, "x")?.len() != len || b64(&p.y, "y")?.len() != len {
                return Err(format!("EC coordinates must be {len} bytes for this curve"));
            }
            vec![alg]
        }
        AlgorithmParameters::OctetKeyPair(p) => {
            if p.curve != EllipticCurve::Ed25519 {
                return Err(format!("OKP curve {:?} is not supported", p.curve));
            }
            if b64(&p.x, "x")?.len() != 32 {
                return Err("an Ed25519 key must be 32 bytes".into());
            }
            vec![Algorithm::EdDSA]
        }
        AlgorithmParameters::OctetKey(p) => {
            if b64(&p.value, "k")?.is_empty() {
                return Err("an oct key must not be empty".into());
            }
            vec![Algorithm::HS256, Algorithm::HS384, Algorithm::HS512]
        }
        AlgorithmParameters::Other(_) => return Err("unsupported key type".into()),
        #[allow(unreachable_patterns)]
        _ => return Err("unsupported key type".into()),
    };
    let algorithms = match declared {
        None => family,
        Some(a) if family.contains(&a) => vec![a],
        Some(a) => return Err(format!("alg {a:?} does not fit the key type")),
    };
    let key = match &jwk.algorithm {
        // Envoy (absl's web-safe base64) takes a secret whose last symbol has
        // bits left over (Envoy Gateway's `"k": "1234567890"`) and drops them;
        // the JWK reader is strict, so the secret is decoded here.
        AlgorithmParameters::OctetKey(p) => {
            DecodingKey::from_secret(&b64(&p.value, "k")?).map_err(|e| e.to_string())?
        }
        _ => DecodingKey::from_jwk(&jwk).map_err(|e| e.to_string())?,
    };
    Ok(JwksKey {
        kid: jwk.common.key_id.clone(),
        algorithms,
        key,
    })
}

fn signature_algorithm(a: KeyAlgorithm) -> Result<Algorithm, String> {
    use KeyAlgorithm as K;
    Ok(match a {
        K::HS256 => Algorithm::HS256,
        K::HS384 => Algorithm::HS384,
        K::HS512 => Algorithm::HS512,
        K::ES256 => Algorithm::ES256,
        K::ES384 => Algorithm::ES384,
        K::RS256 => Algorithm::RS256,
        K::RS384 => Algorithm::RS384,
        K::RS512 => Algorithm::RS512,
        K::PS256 => Algorithm::PS256,
        K::PS384 => Algorithm::PS384,
        K::PS512 => Algorithm::PS512,
        K::EdDSA => Algorithm::EdDSA,
        other => return Err(format!("alg {other:?} is not a signature algorithm")),
    })
}

fn b64(s: &str, field: &str) -> Result<Vec<u8>, String> {
    base64url(s.trim_end_matches('=')).ok_or_else(|| format!("\"{field}\" is not base64url"))
}

/// Decodes unpadded base64url (RFC 4648 section 5), as JWKs encode their numbers.
fn base64url(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    // A single leftover sextet cannot encode a byte.
    (bits < 6).then_some(out)
}

fn modulus_bits(n: &[u8]) -> usize {
    let n = match n.iter().position(|b| *b != 0) {
        Some(i) => &n[i..],
        None => return 0,
    };
    (n.len() - 1) * 8 + (8 - n[0].leading_zeros() as usize)
}
