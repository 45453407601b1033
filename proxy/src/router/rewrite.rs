//! Turns the downstream request head into the upstream one: hop-by-hop headers
//! out, header mutations, host and path rewrites (`x-envoy-original-path`), and
//! the URI form the upstream protocol wants.

use super::headers::{self, FormatCtx};
use crate::request::conn::ConnInfo;
use crate::upstream::host::Host;
use courier_config::cluster::UpstreamProtocol;
use courier_config::route::{
    ClusterWeight, HeaderMutations, HostRewrite, PathMatch, PathRewrite, Route, RouteAction,
};
use http::header::{self, HeaderName, HeaderValue};
use http::request::Parts;
use http::uri::{Authority, PathAndQuery, Scheme, Uri};

const ORIGINAL_PATH: HeaderName = HeaderName::from_static("x-envoy-original-path");
const FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// What shapes the upstream request.
pub struct Plan<'a> {
    /// The route action.
    pub action: &'a RouteAction,
    /// The route (its match decides what `prefix_rewrite` replaces).
    pub route: &'a Route,
    /// The weighted cluster picked, if any.
    pub weighted: Option<&'a ClusterWeight>,
    /// The upstream host picked.
    pub host: &'a Host,
    /// Request header mutation levels, in application order.
    pub levels: &'a [&'a HeaderMutations],
    /// The downstream connection.
    pub conn: &'a ConnInfo,
    /// The cluster's name.
    pub cluster: &'a str,
    /// The protocol spoken upstream.
    pub protocol: UpstreamProtocol,
    /// A rewritten path leaves `x-envoy-original-path` (not under the router's
    /// `suppress_envoy_headers`).
    pub original_path: bool,
}

/// The host the route's rewrite sets, if any: the weighted cluster's
/// literal, else the action's literal, `auto_host_rewrite` (`hostname`, the
/// picked host's name), path regex or header.
pub fn new_host(
    headers: &http::HeaderMap,
    full_path: &str,
    action: &RouteAction,
    weighted: Option<&ClusterWeight>,
    hostname: &str,
) -> Option<String> {
    match (
        weighted.and_then(|w| w.host_rewrite_literal.as_deref()),
        &action.host_rewrite,
    ) {
        (Some(h), _) => Some(h.to_string()),
        (None, Some(HostRewrite::Literal(h))) => Some(h.clone()),
        (None, Some(HostRewrite::Auto)) => (!hostname.is_empty()).then(|| hostname.to_string()),
        (None, Some(HostRewrite::PathRegex(r))) => {
            // As Envoy: on the path as received, its query and fragment left out.
            let just_path = full_path.split(['?', '#']).next().unwrap_or("");
            Some(r.apply(just_path).into_owned())
        }
        (None, Some(HostRewrite::Header(h))) => headers
            .get(h.as_str())
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_string),
        (None, None) => None,
    }
}

