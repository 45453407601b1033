//! Header helpers every stage uses.

use http::{HeaderMap, HeaderValue, Request, Version, header};

/// Copies every header value into one new buffer and points the values at it.
///
/// Header values parsed from a connection are slices of that connection's read
/// buffer, and a slice keeps the whole buffer (8 KiB or more) alive. An HTTP/2
/// connection's HPACK encoder keeps the values it indexes for as long as they
/// stay in its table, so without this each table entry of a response could pin
/// an upstream connection's read buffer for the downstream connection's life.
/// One allocation of the values' own size instead.
pub fn compact(headers: &mut HeaderMap) {
    let total: usize = headers.values().map(|v| v.len()).sum();
    if total == 0 {
        return;
    }
    let mut buf = bytes::BytesMut::with_capacity(total);
    for v in headers.values() {
        buf.extend_from_slice(v.as_bytes());
    }
    let buf = buf.freeze();
    let mut at = 0;
    for v in headers.values_mut() {
        let end = at + v.len();
        let sensitive = v.is_sensitive();
        // The bytes were a valid value a moment ago: this cannot fail.
        if let Ok(mut copy) = HeaderValue::from_maybe_shared(buf.slice(at..end)) {
            copy.set_sensitive(sensitive);
            *v = copy;
        }
        at = end;
    }
}

/// The upgrade an HTTP/1.1 request asks for (`connection: upgrade` and
/// `upgrade: <type>`).
pub fn upgrade_type<B>(req: &Request<B>) -> Option<&str> {
    if req.version() != Version::HTTP_11 {
        return None;
    }
    let asks = req
        .headers()
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    if !asks {
        return None;
    }
    req.headers().get(header::UPGRADE)?.to_str().ok()
}

/// What the connection manager does with a response's `server` header
/// (`server_header_transformation`).
#[derive(Debug, Clone)]
pub enum ServerHeader {
    /// Always this value (`OVERWRITE`, the default).
    Overwrite(HeaderValue),
    /// This value unless the response has one (`APPEND_IF_ABSENT`).
    AppendIfAbsent(HeaderValue),
    /// The response's own, or none (`PASS_THROUGH`).
    PassThrough,
}

impl ServerHeader {
    /// Applies the transformation to a response's headers.
    pub fn apply(&self, headers: &mut HeaderMap) {
        match self {
            Self::Overwrite(v) => {
                headers.insert(header::SERVER, v.clone());
            }
            Self::AppendIfAbsent(v) => {
                if !headers.contains_key(header::SERVER) {
                    headers.insert(header::SERVER, v.clone());
                }
            }
            Self::PassThrough => {}
        }
    }
}
