//! The connection manager's checks at the edges of a request: header size and
//! count limits (431), framing Envoy's codec refuses (400), upgrade types that
//! are not enabled (403), and the request and stream idle timers (408/504).

use crate::request::local_reply::{ReplyTo, local_reply};
use crate::request::progress::Progress;
use crate::router::ResponseFlag;
use crate::router::body::ResponseBody;
use courier_config::listener::hcm::HttpConnectionManager;
use courier_config::route::{Action, Route};
use http::{HeaderValue, Request, Response, StatusCode, Version, header};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use tokio::time::{Instant, sleep_until};

/// Marks a response that must not be sent: the HTTP/2 stream is reset instead
/// (the worker turns it into a service error, which hyper answers with
/// RST_STREAM).
#[derive(Debug, Clone, Copy)]
pub struct ResetStream;

impl std::fmt::Display for ResetStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stream reset by the connection manager")
    }
}

impl std::error::Error for ResetStream {}

/// A local reply that closes the connection (HTTP/1.1), as Envoy's codec errors do.
/// A request the codec refuses: HTTP/2 resets the stream, HTTP/1.1 answers
/// `status` and closes the connection, as Envoy's codecs do.
pub fn codec_refusal(
    version: Version,
    to: ReplyTo,
    status: StatusCode,
    body: &'static str,
) -> Response<ResponseBody> {
    if version == Version::HTTP_2 {
        let mut resp = Response::new(ResponseBody::from(http_body_util::Full::default()));
        resp.extensions_mut().insert(ResetStream);
        return resp;
    }
    closing(to, status, body)
}

fn closing(to: ReplyTo, status: StatusCode, body: &'static str) -> Response<ResponseBody> {
    let mut resp = local_reply(to, status, body);
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp.map(ResponseBody::from)
}

/// What one pass over a request's header names tells [`refuse`]: Envoy's
/// `HeaderMap::byteSize` of the head (every header's name and value, and the
/// pseudo-headers), and whether the headers that the checks below look up by
/// name are there at all (most requests carry neither; each lookup hashes).
struct Scan {
    bytes: usize,
    transfer_encoding: bool,
    connection: bool,
}

fn scan<B>(req: &Request<B>, authority: Option<&str>) -> Scan {
    let mut out = Scan {
        bytes: req.method().as_str().len()
            + req.uri().path_and_query().map_or(1, |p| p.as_str().len())
            + authority.map_or(0, str::len),
        transfer_encoding: false,
        connection: false,
    };
    for (k, v) in req.headers() {
        out.bytes += k.as_str().len() + v.len();
        out.transfer_encoding |= k == header::TRANSFER_ENCODING;
        out.connection |= k == header::CONNECTION;
    }
    out
}

