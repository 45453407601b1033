//! The connection manager's edge checks before routing: `stop_accepting_requests`
//! (503), `headers_with_underscores_action`, and the path transformations
//! (`path_with_escaped_slashes_action`, `normalize_path`, `merge_slashes`).

use crate::local_reply::{ReplyTo, local_reply};
use crate::path_normalize::{self, Outcome, Settings};
use crate::request_limits;
use crate::router::ResponseFlag;
use crate::router::body::ResponseBody;
use crate::stats::Counter;
use courier_config::listener::hcm::HttpConnectionManager;
use courier_config::listener::http_options::HeadersWithUnderscores;
use http::uri::PathAndQuery;
use http::{HeaderValue, Request, Response, StatusCode, Uri, header};

/// Counters of the edge checks (`http.<prefix>.*`).
#[derive(Debug, Default)]
pub struct EdgeStats {
    /// `downstream_rq_overload_close`.
    pub overload_close: Counter,
    /// `downstream_rq_failed_path_normalization`.
    pub failed_path_normalization: Counter,
    /// `downstream_rq_redirected_with_normalized_path`.
    pub redirected_with_normalized_path: Counter,
    /// `requests_rejected_with_underscores_in_headers`.
    pub rejected_underscores: Counter,
    /// `dropped_headers_with_underscores`.
    pub dropped_underscores: Counter,
    /// `downstream_cx_max_duration_reached`.
    pub cx_max_duration_reached: Counter,
    /// `downstream_rq_max_duration_reached`.
    pub rq_max_duration_reached: Counter,
}

impl EdgeStats {
    /// Samples by Envoy's names (relative to `http.<prefix>.`).
    pub fn samples(&self) -> [(&'static str, u64); 7] {
        [
            ("downstream_rq_overload_close", self.overload_close.get()),
            (
                "downstream_rq_failed_path_normalization",
                self.failed_path_normalization.get(),
            ),
            (
                "downstream_rq_redirected_with_normalized_path",
                self.redirected_with_normalized_path.get(),
            ),
            (
                "requests_rejected_with_underscores_in_headers",
                self.rejected_underscores.get(),
            ),
            (
                "dropped_headers_with_underscores",
                self.dropped_underscores.get(),
            ),
            (
                "downstream_cx_max_duration_reached",
                self.cx_max_duration_reached.get(),
            ),
            (
                "downstream_rq_max_duration_reached",
                self.rq_max_duration_reached.get(),
            ),
        ]
    }
}

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
    match hcm
        .common_http_protocol_options
        .headers_with_underscores_action
    {
        HeadersWithUnderscores::Allow => {}
        HeadersWithUnderscores::RejectRequest => {
            if req.headers().keys().any(|k| k.as_str().contains('_')) {
                stats.rejected_underscores.inc();
                // Envoy's codec refuses it: HTTP/1.1 400 and close, HTTP/2 reset.
                return Some(request_limits::codec_refusal(
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
