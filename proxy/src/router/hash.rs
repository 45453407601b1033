//! A request's hash from its route's `hash_policy`, as Envoy's
//! `HashPolicyImpl::generateHash`: each policy that yields a hash (xxHash64)
//! is folded in as `rotl(previous, 1) ^ new`; a terminal policy stops the
//! walk once a hash exists.

use crate::request::conn::{ClientAddress, ConnInfo};
use crate::upstream::hashing::xxhash64;
use courier_config::route::hash_policy::{CookiePolicy, HashKind, HashPolicy};
use http::Request;

/// The request heads the hash reads.
type Parts<B> = Request<B>;

/// A request's hash, and the `Set-Cookie` value a cookie policy with a `ttl`
/// generated (the response carries it).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RequestHash {
    /// The combined hash; `None` when no policy produced one.
    pub hash: Option<u64>,
    /// `Set-Cookie` values to add to the response.
    pub set_cookies: Vec<String>,
}

/// Evaluates `policies` on a request; `generate_cookies`: a cookie policy
/// with a `ttl` generates its cookie when absent (Envoy does so when the
/// balancer asks for the hash, not when the weighted-cluster pick does).
pub fn compute<B>(
    policies: &[HashPolicy],
    parts: &Parts<B>,
    conn: &ConnInfo,
    generate_cookies: bool,
) -> RequestHash {
    let mut out = RequestHash::default();
    for p in policies {
        let new = match &p.kind {
            HashKind::Header { name, rewrite } => header_hash(parts, name, rewrite.as_ref()),
            HashKind::Cookie(c) => cookie_hash(parts, conn, c, generate_cookies, &mut out),
            HashKind::SourceIp => source_ip(parts, conn).map(|ip| xxhash64(ip.as_bytes(), 0)),
            HashKind::QueryParameter(name) => {
                query_value(parts.uri().query(), name).map(|v| xxhash64(v.as_bytes(), 0))
            }
        };
        if let Some(n) = new {
            let old = out.hash.map_or(0, |h| h.rotate_left(1));
            out.hash = Some(old ^ n);
        }
        if p.terminal && out.hash.is_some() {
            break;
        }
    }
    out
}

/// The values of header `name` (pseudo-headers from the request line),
/// rewritten, sorted and hashed in a chain, as Envoy hashes a header's lines.
fn header_hash<B>(
    parts: &Parts<B>,
    name: &str,
    rewrite: Option<&courier_config::route::RegexRewrite>,
) -> Option<u64> {
    let mut values: Vec<Vec<u8>> = match name {
        // Envoy keeps the HTTP/1 Host header as `:authority`: either name
        // reads it.
        ":authority" | "host" => crate::request::conn::authority_of(parts.uri(), parts.headers())
            .map(|a| vec![a.as_bytes().to_vec()])
            .unwrap_or_default(),
        ":path" => parts
            .uri()
            .path_and_query()
            .map(|p| vec![p.as_str().as_bytes().to_vec()])
            .unwrap_or_default(),
        ":method" => vec![parts.method().as_str().as_bytes().to_vec()],
        _ => parts
            .headers()
            .get_all(name)
            .iter()
            .map(|v| v.as_bytes().to_vec())
            .collect(),
    };
    if values.is_empty() {
        return None;
    }
    if let Some(r) = rewrite {
        for v in &mut values {
            let text = String::from_utf8_lossy(v);
            *v = r.apply(&text).into_owned().into_bytes();
        }
    }
    values.sort();
    // Envoy's span hash: each value hashed with the previous one's hash as
    // its seed.
    Some(values.iter().fold(0, |seed, v| xxhash64(v, seed)))
}

/// Envoy's `parseCookieValue`: the first `name=value` among the `cookie`
/// lines' `;`-separated pairs, without surrounding double quotes.
pub fn cookie_value<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    for line in headers.get_all(http::header::COOKIE) {
        let Ok(line) = line.to_str() else { continue };
        for pair in line.split(';') {
            let pair = pair.trim_start_matches(' ');
            let Some((k, v)) = pair.split_once('=') else {
                continue;
            };
            if k == name {
                let v = if v.len() >= 2 && v.starts_with('"') && v.ends_with('"') {
                    &v[1..v.len() - 1]
                } else {
                    v
                };
                return Some(v);
            }
        }
    }
    None
}

