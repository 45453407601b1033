//! Virtual hosts and the domain index that picks one for a request's host.

use super::entry::{self, Route};
use super::headers::{self, HeaderMutations};
use super::retry::{self, HedgePolicy, RetryPolicy};
use super::route_match::RouteRequest;
use super::table::RouteIndex;
use super::{PerFilterConfigs, Settings, per_filter_configs};
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::route::v3 as pb;
use std::borrow::Cow;
use std::collections::HashMap;

/// A validated virtual host with its compiled route index.
#[derive(Debug, Clone)]
pub struct VirtualHost {
    /// Name (unique names are not required, as in Envoy).
    pub name: String,
    /// Domains as configured, lower-cased.
    pub domains: Vec<String>,
    /// Routes, in config order (first match wins).
    pub routes: Vec<Route>,
    index: RouteIndex,
    /// Request header mutations at virtual-host level.
    pub request_headers: HeaderMutations,
    /// Response header mutations at virtual-host level.
    pub response_headers: HeaderMutations,
    /// Retry policy for routes that have none.
    pub retry_policy: Option<RetryPolicy>,
    /// Hedge policy for routes that have none.
    pub hedge_policy: Option<HedgePolicy>,
    /// Per-filter configs at virtual-host level.
    pub typed_per_filter_config: PerFilterConfigs,
    /// Send `x-envoy-attempt-count` upstream.
    pub include_request_attempt_count: bool,
    /// Send `x-envoy-attempt-count` downstream.
    pub include_attempt_count_in_response: bool,
    /// Request body buffer limit for this host's routes (retries, filters).
    pub request_body_buffer_limit: Option<u64>,
    /// `metadata` (`filter_metadata`), kept for what reads it. (Envoy's readers of
    /// a virtual host's metadata, such as `%METADATA(VIRTUAL_HOST:...)%`, are
    /// refused where they are configured.)
    pub metadata: crate::core::MetadataMap,
    /// `rate_limits`: descriptors for the rate limit filters.
    pub rate_limits: Vec<crate::filters::rate_limit_actions::RateLimitPolicy>,
    /// `virtual_clusters`: stat groups of the host's requests
    /// (`vhost.<name>.vcluster.<cluster>.*`, `other` for the rest).
    pub virtual_clusters: Vec<VirtualCluster>,
}

/// A `VirtualCluster`: the requests whose headers all match count in its stats.
#[derive(Debug, Clone)]
pub struct VirtualCluster {
    /// Its name.
    pub name: String,
    /// Its header conditions (`:path`, `:method` and `:authority` included).
    pub headers: Vec<crate::matcher::HeaderMatcher>,
}

impl VirtualHost {
    /// The name of the virtual cluster `req` counts under: the first whose
    /// headers all match, else `other`; `None` when the host has none.
    pub fn virtual_cluster<R: RouteRequest + ?Sized>(&self, req: &R) -> Option<&str> {
        if self.virtual_clusters.is_empty() {
            return None;
        }
        let found = self.virtual_clusters.iter().find(|vc| {
            vc.headers
                .iter()
                .all(|h| super::route_match::header_matches(h, req))
        });
        Some(found.map_or("other", |vc| vc.name.as_str()))
    }
}

impl VirtualHost {
    /// The first route, in config order, that matches `req` (using the index).
    pub fn select_route<R: RouteRequest + ?Sized>(&self, req: &R) -> Option<&Route> {
        self.index
            .select(&self.routes, req)
            .and_then(|i| self.routes.get(i))
    }

    /// The same answer as [`VirtualHost::select_route`] by testing every route in
    /// order (the reference the index is checked against).
    pub fn select_route_linear<R: RouteRequest + ?Sized>(&self, req: &R) -> Option<&Route> {
        self.routes.iter().find(|r| r.route_match.matches(req))
    }
}

