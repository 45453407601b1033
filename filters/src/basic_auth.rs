//! The Basic authentication filter (`envoy.filters.http.basic_auth`), as Envoy's
//! `BasicAuthFilter`: the first value of the credential header (`authorization`
//! unless `authentication_header` names another) must be `Basic <base64 of
//! user:password>` for a user of the htpasswd list (the route's
//! `BasicAuthPerRoute` list in place of the filter's) whose `{SHA}` hash is the
//! password's. Otherwise `401` with `www-authenticate: Basic realm="<original
//! URI>"` and one of Envoy's four bodies. On success the user name goes upstream
//! in `forward_username_header` when set (and in the filter's metadata namespace
//! as `username` with `emit_dynamic_metadata`); the credential header is forwarded
//! untouched, as Envoy does. With `allow_missing` a request without the header or
//! with another scheme goes on unauthenticated and uncounted. Counters `http.<hcm prefix>.basic_auth.{allowed,denied}`.
//! Synchronous: never builds a future.

use crate::chain::{Decision, HttpFilter, LocalReply};
use crate::per_worker::PerWorker;
use crate::request::RequestState;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::basic_auth::{BasicAuth, Users};
use http::header::{HeaderName, HeaderValue, WWW_AUTHENTICATE};
use http::{HeaderMap, StatusCode};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// basic_auth counters.
#[derive(Debug, Default)]
pub struct BasicAuthStats {
    /// `basic_auth.allowed`: a request with valid credentials.
    pub allowed: AtomicU64,
    /// `basic_auth.denied`: a request answered 401.
    pub denied: AtomicU64,
}

/// The basic_auth filter.
#[derive(Debug)]
pub struct BasicAuthFilter {
    /// The filter's name: its metadata namespace.
    name: String,
    config: Arc<BasicAuth>,
    /// `forward_username_header`, parsed once.
    forward: Option<HeaderName>,
    stats: Arc<PerWorker<BasicAuthStats>>,
}

/// Envoy's `MaximumUriLength`: the realm's path is cut to this many bytes.
const MAX_REALM_PATH: usize = 256;

impl BasicAuthFilter {
    /// The filter named `name` (its `http_filters` name) with the HCM-level `config`.
    pub fn new(name: &str, config: Arc<BasicAuth>) -> Self {
        // Validated as a token by courier-config: parsing cannot fail there.
        let forward = config
            .forward_username_header
            .as_deref()
            .and_then(|h| HeaderName::from_bytes(h.as_bytes()).ok());
        Self {
            name: name.to_string(),
            config,
            forward,
            stats: Arc::new(PerWorker::new(BasicAuthStats::default)),
        }
    }

    /// The filter's counters.
    pub fn stats(&self) -> &Arc<PerWorker<BasicAuthStats>> {
        &self.stats
    }
}

/// Envoy's `Base64::decodeWithoutPadding`: up to two trailing `=` dropped, then the
/// standard alphabet with zero trailing bits; anything else decodes to nothing.
fn decode_credential(token: &[u8]) -> Vec<u8> {
    let mut end = token.len();
    for _ in 0..2 {
        if end > 0 && token[end - 1] == b'=' {
            end -= 1;
        }
    }
    STANDARD_NO_PAD.decode(&token[..end]).unwrap_or_default()
}

/// The credential header's value as Envoy's header map holds it: `authorization` is one
/// of Envoy's inline headers, whose repeats are joined with `,` as they arrive; any
/// other header is looked up by its first value.
pub(crate) fn credential<'h>(headers: &'h HeaderMap, name: &str) -> Option<Cow<'h, [u8]>> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?.as_bytes();
    if name != "authorization" {
        return Some(Cow::Borrowed(first));
    }
    let Some(second) = values.next() else {
        return Some(Cow::Borrowed(first));
    };
    let mut joined = first.to_vec();
    for v in std::iter::once(second).chain(values) {
        joined.push(b',');
        joined.extend_from_slice(v.as_bytes());
    }
    Some(Cow::Owned(joined))
}

/// Whether `password`'s SHA-1, base64-encoded, is `user`'s hash in `users`.
fn valid(users: &Users, user: &[u8], password: &[u8]) -> bool {
    let Some(hash) = users.get(user) else {
        return false;
    };
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, password);
    STANDARD.encode(digest.as_ref()) == *hash
}