fn cookie_hash<B>(
    parts: &Parts<B>,
    conn: &ConnInfo,
    c: &CookiePolicy,
    generate: bool,
    out: &mut RequestHash,
) -> Option<u64> {
    match cookie_value(parts.headers(), &c.name) {
        Some(v) if !v.is_empty() => Some(xxhash64(v.as_bytes(), 0)),
        _ => {
            let ttl = c.ttl?;
            if !generate {
                return None;
            }
            // Envoy's value: the hex xxHash64 of the downstream remote and
            // local addresses, the same for every request of a connection.
            let remote = match parts.extensions().get::<ClientAddress>() {
                Some(a) => a.0.to_string(),
                None => conn.peer.to_string(),
            };
            let value = format!(
                "{:016x}",
                xxhash64(format!("{remote}{}", conn.local).as_bytes(), 0)
            );
            out.set_cookies.push(set_cookie(c, &value, ttl));
            Some(xxhash64(value.as_bytes(), 0))
        }
    }
}

/// Envoy's `makeSetCookieValue` (HttpOnly).
fn set_cookie(c: &CookiePolicy, value: &str, ttl: u64) -> String {
    let mut s = format!("{}=\"{value}\"", c.name);
    if ttl != 0 {
        s.push_str(&format!("; Max-Age={ttl}"));
    }
    if !c.path.is_empty() {
        s.push_str(&format!("; Path={}", c.path));
    }
    for (name, value) in &c.attributes {
        if value.is_empty() {
            s.push_str(&format!("; {name}"));
        } else {
            s.push_str(&format!("; {name}={value}"));
        }
    }
    s.push_str("; HttpOnly");
    s
}

/// The downstream client's IP as Envoy prints it (no port, no brackets).
fn source_ip<B>(parts: &Parts<B>, conn: &ConnInfo) -> Option<String> {
    match parts.extensions().get::<ClientAddress>() {
        Some(a) => Some(a.0.ip().to_string()),
        None => conn.peer.ip().map(|ip| ip.to_string()),
    }
}

/// Envoy's `parseQueryString(...).getFirstValue(name)`: `&`-separated pairs,
/// split at the first `=` (a bare name has an empty value), not decoded.
pub fn query_value<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_follow_envoy() {
        assert_eq!(query_value(Some("a=1&b=2&a=3"), "a"), Some("1"));
        assert_eq!(query_value(Some("b&c=1"), "b"), Some(""));
        assert_eq!(query_value(Some("b=x%20y"), "b"), Some("x%20y"));
        assert_eq!(query_value(Some("b=1"), "c"), None);
        assert_eq!(query_value(None, "c"), None);
    }

    #[test]
    fn cookie_values_follow_envoy() {
        let mut h = http::HeaderMap::new();
        h.append("cookie", "a=1; sess=\"xyz\"".parse().unwrap());
        h.append("cookie", "other=2".parse().unwrap());
        assert_eq!(cookie_value(&h, "sess"), Some("xyz"));
        assert_eq!(cookie_value(&h, "other"), Some("2"));
        assert_eq!(cookie_value(&h, "none"), None);
    }

    #[test]
    fn set_cookie_is_envoys() {
        let c = CookiePolicy {
            name: "s".into(),
            path: "/p".into(),
            ttl: Some(60),
            attributes: vec![
                ("SameSite".into(), "Lax".into()),
                ("Secure".into(), String::new()),
            ],
        };
        assert_eq!(
            set_cookie(&c, "00ab", 60),
            "s=\"00ab\"; Max-Age=60; Path=/p; SameSite=Lax; Secure; HttpOnly"
        );
        assert_eq!(
            set_cookie(
                &CookiePolicy {
                    path: String::new(),
                    attributes: vec![],
                    ..c
                },
                "1",
                0
            ),
            "s=\"1\"; HttpOnly"
        );
    }
}
