//! The authorization redirect and the callback's `state` as Envoy 1.40 builds and
//! reads them: the sorted query of the authorization endpoint, the PKCE pair, and
//! `state` as base64url JSON `{"url","csrf_token","flow_id"}`.

use base64::Engine as _;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use courier_config::filters::oauth2::OAuth2Config;
use std::collections::BTreeMap;

/// Envoy's `PercentEncoding::urlEncode`: all but RFC 3986 unreserved characters escaped.
pub(crate) fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Envoy's `PercentEncoding::encode(value, reserved)`: `reserved`, controls, space-less
/// bytes below `' '` and bytes from `~` up escaped.
pub(crate) fn form_encode(s: &str, reserved: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if !(b' '..b'~').contains(&b) || reserved.as_bytes().contains(&b) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

/// 16 lower-case hex digits of a random `u64` (Envoy's flow id and nonce).
pub(crate) fn random_hex() -> String {
    let mut b = [0u8; 8];
    // An all-zero id on a failing RNG still works: the CSRF HMAC guards the flow.
    let _ = aws_lc_rs::rand::fill(&mut b);
    format!("{:016x}", u64::from_ne_bytes(b))
}

/// A PKCE code verifier (32 random bytes, base64url) and its S256 challenge.
pub(crate) fn pkce() -> (String, String) {
    let mut b = [0u8; 32];
    let _ = aws_lc_rs::rand::fill(&mut b);
    let verifier = URL_SAFE_NO_PAD.encode(b);
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, verifier.as_bytes());
    (verifier, URL_SAFE_NO_PAD.encode(digest.as_ref()))
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// Envoy's `encodeState`.
pub(crate) fn encode_state(url: &str, csrf: &str, flow_id: &str) -> String {
    let json = format!(
        "{{\"url\":{},\"csrf_token\":{},\"flow_id\":{}}}",
        json_string(url),
        json_string(csrf),
        json_string(flow_id)
    );
    URL_SAFE_NO_PAD.encode(json)
}

/// A decoded `state`: the original URL, the CSRF token and the flow id (empty when the
/// state of an older Envoy has none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct State {
    pub url: String,
    pub csrf_token: String,
    pub flow_id: String,
}

/// Reads a `state`; `Err` is Envoy's failure detail.
pub(crate) fn decode_state(state: &str) -> Result<State, String> {
    let raw = URL_SAFE_NO_PAD
        .decode(state.trim_end_matches('='))
        .or_else(|_| URL_SAFE.decode(state))
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Err(format!("State query param is not a valid JSON: {text}"));
    };
    let get = |k: &str| m.get(k).map(|v| v.as_str().unwrap_or_default().to_string());
    match (get("url"), get("csrf_token")) {
        (Some(url), Some(csrf_token)) => Ok(State {
            url,
            csrf_token,
            flow_id: get("flow_id").unwrap_or_default(),
        }),
        _ => Err(format!(
            "State query param does not contain url or CSRF token: {text}"
        )),
    }
}

/// The query of a path as Envoy's `QueryParamsMulti::parseQueryString` keeps it:
/// name -> values, not decoded.
pub(crate) fn query(path: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let Some((_, q)) = path.split_once('?') else {
        return out;
    };
    let q = q.split('#').next().unwrap_or("");
    for part in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        out.entry(k.to_string()).or_default().push(v.to_string());
    }
    out
}

/// Envoy's `Url::initialize` (not CONNECT): `http(s)://host[...]`.
pub(crate) fn is_url(u: &str) -> bool {
    let Some((scheme, rest)) = u.split_once("://") else {
        return false;
    };
    (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        && !rest.split(['/', '?', '#']).next().unwrap_or("").is_empty()
}

/// The path and query of an absolute URL (`/` when it has none).
pub(crate) fn path_of_url(u: &str) -> &str {
    let rest = u.split_once("://").map_or(u, |(_, r)| r);
    match rest.find(['/', '?']) {
        Some(i) => &rest[i..],
        None => "/",
    }
}

/// The path without its query and fragment (what a `PathMatcher` matches).
pub(crate) fn path_only(path: &str) -> &str {
    path.split(['?', '#']).next().unwrap_or(path)
}

/// The authorization redirect's `Location`: the endpoint with its query replaced by
/// its own parameters and the flow's, sorted by name (Envoy's btree), then `resource`s.
pub(crate) fn authorization_location(cfg: &OAuth2Config, state: &str, challenge: &str) -> String {
    let ep = &cfg.authorization_endpoint;
    let mut params = query(ep);
    let mut set = |k: &str, v: String| {
        params.insert(k.to_string(), vec![v]);
    };
    set("client_id", cfg.client_id.clone());
    set("response_type", "code".into());
    set("scope", url_encode(&cfg.auth_scopes.join(" ")));
    set("state", state.to_string());
    set("redirect_uri", url_encode(&cfg.redirect_uri));
    set("code_challenge", challenge.to_string());
    set("code_challenge_method", "S256".into());
    let base = ep.split(['?', '#']).next().unwrap_or(ep);
    // `Url::toString` writes `/` for an endpoint without a path.
    let slash = match base.split_once("://") {
        Some((_, rest)) if !rest.contains('/') => "/",
        _ => "",
    };
    let q: Vec<String> = params
        .iter()
        .flat_map(|(k, vs)| vs.iter().map(move |v| format!("{k}={v}")))
        .collect();
    let mut out = format!("{base}{slash}?{}", q.join("&"));
    for r in &cfg.resources {
        out.push_str("&resource=");
        out.push_str(&url_encode(r));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_as_envoy_writes_it() {
        let s = encode_state("http://a/b?c=\"d\"", "n.h", "f1");
        let st = decode_state(&s).unwrap();
        assert_eq!(st.url, "http://a/b?c=\"d\"");
        assert_eq!(st.flow_id, "f1");
        // The state Envoy 1.40 sent in a redirect (taken from a live run).
        let envoy = "eyJ1cmwiOiJodHRwOi8vd3d3LmV4YW1wbGUuY29tL2Zvby94P2E9YiIsImNzcmZfdG9rZW4iOiIwN2QwMWRmYmM4NGVkODdiLm9iQWUwbDZZQkx2T25Va2RTM3FINm1rS2p4akpyaFhsdWhhUWRoZ2E1TW89IiwiZmxvd19pZCI6IjA3ZDAxZGZiYzg0ZWQ4N2IifQ";
        let st = decode_state(envoy).unwrap();
        assert_eq!(st.url, "http://www.example.com/foo/x?a=b");
        assert_eq!(st.flow_id, "07d01dfbc84ed87b");
        assert_eq!(
            encode_state(&st.url, &st.csrf_token, &st.flow_id),
            envoy,
            "same bytes as Envoy's encodeState"
        );
        assert!(decode_state("bm90IGpzb24").is_err());
    }

    #[test]
    fn encodings() {
        assert_eq!(url_encode("openid email"), "openid%20email");
        assert_eq!(url_encode("https://a.b/c"), "https%3A%2F%2Fa.b%2Fc");
        assert_eq!(
            form_encode("a:b/c=d&e?f+g h~", ":/=&?+"),
            "a%3Ab%2Fc%3Dd%26e%3Ff%2Bg h%7E"
        );
        assert_eq!(path_only("/cb?code=1"), "/cb");
    }
}
