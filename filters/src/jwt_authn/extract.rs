//! Token extraction (envoy-reference 2.2 step 3): headers (with `value_prefix` searched
//! anywhere in each value), then query parameters (first value), then cookies.

use courier_config::filters::jwt_authn::JwtProvider;
use http::request::Parts;

/// Where a token was found (what `forward: false` removes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location<'p> {
    /// A request header, by lower-case name.
    Header(&'p str),
    /// A query parameter.
    Param,
    /// A cookie.
    Cookie,
}

/// One extracted token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extracted<'p> {
    /// The compact JWT.
    pub token: String,
    /// Where it was.
    pub location: Location<'p>,
}

fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'=')
}

/// The token after `prefix` in `value` (Envoy searches the prefix anywhere and takes the
/// base64url/`.` run that follows); the whole value when the prefix is empty.
fn after_prefix<'v>(value: &'v str, prefix: &str) -> Option<&'v str> {
    if prefix.is_empty() {
        return (!value.is_empty()).then_some(value);
    }
    let start = value.find(prefix)? + prefix.len();
    let rest = &value[start..];
    let end = rest
        .bytes()
        .position(|b| !is_token_char(b))
        .unwrap_or(rest.len());
    (end > 0).then_some(&rest[..end])
}

/// Appends the tokens `p` finds in the request to `out`.
pub fn extract<'p>(p: &'p JwtProvider, head: &Parts, out: &mut Vec<Extracted<'p>>) {
    for h in &p.from_headers {
        for v in head.headers.get_all(h.name.as_str()) {
            if let Ok(v) = v.to_str()
                && let Some(t) = after_prefix(v, &h.value_prefix)
            {
                out.push(Extracted {
                    token: t.to_string(),
                    location: Location::Header(&h.name),
                });
            }
        }
    }
    if !p.from_params.is_empty()
        && let Some(q) = head.uri.query()
    {
        for name in &p.from_params {
            let first = q.split('&').find_map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k == name).then_some(v)
            });
            if let Some(v) = first.filter(|v| !v.is_empty()) {
                out.push(Extracted {
                    token: v.to_string(),
                    location: Location::Param,
                });
            }
        }
    }
    if !p.from_cookies.is_empty() {
        for v in head.headers.get_all(http::header::COOKIE) {
            let Ok(v) = v.to_str() else { continue };
            for pair in v.split(';') {
                let (k, val) = pair.trim().split_once('=').unwrap_or((pair.trim(), ""));
                if p.from_cookies.iter().any(|c| c == k) && !val.is_empty() {
                    out.push(Extracted {
                        token: val.trim_matches('"').to_string(),
                        location: Location::Cookie,
                    });
                }
            }
        }
    }
}

/// Whether `p` would find any token (without copying one).
pub fn has_token(p: &JwtProvider, head: &Parts) -> bool {
    let mut v = Vec::new();
    extract(p, head, &mut v);
    !v.is_empty()
}

#[cfg(test)]
mod tests {
    use super::after_prefix;

    #[test]
    fn prefix_is_searched_anywhere_and_token_chars_end_it() {
        assert_eq!(
            after_prefix("Bearer abc.def.ghi", "Bearer "),
            Some("abc.def.ghi")
        );
        assert_eq!(after_prefix("x, Bearer a.b.c, y", "Bearer "), Some("a.b.c"));
        assert_eq!(after_prefix("bearer a.b.c", "Bearer "), None);
        assert_eq!(after_prefix("Bearer ", "Bearer "), None);
        assert_eq!(after_prefix("a.b.c", ""), Some("a.b.c"));
    }
}
