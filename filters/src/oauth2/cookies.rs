//! The OAuth2 filter's cookies as Envoy 1.40 writes and reads them: parsing the
//! `cookie` header, the HMAC that signs the session cookies, the CSRF token, the
//! AES-256-CBC encryption of tokens and of the PKCE code verifier, and the
//! `Set-Cookie` attribute tails.

use aws_lc_rs::cipher::{
    AES_256, DecryptionContext, EncryptionContext, PaddedBlockDecryptingKey,
    PaddedBlockEncryptingKey, UnboundCipherKey,
};
use aws_lc_rs::iv::FixedLength;
use aws_lc_rs::{digest, hmac};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use courier_config::filters::oauth2::{CookieSettings, SameSite};
use http::HeaderMap;

/// Envoy's delete form of a cookie.
pub(crate) fn delete(name: &str, path: &str, domain: &str) -> String {
    let secure = if name.starts_with("__Secure-") || name.starts_with("__Host-") {
        "; Secure"
    } else {
        ""
    };
    let domain = domain_attr(domain);
    format!("{name}=deleted; path={path}; expires=Thu, 01 Jan 1970 00:00:00 GMT{domain}{secure}")
}

/// `;domain=<d>` when a cookie domain is configured.
pub(crate) fn domain_attr(domain: &str) -> String {
    if domain.is_empty() {
        String::new()
    } else {
        format!(";domain={domain}")
    }
}

/// Envoy's `buildCookieTail`: `[;domain=d];path=p;Max-Age=n;secure;HttpOnly[;SameSite=x][;Partitioned]`.
pub(crate) fn tail(settings: &CookieSettings, max_age: &str, domain: &str) -> String {
    let same_site = match settings.same_site {
        SameSite::Disabled => "",
        SameSite::Strict => ";SameSite=Strict",
        SameSite::Lax => ";SameSite=Lax",
        SameSite::None => ";SameSite=None",
    };
    let partitioned = if settings.partitioned {
        ";Partitioned"
    } else {
        ""
    };
    format!(
        "{};path={};Max-Age={max_age};secure;HttpOnly{same_site}{partitioned}",
        domain_attr(domain),
        settings.path
    )
}

/// The request's cookies in order (Envoy's `parseCookies`: every `cookie` header,
/// split on `;`, names and values trimmed, surrounding quotes of a value dropped).
pub(crate) fn parse(headers: &HeaderMap) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for h in headers.get_all(http::header::COOKIE) {
        let Ok(h) = h.to_str() else { continue };
        for part in h.split(';') {
            let part = part.trim_start_matches(' ');
            let Some((k, v)) = part.split_once('=') else {
                continue;
            };
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v);
            out.push((k.to_string(), v.to_string()));
        }
    }
    out
}

/// The first value of cookie `name` (Envoy's `parseCookieValue`), if not empty.
pub(crate) fn value<'c>(cookies: &'c [(String, String)], name: &str) -> Option<&'c str> {
    cookies
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// Rewrites the `cookie` header from `cookies` (Envoy joins them with `; `).
pub(crate) fn write(headers: &mut HeaderMap, cookies: &[(String, String)]) {
    headers.remove(http::header::COOKIE);
    if cookies.is_empty() {
        return;
    }
    let joined = cookies
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("; ");
    if let Ok(v) = http::HeaderValue::from_str(&joined) {
        headers.insert(http::header::COOKIE, v);
    }
}

/// Whether `name` is cookie `base` or a flow's `base.<flow id>`.
pub(crate) fn matches_base(name: &str, base: &str) -> bool {
    name == base
        || (name.len() > base.len() + 1
            && name.starts_with(base)
            && name.as_bytes()[base.len()] == b'.')
}

fn hmac_sha256(secret: &[u8], msg: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    hmac::sign(&key, msg).as_ref().to_vec()
}

/// The HMAC cookie's value: base64 of HMAC-SHA256 over `domain`, `expires` and the
/// three tokens joined with `\n` (Envoy's `encodeHmacBase64`).
pub(crate) fn session_hmac(secret: &[u8], parts: [&str; 5]) -> String {
    STANDARD.encode(hmac_sha256(secret, parts.join("\n").as_bytes()))
}

/// The older form Envoy still accepts: base64 of the lower-case hex of the HMAC.
pub(crate) fn session_hmac_hex(secret: &[u8], parts: [&str; 5]) -> String {
    let mac = hmac_sha256(secret, parts.join("\n").as_bytes());
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    STANDARD.encode(hex)
}

