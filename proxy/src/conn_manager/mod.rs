//! The HTTP connection manager: per request, apply the request header rules, pick
//! the virtual host and route from the snapshot, run the HTTP filters (jwt_authn,
//! RBAC: `http_filters`) and answer (direct responses and
//! redirects here; forwarding is the router's), applying the connection manager's
//! response rules.

mod direct_body;
pub mod grpc_timeout;
pub mod limits;
pub mod path_normalize;
pub mod sanitize;

use crate::access_log::body::LoggedBody;
use crate::access_log::{
    DirectResponse, DynamicMetadata, Guard, HealthChecked, Logs, Pending, ResponseSide, RouteName,
};
use crate::request::body::{RequestProgress, UpstreamBody};
use crate::request::conn::{ClientAddress, ConnInfo, authority, authority_of};
use crate::request::local_reply::{Body, ReplyTo, local_reply, reply};
use crate::request::progress::Progress;
use crate::request::view::View;
use crate::router::body::ResponseBody;
use crate::router::facts::{Details, Upstreamed};
use crate::router::{self, Matched, ResponseFlag, Upstream, forwarded};
use crate::stats::HcmStats;
use courier_config::listener::hcm::HttpConnectionManager;
use courier_config::listener::hcm::RouteSpecifier;
use courier_config::route::{
    Action, PathMatch, RedirectAction, RedirectPath, Route, RouteConfig, RouteRequest, VirtualHost,
};
use courier_config::snapshot::Snapshot;
use courier_filters::{FilterChain, RequestState, Verdict};
use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::time::Instant;

const REQUEST_ID: header::HeaderName = header::HeaderName::from_static("x-request-id");
const FORCE_TRACE: header::HeaderName = header::HeaderName::from_static("x-envoy-force-trace");

/// The request's tracing decision and span, with the route's `tracing` if the route
/// it selects now has one.
fn trace_request(
    t: &courier_config::tracing::Tracing,
    rc: Option<&Arc<RouteConfig>>,
    req: &mut Request<Incoming>,
    info: &ConnInfo,
    stats: &HcmStats,
) -> crate::trace::Started {
    let route = rc
        .and_then(|rc| select(rc, &View::of(req)))
        .and_then(|(_, r)| r.tracing.clone());
    let traced = crate::trace::decide(t, route.as_deref(), req.headers_mut(), &stats.tracing);
    crate::trace::start(
        t,
        route.as_deref(),
        traced,
        (req.uri(), req.headers()),
        info.listener.traffic_direction,
    )
}

/// The virtual host and route a request head selects.
fn select<'a>(rc: &'a RouteConfig, head: &View<'_>) -> Option<(&'a VirtualHost, &'a Route)> {
    let host = authority_of(head.uri, head.headers).unwrap_or("");
    rc.select_virtual_host(host)
        .and_then(|vh| Some((vh, vh.select_route(head)?)))
}