/// Rewrites `parts` in place into the upstream request head.
pub fn prepare(parts: &mut Parts, plan: &Plan<'_>) {
    headers::strip_hop_by_hop(&mut parts.headers);
    if untouched(parts, plan) {
        // An origin-form HTTP/1.1 request with its `host` goes on as it came: no
        // copy of its authority and path, no re-parse.
        parts.version = http::Version::HTTP_11;
        return;
    }
    let mut authority = crate::request::conn::authority_of(&parts.uri, &parts.headers)
        .unwrap_or("")
        .to_string();
    let full_path = parts
        .uri
        .path_and_query()
        .map_or_else(|| "/".to_string(), |p| p.as_str().to_string());

    if !plan.levels.is_empty() {
        let protocol = headers::protocol(parts.version);
        let method = parts.method.as_str().to_string();
        let scheme = parts.uri.scheme_str().unwrap_or("http").to_string();
        let (path, auth) = (full_path.clone(), authority.clone());
        let remote = parts
            .extensions
            .get::<crate::request::conn::ClientAddress>()
            .map(|c| c.0);
        headers::apply(&mut parts.headers, plan.levels, |current, fs| {
            FormatCtx {
                method: &method,
                path: &path,
                authority: &auth,
                scheme: &scheme,
                request: current,
                response: None,
                conn: plan.conn,
                remote,
                protocol,
                upstream_host: Some(plan.host.address_text()),
                cluster: plan.cluster,
                route_name: &plan.route.name,
            }
            .eval(fs)
        });
    }

    let new_host = new_host(
        &parts.headers,
        &full_path,
        plan.action,
        plan.weighted,
        plan.host.hostname(),
    );
    if let Some(h) = new_host {
        if plan.action.append_x_forwarded_host && !authority.is_empty() {
            let value = match parts
                .headers
                .get(&FORWARDED_HOST)
                .and_then(|v| v.to_str().ok())
            {
                Some(old) if !old.is_empty() => format!("{old},{authority}"),
                _ => authority.clone(),
            };
            if let Ok(v) = HeaderValue::from_str(&value) {
                parts.headers.insert(FORWARDED_HOST, v);
            }
        }
        authority = h;
    }

    let new_path = plan
        .action
        .path_rewrite
        .as_ref()
        .map(|rw| rewrite_path(&full_path, &plan.route.route_match.path, rw));
    let path = match new_path {
        Some(p) if p != full_path => {
            if plan.original_path
                && let Ok(v) = HeaderValue::from_str(&full_path)
            {
                parts.headers.insert(ORIGINAL_PATH, v);
            }
            p
        }
        _ => full_path,
    };

    let pq =
        PathAndQuery::try_from(path.as_str()).unwrap_or_else(|_| PathAndQuery::from_static("/"));
    match plan.protocol {
        UpstreamProtocol::Http2 => {
            parts.version = http::Version::HTTP_2;
            parts.headers.remove(header::HOST);
            let mut uri = http::uri::Parts::default();
            uri.scheme = Some(Scheme::HTTP);
            uri.authority = Authority::try_from(authority.as_str()).ok();
            uri.path_and_query = Some(pq);
            if let Ok(u) = Uri::from_parts(uri) {
                parts.uri = u;
            }
        }
        _ => {
            parts.version = http::Version::HTTP_11;
            if let Ok(v) = HeaderValue::from_str(&authority) {
                parts.headers.insert(header::HOST, v);
            }
            parts.uri = Uri::from(pq);
        }
    }
}

/// Whether nothing of `parts` changes on its way to an HTTP/1.1 upstream: no header
/// mutation, no host or path rewrite, already origin-form with a `host` header.
fn untouched(parts: &Parts, plan: &Plan<'_>) -> bool {
    plan.levels.is_empty()
        && plan.action.path_rewrite.is_none()
        && plan.action.host_rewrite.is_none()
        && plan
            .weighted
            .is_none_or(|w| w.host_rewrite_literal.is_none())
        && plan.protocol != UpstreamProtocol::Http2
        && parts.uri.scheme().is_none()
        && parts.uri.authority().is_none()
        && parts.uri.path_and_query().is_some()
        && parts.headers.contains_key(header::HOST)
}

/// The rewritten path (query kept): `prefix_rewrite` replaces the matched prefix
/// (the whole path for exact and regex matches); `regex_rewrite` replaces every
/// match in the path without its query.
fn rewrite_path(full: &str, matched: &PathMatch, rw: &PathRewrite) -> String {
    let (path, query) = match full.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (full, None),
    };
    match rw {
        PathRewrite::Prefix(new) => match matched {
            // Prefix routes match against the full path, query included.
            PathMatch::Prefix(old) => match full.get(old.len()..) {
                Some(rest) if full.len() >= old.len() => format!("{new}{rest}"),
                _ => full.to_string(),
            },
            PathMatch::SeparatedPrefix(old) => {
                let rest = path.get(old.len()..).unwrap_or("");
                with_query(format!("{new}{rest}"), query)
            }
            PathMatch::Exact(_) | PathMatch::Regex(_) => with_query(new.clone(), query),
        },
        PathRewrite::Regex(r) => with_query(r.apply(path).into_owned(), query),
    }
}

fn with_query(mut path: String, query: Option<&str>) -> String {
    if let Some(q) = query {
        path.push('?');
        path.push_str(q);
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_rewrite_replaces_the_matched_prefix() {
        let m = PathMatch::Prefix("/svc/".into());
        let rw = PathRewrite::Prefix("/".into());
        assert_eq!(rewrite_path("/svc/x?q=1", &m, &rw), "/x?q=1");
        let exact = PathMatch::Exact("/a".into());
        assert_eq!(
            rewrite_path("/a?z", &exact, &PathRewrite::Prefix("/b".into())),
            "/b?z"
        );
        let sep = PathMatch::SeparatedPrefix("/api".into());
        assert_eq!(
            rewrite_path("/api/v1?x", &sep, &PathRewrite::Prefix("/new".into())),
            "/new/v1?x"
        );
    }
}
