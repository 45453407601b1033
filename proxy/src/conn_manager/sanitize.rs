//! The connection manager's edge checks before routing: `stop_accepting_requests`
//! (503), `headers_with_underscores_action`, the path transformations
//! (`path_with_escaped_slashes_action`, `normalize_path`, `merge_slashes`) and
//! the host's (`strip_trailing_host_dot`, `strip_matching_host_port`,
//! `strip_any_host_port`).

use crate::conn_manager::path_normalize::{self, Outcome, Settings};
use crate::request::local_reply::{ReplyTo, local_reply};
use crate::router::ResponseFlag;
use crate::router::body::ResponseBody;
use crate::stats::EdgeStats;
use courier_config::listener::hcm::{HttpConnectionManager, StripPort};
use courier_config::listener::http_options::HeadersWithUnderscores;
use http::uri::PathAndQuery;
use http::{HeaderValue, Request, Response, StatusCode, Uri, header};

/// Applies the edge checks to `req` (on a listener bound to `listener_port`);
/// a response when the request is answered here.
pub fn check<B>(
    req: &mut Request<B>,
    hcm: &HttpConnectionManager,
    stats: &EdgeStats,
    listener_port: Option<u16>,
) -> Option<Response<ResponseBody>> {
    // `ReplyTo` only where a reply is made: it looks a header up.
    if crate::overload::of(hcm.bypass_overload_manager).stop_requests() {
        stats.overload_close.inc();
        let mut resp = local_reply(
            ReplyTo::of(req),
            StatusCode::SERVICE_UNAVAILABLE,
            "envoy overloaded",
        )
        .map(ResponseBody::from);
        resp.extensions_mut().insert(ResponseFlag("OL"));
        return Some(resp);
    }
    // HTTP/1.0 without a host: `default_host_for_http_10` (Envoy's codec).
    if req.version() == http::Version::HTTP_10
        && !req.headers().contains_key(header::HOST)
        && let Some(host) = &hcm.http_protocol_options.default_host_for_http_10
        && let Ok(v) = HeaderValue::from_str(host)
    {
        req.headers_mut().insert(header::HOST, v);
    }
    // Envoy answers `Expect: 100-continue` itself (so does hyper, when the
    // body is first read) and does not pass it on without `proxy_100_continue`.
    if !hcm.proxy_100_continue
        && req
            .headers()
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
    {
        req.headers_mut().remove(header::EXPECT);
    }
    match hcm
        .common_http_protocol_options
        .headers_with_underscores_action
    {
        HeadersWithUnderscores::Allow => {}
        HeadersWithUnderscores::RejectRequest => {
            if req.headers().keys().any(|k| k.as_str().contains('_')) {
                stats.rejected_underscores.inc();
                // Envoy's codec refuses it: HTTP/1.1 400 and close, HTTP/2 reset.
                return Some(crate::conn_manager::limits::codec_refusal(
                    req.version(),
                    ReplyTo::of(req),
                    StatusCode::BAD_REQUEST,
                    "Bad Request",
                ));
            }
        }
        HeadersWithUnderscores::DropHeader => {
            let names: Vec<_> = req
                .headers()
                .keys()
                .filter(|k| k.as_str().contains('_'))
                .cloned()
                .collect();
            for n in names {
                stats.dropped_underscores.inc();
                req.headers_mut().remove(n);
            }
        }
    }
    normalize_host(req, hcm, listener_port);
    let settings = Settings {
        normalize: hcm.normalize_path,
        merge_slashes: hcm.merge_slashes,
        escaped_slashes: hcm.path_with_escaped_slashes_action,
    };
    // CONNECT has an authority, not a path.
    if !settings.any() || req.method() == http::Method::CONNECT {
        return None;
    }
    let to = ReplyTo::of(req);
    let pq = req.uri().path_and_query().map_or("/", PathAndQuery::as_str);
    match path_normalize::apply(pq, settings) {
        Outcome::Same => None,
        Outcome::Rewrite(p) => match with_path(req.uri(), &p) {
            Some(uri) => {
                *req.uri_mut() = uri;
                None
            }
            None => Some(bad_path(stats, to)),
        },
        Outcome::Redirect(p) => {
            // gRPC clients do not follow redirects: Envoy rejects them.
            if to.grpc {
                return Some(bad_path(stats, to));
            }
            let Ok(location) = HeaderValue::from_str(&p) else {
                return Some(bad_path(stats, to));
            };
            stats.redirected_with_normalized_path.inc();
            let mut resp = local_reply(to, StatusCode::TEMPORARY_REDIRECT, "");
            resp.headers_mut().insert(header::LOCATION, location);
            Some(resp.map(ResponseBody::from))
        }
        Outcome::Reject => Some(bad_path(stats, to)),
    }
}