/// Handles one request on a connection of listener `info.listener`, with
/// the connection manager of filter chain `info.filter_chain_index`. With an
/// upstream response comes the request's progress, which drives the stream
/// idle timer while the response body streams. `server` says what becomes of
/// each response's `server` header (built once per filter chain; `None`
/// without a connection manager).
pub async fn handle(
    mut req: Request<Incoming>,
    snapshot: &Arc<Snapshot>,
    info: &ConnInfo,
    stats: &HcmStats,
    up: &Upstream<'_>,
    server: Option<&crate::request::headers::ServerHeader>,
) -> (Response<LoggedBody<ResponseBody>>, Option<Arc<Progress>>) {
    stats.rq_total.inc();
    let hcm = crate::request::conn::chain_at(&info.listener, info.filter_chain_index)
        .and_then(|fc| fc.hcm());
    let logging = hcm.is_some_and(|h| !h.access_log.is_empty());
    let mut guard = Guard(None);
    let mut streaming = None;
    let mut resp = match hcm {
        Some(hcm) => 'answer: {
            let asks_upgrade = match limits::refuse(&req, hcm) {
                Ok(asks) => asks.0,
                Err(refused) => break 'answer refused,
            };
            // `early_header_mutation_extensions`: before anything reads the
            // headers, route selection included.
            if !hcm.early_header_mutations.is_empty() {
                courier_filters::header_mutation::apply(
                    &hcm.early_header_mutations,
                    req.headers_mut(),
                );
            }
            if let Some(answered) =
                crate::conn_manager::sanitize::check(&mut req, hcm, &stats.edge, info.local.port())
            {
                break 'answer answered;
            }
            let rc = route_config(hcm, snapshot);
            let internal_only = rc.map_or(&[][..], |rc| &rc.internal_only_headers[..]);
            let (remote, control_headers) =
                match forwarded::mutate_request(req.headers_mut(), hcm, internal_only, info) {
                    Ok((remote, control, from_headers)) => {
                        if from_headers {
                            req.extensions_mut()
                                .insert(ClientAddress(std::net::SocketAddr::new(remote, 0)));
                        }
                        (remote, control)
                    }
                    // An `original_ip_detection_extensions` entry refused it.
                    Err(status) => {
                        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
                        let mut resp =
                            local_reply(ReplyTo::of(&req), status, "").map(ResponseBody::from);
                        resp.extensions_mut()
                            .insert(Details("rejecting_because_detection_failed".to_string()));
                        break 'answer resp;
                    }
                };
            let crate::trace::Started { span, inject } = match &hcm.tracing {
                Some(t) => trace_request(t, rc, &mut req, info, stats),
                None => crate::trace::Started::default(),
            };
            // A sampled span is finished with the log lines.
            let logging = logging || span.is_some();
            // Envoy answers with the request id when asked to, or when the request
            // (still) carries `x-envoy-force-trace`.
            let request_id = (hcm.always_set_request_id_in_response
                || (control_headers && req.headers().contains_key(FORCE_TRACE)))
            .then(|| req.headers().get(REQUEST_ID).cloned())
            .flatten();
            let to = ReplyTo::of(&req);
            // The log sees the request as the connection manager passed it on.
            let log_progress = logging.then(|| {
                let mut pending = pending(&req, info);
                pending.span = span;
                let progress = (Arc::clone(&pending.request), pending.started);
                guard.0 = Some(pending);
                progress
            });
            // Request progress drives the request and stream-idle timers; the
            // access log's wrapper goes outside it.
            let progress = Arc::new(Progress::new());
            // `preserve_case`: the names the client sent go upstream in its case.
            if matches!(
                hcm.http_protocol_options.header_case,
                courier_config::listener::http_options::HeaderCase::Preserve { .. }
            ) && req.version() != http::Version::HTTP_2
            {
                let case = crate::request::header_case::ReadCase::of(req.extensions());
                req.extensions_mut().insert(case);
            }
            // HTTP/2 always carries trailers; HTTP/1.1 only with `enable_trailers`.
            let keep_trailers =
                req.version() == http::Version::HTTP_2 || hcm.http_protocol_options.enable_trailers;
            let req = req.map(|b| {
                let timed =
                    crate::request::body::RequestBody::new(b, Arc::clone(&progress), keep_trailers);
                UpstreamBody::new(timed, log_progress)
            });
            // The route's `idle_timeout` is noted on it.
            let route_progress = Arc::clone(&progress);
            // Built in place: a binding moved into `pin!` would take a second slot in
            // this future.
            let answer = std::pin::pin!(respond(
                req,
                rc,
                stats,
                info,
                up,
                logging,
                remote,
                &route_progress,
                asks_upgrade.then_some(hcm),
                inject.as_ref(),
            ));
            let mut resp = limits::timed(answer, Arc::clone(&progress), hcm, to, &stats.edge).await;
            // The stream idle timer goes on while an upstream response streams
            // (worker); courier's own replies never stall. Returned beside the
            // response: in its extensions it would cost three allocations.
            if resp.body().is_upstream() {
                streaming = Some(progress);
            }
            if let Some(id) = request_id {
                resp.headers_mut().insert(REQUEST_ID, id);
            }
            resp
        }
        // The connection's filter chain index names no chain (not expected).
        None => reply(StatusCode::SERVICE_UNAVAILABLE, "").map(ResponseBody::from),
    };
    if let Some(s) = server {
        s.apply(resp.headers_mut());
    }
    stats.response(resp.status().as_u16());
    crate::request::reason::envoy_phrase(&mut resp);
    let Some(pending) = guard.0.take() else {
        return (resp.map(LoggedBody::plain), streaming);
    };
    let side = ResponseSide {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        flag: resp.extensions().get::<ResponseFlag>().map(|f| f.0),
        upstream: resp.extensions_mut().remove::<Upstreamed>(),
        route_name: resp.extensions_mut().remove::<RouteName>().map(|r| r.0),
        direct: resp.extensions().get::<DirectResponse>().is_some(),
        details: resp.extensions_mut().remove::<Details>().map(|d| d.0),
        health_check: resp.extensions_mut().remove::<HealthChecked>().is_some(),
        dynamic_metadata: resp
            .extensions_mut()
            .remove::<DynamicMetadata>()
            .unwrap_or_default(),
        response_duration: pending.started.elapsed(),
        ..ResponseSide::default()
    };
    (
        resp.map(|b| LoggedBody::logged(b, pending, side)),
        streaming,
    )
}