/// What Envoy refuses before routing: headers over `max_request_headers_kb` or
/// `max_headers_count` (HTTP/1.1: 431 and close; HTTP/2: the stream is reset),
/// HTTP/1.0 unless accepted (426), HTTP/1.1 without a host (400),
/// `content-length` with `transfer-encoding` (400). (An upgrade of a type that
/// is not enabled waits for the route: [`upgrade_refused`].)
///
/// `Ok` says whether the request asks for an upgrade (so that requests that do
/// not, nearly all, skip [`upgrade_type`]'s lookup after routing).
// The refusal is the response itself, moved once to the caller; a box would
// allocate for every refusal.
#[allow(clippy::result_large_err)]
pub fn refuse<B>(
    req: &Request<B>,
    hcm: &HttpConnectionManager,
) -> Result<AsksUpgrade, Response<ResponseBody>> {
    let h2 = req.version() == Version::HTTP_2;
    // Only for a refusal: it looks a header up.
    let to = || ReplyTo::of(req);
    let authority = crate::request::conn::authority(req);
    let scan = scan(req, authority);
    let too_many =
        req.headers().len() > hcm.common_http_protocol_options.max_headers_count as usize;
    if too_many || scan.bytes > hcm.max_request_headers_kb as usize * 1024 {
        return Err(codec_refusal(
            req.version(),
            to(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "Request Header Fields Too Large",
        ));
    }
    if req.version() == Version::HTTP_10 && !hcm.http_protocol_options.accept_http_10 {
        return Err(closing(
            to(),
            StatusCode::UPGRADE_REQUIRED,
            "Upgrade Required",
        ));
    }
    // HTTP/1.1 requires a host (RFC 9112 3.2).
    if req.version() == Version::HTTP_11 && authority.is_none() {
        return Err(closing(to(), StatusCode::BAD_REQUEST, ""));
    }
    let headers = req.headers();
    if !h2 && scan.transfer_encoding && headers.contains_key(header::CONTENT_LENGTH) {
        return Err(closing(to(), StatusCode::BAD_REQUEST, "Bad Request"));
    }
    if !h2 {
        // A target like `abc` parses as authority-form, which only CONNECT may
        // use: forwarded, it would turn into `host: abc`.
        let uri = req.uri();
        if uri.scheme().is_none()
            && uri.authority().is_some()
            && req.method() != http::Method::CONNECT
        {
            return Err(closing(to(), StatusCode::BAD_REQUEST, "Bad Request"));
        }
        // Envoy's codec takes exactly `chunked` (hyper also lets through codings
        // before it, or `chunked` twice): anything else is 501.
        let mut codings = scan
            .transfer_encoding
            .then(|| headers.get_all(header::TRANSFER_ENCODING).iter())
            .into_iter()
            .flatten();
        let chunked_only = match (codings.next(), codings.next()) {
            (None, _) => true,
            (Some(v), None) => v
                .to_str()
                .is_ok_and(|v| v.trim().eq_ignore_ascii_case("chunked")),
            _ => false,
        };
        if !chunked_only {
            return Err(closing(
                to(),
                StatusCode::NOT_IMPLEMENTED,
                "Not Implemented",
            ));
        }
    }
    Ok(AsksUpgrade(scan.connection))
}

/// Whether a request's head has a `connection` header, without which it asks
/// for no upgrade.
#[derive(Debug, Clone, Copy)]
pub struct AsksUpgrade(pub bool);

/// Envoy's answer to an upgrade its route does not take: 403, and the
/// connection closed (whatever follows the head may be the upgraded
/// protocol's bytes, not a request). Upgrades of a type the route names go as
/// it says; other types as the connection manager's `upgrade_configs` say.
/// A request that matched no route is not refused here, as in Envoy: its
/// answer is the router's 404.
pub fn upgrade_refused<B>(
    req: &Request<B>,
    kind: &str,
    route: &Route,
    hcm: &HttpConnectionManager,
) -> Option<Response<ResponseBody>> {
    let by_route = match &route.action {
        Action::Route(ra) => ra.upgrade(kind),
        Action::DirectResponse(_) | Action::Redirect(_) => None,
    };
    let allowed = by_route.unwrap_or_else(|| {
        hcm.upgrade_configs
            .iter()
            .any(|u| u.enabled && u.upgrade_type.eq_ignore_ascii_case(kind))
    });
    if allowed {
        return None;
    }
    Some(closing(ReplyTo::of(req), StatusCode::FORBIDDEN, ""))
}

/// Runs `respond` under `request_timeout` (until the whole request has been
/// read: 408 `request timeout`) and `stream_idle_timeout` (no request event for
/// that long before the response: 408 `stream timeout` while the request is
/// still arriving, 504 once it has been forwarded whole) and `max_stream_duration`
/// (408/504 `downstream duration timeout`), as Envoy.
///
/// `respond` is borrowed pinned, not moved in: the caller's future holds the (large)
/// answering future once, and this one only a pointer to it — a future taken by value
/// would be stored again in this future's state, and hyper moves the whole per-request
/// future into the connection's in-flight slot on every request.
pub async fn timed<F: Future<Output = Response<ResponseBody>>>(
    mut respond: Pin<&mut F>,
    progress: Arc<Progress>,
    hcm: &HttpConnectionManager,
    to: ReplyTo,
    stats: &crate::stats::EdgeStats,
) -> Response<ResponseBody> {
    let overload = crate::overload::of(hcm.bypass_overload_manager);
    // `reduce_timeouts` shortens the stream idle timer under memory pressure.
    let scaled = |t: std::time::Duration| {
        overload.scaled(courier_config::overload::ScaledTimer::StreamIdle, t)
    };
    // From when the headers arrived, as Envoy's timer.
    let mut request_deadline = hcm.request_timeout.map(|t| progress.started() + t);
    // Read once the response is pending: the first poll selects the route,
    // whose `idle_timeout` and `max_stream_duration` override the connection
    // manager's.
    let limits = || {
        let idle = progress.idle_timeout(hcm.stream_idle_timeout);
        let max_stream =
            progress.max_stream_duration(hcm.common_http_protocol_options.max_stream_duration);
        (idle, max_stream.map(|t| progress.started() + t))
    };
    // One timer, made only when needed: a local reply (ready at the first
    // poll) has none; nor has a request while the router's attempt timeout,
    // in this same task, wakes it before this function's earliest deadline
    // (the router's firing ends the wait), so a routed request holds one
    // timer, not two. Once armed it is kept while the idle deadline moves
    // later (it fires early and is re-checked): a new timer per body frame
    // would cost more than the early wake.
    let mut timer = std::pin::pin!(None::<tokio::time::Sleep>);
    let mut armed: Option<Instant> = None;
    loop {
        let changed = overload.timers_changed();
        tokio::pin!(changed);
        // The response, or `None` when a timer fired or the overload
        // manager's timer scale changed: the deadlines are checked.
        let woke = std::future::poll_fn(|cx| {
            if let Poll::Ready(resp) = respond.as_mut().poll(cx) {
                return Poll::Ready(Some(resp));
            }
            let (idle, stream_deadline) = limits();
            let idle_deadline = idle.map(|t| progress.last_activity() + scaled(t));
            let next = [request_deadline, idle_deadline, stream_deadline]
                .into_iter()
                .flatten()
                .min();
            if let Some(next) = next
                && progress.router_wake().is_none_or(|w| w > next)
            {
                if armed.is_none_or(|a| a > next) {
                    match timer.as_mut().as_pin_mut() {
                        Some(t) => t.reset(next),
                        None => timer.set(Some(sleep_until(next))),
                    }
                    armed = Some(next);
                }
                if let Some(t) = timer.as_mut().as_pin_mut()
                    && t.poll(cx).is_ready()
                {
                    armed = None;
                    return Poll::Ready(None);
                }
            }
            if changed.as_mut().poll(cx).is_ready() {
                // `reduce_timeouts` changed: the idle deadline may be sooner.
                armed = None;
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await;
        if let Some(resp) = woke {
            return resp;
        }
        let (idle, stream_deadline) = limits();
        let now = Instant::now();
        if stream_deadline.is_some_and(|d| d <= now) {
            // `max_stream_duration`, Envoy's local reply: 504 once the request
            // was read whole, else 408 (and the HTTP/1 connection closes).
            stats.rq_max_duration_reached.inc();
            let mut resp = if progress.done() {
                local_reply(
                    to,
                    StatusCode::GATEWAY_TIMEOUT,
                    "downstream duration timeout",
                )
                .map(ResponseBody::from)
            } else {
                closing(
                    to,
                    StatusCode::REQUEST_TIMEOUT,
                    "downstream duration timeout",
                )
            };
            resp.extensions_mut().insert(ResponseFlag("DT"));
            return resp;
        }
        if request_deadline.is_some_and(|d| d <= now) {
            if progress.done() {
                // Disarmed: the whole request has gone upstream.
                request_deadline = None;
            } else {
                return closing(to, StatusCode::REQUEST_TIMEOUT, "request timeout");
            }
        }
        if let Some(t) = idle
            && progress.last_activity() + scaled(t) <= now
        {
            let mut resp = if progress.done() {
                local_reply(to, StatusCode::GATEWAY_TIMEOUT, "stream timeout")
                    .map(ResponseBody::from)
            } else {
                closing(to, StatusCode::REQUEST_TIMEOUT, "stream timeout")
            };
            resp.extensions_mut().insert(ResponseFlag("SI"));
            return resp;
        }
    }
}
