//! The router: forwards a request whose route says `route:` — picks the cluster
//! (named, from a header, or weighted), a host by the cluster's load balancer,
//! rewrites path and host, applies header mutations, sends over the worker's pool
//! under the route timeout, and streams the response back. Failures become
//! Envoy's local replies (503 `no healthy upstream`, 503 connect failure, 504
//! `upstream request timeout`).

pub mod body;
pub mod facts;
mod filtered;
pub mod forwarded;
pub mod hash;
pub mod headers;
mod mirror;
mod rewrite;
pub mod upgrade;

use crate::attempt::{self, retry};
use crate::request::conn::ConnInfo;
use crate::request::local_reply::reply;
use crate::request::view::View;
use crate::stats::vhost as vstats;
use crate::stats::{ClusterStats, WorkerStats};
use crate::upstream::ClusterManager;
use crate::upstream::pool::{self, UpstreamBody};
use body::ResponseBody;
use courier_config::listener::http_options::HeaderCase;
use courier_config::route::{
    ClusterSpecifier, ClusterWeight, HeaderMutations, Route, RouteAction, RouteConfig, VirtualHost,
};
use headers::FormatCtx;
use http::header::{HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use std::borrow::Cow;
use tokio::time::Instant;

const SERVICE_TIME: HeaderName = HeaderName::from_static("x-envoy-upstream-service-time");
const EXPECTED_TIMEOUT: HeaderName = HeaderName::from_static("x-envoy-expected-rq-timeout-ms");
const OVERLOADED: HeaderName = HeaderName::from_static("x-envoy-overloaded");

/// Why courier answered itself (Envoy's short response flag), kept on the response
/// for the access log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseFlag(pub &'static str);

/// The matched route and its surroundings.
#[derive(Clone, Copy)]
pub struct Matched<'a> {
    /// The route configuration.
    pub config: &'a RouteConfig,
    /// The virtual host.
    pub vhost: &'a VirtualHost,
    /// The route.
    pub route: &'a Route,
    /// The request's random value: picks the weighted cluster (the filters before the
    /// router saw the same pick's per-filter configs).
    pub random: u64,
    /// The request's progress: the router notes on it when its attempt
    /// timeout will wake the request's task.
    pub progress: &'a crate::request::progress::Progress,
}

impl<'a> Matched<'a> {
    /// Header mutation levels in Envoy's order: the weighted cluster's first, then
    /// least to most specific when `most_specific_header_mutations_wins` (so the
    /// route's win), else most to least specific (so the route config's win).
    pub fn levels(
        &self,
        weighted: Option<&'a ClusterWeight>,
        pick: fn(&'a ClusterWeight) -> &'a HeaderMutations,
        side: fn(&'a Route, &'a VirtualHost, &'a RouteConfig) -> [&'a HeaderMutations; 3],
    ) -> Vec<&'a HeaderMutations> {
        let [route, vhost, global] = side(self.route, self.vhost, self.config);
        let weighted = weighted.map(pick);
        // Most configs mutate nothing: no allocation then.
        if route.is_empty()
            && vhost.is_empty()
            && global.is_empty()
            && weighted.is_none_or(|w| w.is_empty())
        {
            return Vec::new();
        }
        let mut out: Vec<&HeaderMutations> = weighted.into_iter().collect();
        if self.config.most_specific_header_mutations_wins {
            out.extend([global, vhost, route]);
        } else {
            out.extend([route, vhost, global]);
        }
        out.retain(|m| !m.is_empty());
        out
    }