/// The request side of the log entry of `req`.
fn pending(req: &Request<Incoming>, info: &ConnInfo) -> Pending {
    use http_body::Body as _;
    Pending {
        logs: Logs::Hcm {
            listener: Arc::clone(&info.listener),
            filter_chain_index: info.filter_chain_index,
        },
        start: SystemTime::now(),
        started: Instant::now(),
        method: req.method().clone(),
        uri: req.uri().clone(),
        version: req.version(),
        headers: req.headers().clone(),
        peer: info.peer.clone(),
        remote: req.extensions().get::<ClientAddress>().map(|c| c.0),
        local: info.local.clone(),
        server_name: info.server_name.clone(),
        fingerprints: info.fingerprints.clone(),
        connection_id: info.id,
        request: Arc::new(RequestProgress::new(req.body().is_end_stream())),
        span: None,
    }
}

/// The route configuration in force for `hcm`: inline, or by name from RDS
/// (none until its first RouteConfiguration arrives).
fn route_config<'a>(
    hcm: &'a HttpConnectionManager,
    snapshot: &'a Snapshot,
) -> Option<&'a Arc<RouteConfig>> {
    match &hcm.route_specifier {
        RouteSpecifier::Inline(rc) => Some(rc),
        RouteSpecifier::Rds {
            route_config_name, ..
        } => snapshot.route_configs.get(route_config_name),
    }
}

