//! The API key authentication filter (`envoy.filters.http.api_key_auth`), as Envoy
//! 1.40's `ApiKeyAuthFilter`: the key is the first non-empty one of the key sources
//! in order (a header's first value without a `Bearer ` prefix, a query parameter's
//! first percent-decoded value, a cookie's value without quotes); it must be one of
//! the credentials, and on a route with `allowed_clients` its client one of them.
//! A route's `ApiKeyAuthPerRoute` replaces the credentials and key sources it sets,
//! and always the forwarding. Otherwise `401 Client authentication failed.` or
//! `403 Client is forbidden.`. An authenticated request gets its client in the
//! forwarding header and, with `hide_credentials`, loses the key from every key
//! source (the query is then rebuilt as Envoy does: decoded, in key order).
//! Counters `http.<hcm prefix>.api_key_auth.{allowed,unauthorized,forbidden}`.
//! Synchronous: never builds a future.

mod query;

use crate::basic_auth::credential;
use crate::chain::{Decision, HttpFilter, LocalReply};
use crate::per_worker::PerWorker;
use crate::request::RequestState;
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::api_key_auth::{ApiKeyAuthConfig, KeySource};
use http::header::{COOKIE, HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// api_key_auth counters.
#[derive(Debug, Default)]
pub struct ApiKeyAuthStats {
    /// `api_key_auth.allowed`.
    pub allowed: AtomicU64,
    /// `api_key_auth.unauthorized`: answered 401.
    pub unauthorized: AtomicU64,
    /// `api_key_auth.forbidden`: answered 403.
    pub forbidden: AtomicU64,
}

/// The api_key_auth filter.
#[derive(Debug)]
pub struct ApiKeyAuthFilter {
    config: Arc<ApiKeyAuthConfig>,
    stats: Arc<PerWorker<ApiKeyAuthStats>>,
}

impl ApiKeyAuthFilter {
    /// A filter with the HCM-level `config`.
    pub fn new(config: Arc<ApiKeyAuthConfig>) -> Self {
        Self {
            config,
            stats: Arc::new(PerWorker::new(ApiKeyAuthStats::default)),
        }
    }

    /// The filter's counters.
    pub fn stats(&self) -> &Arc<PerWorker<ApiKeyAuthStats>> {
        &self.stats
    }

    fn deny(
        &self,
        req: &RequestState<'_>,
        forbidden: bool,
        details: &'static str,
    ) -> Decision<'static> {
        let stats = self.stats.get(req.conn.worker);
        let (status, body, counter) = if forbidden {
            (
                StatusCode::FORBIDDEN,
                "Client is forbidden.",
                &stats.forbidden,
            )
        } else {
            (
                StatusCode::UNAUTHORIZED,
                "Client authentication failed.",
                &stats.unauthorized,
            )
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Decision::Respond(LocalReply::new(status, body, details))
    }
}

/// Envoy's `parseCookieValue`: the value of the first cookie named `name` over every
/// `cookie` header, without surrounding double quotes.
fn cookie_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h [u8]> {
    for h in headers.get_all(COOKIE) {
        for c in h.as_bytes().split(|b| *b == b';').filter(|c| !c.is_empty()) {
            let Some(eq) = c.iter().position(|b| *b == b'=') else {
                continue;
            };
            let start = c.iter().position(|b| *b != b' ').unwrap_or(c.len()).min(eq);
            if &c[start..eq] != name.as_bytes() {
                continue;
            }
            let v = &c[eq + 1..];
            return Some(if v.len() >= 2 && v[0] == b'"' && v[v.len() - 1] == b'"' {
                &v[1..v.len() - 1]
            } else {
                v
            });
        }
    }
    None
}

/// Envoy's `removeCookieValue`: every `cookie` header replaced by one holding the
/// other cookies (leading spaces trimmed, `; `-joined); cookies without `=` go too.
fn remove_cookie(headers: &mut HeaderMap, name: &str) {
    let mut kept: Vec<u8> = Vec::new();
    for h in headers.get_all(COOKIE) {
        for c in h.as_bytes().split(|b| *b == b';').filter(|c| !c.is_empty()) {
            let Some(eq) = c.iter().position(|b| *b == b'=') else {
                continue;
            };
            let start = c.iter().position(|b| *b != b' ').unwrap_or(c.len()).min(eq);
            if &c[start..eq] == name.as_bytes() {
                continue;
            }
            if !kept.is_empty() {
                kept.extend_from_slice(b"; ");
            }
            kept.extend_from_slice(&c[start..]);
        }
    }
    headers.remove(COOKIE);
    if !kept.is_empty()
        && let Ok(v) = HeaderValue::from_bytes(&kept)
    {
        headers.insert(COOKIE, v);
    }
}

/// The key `source` holds, if any (possibly empty).
fn key_of<'h>(req: &'h RequestState<'_>, source: &KeySource) -> Option<Cow<'h, [u8]>> {
    match source {
        KeySource::Header(name) => Some(match credential(&req.head.headers, name)? {
            Cow::Borrowed(v) => Cow::Borrowed(v.strip_prefix(b"Bearer ").unwrap_or(v)),
            Cow::Owned(v) => Cow::Owned(v.strip_prefix(b"Bearer ").unwrap_or(&v).to_vec()),
        }),
        KeySource::Query(name) => query::first_value(req.path(), name).map(Cow::Owned),
        KeySource::Cookie(name) => cookie_value(&req.head.headers, name).map(Cow::Borrowed),
    }
}

fn remove_key(req: &mut RequestState<'_>, source: &KeySource) {
    match source {
        KeySource::Header(name) => {
            req.head.headers.remove(name.as_str());
        }
        KeySource::Query(name) => query::remove(req, name),
        KeySource::Cookie(name) => remove_cookie(&mut req.head.headers, name),
    }
}

impl HttpFilter for ApiKeyAuthFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        let route = match per_route {
            Some(PerRouteFilterConfig::ApiKeyAuth(p)) => Some(&**p),
            _ => None,
        };
        let base = &*self.config;
        let over = route.map(|r| &r.config);
        let sources = over
            .and_then(|o| o.key_sources.as_ref())
            .or(base.key_sources.as_ref());
        let credentials = over
            .and_then(|o| o.credentials.as_ref())
            .or(base.credentials.as_ref());
        let forwarding = over.map_or(&base.forwarding, |o| &o.forwarding);
        let Some(sources) = sources else {
            return self.deny(req, false, "missing_key_sources");
        };
        let Some(credentials) = credentials else {
            return self.deny(req, false, "missing_credentials");
        };
        let key = sources
            .iter()
            .filter_map(|s| key_of(req, s))
            .find(|k| !k.is_empty());
        let Some(key) = key else {
            return self.deny(req, false, "missing_api_key");
        };
        let client = std::str::from_utf8(&key)
            .ok()
            .and_then(|k| credentials.get(k));
        let Some(client) = client else {
            return self.deny(req, false, "unknown_api_key");
        };
        if let Some(r) = route
            && !r.allowed_clients.is_empty()
            && !r.allowed_clients.contains(client)
        {
            return self.deny(req, true, "client_not_allowed");
        }
        if let Some(name) = &forwarding.header
            && let Ok(name) = HeaderName::from_bytes(name.as_bytes())
            && let Ok(v) = HeaderValue::from_str(client)
        {
            req.head.headers.insert(name, v);
        }
        if forwarding.hide_credentials {
            for s in sources.iter() {
                remove_key(req, s);
            }
        }
        self.stats
            .get(req.conn.worker)
            .allowed
            .fetch_add(1, Ordering::Relaxed);
        Decision::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::{cookie_value, remove_cookie};
    use http::HeaderMap;
    use http::header::COOKIE;

    fn cookies(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(COOKIE, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn cookies_read_and_removed_as_envoy() {
        let h = cookies(&["x=1; apikey=\"k2\"; y=2", "apikey=k3"]);
        assert_eq!(cookie_value(&h, "apikey"), Some(b"k2".as_slice()));
        assert_eq!(
            cookie_value(&cookies(&["apikey =k1;apikey=k2"]), "apikey"),
            Some(b"k2".as_slice())
        );
        assert_eq!(
            cookie_value(&cookies(&["apikey=; apikey=k1"]), "apikey"),
            Some(b"".as_slice())
        );
        assert_eq!(cookie_value(&cookies(&["a=1"]), "apikey"), None);

        let mut h = cookies(&["flag;  a=1 ;apikey=k1; ;b=2"]);
        remove_cookie(&mut h, "apikey");
        assert_eq!(h.get(COOKIE).unwrap(), "a=1 ; b=2");
        let mut h = cookies(&["a=1", "  b=2"]);
        remove_cookie(&mut h, "apikey");
        assert_eq!(h.get_all(COOKIE).iter().count(), 1);
        assert_eq!(h.get(COOKIE).unwrap(), "a=1; b=2");
        let mut h = cookies(&["apikey=k"]);
        remove_cookie(&mut h, "apikey");
        assert!(h.get(COOKIE).is_none());
    }
}