/// Compares without an early exit on the first difference.
pub(crate) fn same(a: &str, b: &str) -> bool {
    aws_lc_rs::constant_time::verify_slices_are_equal(a.as_bytes(), b.as_bytes()).is_ok()
}

/// A CSRF token `<nonce>.<base64 HMAC(nonce)>` (Envoy's `generateCsrfToken`).
pub(crate) fn csrf_token(secret: &[u8], nonce: &str) -> String {
    format!(
        "{nonce}.{}",
        STANDARD.encode(hmac_sha256(secret, nonce.as_bytes()))
    )
}

/// Whether a CSRF token's HMAC is the secret's.
pub(crate) fn csrf_valid(secret: &[u8], token: &str) -> bool {
    let Some((nonce, mac)) = token.split_once('.') else {
        return false;
    };
    same(&STANDARD.encode(hmac_sha256(secret, nonce.as_bytes())), mac)
}

fn key(secret: &[u8]) -> Option<UnboundCipherKey> {
    let k = digest::digest(&digest::SHA256, secret);
    UnboundCipherKey::new(&AES_256, k.as_ref()).ok()
}

/// AES-256-CBC (PKCS#7) under SHA-256 of the secret, a random IV prepended, base64url
/// without padding: Envoy's `encrypt`. `None` only if the cipher fails.
pub(crate) fn encrypt(plaintext: &str, secret: &[u8]) -> Option<String> {
    let mut iv = [0u8; 16];
    aws_lc_rs::rand::fill(&mut iv).ok()?;
    let k = PaddedBlockEncryptingKey::cbc_pkcs7(key(secret)?).ok()?;
    let mut data = plaintext.as_bytes().to_vec();
    k.less_safe_encrypt(&mut data, EncryptionContext::Iv128(FixedLength::from(iv)))
        .ok()?;
    let mut out = iv.to_vec();
    out.extend_from_slice(&data);
    Some(URL_SAFE_NO_PAD.encode(out))
}

/// Envoy's `decrypt`; `None` when the input is not such a ciphertext under the secret.
pub(crate) fn decrypt(encrypted: &str, secret: &[u8]) -> Option<String> {
    let raw = URL_SAFE_NO_PAD
        .decode(encrypted.trim_end_matches('='))
        .ok()?;
    if raw.len() <= 16 {
        return None;
    }
    let (iv, ct) = raw.split_at(16);
    let iv: [u8; 16] = iv.try_into().ok()?;
    let k = PaddedBlockDecryptingKey::cbc_pkcs7(key(secret)?).ok()?;
    let mut ct = ct.to_vec();
    let plain = k
        .decrypt(&mut ct, DecryptionContext::Iv128(FixedLength::from(iv)))
        .ok()?;
    String::from_utf8(plain.to_vec()).ok()
}

/// Envoy's `decryptToken`: a value that does not decrypt to a valid header value is
/// kept as it is (a token written before encryption, or under another secret: its HMAC
/// then fails).
pub(crate) fn decrypt_token(encrypted: &str, secret: &[u8]) -> String {
    match decrypt(encrypted, secret) {
        Some(p) if http::HeaderValue::from_str(&p).is_ok() => p,
        _ => encrypted.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encryption_round_trips_and_refuses_other_secrets() {
        let e = encrypt("token-1", b"k").unwrap();
        assert_eq!(decrypt(&e, b"k").as_deref(), Some("token-1"));
        assert_eq!(decrypt_token("plain", b"k"), "plain");
        assert_ne!(decrypt(&e, b"other").as_deref(), Some("token-1"));
    }

    #[test]
    fn csrf_and_hmac_forms() {
        let t = csrf_token(b"s", "abc");
        assert!(csrf_valid(b"s", &t));
        assert!(!csrf_valid(b"x", &t));
        let parts = ["example.com", "1", "a", "", ""];
        assert_ne!(session_hmac(b"s", parts), session_hmac_hex(b"s", parts));
        assert!(matches_base("OauthNonce.ab", "OauthNonce"));
        assert!(!matches_base("OauthNonceX", "OauthNonce"));
        assert_eq!(
            delete("__Host-x", "/", "d.com"),
            "__Host-x=deleted; path=/; expires=Thu, 01 Jan 1970 00:00:00 GMT;domain=d.com; Secure"
        );
    }
}