// Two more than clippy's limit: the request's progress (for the route's idle
// timeout) travels beside the request rather than in its extensions, which
// would allocate per request; `upgrades` is the connection manager, given only
// when the request may ask for an upgrade.
#[allow(clippy::too_many_arguments)]
async fn respond(
    mut req: Request<UpstreamBody>,
    rc: Option<&Arc<RouteConfig>>,
    stats: &HcmStats,
    info: &ConnInfo,
    up: &Upstream<'_>,
    logging: bool,
    remote: std::net::IpAddr,
    progress: &Arc<Progress>,
    upgrades: Option<&HttpConnectionManager>,
    inject: Option<&crate::trace::Inject>,
) -> Response<ResponseBody> {
    let Some(rc) = rc else {
        stats.no_route.inc();
        return no_route(reply(StatusCode::NOT_FOUND, ""));
    };
    let selected = select(rc, &View::of(&req));
    // An upgrade its route does not take is refused before the filters run, as
    // Envoy refuses it when it builds the stream's filter chain.
    if let Some(hcm) = upgrades
        && let Some((_, route)) = selected
        && let Some(kind) = crate::request::headers::upgrade_type(&req)
        && let Some(mut refused) = limits::upgrade_refused(&req, kind, route, hcm)
    {
        stats.ws_on_non_ws_route.inc();
        if logging {
            refused
                .extensions_mut()
                .insert(Details("upgrade_failed".into()));
        }
        return refused;
    }
    if let Some((_, route)) = selected
        && let Action::Route(ra) = &route.action
    {
        if let Some(t) = ra.idle_timeout {
            progress.set_route_idle_timeout(t);
        }
        if let Some(m) = &ra.max_stream_duration
            && let Some(limit) = m.limit(crate::conn_manager::grpc_timeout::of(req.headers()))
        {
            progress.set_route_max_stream_duration(limit);
        }
    }
    // Envoy's per-stream random value: the weighted cluster the filters see is the one
    // the router takes.
    let random = fastrand::u64(..);
    // The router is awaited at one place for both ways in: each await of it would take
    // its own slot in this future, which hyper moves on every request.
    // Without filters the request stays where it is (no move into a new binding).
    let mut selected = selected;
    let mut filtered = None;
    if let Some(chain) = info.http_filters.as_deref() {
        match filter(
            chain,
            req,
            rc,
            (selected, random),
            info,
            remote,
            logging,
            progress,
        )
        .await
        {
            Filtered::Answered(mut resp) => {
                if logging {
                    route_cluster(&mut resp, selected, random, up);
                }
                return resp;
            }
            Filtered::Continue(r, s, state) => {
                (req, selected, filtered) = (r, s, Some((chain, state)));
            }
        }
    }
    // The trace context goes to the upstream (after the filters, as Envoy's router
    // injects it).
    if let Some(values) = inject {
        crate::trace::inject(req.headers_mut(), values);
    }
    let mut resp = route(
        req,
        rc,
        (selected, random, progress),
        stats,
        info,
        up,
        logging,
    )
    .await;
    if let Some((chain, mut state)) = filtered {
        // A flag a filter set on the way through (fault injection's `DI`), when the
        // router set none.
        if let Some(f) = state
            .filter_state
            .get::<courier_filters::request::StreamResponseFlag>()
            && resp.extensions().get::<ResponseFlag>().is_none()
        {
            resp.extensions_mut().insert(ResponseFlag(f.0));
        }
        if let Some(held) = encode(chain, &mut state, &mut resp, logging) {
            release(held, &mut resp).await;
        }
    }
    resp
}

/// Names the matched route's cluster on a filter's local reply, for its log
/// line's `%UPSTREAM_CLUSTER%`: Envoy caches the route's cluster when it picks
/// the route, before any filter runs (the weighted cluster by the stream's
/// random value, as the router would take it). A `cluster_header` route's
/// cluster depends on the request's headers, which the filters may have
/// changed: left unnamed.
fn route_cluster(
    resp: &mut Response<ResponseBody>,
    selected: Option<(&VirtualHost, &Route)>,
    random: u64,
    up: &Upstream<'_>,
) {
    use courier_config::route::ClusterSpecifier;
    let Some((_, route)) = selected else { return };
    let Action::Route(ra) = &route.action else {
        return;
    };
    let name = match &ra.cluster {
        ClusterSpecifier::Cluster(name) => name.as_str(),
        ClusterSpecifier::Weighted(w) => match w.pick(random) {
            Some(c) => c.name.as_str(),
            None => return,
        },
        ClusterSpecifier::Header(_) => return,
    };
    if resp.extensions().get::<Upstreamed>().is_none()
        && let Some(cluster) = up.clusters.get(name)
    {
        resp.extensions_mut().insert(Upstreamed {
            host: None,
            cluster: Arc::clone(&cluster.config),
        });
    }
}

/// A filter held the response headers until the whole body has been read through its
/// encoders (gRPC-Web making a non-gRPC response's body its `grpc-message`): reads it
/// (what the encoders keep is theirs to bound), lets them finish the headers, and sends
/// the response without a body.
async fn release(mut encoders: courier_filters::BodyEncoders, resp: &mut Response<ResponseBody>) {
    use http_body_util::BodyExt as _;
    let mut body = std::mem::replace(resp.body_mut(), ResponseBody::Local(Default::default()));
    // What the encoders return is not sent: the body becomes the headers' business.
    // An encoder's error, or the upstream's, ends the reading with what was read.
    loop {
        match body.frame().await {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    if encoders.data(data, false).is_err() {
                        break;
                    }
                }
                Err(frame) => {
                    if let Ok(mut t) = frame.into_trailers() {
                        let _ = encoders.trailers(&mut t);
                    }
                    break;
                }
            },
            None => {
                let _ = encoders.data(bytes::Bytes::new(), true);
                break;
            }
            Some(Err(_)) => break,
        }
    }
    encoders.release_headers(resp.headers_mut());
}