    /// Response header levels.
    pub fn response_levels(&self, weighted: Option<&'a ClusterWeight>) -> Vec<&'a HeaderMutations> {
        self.levels(
            weighted,
            |w| &w.response_headers,
            |r, v, c| {
                [
                    &r.response_headers,
                    &v.response_headers,
                    &c.response_headers,
                ]
            },
        )
    }

    fn request_levels(&self, weighted: Option<&'a ClusterWeight>) -> Vec<&'a HeaderMutations> {
        self.levels(
            weighted,
            |w| &w.request_headers,
            |r, v, c| [&r.request_headers, &v.request_headers, &c.request_headers],
        )
    }
}

/// What the router needs from the worker.
pub struct Upstream<'a> {
    /// The clusters.
    pub clusters: &'a ClusterManager,
    /// This worker's stats.
    pub stats: &'a WorkerStats,
}

/// Builds the router's local replies and applies response header mutations.
struct Out<'a> {
    m: Matched<'a>,
    levels: Vec<&'a HeaderMutations>,
    conn: &'a ConnInfo,
    protocol: &'static str,
    version: http::Version,
    cluster: &'a str,
    /// The cluster's `enable_trailers` (HTTP/1.1 connections).
    h1_trailers: bool,
    /// The cluster's `header_key_format`.
    header_case: HeaderCase,
    /// The router's `suppress_envoy_headers`.
    suppress: bool,
}

impl Out<'_> {
    fn local<R>(
        &self,
        req: Option<&Request<R>>,
        status: StatusCode,
        body: impl Into<bytes::Bytes>,
        flag: &'static str,
        host: Option<&str>,
    ) -> Response<ResponseBody> {
        let mut resp = reply(status, body);
        resp.extensions_mut().insert(ResponseFlag(flag));
        self.mutate(&mut resp, req, host);
        resp.map(ResponseBody::from)
    }

    fn mutate<B, R>(&self, resp: &mut Response<B>, req: Option<&Request<R>>, host: Option<&str>) {
        if let Some(req) = req
            && !self.levels.is_empty()
        {
            response_headers(
                resp,
                &self.levels,
                req,
                self.conn,
                self.protocol,
                host,
                self.cluster,
                self.m.route,
            );
        }
    }
}

