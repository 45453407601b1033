//! The query string as Envoy's `QueryParamsMulti::parseAndDecodeQueryString` reads
//! it (names and values percent-decoded, `+` left alone, a parameter without `=`
//! valued empty) and as `replaceQueryString` writes it back: sorted by name (a
//! name's values in arrival order), `name=value` joined with `&`, decoded.

use crate::request::RequestState;
use http::Uri;
use http::uri::PathAndQuery;
use std::collections::BTreeMap;

type Params = BTreeMap<Vec<u8>, Vec<Vec<u8>>>;

/// Envoy's `PercentEncoding::decode`: `%XX` with two hex digits becomes its byte,
/// anything else stays.
fn decode(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%'
            && i + 2 < s.len()
            && let (Some(hi), Some(lo)) = (hex(s[i + 1]), hex(s[i + 2]))
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
            continue;
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

fn parse(path: &str) -> Params {
    let mut params = Params::new();
    let Some((_, query)) = path.split_once('?') else {
        return params;
    };
    let query = query.as_bytes();
    let mut start = 0;
    // As Envoy's loop: an empty parameter between two `&` counts (name and value
    // empty), a trailing `&` does not.
    while start < query.len() {
        let end = query[start..]
            .iter()
            .position(|b| *b == b'&')
            .map_or(query.len(), |e| start + e);
        let param = &query[start..end];
        let (name, value) = match param.iter().position(|b| *b == b'=') {
            Some(eq) => (decode(&param[..eq]), decode(&param[eq + 1..])),
            None => (decode(param), Vec::new()),
        };
        params.entry(name).or_default().push(value);
        start = end + 1;
    }
    params
}

/// The first value of parameter `name`, decoded.
pub(super) fn first_value(path: &str, name: &str) -> Option<Vec<u8>> {
    parse(path)
        .remove(name.as_bytes())
        .and_then(|v| v.into_iter().next())
}

/// Bytes a request target cannot carry are percent-encoded again: Envoy sends the
/// decoded query as is (even a space), which no valid request line holds.
fn encode_for_target(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    for &b in raw {
        if b <= b' ' || b >= 0x7f || b == b'#' {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

/// Removes parameter `name` from `:path`, rewriting the query as Envoy does.
pub(super) fn remove(req: &mut RequestState<'_>, name: &str) {
    let path = req.path();
    let Some((base, _)) = path.split_once('?') else {
        return;
    };
    let mut params = parse(path);
    params.remove(name.as_bytes());
    let mut raw = base.as_bytes().to_vec();
    let mut delim = b'?';
    for (k, values) in &params {
        for v in values {
            raw.push(delim);
            raw.extend_from_slice(k);
            raw.push(b'=');
            raw.extend_from_slice(v);
            delim = b'&';
        }
    }
    let Ok(pq) = PathAndQuery::try_from(encode_for_target(&raw)) else {
        return;
    };
    let mut parts = req.head.uri.clone().into_parts();
    parts.path_and_query = Some(pq);
    if let Ok(u) = Uri::from_parts(parts) {
        req.head.uri = u;
    }
}

#[cfg(test)]
mod tests {
    use super::{decode, encode_for_target, first_value, parse};

    #[test]
    fn query_parsed_as_envoy() {
        assert_eq!(decode(b"a%41%4g%2"), b"aA%4g%2");
        assert_eq!(decode(b"k+1"), b"k+1");
        let p = parse("/p?z=1&api_key=k1&a=2&a=0&b&c%3Dd=%41");
        let keys: Vec<&[u8]> = p.keys().map(Vec::as_slice).collect();
        assert_eq!(keys, [&b"a"[..], b"api_key", b"b", b"c=d", b"z"]);
        assert_eq!(p[b"a".as_slice()], [b"2".to_vec(), b"0".to_vec()]);
        assert_eq!(
            first_value("/p?api%5Fkey=k%31&api_key=k2", "api_key"),
            Some(b"k1".to_vec())
        );
        assert_eq!(first_value("/p", "api_key"), None);
        assert_eq!(first_value("/p?api_key", "api_key"), Some(Vec::new()));
    }

    #[test]
    fn decoded_bytes_a_target_cannot_carry_are_encoded_again() {
        // Envoy would send `/p?b= x+y`, which breaks the request line.
        assert_eq!(
            encode_for_target(b"/p?b= x+y&c=\xff#"),
            "/p?b=%20x+y&c=%FF%23"
        );
    }
}
