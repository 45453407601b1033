//! The CSRF HTTP filter (`envoy.filters.http.csrf`), as Envoy's `CsrfFilter`: a
//! request with a mutating method (POST, PUT, DELETE, PATCH) must come from the
//! origin it targets — its `origin` (else `referer`) host and port equal to its
//! host, or matching one of `additional_origins` — or it is answered
//! `403 Invalid origin` (`csrf_origin_mismatch`). With only `shadow_enabled`
//! in force the check is counted and the request goes on. Counters
//! `http.<hcm prefix>.csrf.{missing_source_origin,request_invalid,request_valid}`.
//! Synchronous: never builds a future.

use crate::chain::{Decision, HttpFilter, LocalReply};
use crate::per_worker::PerWorker;
use crate::request::RequestState;
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::csrf::CsrfPolicy;
use http::{Method, StatusCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// CSRF counters.
#[derive(Debug, Default)]
pub struct CsrfStats {
    /// `csrf.missing_source_origin`: a checked request without `origin` or `referer`.
    pub missing_source_origin: AtomicU64,
    /// `csrf.request_invalid`: its source origin did not match.
    pub request_invalid: AtomicU64,
    /// `csrf.request_valid`: it did.
    pub request_valid: AtomicU64,
}

/// The CSRF filter.
#[derive(Debug)]
pub struct CsrfFilter {
    policy: Arc<CsrfPolicy>,
    stats: Arc<PerWorker<CsrfStats>>,
}

impl CsrfFilter {
    /// A filter with the HCM-level `policy`.
    pub fn new(policy: Arc<CsrfPolicy>) -> Self {
        Self {
            policy,
            stats: Arc::new(PerWorker::new(CsrfStats::default)),
        }
    }

    /// The filter's counters.
    pub fn stats(&self) -> &Arc<PerWorker<CsrfStats>> {
        &self.stats
    }
}

/// Envoy's `hostAndPort`: the host and port of a URL (`scheme://host[:port]/...`),
/// or the value itself when it is not one (a `host` header, `null`).
fn host_and_port(v: &str) -> &str {
    let Some((scheme, rest)) = v.split_once("://") else {
        return v;
    };
    if scheme.is_empty() || rest.is_empty() {
        return v;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    // Without userinfo, as a URL's host and port.
    authority.rsplit_once('@').map_or(authority, |(_, h)| h)
}

fn mutating(m: &Method) -> bool {
    matches!(
        *m,
        Method::POST | Method::PUT | Method::DELETE | Method::PATCH
    )
}

impl HttpFilter for CsrfFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        let policy = match per_route {
            Some(PerRouteFilterConfig::Csrf(p)) => &**p,
            _ => &*self.policy,
        };
        let enabled = policy.filter_enabled.admits(fastrand::u64(..));
        let shadow = policy.shadow_enabled.admits(fastrand::u64(..));
        if (!enabled && !shadow) || !mutating(&req.head.method) {
            return Decision::Continue;
        }
        let stats = self.stats.get(req.conn.worker);
        // An opaque origin (`null`) names no source: the referer is looked at,
        // as Envoy 1.40 does (checked in tests/csrf_differential.rs).
        let source = req
            .first_header("origin")
            .filter(|o| *o != "null")
            .map(host_and_port)
            .filter(|o| !o.is_empty())
            .or_else(|| req.first_header("referer").map(host_and_port))
            .unwrap_or("");
        let valid = if source.is_empty() {
            stats.missing_source_origin.fetch_add(1, Ordering::Relaxed);
            false
        } else if source == host_and_port(req.authority())
            || policy.additional_origins.iter().any(|m| m.matches(source))
        {
            true
        } else {
            stats.request_invalid.fetch_add(1, Ordering::Relaxed);
            false
        };
        if valid {
            stats.request_valid.fetch_add(1, Ordering::Relaxed);
            return Decision::Continue;
        }
        if !enabled {
            return Decision::Continue;
        }
        Decision::Respond(LocalReply::new(
            StatusCode::FORBIDDEN,
            "Invalid origin",
            "csrf_origin_mismatch",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::host_and_port;

    #[test]
    fn host_and_port_of_urls_and_hosts() {
        assert_eq!(host_and_port("https://example.com"), "example.com");
        assert_eq!(host_and_port("http://a.test:8080/x?y"), "a.test:8080");
        assert_eq!(host_and_port("http://u:p@a.test/x"), "a.test");
        assert_eq!(host_and_port("example.com:80"), "example.com:80");
        assert_eq!(host_and_port("null"), "null");
    }
}