/// Forwards `req` along `action`; with `logging`, the response carries the
/// upstream it came from ([`crate::router::facts::Upstreamed`]).
pub async fn forward(
    req: Request<UpstreamBody>,
    action: &RouteAction,
    m: Matched<'_>,
    conn: &ConnInfo,
    up: &Upstream<'_>,
    logging: bool,
) -> Response<ResponseBody> {
    let (name, weighted): (Cow<'_, str>, Option<&ClusterWeight>) = match &action.cluster {
        ClusterSpecifier::Cluster(n) => (Cow::Borrowed(n), None),
        ClusterSpecifier::Header(h) => (
            Cow::Owned(
                req.headers()
                    .get(h.as_str())
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string(),
            ),
            None,
        ),
        ClusterSpecifier::Weighted(w) => match w.pick(if w.use_hash_policy {
            // Envoy's weighted pick reads the hash without generating a
            // cookie; no hash: the random value.
            hash::compute(&action.hash_policy, &req, conn, false)
                .hash
                .unwrap_or(m.random)
        } else {
            m.random
        }) {
            Some(c) => (Cow::Borrowed(&c.name), Some(c)),
            None => (Cow::Borrowed(""), None),
        },
    };
    let mut out = Out {
        m,
        levels: m.response_levels(weighted),
        conn,
        protocol: headers::protocol(req.version()),
        version: req.version(),
        cluster: &name,
        // Set once the cluster is found.
        h1_trailers: false,
        header_case: HeaderCase::Lower,
        suppress: crate::request::conn::chain_at(&conn.listener, conn.filter_chain_index)
            .and_then(|fc| fc.hcm())
            .is_some_and(|h| h.suppress_envoy_headers),
    };
    let Some(cluster) = up.clusters.get(&name) else {
        let status = StatusCode::from_u16(action.cluster_not_found_response_code)
            .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        return out.local(Some(&req), status, "", "NC", None);
    };
    out.h1_trailers = cluster.config.http.enable_trailers;
    out.header_case = cluster.config.http.header_case;
    // Clusters added over CDS count in their own (shared) stats.
    let shared_stats: &std::sync::Arc<ClusterStats> =
        match cluster.stat_slot.and_then(|i| up.stats.clusters.get(i)) {
            Some((_, s)) => s,
            None => &cluster.stats,
        };
    let stats: &ClusterStats = shared_stats;
    // The route's and virtual cluster's counters, for those that have them.
    let vhost = &m.vhost.name;
    let route_stats = m
        .route
        .stat_prefix
        .as_deref()
        .map(|p| vstats::route(vhost, p));
    let vcluster_stats = m
        .vhost
        .virtual_cluster(&View::of(&req))
        .map(|n| vstats::vcluster(vhost, n));
    let charges = vstats::Charges::new(stats, route_stats, vcluster_stats);
    let stats = &charges;
    // The hash is computed only for a balancer that reads it, as Envoy's
    // balancers ask for it: only then does a cookie policy set its cookie.
    // The cluster's own policies (`HttpProtocolOptions.hash_policy`) replace
    // the route's.
    let lb = &cluster.config.lb;
    let policies = if lb.cluster_hash_policy.is_empty() {
        &action.hash_policy
    } else {
        &lb.cluster_hash_policy
    };
    let request_hash = (lb.policy.uses_hash() && !policies.is_empty())
        .then(|| hash::compute(policies, &req, conn, true));
    let hash_value = request_hash.as_ref().and_then(|h| h.hash);
    let host = match &cluster.dynamic {
        // The name the upstream request will carry, after the route's rewrite.
        Some(d) => {
            d.host(&dynamic_authority(&req, action, weighted), None)
                .await
        }
        None => cluster.choose_hashed(hash_value),
    };
    let Some(host) = host else {
        stats.cx_none_healthy.inc();
        stats.settled(503);
        let mut resp = out.local(
            Some(&req),
            StatusCode::SERVICE_UNAVAILABLE,
            "no healthy upstream",
            "UH",
            None,
        );
        if logging {
            resp.extensions_mut()
                .insert(crate::router::facts::Upstreamed {
                    host: None,
                    cluster: std::sync::Arc::clone(&cluster.config),
                });
        }
        return resp;
    };

    // An upgrade the connection manager let through (its type is enabled).
    let upgrade =
        crate::request::headers::upgrade_type(&req).and_then(|t| HeaderValue::from_str(t).ok());
    let (mut parts, body) = req.into_parts();
    // `upstream_proxy_protocol`: the pool names (and keys connections by) the
    // downstream connection.
    if cluster.sockets.any_proxy_protocol()
        && let Some(d) =
            crate::upstream::proxy_header::Downstream::of(&conn.peer, &conn.local, conn.id)
    {
        parts.extensions.insert(d);
    }
    let levels = m.request_levels(weighted);
    let downstream_h2 = parts.version == http::Version::HTTP_2;
    rewrite::prepare(
        &mut parts,
        &rewrite::Plan {
            action,
            route: m.route,
            weighted,
            host: &host,
            levels: &levels,
            conn,
            cluster: &name,
            protocol: cluster.config.http.protocol.for_request(downstream_h2),
            original_path: !out.suppress,
        },
    );
    if let Some(u) = &upgrade {
        upgrade::restore_headers(&mut parts.headers, u.clone());
    }
    let (retry, timeouts) = match upgrade {
        // An upgrade goes once, under the route timeout.
        Some(_) => (
            None,
            retry::Timeouts {
                global: action.timeout,
                ..Default::default()
            },
        ),
        None => retry::plan(action, m.vhost, &mut parts.headers),
    };
    let mut retry = retry;
    if let Some(r) = &mut retry {
        r.hash = hash_value;
    }
    if let Some(t) = timeouts.expected().filter(|_| !out.suppress) {
        parts
            .headers
            .insert(EXPECTED_TIMEOUT, headers::number(t.as_millis() as u64));
    }
    // Response header values may refer to the request: keep what was sent.
    let seen = (!out.levels.is_empty()).then(|| {
        let mut r = Request::new(());
        *r.method_mut() = parts.method.clone();
        *r.uri_mut() = parts.uri.clone();
        *r.headers_mut() = parts.headers.clone();
        r
    });
    let reply_to = filtered::reply_to(&cluster, &parts);
    let started = Instant::now();
    let done = if upgrade.is_some() {
        let request = Request::from_parts(parts, body);
        // Boxed: upgrades are rare; their state stays out of every request's future.
        let last = Box::pin(filtered::upgrade(
            &cluster,
            &host,
            request,
            stats,
            shared_stats,
            action.timeout,
        ))
        .await;
        let last = match last {
            Ok(Ok(resp)) => attempt::Final::Upgraded(resp),
            Ok(Err(e)) => attempt::Final::Failed(e),
            Err(f) => f,
        };
        if matches!(last, attempt::Final::Timeout) {
            stats.attached();
            stats.timeout();
            stats.response(504);
            host.stats.attached();
            host.stats.timed_out();
        }
        attempt::Done {
            last,
            host: std::sync::Arc::clone(&host),
            attempts: 1,
            limit_exceeded: false,
            stream_deadline: None,
        }
    } else {
        let buffer_limit = m
            .route
            .request_body_buffer_limit
            .or(m.vhost.request_body_buffer_limit)
            .unwrap_or(conn.buffer_limit);
        let body = if action.request_mirror_policies.is_empty() {
            body
        } else {
            mirror::start(
                &action.request_mirror_policies,
                &parts,
                body,
                up,
                buffer_limit,
                action.timeout,
            )
        };
        let a = attempt::Attempts {
            cluster: &cluster,
            stats,
            high: action.priority == courier_config::route::RoutingPriority::High,
            retry,
            timeouts,
            count_upstream: m.vhost.include_request_attempt_count,
            buffer_limit,
            started,
            progress: m.progress,
            hedge: action
                .hedge_policy
                .as_ref()
                .or(m.vhost.hedge_policy.as_ref())
                .is_some_and(|h| h.hedge_on_per_try_timeout),
            max_stream: cluster.config.http.common.max_stream_duration,
        };
        attempt::run(a, parts, body, std::sync::Arc::clone(&host)).await
    };
    let host_text = Some(done.host.address_text());
    let urx = done.limit_exceeded;
    // What the route and virtual cluster are charged (a filter's reply is not
    // the upstream's).
    let settled = match &done.last {
        attempt::Final::Timeout => Some(504),
        // Envoy charges no response code for it (no `chargeUpstreamAbort`).
        attempt::Final::MaxStreamDuration => None,
        attempt::Final::Response(r, _) | attempt::Final::Upgraded(r) => Some(r.status().as_u16()),
        attempt::Final::Failed(_)
            if m.progress.filter_reply().is_some() || m.progress.has_body_failed() =>
        {
            None
        }
        attempt::Final::Failed(e) => Some(e.status()),
        // Not the upstream's answer.
        attempt::Final::Local(_) => None,
        _ => Some(503),
    };
    if let Some(status) = settled {
        stats.settled(status);
    }
    let mut resp = match done.last {
        attempt::Final::Timeout => out.local(
            seen.as_ref(),
            StatusCode::GATEWAY_TIMEOUT,
            "upstream request timeout",
            if urx { "UT,URX" } else { "UT" },
            host_text,
        ),
        // Envoy's `onStreamMaxDurationReached`: 504 once the downstream
        // request is whole, else 408 (`maybeRequestTimeoutCode`).
        attempt::Final::MaxStreamDuration => {
            let status = if m.progress.done_at().is_some() {
                StatusCode::GATEWAY_TIMEOUT
            } else {
                StatusCode::REQUEST_TIMEOUT
            };
            let mut resp = out.local(
                seen.as_ref(),
                status,
                "upstream max stream duration reached",
                if urx { "UMSDR,URX" } else { "UMSDR" },
                host_text,
            );
            if logging {
                resp.extensions_mut().insert(crate::router::facts::Details(
                    "upstream_max_stream_duration_reached".to_string(),
                ));
            }
            resp
        }
        attempt::Final::Overflow => {
            stats.response(503);
            let mut resp = out.local(
                seen.as_ref(),
                StatusCode::SERVICE_UNAVAILABLE,
                "upstream connect error or disconnect/reset before headers. reset reason: overflow",
                "UO",
                host_text,
            );
            if !out.suppress {
                resp.headers_mut()
                    .insert(OVERLOADED, HeaderValue::from_static("true"));
            }
            resp
        }
        attempt::Final::NoHost => {
            stats.cx_none_healthy.inc();
            out.local(
                seen.as_ref(),
                StatusCode::SERVICE_UNAVAILABLE,
                "no healthy upstream",
                "UH",
                None,
            )
        }
        // Counted as upstream_cx_pool_overflow where the pool was refused.
        attempt::Final::PoolOverflow => out.local(
            seen.as_ref(),
            StatusCode::SERVICE_UNAVAILABLE,
            "no healthy upstream",
            "UH",
            None,
        ),
        // A cluster's upstream filter answered: its reply goes downstream as
        // the attempt's response (Envoy's upstream `sendLocalReply`), with no
        // response flag and no upstream service time.
        attempt::Final::Local(r) => {
            filtered::response(&out, &r, reply_to, seen.as_ref(), host_text, logging)
        }
        // A filter's request body encoder failed and answers with its own reply
        // (gRPC-Web's 400 for a body that is not base64), as Envoy's `sendLocalReply`
        // from `decodeData`: no response flag.
        attempt::Final::Failed(_) if let Some(r) = m.progress.filter_reply() => {
            let mut resp = out.local(seen.as_ref(), r.status, r.body.clone(), "-", host_text);
            resp.extensions_mut().remove::<ResponseFlag>();
            if logging {
                resp.extensions_mut()
                    .insert(crate::router::facts::Details(r.details.to_string()));
            }
            resp
        }
        // hyper refused the downstream's body mid-way (a malformed chunk
        // after the head went upstream): Envoy's codec answers 400 and closes.
        attempt::Final::Failed(_) if m.progress.has_body_failed() => {
            let mut resp = out.local(
                seen.as_ref(),
                StatusCode::BAD_REQUEST,
                "Bad Request",
                "DPE",
                host_text,
            );
            resp.headers_mut()
                .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
            resp
        }
        attempt::Final::Failed(e) => {
            let retried = if done.attempts > 1 {
                "retried and the latest "
            } else {
                ""
            };
            let body = format!(
                "upstream connect error or disconnect/reset before headers. {retried}reset reason: {}",
                e.reason()
            );
            let flag = if urx { with_urx(e.flag()) } else { e.flag() };
            let mut resp = out.local(
                seen.as_ref(),
                StatusCode::from_u16(e.status()).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
                body,
                flag,
                host_text,
            );
            if logging {
                resp.extensions_mut()
                    .insert(crate::router::facts::Details(e.details()));
            }
            resp
        }
        attempt::Final::Upgraded(resp) => {
            stats.attached();
            stats.response(resp.status().as_u16());
            done.host.stats.attached();
            done.host.stats.charge(resp.status().as_u16());
            proxied(
                resp,
                None,
                None,
                None,
                &out,
                started,
                seen.as_ref(),
                host_text,
            )
        }
        attempt::Final::Response(mut resp, lease) => {
            let stream_end = done
                .stream_deadline
                .map(|at| body::StreamEnd::new(at, std::sync::Arc::clone(shared_stats)));
            // An upstream filter reads this gRPC response's status from its trailers.
            let trailers = resp
                .extensions_mut()
                .remove::<courier_filters::upstream::GrpcTrailers>();
            let mut r = proxied(
                resp,
                Some(lease),
                timeouts.per_try_idle,
                stream_end,
                &out,
                started,
                seen.as_ref(),
                host_text,
            );
            if urx {
                r.extensions_mut().insert(ResponseFlag("URX"));
            }
            if let Some(t) = trailers {
                let mut encoders = courier_filters::BodyEncoders::default();
                encoders.push(Box::new(t));
                r = r.map(|b| b.encode(encoders));
            }
            // A generated hash cookie goes on the upstream's response.
            for c in request_hash.iter().flat_map(|h| &h.set_cookies) {
                if let Ok(v) = HeaderValue::from_str(c) {
                    r.headers_mut().append(http::header::SET_COOKIE, v);
                }
            }
            r
        }
    };
    if m.vhost.include_attempt_count_in_response {
        resp.headers_mut()
            .insert(attempt::ATTEMPT_COUNT, HeaderValue::from(done.attempts));
    }
    // For the access log's %UPSTREAM_HOST% and %UPSTREAM_CLUSTER% (no
    // allocation for the extension when nothing logs).
    if logging {
        resp.extensions_mut()
            .insert(crate::router::facts::Upstreamed {
                host: Some(std::sync::Arc::clone(&done.host)),
                cluster: std::sync::Arc::clone(&cluster.config),
            });
    }
    resp
}