/// Translates a `VirtualHost`. Routes that fail are left out (their errors are
/// reported), so the host can still take part in the domain checks.
pub(crate) fn virtual_host(
    vh: &pb::VirtualHost,
    path: &Path<'_>,
    settings: &Settings,
    ctx: &mut Ctx,
) -> VirtualHost {
    if vh.name.is_empty() {
        ctx.error(&path.field("name"), "must not be empty");
    }
    if vh.domains.is_empty() {
        ctx.error(&path.field("domains"), "at least one domain is required");
    }
    let dp = path.field("domains");
    for (i, d) in vh.domains.iter().enumerate() {
        if !headers::valid_name_chars(d) {
            ctx.error(&dp.index(i), "must not contain NUL, CR or LF");
        }
    }
    let rp = path.field("routes");
    let routes: Vec<Route> = vh
        .routes
        .iter()
        .enumerate()
        .filter_map(|(i, r)| entry::route(r, &rp.index(i), settings, ctx))
        .collect();
    let (request_headers, response_headers) = headers::both(
        path,
        (&vh.request_headers_to_add, &vh.request_headers_to_remove),
        (&vh.response_headers_to_add, &vh.response_headers_to_remove),
        ctx,
    );
    let retry_policy = vh
        .retry_policy
        .as_ref()
        .and_then(|r| retry::retry_policy(r, &path.field("retry_policy"), ctx));
    let hedge_policy = vh
        .hedge_policy
        .as_ref()
        .and_then(|h| retry::hedge_policy(h, &path.field("hedge_policy"), ctx));
    let index = RouteIndex::build(routes.iter().map(|r| &r.route_match));
    let rate_limits = crate::filters::rate_limit_actions::route_policies(
        &vh.rate_limits,
        &path.field("rate_limits"),
        ctx,
    )
    .unwrap_or_default();
    let vp = path.field("virtual_clusters");
    let mut virtual_clusters = Vec::with_capacity(vh.virtual_clusters.len());
    for (i, vc) in vh.virtual_clusters.iter().enumerate() {
        let p = vp.index(i);
        if vc.name.is_empty() {
            ctx.error(&p.field("name"), "must not be empty");
            continue;
        }
        let hp = p.field("headers");
        let headers = vc
            .headers
            .iter()
            .enumerate()
            .filter_map(|(j, h)| crate::matcher::header_matcher(h, &hp.index(j), ctx))
            .collect();
        virtual_clusters.push(VirtualCluster {
            name: vc.name.clone(),
            headers,
        });
    }
    VirtualHost {
        virtual_clusters,
        rate_limits,
        name: vh.name.clone(),
        domains: vh.domains.iter().map(|d| d.to_ascii_lowercase()).collect(),
        routes,
        index,
        request_headers,
        response_headers,
        retry_policy,
        hedge_policy,
        typed_per_filter_config: per_filter_configs(&vh.typed_per_filter_config, path, ctx),
        include_request_attempt_count: vh.include_request_attempt_count,
        include_attempt_count_in_response: vh.include_attempt_count_in_response,
        request_body_buffer_limit: entry::buffer_limit(
            vh.per_request_buffer_limit_bytes.as_ref(),
            vh.request_body_buffer_limit.as_ref(),
        ),
        metadata: crate::core::metadata(vh.metadata.as_ref()),
    }
}

/// Why a domain could not be added to the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Duplicate {
    /// A second `*`.
    Wildcard,
    /// The same domain (after lower-casing) twice.
    Domain,
}

/// Wildcard domains of one length: Envoy tries longer wildcards first.
#[derive(Debug, Clone, Default)]
struct Wildcards {
    /// `(length of the fixed part, fixed part -> virtual host)`, longest first.
    by_len: Vec<(usize, HashMap<String, usize>)>,
}

impl Wildcards {
    fn insert(&mut self, fixed: &str, vhost: usize) -> bool {
        let len = fixed.len();
        let at = match self.by_len.binary_search_by(|(l, _)| len.cmp(l)) {
            Ok(i) => i,
            Err(i) => {
                self.by_len.insert(i, (len, HashMap::new()));
                i
            }
        };
        self.by_len[at].1.insert(fixed.to_string(), vhost).is_none()
    }

    /// The longest wildcard whose fixed part `part(host, len)` names, where the
    /// `*` must still match at least one character.
    fn find<'h>(
        &self,
        host: &'h str,
        part: impl Fn(&'h str, usize) -> Option<&'h str>,
    ) -> Option<usize> {
        self.by_len
            .iter()
            .filter(|(len, _)| *len < host.len())
            .find_map(|(len, map)| part(host, *len).and_then(|p| map.get(p).copied()))
    }
}

/// Envoy's virtual-host selection: exact domain, then suffix wildcards
/// (`*.foo.com`, `*-bar.foo.com`) longest first, then prefix wildcards (`foo.*`)
/// longest first, then `*`.
#[derive(Debug, Clone, Default)]
pub(crate) struct DomainIndex {
    exact: HashMap<String, usize>,
    suffixes: Wildcards,
    prefixes: Wildcards,
    default: Option<usize>,
}

impl DomainIndex {
    /// Adds a lower-cased domain of virtual host `vhost`.
    pub(crate) fn insert(&mut self, domain: &str, vhost: usize) -> Result<(), Duplicate> {
        let fresh = if domain == "*" {
            if self.default.is_some() {
                return Err(Duplicate::Wildcard);
            }
            self.default = Some(vhost);
            true
        } else if let Some(suffix) = domain.strip_prefix('*') {
            self.suffixes.insert(suffix, vhost)
        } else if let Some(prefix) = domain.strip_suffix('*') {
            self.prefixes.insert(prefix, vhost)
        } else {
            self.exact.insert(domain.to_string(), vhost).is_none()
        };
        if fresh {
            Ok(())
        } else {
            Err(Duplicate::Domain)
        }
    }