/// What the filter chain made of a request.
// Not boxed: the value is taken apart as soon as the chain returns it, and a box would
// cost an allocation per filtered request.
#[allow(clippy::large_enum_variant)]
enum Filtered<'a> {
    /// A filter answered (its response hooks have run).
    Answered(Response<ResponseBody>),
    /// On to the router, with the route as the filters left it.
    Continue(
        Request<UpstreamBody>,
        Option<(&'a VirtualHost, &'a Route)>,
        RequestState<'a>,
    ),
}

/// Runs the filter chain; the filters run before the router, also when no route
/// matched (the router then answers 404), as in Envoy. A filter whose request body
/// encoder fails with a reply of its own tells `progress`, where the router finds it.
// One more than clippy's limit: the request's progress travels beside the request, as
// in `respond`.
#[allow(clippy::too_many_arguments)]
async fn filter<'a>(
    chain: &FilterChain,
    req: Request<UpstreamBody>,
    rc: &'a RouteConfig,
    (selected, random): (Option<(&'a VirtualHost, &'a Route)>, u64),
    info: &'a ConnInfo,
    remote: std::net::IpAddr,
    logging: bool,
    progress: &Arc<Progress>,
) -> Filtered<'a> {
    let to = ReplyTo::of(&req);
    let (head, mut body) = req.into_parts();
    let filter_route =
        selected.map(|(vh, r)| crate::filter_chain::selected_route(rc, vh, r, random));
    // Whether the request has a body at all, before any of it is buffered.
    let end_stream = http_body::Body::is_end_stream(&body);
    let mut buffered = crate::filter_chain::body::Buffered::default();
    let mut held = false;
    if let Some(wanted) = chain.wants_body_on(filter_route)
        && !http_body::Body::is_end_stream(&body)
    {
        match crate::filter_chain::body::buffer(&mut body, wanted).await {
            Ok(b) => (buffered, held) = (b, true),
            Err(_) => {
                let mut resp = local_reply(to, StatusCode::PAYLOAD_TOO_LARGE, "Payload Too Large");
                if logging {
                    // Envoy's HCM names its buffer-limit reply so.
                    resp.extensions_mut()
                        .insert(Details("request_payload_too_large".into()));
                }
                return Filtered::Answered(resp.map(ResponseBody::from));
            }
        }
    }
    let mut state = RequestState::new(head, &info.facts, remote, filter_route);
    state.body = held.then(|| buffered.bytes.clone());
    state.end_stream = end_stream;
    let mut reselected = None;
    let verdict = chain
        .decode_headers(&mut state, |head| {
            let s = select(rc, &View::parts(head));
            reselected = Some(s);
            s.map(|(vh, r)| crate::filter_chain::selected_route(rc, vh, r, random))
        })
        .await;
    match verdict {
        Verdict::Respond(r) => {
            let mut resp = local_reply(to, r.status, r.body);
            if to.grpc
                && let Some(code) = r.grpc_status
            {
                resp.headers_mut()
                    .insert("grpc-status", http::HeaderValue::from(code));
            }
            resp.headers_mut().extend(r.headers);
            if r.details.starts_with("ext_authz") {
                resp.extensions_mut().insert(ResponseFlag("UAEX"));
            }
            if let Some(flag) = r.response_flag {
                resp.extensions_mut().insert(ResponseFlag(flag));
            }
            if logging {
                resp.extensions_mut()
                    .insert(Details(r.details.into_owned()));
            }
            let mut resp = resp.map(ResponseBody::from);
            // A local reply's body is known whole: no filter holds its headers.
            if let Some(held) = encode(chain, &mut state, &mut resp, logging) {
                *resp.body_mut() = ResponseBody::Local(Default::default());
                drop(held);
            }
            Filtered::Answered(resp)
        }
        Verdict::Continue => {
            let selected = reselected.unwrap_or(selected);
            // The head goes on to the router; filters' response hooks do not need it.
            let head = std::mem::replace(&mut state.head, Request::new(()).into_parts().0);
            // A buffered body goes on as the bytes read (then the trailers, or the rest of
            // a partial body still in the stream).
            let body = match state.body.take() {
                Some(b) => UpstreamBody::new(
                    crate::request::body::RequestBody::replay(
                        b,
                        buffered.trailers,
                        buffered.more.then(|| Box::new(body)),
                    ),
                    None,
                ),
                None => body,
            };
            // A filter that transforms the request body (a compressor's request direction)
            // gets it as it streams upstream.
            let body = if state.request_encoders.is_empty() {
                body
            } else {
                let encoders = std::mem::take(&mut state.request_encoders);
                UpstreamBody::new(
                    crate::request::body::RequestBody::encoded(
                        body,
                        encoders,
                        Some(Arc::clone(progress)),
                    ),
                    None,
                )
            };
            Filtered::Continue(Request::from_parts(head, body), selected, state)
        }
    }
}