/// Envoy's `maybeNormalizeHost`: the trailing dot of the host name goes
/// (`example.com.` and `example.com.:80`), then its port (any, or the
/// listener's only), before routing and as the upstream receives it.
fn normalize_host<B>(
    req: &mut Request<B>,
    hcm: &HttpConnectionManager,
    listener_port: Option<u16>,
) {
    if !hcm.strip_trailing_host_dot && hcm.strip_port == StripPort::None {
        return;
    }
    let Some(original) = crate::request::conn::authority(req) else {
        return;
    };
    let mut host = std::borrow::Cow::Borrowed(original);
    if hcm.strip_trailing_host_dot
        && let Some(stripped) = strip_trailing_dot(&host)
    {
        host = std::borrow::Cow::Owned(stripped);
    }
    // CONNECT's authority-form names the port to connect to.
    if req.method() != http::Method::CONNECT {
        let keep = match hcm.strip_port {
            StripPort::None => None,
            StripPort::Any => Some(None),
            StripPort::Matching => Some(listener_port),
        };
        if let Some(only) = keep
            && let Some(stripped) = strip_port(&host, only)
        {
            host = std::borrow::Cow::Owned(stripped.to_string());
        }
    }
    if host == original {
        return;
    }
    let host = host.into_owned();
    set_authority(req, &host);
}

/// `example.com.` -> `example.com`, `example.com.:80` -> `example.com:80`.
fn strip_trailing_dot(host: &str) -> Option<String> {
    let dot = host.rfind('.')?;
    if dot + 1 == host.len() {
        return Some(host[..dot].to_string());
    }
    let colon = host.rfind(':')?;
    (colon == dot + 1).then(|| format!("{}{}", &host[..dot], &host[colon..]))
}

/// The host without its port: any port (`only` = `None`) or only `only`.
/// An IPv6 literal keeps its brackets; a port that is not a number stays.
fn strip_port(host: &str, only: Option<u16>) -> Option<&str> {
    let colon = host.rfind(':')?;
    if host.rfind(']').is_some_and(|end| end > colon) {
        return None;
    }
    let port: u32 = host[colon + 1..].parse().ok()?;
    if only.is_some_and(|p| u32::from(p) != port) {
        return None;
    }
    Some(&host[..colon])
}

/// Sets `:authority`: the URI's authority when it has one (HTTP/2,
/// absolute-form), and the `host` header when there is one.
fn set_authority<B>(req: &mut Request<B>, host: &str) {
    let Ok(value) = HeaderValue::from_str(host) else {
        return;
    };
    if req.uri().authority().is_some()
        && let Ok(authority) = http::uri::Authority::try_from(host)
    {
        let mut parts = req.uri().clone().into_parts();
        parts.authority = Some(authority);
        if let Ok(uri) = Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
    }
    if req.headers().contains_key(header::HOST) {
        req.headers_mut().insert(header::HOST, value);
    }
}

fn bad_path(stats: &EdgeStats, to: ReplyTo) -> Response<ResponseBody> {
    stats.failed_path_normalization.inc();
    local_reply(to, StatusCode::BAD_REQUEST, "").map(ResponseBody::from)
}

fn with_path(uri: &Uri, path_and_query: &str) -> Option<Uri> {
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(path_and_query).ok()?);
    Uri::from_parts(parts).ok()
}

#[cfg(test)]
mod host_tests {
    use super::{strip_port, strip_trailing_dot};

    #[test]
    fn trailing_dots_as_envoy_strips_them() {
        assert_eq!(strip_trailing_dot("a.com.").as_deref(), Some("a.com"));
        assert_eq!(
            strip_trailing_dot("a.com.:8080").as_deref(),
            Some("a.com:8080")
        );
        assert_eq!(strip_trailing_dot("a.com"), None);
        assert_eq!(strip_trailing_dot("a.com:80"), None);
        assert_eq!(strip_trailing_dot("localhost"), None);
    }

    #[test]
    fn ports_as_envoy_strips_them() {
        assert_eq!(strip_port("a.com:80", None), Some("a.com"));
        assert_eq!(strip_port("a.com:80", Some(80)), Some("a.com"));
        assert_eq!(strip_port("a.com:81", Some(80)), None);
        assert_eq!(strip_port("[::1]:80", None), Some("[::1]"));
        assert_eq!(strip_port("[::1]", None), None);
        assert_eq!(strip_port("a.com:x", None), None);
        assert_eq!(strip_port("a.com", None), None);
    }
}