/// The `:authority` a request to a dynamic forward proxy cluster names its
/// host by: the route's host rewrite, else the request's own.
fn dynamic_authority<B>(
    req: &Request<B>,
    action: &RouteAction,
    weighted: Option<&ClusterWeight>,
) -> String {
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    rewrite::new_host(req.headers(), path, action, weighted, "").unwrap_or_else(|| {
        crate::request::conn::authority(req)
            .unwrap_or("")
            .to_string()
    })
}

/// An upstream response on its way downstream.
#[allow(clippy::too_many_arguments)]
fn proxied(
    resp: Response<hyper::body::Incoming>,
    lease: Option<pool::Lease>,
    idle: Option<std::time::Duration>,
    stream_end: Option<body::StreamEnd>,
    out: &Out<'_>,
    started: Instant,
    seen: Option<&Request<()>>,
    host_text: Option<&str>,
) -> Response<ResponseBody> {
    let (mut rp, rb) = resp.into_parts();
    let keep_trailers = rp.version == http::Version::HTTP_2 || out.h1_trailers;
    // Answer in the downstream's HTTP version with the standard reason phrase
    // (hyper would echo the upstream's, as Envoy does not).
    rp.version = out.version;
    let extensions = std::mem::take(&mut rp.extensions);
    if let HeaderCase::Preserve {
        forward_reason_phrase,
    } = out.header_case
    {
        rp.extensions =
            crate::request::header_case::response_extensions(extensions, forward_reason_phrase);
    }
    let switched = (rp.status == StatusCode::SWITCHING_PROTOCOLS)
        .then(|| rp.headers.get(http::header::UPGRADE).cloned())
        .flatten();
    headers::strip_hop_by_hop(&mut rp.headers);
    if let Some(u) = switched {
        // Envoy 1.40 sends no upstream service time on a 101.
        upgrade::restore_headers(&mut rp.headers, u);
    } else if !out.suppress {
        rp.headers.insert(
            SERVICE_TIME,
            headers::number(started.elapsed().as_millis() as u64),
        );
    }
    let body = match lease {
        Some(lease) => ResponseBody::upstream(rb, lease, idle, stream_end, keep_trailers),
        None => upgrade::body(rb),
    };
    let mut resp = Response::from_parts(rp, body);
    out.mutate(&mut resp, seen, host_text);
    resp
}

