//! The connection manager's edge checks before routing: `stop_accepting_requests`
//! (503), `headers_with_underscores_action`, and the path transformations
//! (`path_with_escaped_slashes_action`, `normalize_path`, `merge_slashes`).

use crate::conn_manager::path_normalize::{self, Outcome, Settings};
use crate::request::local_reply::{ReplyTo, local_reply};
use crate::router::ResponseFlag;
use crate::router::body::ResponseBody;
use crate::stats::EdgeStats;
use courier_config::listener::hcm::HttpConnectionManager;
use courier_config::listener::http_options::HeadersWithUnderscores;
use http::uri::PathAndQuery;
use http::{HeaderValue, Request, Response, StatusCode, Uri, header};

/// Applies the edge checks to `req`; a response when the request is answered here.
pub fn check<B>(
    req: &mut Request<B>,
    hcm: &HttpConnectionManager,
    stats: &EdgeStats,
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

fn bad_path(stats: &EdgeStats, to: ReplyTo) -> Response<ResponseBody> {
    stats.failed_path_normalization.inc();
    local_reply(to, StatusCode::BAD_REQUEST, "").map(ResponseBody::from)
}

fn with_path(uri: &Uri, path_and_query: &str) -> Option<Uri> {
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(path_and_query).ok()?);
    Uri::from_parts(parts).ok()
}