/// The filters' response hooks, the response headers they asked for, and (for the access
/// log) the request's dynamic metadata. A body a filter transforms (the compressor) is
/// wrapped in its encoders here; a chain without body filters skips all of that. Returns
/// the encoders when one holds the headers until the body has been read ([`release`]).
fn encode(
    chain: &FilterChain,
    state: &mut RequestState<'_>,
    resp: &mut Response<ResponseBody>,
    logging: bool,
) -> Option<courier_filters::BodyEncoders> {
    let mut held = None;
    if chain.has_body_filters() {
        held = encode_body(chain, state, resp);
    } else {
        chain.encode_headers(state, resp.headers_mut());
    }
    // `HeaderMap::into_iter` names only the first value of each name: the
    // following ones (`None`) belong to the last name seen.
    let mut last = None;
    for (name, value) in std::mem::take(&mut state.response_headers) {
        if name.is_some() {
            last = name;
        }
        if let Some(name) = &last {
            resp.headers_mut().append(name.clone(), value);
        }
    }
    if logging && !state.metadata.is_empty() {
        resp.extensions_mut()
            .insert(DynamicMetadata(std::mem::take(&mut state.metadata)));
    }
    if logging
        && state
            .filter_state
            .get::<courier_filters::health_check::HealthCheckRequest>()
            .is_some()
    {
        resp.extensions_mut().insert(HealthChecked);
    }
    held
}