/// A reset's flag with `URX` (the retry limit was reached).
fn with_urx(flag: &'static str) -> &'static str {
    match flag {
        "UF" => "UF,URX",
        "UC" => "UC,URX",
        "UR" => "UR,URX",
        "UPE" => "UPE,URX",
        other => other,
    }
}

/// Applies response header mutations to `resp` (for `req`).
#[allow(clippy::too_many_arguments)]
pub fn response_headers<B, R>(
    resp: &mut Response<B>,
    levels: &[&HeaderMutations],
    req: &Request<R>,
    conn: &ConnInfo,
    protocol: &'static str,
    upstream_host: Option<&str>,
    cluster: &str,
    route: &Route,
) {
    let status = resp.status().as_u16();
    let authority = crate::request::conn::authority(req).unwrap_or("");
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let (method, scheme) = (
        req.method().as_str(),
        req.uri().scheme_str().unwrap_or("http"),
    );
    let request = req.headers();
    headers::apply(resp.headers_mut(), levels, |current, fs| {
        FormatCtx {
            method,
            path,
            authority,
            scheme,
            request,
            response: Some((current, status)),
            conn,
            remote: req
                .extensions()
                .get::<crate::request::conn::ClientAddress>()
                .map(|c| c.0),
            protocol,
            upstream_host,
            cluster,
            route_name: &route.name,
        }
        .eval(fs)
    });
}
