//! The response-header tests and edits of the compressor filter (Envoy's
//! `isMinimumContentLength`, `isContentTypeAllowed`, `hasCacheControlNoTransform`,
//! `isTransferEncodingAllowed`, `insertVaryHeader`, `sanitizeEtagHeader`).

use http::HeaderMap;
use http::header::{
    CACHE_CONTROL, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, ETAG, TRANSFER_ENCODING, UPGRADE, VARY,
};

/// A header's values joined with `,` as Envoy sees an inline header; `None` when absent.
/// Values that are not text are read lossily: they can only fail the token tests.
pub(crate) fn joined(headers: &HeaderMap, name: &http::HeaderName) -> Option<String> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    let mut out = String::from_utf8_lossy(first.as_bytes()).into_owned();
    for v in values {
        out.push(',');
        out.push_str(&String::from_utf8_lossy(v.as_bytes()));
    }
    Some(out)
}

/// Whether `token` is one of the `,`-separated items of `value` (trimmed; `ci`:
/// ignoring case).
fn has_token(value: &str, token: &str, ci: bool) -> bool {
    value.split(',').map(str::trim).any(|t| {
        if ci {
            t.eq_ignore_ascii_case(token)
        } else {
            t == token
        }
    })
}

/// `content-length` is absent (the length is unknown, so the body may be large) or at
/// least `min`. An unreadable length is too small.
pub(crate) fn long_enough(headers: &HeaderMap, min: u32) -> bool {
    match headers.get(CONTENT_LENGTH) {
        None => true,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .is_some_and(|n| n >= u64::from(min)),
    }
}

/// The response's `content-type` (empty when absent), as negotiation compares it.
pub(crate) fn content_type(headers: &HeaderMap) -> String {
    joined(headers, &CONTENT_TYPE)
        .map(|v| super::negotiate::content_type_key(&v))
        .unwrap_or_default()
}

/// `cache-control` has `no-transform`.
pub(crate) fn no_transform(headers: &HeaderMap) -> bool {
    joined(headers, &CACHE_CONTROL).is_some_and(|v| has_token(&v, "no-transform", true))
}

/// The response switches protocols (`connection: upgrade` with an `upgrade` header).
pub(crate) fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(UPGRADE)
        && joined(headers, &CONNECTION).is_some_and(|v| has_token(&v, "upgrade", true))
}

/// `transfer-encoding` does not already compress (with a known coding or `ours`).
pub(crate) fn transfer_encoding_allowed(headers: &HeaderMap, ours: &str) -> bool {
    let Some(te) = joined(headers, &TRANSFER_ENCODING) else {
        return true;
    };
    !te.split(',').map(str::trim).any(|t| {
        ["gzip", "br", "deflate", "compress", "zstd", ours]
            .iter()
            .any(|c| t.eq_ignore_ascii_case(c))
    })
}

/// Adds `Accept-Encoding` to `vary` unless it is there (compared case-sensitively, as
/// Envoy does).
pub(crate) fn insert_vary(headers: &mut HeaderMap) {
    let value = match joined(headers, &VARY) {
        None => http::HeaderValue::from_static("Accept-Encoding"),
        Some(v) if has_token(&v, "Accept-Encoding", false) => return,
        Some(v) => match http::HeaderValue::from_str(&format!("{v}, Accept-Encoding")) {
            Ok(v) => v,
            // A `vary` that is not text stays as it was.
            Err(_) => return,
        },
    };
    headers.insert(VARY, value);
}

/// A strong `etag` describes the uncompressed bytes: it goes, or with `weaken` becomes
/// weak (`W/`); a weak one stays.
pub(crate) fn sanitize_etag(headers: &mut HeaderMap, weaken: bool) {
    let Some(v) = headers.get(ETAG) else {
        return;
    };
    let b = v.as_bytes();
    if b.len() > 2 && !((b[0] == b'w' || b[0] == b'W') && b[1] == b'/') {
        let weak = [b"W/", b].concat();
        match http::HeaderValue::from_bytes(&weak) {
            Ok(w) if weaken => {
                headers.insert(ETAG, w);
            }
            _ => {
                headers.remove(ETAG);
            }
        }
    }
}
