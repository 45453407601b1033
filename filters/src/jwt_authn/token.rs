//! Parsing and verifying one compact JWT against a provider (envoy-reference 2.2 step 4).

use super::status::Status;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use courier_config::filters::jwt_authn::{Jwks, JwtProvider};
use jsonwebtoken::Algorithm;
use serde_json::{Map, Value};
use std::str::FromStr;

/// A token whose structure parsed; claims not yet checked, signature not yet verified.
#[derive(Debug, Clone)]
pub struct ParsedJwt {
    /// The JOSE header.
    pub header: Map<String, Value>,
    /// The claims.
    pub payload: Map<String, Value>,
    /// `alg`.
    pub alg: Algorithm,
    /// Byte length of `header.payload` (the signing input) in the token.
    signing_input_len: usize,
    /// Byte range of the payload segment in the token.
    payload_range: (usize, usize),
}

impl ParsedJwt {
    /// The token's `iss` (empty when absent).
    pub fn issuer(&self) -> &str {
        self.payload
            .get("iss")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// The base64url payload segment of `token` (the one this was parsed from).
    pub fn payload_segment<'t>(&self, token: &'t str) -> &'t str {
        token
            .get(self.payload_range.0..self.payload_range.1)
            .unwrap_or("")
    }

    fn kid(&self) -> Option<&str> {
        self.header.get("kid").and_then(Value::as_str)
    }
}

fn decode_json(segment: &str, err: Status) -> Result<Map<String, Value>, Status> {
    let bytes = URL_SAFE_NO_PAD
        .decode(segment.trim_end_matches('='))
        .map_err(|_| err)?;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(err),
    }
}

/// Parses a compact JWT: three sections, base64url JSON header and payload, a supported
/// `alg` (never `none`).
pub fn parse(token: &str) -> Result<ParsedJwt, Status> {
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Status::BadFormat);
    };
    if h.is_empty() || p.is_empty() || s.is_empty() {
        return Err(Status::BadFormat);
    }
    let header = decode_json(h, Status::HeaderParse)?;
    let alg = match header.get("alg") {
        Some(Value::String(a)) => Algorithm::from_str(a).map_err(|_| Status::AlgNotImplemented)?,
        _ => return Err(Status::HeaderBadAlg),
    };
    let payload = decode_json(p, Status::PayloadParse)?;
    Ok(ParsedJwt {
        header,
        payload,
        alg,
        signing_input_len: h.len() + 1 + p.len(),
        payload_range: (h.len() + 1, h.len() + 1 + p.len()),
    })
}

fn int_claim(payload: &Map<String, Value>, name: &str) -> Option<i64> {
    match payload.get(name)? {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        _ => None,
    }
}

/// Audience as Envoy compares it: without `http://`/`https://` and one trailing `/`.
fn normalise(aud: &str) -> &str {
    let a = aud
        .strip_prefix("https://")
        .or_else(|| aud.strip_prefix("http://"))
        .unwrap_or(aud);
    a.strip_suffix('/').unwrap_or(a)
}

/// Checks the claims that do not need the key: time (with the provider's clock skew),
/// `exp` presence and lifetime, audiences (`audiences` replaces the provider's for
/// `provider_and_audiences`), subject. The issuer is checked by the caller, which uses it to
/// choose the provider.
pub fn check_claims(
    p: &JwtProvider,
    audiences: Option<&[String]>,
    jwt: &ParsedJwt,
    now: i64,
) -> Result<(), Status> {
    let skew = i64::try_from(p.clock_skew.as_secs()).unwrap_or(i64::MAX);
    let exp = int_claim(&jwt.payload, "exp");
    let nbf = int_claim(&jwt.payload, "nbf");
    if let Some(nbf) = nbf
        && now.saturating_add(skew) < nbf
    {
        return Err(Status::NotYetValid);
    }
    if let Some(exp) = exp
        && exp != 0
        && now > exp.saturating_add(skew)
    {
        return Err(Status::Expired);
    }
    if p.require_expiration && exp.is_none() {
        return Err(Status::VerificationFail);
    }
    if let Some(max) = p.max_lifetime {
        let start = int_claim(&jwt.payload, "iat").or(nbf);
        let too_long = match (exp, start) {
            (Some(e), Some(s)) => {
                e.saturating_sub(s) > i64::try_from(max.as_secs()).unwrap_or(i64::MAX)
            }
            // Without both ends the lifetime cannot be bounded.
            _ => true,
        };
        if too_long {
            return Err(Status::VerificationFail);
        }
    }
    let allowed = audiences.unwrap_or(&p.audiences);
    if !allowed.is_empty() {
        let ok = |a: &str| allowed.iter().any(|x| normalise(x) == normalise(a));
        let pass = match jwt.payload.get("aud") {
            Some(Value::String(a)) => ok(a),
            Some(Value::Array(v)) => v.iter().filter_map(Value::as_str).any(ok),
            _ => false,
        };
        if !pass {
            return Err(Status::AudienceNotAllowed);
        }
    }
    if let Some(sm) = &p.subjects {
        let sub = jwt.payload.get("sub").and_then(Value::as_str).unwrap_or("");
        if !sm.matches(sub) {
            return Err(Status::VerificationFail);
        }
    }
    Ok(())
}

/// Verifies the signature with the JWKS keys whose `kid` (when both have one) and
/// algorithms fit the token.
pub fn verify_signature(token: &str, jwt: &ParsedJwt, jwks: &Jwks) -> Result<(), Status> {
    let (message, signature) = token.split_at(jwt.signing_input_len.min(token.len()));
    let signature = signature.strip_prefix('.').unwrap_or(signature);
    let kid = jwt.kid();
    let mut usable = false;
    for k in &jwks.keys {
        let kid_ok = match (kid, k.kid.as_deref()) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        if !kid_ok || !k.algorithms.contains(&jwt.alg) {
            continue;
        }
        usable = true;
        if jsonwebtoken::crypto::verify(signature, message.as_bytes(), &k.key, jwt.alg)
            .unwrap_or(false)
        {
            return Ok(());
        }
    }
    Err(if usable {
        Status::VerificationFail
    } else {
        Status::KidAlgMismatch
    })
}