/// [`encode`]'s part for chains with body filters: the response head through the
/// filters, and the body through the encoders they return (returned instead when one
/// holds the headers until the body has been read).
fn encode_body(
    chain: &FilterChain,
    state: &mut RequestState<'_>,
    resp: &mut Response<ResponseBody>,
) -> Option<courier_filters::BodyEncoders> {
    use http_body::Body as _;
    let body = resp.body();
    let end_stream = body.is_end_stream();
    // Envoy's local replies carry their length, and the compressor's minimum length reads
    // it: courier's own bodies say it here (hyper would add the same header when sending).
    if let ResponseBody::Local(_) = body
        && let Some(n) = body.size_hint().exact()
        // An empty body is never compressed: no length needed (nor wanted on a 204).
        && n > 0
        && !resp.headers().contains_key(header::CONTENT_LENGTH)
    {
        resp.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    // A local reply's body is known whole (a ready `Full`): the gRPC-Web filter makes it
    // the `grpc-message` of a non-gRPC reply, as Envoy does.
    let local_body = match resp.body_mut() {
        ResponseBody::Local(b) if !end_stream => local_bytes(b),
        _ => None,
    };
    if let Some(b) = &local_body {
        *resp.body_mut() = ResponseBody::Local(http_body_util::Full::new(b.clone()));
    }
    let status = resp.status();
    let local = matches!(resp.body(), ResponseBody::Local(_));
    let mut head = courier_filters::ResponseHead {
        status,
        headers: resp.headers_mut(),
        end_stream,
        local_body,
        local,
        replacement: None,
    };
    let encoders = chain.encode_response(state, &mut head);
    if let Some(r) = head.replacement.take() {
        // A filter's local reply in place of this response (custom_response): its
        // status, whole header set and body; the original body is dropped.
        *resp.status_mut() = r.status;
        *resp.headers_mut() = r.headers;
        *resp.body_mut() = ResponseBody::Local(http_body_util::Full::new(r.body));
        return None;
    }
    if encoders.holds_headers() {
        return Some(encoders);
    }
    if !encoders.is_empty() {
        let body = std::mem::replace(resp.body_mut(), ResponseBody::Local(Default::default()));
        *resp.body_mut() = body.encode(encoders);
    }
    None
}

/// The bytes of a local reply's body, taken out of it (a `Full` is always ready).
fn local_bytes(b: &mut http_body_util::Full<bytes::Bytes>) -> Option<bytes::Bytes> {
    use http_body_util::BodyExt as _;
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut frame = std::pin::pin!(b.frame());
    match frame.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(Some(Ok(f))) => f.into_data().ok(),
        _ => None,
    }
}

/// The router's part: answers a request on the route it selected (404 without one);
/// `random` picks its weighted cluster (the one the filters saw).
async fn route(
    req: Request<UpstreamBody>,
    rc: &RouteConfig,
    (selected, random, progress): (Option<(&VirtualHost, &Route)>, u64, &Progress),
    stats: &HcmStats,
    info: &ConnInfo,
    up: &Upstream<'_>,
    logging: bool,
) -> Response<ResponseBody> {
    let to = ReplyTo::of(&req);
    let Some((vhost, route)) = selected else {
        stats.no_route.inc();
        return no_route(local_reply(to, StatusCode::NOT_FOUND, ""));
    };
    let matched = Matched {
        config: rc,
        vhost,
        route,
        random,
        progress,
    };
    let mut resp: Response<Body> = match &route.action {
        Action::Route(action) => {
            // Not boxed on its own: the whole request future is boxed once where the
            // codec calls the service (serve_conn.rs), and a second box here cost an
            // allocation of the router's (large) state per request.
            let mut resp = router::forward(req, action, matched, info, up, logging).await;
            if logging {
                resp.extensions_mut().insert(RouteName(route.name.clone()));
            }
            return resp;
        }
        Action::DirectResponse(d) => {
            stats.rq_direct_response.inc();
            let status = StatusCode::from_u16(d.status).unwrap_or(StatusCode::OK);
            let mut resp = match &d.body_format {
                None => local_reply(to, status, d.body.clone().unwrap_or_default()),
                Some(f) => {
                    let body = direct_body::render(f, d.body.as_ref(), &req, info, &route.name);
                    let empty = body.is_empty();
                    let mut resp = local_reply(to, status, body);
                    // Envoy types a formatted body by its format (an empty
                    // one stays untyped); gRPC replies keep theirs.
                    if !empty
                        && !to.grpc
                        && let Ok(v) = HeaderValue::from_str(&f.content_type)
                    {
                        resp.headers_mut().insert(header::CONTENT_TYPE, v);
                    }
                    resp
                }
            };
            if logging {
                resp.extensions_mut().insert(DirectResponse);
            }
            // Envoy points 201 and 3xx direct responses at the request's own URL
            // (RFC 7231 7.1.2): a redirect with nothing rewritten.
            if (status == StatusCode::CREATED || status.is_redirection())
                && let Ok(v) = HeaderValue::from_str(&location(&req, route, &SAME_URL))
            {
                resp.headers_mut().insert(header::LOCATION, v);
            }
            resp
        }
        Action::Redirect(r) => {
            stats.rq_redirect.inc();
            let status =
                StatusCode::from_u16(r.response_code).unwrap_or(StatusCode::MOVED_PERMANENTLY);
            let mut resp = local_reply(to, status, "");
            if logging {
                // Envoy's details for a redirect are `direct_response` too.
                resp.extensions_mut().insert(DirectResponse);
            }
            if let Ok(v) = HeaderValue::from_str(&location(&req, route, r)) {
                resp.headers_mut().insert(header::LOCATION, v);
            }
            resp
        }
    };
    let levels = matched.response_levels(None);
    if !levels.is_empty() {
        let protocol = router::headers::protocol(req.version());
        router::response_headers(&mut resp, &levels, &req, info, protocol, None, "", route);
    }
    if logging {
        resp.extensions_mut().insert(RouteName(route.name.clone()));
    }
    resp.map(ResponseBody::from)
}