    /// The index of the virtual host for `host` (the `:authority`). With
    /// `ignore_port`, a trailing `:port` is dropped first (never inside an IPv6 literal).
    pub(crate) fn select(&self, host: &str, ignore_port: bool) -> Option<usize> {
        if self.exact.is_empty()
            && self.suffixes.by_len.is_empty()
            && self.prefixes.by_len.is_empty()
        {
            return self.default;
        }
        let host = if ignore_port { strip_port(host) } else { host };
        let host: Cow<'_, str> = if host.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(host.to_ascii_lowercase())
        } else {
            Cow::Borrowed(host)
        };
        let host = host.as_ref();
        if let Some(&i) = self.exact.get(host) {
            return Some(i);
        }
        self.suffixes
            .find(host, |h, len| h.get(h.len() - len..))
            .or_else(|| self.prefixes.find(host, |h, len| h.get(..len)))
            .or(self.default)
    }
}

/// `host` without a trailing `:port` (Envoy's `getPortStart`: the last `:` that is
/// not inside `[...]`).
fn strip_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(colon) if host.rfind(']').is_none_or(|b| b < colon) => &host[..colon],
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(domains: &[&[&str]]) -> DomainIndex {
        let mut idx = DomainIndex::default();
        for (i, ds) in domains.iter().enumerate() {
            for d in *ds {
                idx.insert(&d.to_ascii_lowercase(), i).unwrap();
            }
        }
        idx
    }

    #[test]
    fn conformance_case_2_order() {
        let idx = index(&[&["*.foo.com"], &["foo.*"], &["*"], &["a.foo.com"]]);
        assert_eq!(idx.select("b.foo.com", false), Some(0));
        assert_eq!(idx.select("foo.bar", false), Some(1));
        assert_eq!(idx.select("x", false), Some(2));
        assert_eq!(idx.select("a.foo.com", false), Some(3), "exact beats all");
        assert_eq!(
            idx.select("A.FOO.COM", false),
            Some(3),
            "hosts are case-insensitive"
        );
        // `*` in a wildcard matches at least one character.
        assert_eq!(idx.select(".foo.com", false), Some(2));
        assert_eq!(idx.select("foo.", false), Some(2));
    }

    #[test]
    fn longest_wildcard_first() {
        let idx = index(&[
            &["*.bar.com"],
            &["*-bar.bar.com"],
            &["foo.*"],
            &["foo.bar.*"],
        ]);
        assert_eq!(idx.select("x-bar.bar.com", false), Some(1));
        assert_eq!(idx.select("x.bar.com", false), Some(0));
        assert_eq!(idx.select("foo.bar.baz", false), Some(3));
        assert_eq!(idx.select("foo.baz", false), Some(2));
        assert_eq!(idx.select("nothing", false), None);
        // Suffix wildcards beat prefix wildcards.
        let idx = index(&[&["foo.*"], &["*.com"]]);
        assert_eq!(idx.select("foo.com", false), Some(1));
    }

    #[test]
    fn ports() {
        let idx = index(&[&["foo.com"], &["foo.com:8080"], &["[::1]"]]);
        assert_eq!(idx.select("foo.com:8080", false), Some(1));
        assert_eq!(idx.select("foo.com:9090", false), None);
        assert_eq!(idx.select("foo.com:9090", true), Some(0));
        assert_eq!(idx.select("[::1]:80", true), Some(2));
        assert_eq!(idx.select("[::1]", true), Some(2));
        assert_eq!(strip_port("[::1]"), "[::1]");
        assert_eq!(strip_port("a:1"), "a");
    }

    #[test]
    fn duplicates() {
        let mut idx = DomainIndex::default();
        assert_eq!(idx.insert("*", 0), Ok(()));
        assert_eq!(idx.insert("*", 1), Err(Duplicate::Wildcard));
        assert_eq!(idx.insert("*.a", 0), Ok(()));
        assert_eq!(idx.insert("*.a", 1), Err(Duplicate::Domain));
        assert_eq!(idx.insert("a.*", 1), Ok(()));
        assert_eq!(idx.insert("a.*", 1), Err(Duplicate::Domain));
        assert_eq!(idx.insert("a", 1), Ok(()));
        assert_eq!(idx.insert("a", 0), Err(Duplicate::Domain));
    }
}