/// Envoy's `buildOriginalUri`: `<x-forwarded-proto>://<host><path>`, the path being
/// `x-envoy-original-path` when a rewrite kept it, cut to 256 bytes.
fn realm(req: &RequestState<'_>) -> Vec<u8> {
    let headers = &req.head.headers;
    let path = headers
        .get("x-envoy-original-path")
        .map_or(req.path().as_bytes(), HeaderValue::as_bytes);
    let path = &path[..path.len().min(MAX_REALM_PATH)];
    let proto = headers
        .get("x-forwarded-proto")
        .map_or(req.scheme().as_bytes(), HeaderValue::as_bytes);
    let mut v = Vec::with_capacity(16 + proto.len() + path.len());
    v.extend_from_slice(b"Basic realm=\"");
    v.extend_from_slice(proto);
    v.extend_from_slice(b"://");
    v.extend_from_slice(req.authority().as_bytes());
    v.extend_from_slice(path);
    v.push(b'"');
    v
}

impl BasicAuthFilter {
    fn deny(
        &self,
        req: &RequestState<'_>,
        body: &'static str,
        details: &'static str,
    ) -> Decision<'static> {
        self.stats
            .get(req.conn.worker)
            .denied
            .fetch_add(1, Ordering::Relaxed);
        let mut reply = LocalReply::new(StatusCode::UNAUTHORIZED, body, details);
        let mut headers = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_bytes(&realm(req)) {
            headers.insert(WWW_AUTHENTICATE, v);
        }
        reply.headers = headers;
        Decision::Respond(reply)
    }
}

impl HttpFilter for BasicAuthFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        let users = match per_route {
            Some(PerRouteFilterConfig::BasicAuth(p)) => &*p.users,
            _ => &*self.config.users,
        };
        let Some(value) = credential(&req.head.headers, &self.config.authentication_header) else {
            if self.config.allow_missing {
                return Decision::Continue;
            }
            return self.deny(
                req,
                "User authentication failed. Missing username and password.",
                "no_credential_for_basic_auth",
            );
        };
        let Some(token) = value.strip_prefix(b"Basic ") else {
            if self.config.allow_missing {
                return Decision::Continue;
            }
            return self.deny(
                req,
                "User authentication failed. Expected 'Basic' authentication scheme.",
                "invalid_scheme_for_basic_auth",
            );
        };
        let decoded = decode_credential(token);
        let Some(colon) = decoded.iter().position(|b| *b == b':') else {
            return self.deny(
                req,
                "User authentication failed. Invalid basic credential format.",
                "invalid_format_for_basic_auth",
            );
        };
        let (user, password) = (&decoded[..colon], &decoded[colon + 1..]);
        if !valid(users, user, password) {
            return self.deny(
                req,
                "User authentication failed. Invalid username/password combination.",
                "invalid_credential_for_basic_auth",
            );
        }
        if let Some(name) = &self.forward
            && let Ok(v) = HeaderValue::from_bytes(user)
        {
            req.head.headers.insert(name.clone(), v);
        }
        if self.config.emit_dynamic_metadata {
            let user = String::from_utf8_lossy(user).into_owned();
            req.set_metadata(&self.name, "username", serde_json::Value::String(user));
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
    use super::{decode_credential, valid};
    use courier_config::filters::basic_auth::parse_htpasswd;

    #[test]
    fn credentials_decode_as_envoy() {
        assert_eq!(decode_credential(b"dXNlcjE6cGFzczE="), b"user1:pass1");
        assert_eq!(decode_credential(b"dXNlcjE6cGFzczE"), b"user1:pass1");
        assert_eq!(decode_credential(b"eHl6"), b"xyz");
        // Trailing bits set, a lone sixth, three `=`, another alphabet: nothing.
        assert_eq!(decode_credential(b"eHk"), b"xy");
        assert!(decode_credential(b"eHl").is_empty());
        assert!(decode_credential(b"eHm").is_empty());
        assert!(decode_credential(b"eHl6e").is_empty());
        assert!(decode_credential(b"eA===").is_empty());
        assert!(decode_credential(b"_-8=").is_empty());
        assert!(decode_credential(b"").is_empty());
    }

    #[test]
    fn passwords_check_against_sha_hashes() {
        let users = parse_htpasswd(b"user1:{SHA}8FePHnF0saQcTqjG4X96ijuIySo=").unwrap();
        assert!(valid(&users, b"user1", b"pass1"));
        assert!(!valid(&users, b"user1", b"pass2"));
        assert!(!valid(&users, b"user2", b"pass1"));
    }
}