/// A 404 for a request no route takes, flagged `NR` for the access log.
fn no_route(mut resp: Response<Body>) -> Response<ResponseBody> {
    resp.extensions_mut().insert(ResponseFlag("NR"));
    resp.map(ResponseBody::from)
}

/// A redirect that rewrites nothing: the request's own URL.
const SAME_URL: RedirectAction = RedirectAction {
    scheme: None,
    host: None,
    port: None,
    path: None,
    response_code: 301,
    strip_query: false,
};

/// A redirect's `location`, built from the request and the action.
fn location<B>(req: &Request<B>, route: &Route, r: &RedirectAction) -> String {
    let scheme_in = req.uri().scheme_str().unwrap_or("http");
    let scheme = r.scheme.as_deref().unwrap_or(scheme_in);
    let authority = authority(req).unwrap_or("");
    let (host_in, port_in) = split_port(authority);
    let host = r.host.as_deref().unwrap_or(host_in);
    let port = match (r.port, port_in) {
        (Some(p), _) => Some(p.to_string()),
        // A new host replaces the whole authority, port included, as Envoy does.
        (None, Some(_)) if r.host.is_some() => None,
        // A scheme change drops the old scheme's default port, as Envoy does.
        (None, Some(p)) if scheme != scheme_in && (p == "80" || p == "443") => None,
        (None, Some(p)) => Some(p.to_string()),
        (None, None) => None,
    };
    let full = View::of(req).path().to_string();
    let (path_in, query_in) = match full.split_once('?') {
        Some((p, q)) => (p.to_string(), Some(q.to_string())),
        None => (full.clone(), None),
    };
    let path = match &r.path {
        None => path_in.clone(),
        Some(RedirectPath::Path(p)) => p.clone(),
        Some(RedirectPath::Prefix(new)) => match &route.route_match.path {
            PathMatch::Prefix(old) if path_in.len() >= old.len() => {
                format!("{new}{}", &path_in[old.len()..])
            }
            _ => path_in.clone(),
        },
        Some(RedirectPath::Regex(rw)) => rw.apply(&path_in).into_owned(),
    };
    let mut location = format!("{scheme}://{host}");
    if let Some(p) = port {
        location.push(':');
        location.push_str(&p);
    }
    location.push_str(&path);
    // A redirect path with its own query replaces the request's.
    if !r.strip_query
        && !path.contains('?')
        && let Some(q) = query_in
    {
        location.push('?');
        location.push_str(&q);
    }
    location
}

/// Splits `host:port` (IPv6 literals in brackets keep their colons).
fn split_port(authority: &str) -> (&str, Option<&str>) {
    match authority.rsplit_once(':') {
        Some((h, p))
            if !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && (!h.contains(':') || h.ends_with(']')) =>
        {
            (h, Some(p))
        }
        _ => (authority, None),
    }
}

#[cfg(test)]
mod tests {
    use super::split_port;

    #[test]
    fn splits_ports_but_not_ipv6_colons() {
        assert_eq!(split_port("a.com:8080"), ("a.com", Some("8080")));
        assert_eq!(split_port("a.com"), ("a.com", None));
        assert_eq!(split_port("[::1]:80"), ("[::1]", Some("80")));
        assert_eq!(split_port("[::1]"), ("[::1]", None));
    }
}

#[cfg(test)]
mod local_tests;
