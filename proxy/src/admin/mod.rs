//! The admin endpoint (`admin.address`), served on the main thread: `/ready`,
//! `/stats`, `/stats/prometheus`, `/server_info`, `/listeners`, `/clusters`,
//! `/config_dump`, `/logging`, `/runtime`, and the POST-only `/drain_listeners`,
//! `/reset_counters`, `/quitquitquit`, `/runtime_modify`, `/cpuprofiler`,
//! `/heapprofiler`. Requests are logged to `admin.access_log`.

mod clusters;
pub(crate) mod config_dump;
pub mod deferred_stats;
mod endpoint_stats;
mod histograms;
pub mod otlp_sink;
mod profiler;
pub mod runtime;
pub mod sinks;

use crate::access_log::body::LoggedBody;
use crate::access_log::{Logs, Pending, ResponseSide};
use crate::request::body::RequestProgress;
use crate::request::conn::Peer;
use crate::request::local_reply::{Body, reply};
use crate::request::phase::Phase;
use crate::server::{Shared, State};
use crate::stats;
use courier_config::core::Address;
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::net::{TcpListener, UnixListener};
use tokio::time::Instant;

/// Binds admin (a TCP address or a Unix domain socket) and serves it in the
/// background; returns what it bound as Envoy writes it to
/// `--admin-address-path` (`ip:port`, or the pipe's path).
pub async fn spawn(address: &Address, shared: Arc<Shared>) -> Result<String, String> {
    match address {
        Address::Socket(sa) => {
            let addr = crate::accept::listeners::resolve(sa)?;
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|e| format!("admin: bind {addr}: {e}"))?;
            let bound = listener
                .local_addr()
                .map_err(|e| format!("admin: bind {addr}: {e}"))?;
            tokio::spawn(async move {
                loop {
                    let Ok((stream, peer)) = listener.accept().await else {
                        continue;
                    };
                    let local = stream.local_addr().unwrap_or(bound);
                    serve(stream, Arc::clone(&shared), Peer::Ip(peer), Peer::Ip(local));
                }
            });
            Ok(bound.to_string())
        }
        Address::Pipe(pipe) => {
            let listener = crate::accept::socket::bind_unix(pipe)
                .and_then(UnixListener::from_std)
                .map_err(|e| format!("admin: bind {}: {e}", pipe.path))?;
            // Envoy names both ends of a pipe connection by the socket's path.
            let name: Arc<str> = Arc::from(pipe.path.as_str());
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let end = Peer::Pipe(Arc::clone(&name));
                    serve(stream, Arc::clone(&shared), end.clone(), end);
                }
            });
            Ok(pipe.path.clone())
        }
    }
}

/// Serves one admin connection on a task of its own.
fn serve<S>(stream: S, shared: Arc<Shared>, peer: Peer, local: Peer)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let service = service_fn(move |req| {
            let shared = Arc::clone(&shared);
            let (peer, local) = (peer.clone(), local.clone());
            async move { Ok::<_, std::convert::Infallible>(logged(&req, &shared, peer, local)) }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .await;
    });
}

/// Answers and, when admin has access logs, logs the request as the connection
/// manager does.
fn logged(
    req: &Request<Incoming>,
    shared: &Shared,
    peer: Peer,
    local: Peer,
) -> Response<LoggedBody<Body>> {
    let start = (SystemTime::now(), Instant::now());
    let resp = handle(req, shared);
    if shared.admin_logs.is_empty() {
        return resp.map(LoggedBody::plain);
    }
    let pending = Pending {
        logs: Logs::Admin(Arc::clone(&shared.admin_logs)),
        start: start.0,
        started: start.1,
        method: req.method().clone(),
        uri: req.uri().clone(),
        version: req.version(),
        headers: req.headers().clone(),
        peer,
        remote: None,
        local,
        server_name: None,
        fingerprints: None,
        connection_id: 0,
        request: Arc::new(RequestProgress::new(true)),
        span: None,
    };
    let side = ResponseSide {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        response_duration: start.1.elapsed(),
        ..ResponseSide::default()
    };
    resp.map(|b| LoggedBody::logged(b, pending, side))
}

fn handle(req: &Request<Incoming>, shared: &Shared) -> Response<Body> {
    let path = req.uri().path();
    let query = req.uri().query().unwrap_or("");
    let has = |param: &str| {
        query
            .split('&')
            .any(|p| p == param || p.split_once('=').is_some_and(|(k, _)| k == param))
    };
    // Envoy: endpoints that change state need POST (`/logging` only to change).
    let mutating = matches!(
        path,
        "/quitquitquit"
            | "/drain_listeners"
            | "/healthcheck/fail"
            | "/healthcheck/ok"
            | "/reset_counters"
            | "/runtime_modify"
            | "/cpuprofiler"
            | "/heapprofiler"
    ) || (path == "/logging" && !query.is_empty());
    if mutating && req.method() != Method::POST {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "This endpoint requires POST\n",
        );
    }
    match path {
        "/ready" => match shared.state() {
            State::Live => reply(StatusCode::OK, "LIVE\n"),
            State::Initializing => reply(StatusCode::SERVICE_UNAVAILABLE, "INITIALIZING\n"),
            State::Draining => reply(StatusCode::SERVICE_UNAVAILABLE, "DRAINING\n"),
        },
        "/stats" => {
            let filter = match stat_filter(query) {
                Ok(f) => f,
                Err(e) => return e.reply(),
            };
            let mut samples = filtered(samples(shared), filter.as_ref());
            let endpoints = endpoint_stats::samples(&shared.clusters, &|n| {
                filter.as_ref().is_none_or(|re| re.is_match(n))
            });
            let hists = histograms::gather(shared, filter.as_ref(), has("usedonly"));
            if query.split('&').any(|p| p == "format=prometheus") {
                return prometheus(&samples, &hists, &endpoints, shared);
            }
            // After every other stat, as Envoy lists them.
            samples.extend(endpoint_stats::named(&endpoints));
            if query.split('&').any(|p| p == "format=json") {
                let mut v = stats::json_value(&samples);
                if let (Some(h), Some(list)) = (
                    histograms::json(&hists),
                    v.get_mut("stats").and_then(|s| s.as_array_mut()),
                ) {
                    list.push(h);
                }
                let mut r = reply(StatusCode::OK, format!("{v:#}\n"));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                r
            } else {
                let mut text = stats::render_text(&samples);
                text.push_str(&histograms::text(&hists));
                reply(StatusCode::OK, text)
            }
        }
        "/stats/prometheus" => match stat_filter(query) {
            Ok(filter) => {
                let samples = filtered(samples(shared), filter.as_ref());
                let endpoints = endpoint_stats::samples(&shared.clusters, &|n| {
                    filter.as_ref().is_none_or(|re| re.is_match(n))
                });
                let hists = histograms::gather(shared, filter.as_ref(), has("usedonly"));
                prometheus(&samples, &hists, &endpoints, shared)
            }
            Err(e) => e.reply(),
        },
        "/server_info" => json(server_info(shared)),
        "/listeners" => {
            let mut s = String::new();
            for l in &shared.listeners.current().listeners {
                s.push_str(&format!("{}::{}\n", l.name(), l.address));
            }
            reply(StatusCode::OK, s)
        }
        "/clusters" => {
            if query.split('&').any(|p| p == "format=json") {
                json(clusters::json(&shared.clusters))
            } else {
                reply(StatusCode::OK, clusters::text(&shared.clusters))
            }
        }
        "/config_dump" => match &shared.bootstrap_dump {
            Some(b) => {
                let mut v = b.clone();
                if let Some(x) = &shared.xds
                    && let Some(configs) = v.get_mut("configs").and_then(|c| c.as_array_mut())
                {
                    crate::xds::merge_dump(x, &shared.clusters, &shared.listeners, configs);
                }
                json(v)
            }
            None => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "the bootstrap was not kept\n",
            ),
        },
        // Envoy's server-wide health check state, which the health check
        // filter answers from.
        "/healthcheck/fail" => {
            courier_filters::health_check::set_failing(true);
            reply(StatusCode::OK, "OK\n")
        }
        "/healthcheck/ok" => {
            courier_filters::health_check::set_failing(false);
            reply(StatusCode::OK, "OK\n")
        }
        "/drain_listeners" => {
            // In-flight requests carry on; with `graceful`, open connections are
            // also asked to finish (connection: close / GOAWAY).
            let target = if has("graceful") {
                Phase::ConnectionsDraining
            } else {
                Phase::ListenersStopped
            };
            shared.phase.send_if_modified(|p| {
                let changed = *p < target;
                *p = (*p).max(target);
                changed
            });
            reply(StatusCode::OK, "OK\n")
        }
        "/reset_counters" => {
            // Deferred traffic stats counted since the last scrape exist in
            // Envoy before the reset and after it: note them first.
            if shared.deferred_stats.is_some() {
                let _ = samples(shared);
            }
            stats::reset_counters(&shared.stats);
            crate::trace::zipkin_export::reset();
            crate::trace::datadog_export::reset();
            shared.http_filters.reset_counters();
            shared.listeners.reset_counters();
            crate::l4::stats::reset_counters();
            crate::accept::proxy_protocol::reset_counters();
            crate::accept::connection_limit::reset_counters();
            crate::accept::network_rbac::reset_counters();
            crate::udp::stats::reset_counters();
            crate::access_log::otel::reset_counters();
            crate::access_log::grpc_als::reset_counters();
            crate::stats::vhost::reset_counters();
            for c in shared.clusters.clusters() {
                for (_, counter) in c.zone_stats.values() {
                    counter.reset();
                }
                // Host stats (`/clusters`, per-endpoint stats) are not in
                // Envoy's store: its reset leaves them alone.
            }
            reply(StatusCode::OK, "OK\n")
        }
        "/logging" => logging(query, shared),
        "/runtime" => json(shared.runtime.show()),
        "/runtime_modify" => shared.runtime.modify(query),
        "/cpuprofiler" => profiler::cpu(query),
        "/heapprofiler" => profiler::heap(),
        "/quitquitquit" => {
            shared.quit.notify_one();
            reply(StatusCode::OK, "OK\n")
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "invalid path. admin commands are: /clusters /config_dump /cpuprofiler /drain_listeners /heapprofiler /listeners /logging /quitquitquit /ready /reset_counters /runtime /runtime_modify /server_info /stats /stats/prometheus\n",
        ),
    }
}

/// `/logging`: lists the level (GET), or sets it (`POST ?level=debug`).
fn logging(query: &str, shared: &Shared) -> Response<Body> {
    let level = query
        .split('&')
        .find_map(|p| p.strip_prefix("level="))
        .map(|l| match l {
            "warning" => "warn",
            "critical" => "error",
            other => other,
        });
    if let Some(level) = level {
        if !matches!(level, "trace" | "debug" | "info" | "warn" | "error" | "off") {
            return reply(
                StatusCode::BAD_REQUEST,
                "error: unknown logger level\nusage: /logging?level=<trace|debug|info|warning|error|critical|off>\n",
            );
        }
        let Some(control) = &shared.log_control else {
            return reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "logging is not controllable\n",
            );
        };
        if let Err(e) = (control.0)(level) {
            return reply(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"));
        }
    } else if !query.is_empty() {
        return reply(
            StatusCode::BAD_REQUEST,
            "usage: /logging?level=<trace|debug|info|warning|error|critical|off>\n",
        );
    }
    let current = tracing::level_filters::LevelFilter::current();
    let name = match current.into_level() {
        None => "off".to_string(),
        Some(tracing::Level::WARN) => "warning".to_string(),
        Some(l) => l.as_str().to_ascii_lowercase(),
    };
    reply(
        StatusCode::OK,
        format!("active loggers:\n  courier: {name}\n"),
    )
}

/// Every counter and gauge: the workers' and the HTTP filters', sorted by name.
pub(crate) fn samples(shared: &Shared) -> Vec<stats::Sample> {
    let mut samples = stats::collect(&shared.stats);
    shared.http_filters.samples(&mut samples);
    shared.listeners.samples(&mut samples);
    crate::l4::stats::samples(&mut samples);
    crate::accept::proxy_protocol::samples(&mut samples);
    crate::accept::connection_limit::samples(&mut samples);
    crate::accept::network_rbac::samples(&mut samples);
    crate::udp::stats::samples(&mut samples);
    crate::access_log::otel::samples(&mut samples);
    crate::access_log::grpc_als::samples(&mut samples);
    vhost_samples(shared, &mut samples);
    crate::upstream::circuit::samples(&shared.clusters, &mut samples);
    crate::upstream::outlier::samples(&shared.clusters, &mut samples);
    crate::upstream::filter_samples(&shared.clusters, &mut samples);
    crate::upstream::socket::samples(&shared.clusters, &mut samples);
    crate::upstream::zone::samples(&shared.clusters, &mut samples);
    shared.clusters.dynamic_samples(&mut samples);
    if let Some(x) = &shared.xds {
        crate::xds::samples(x, &mut samples);
    }
    crate::xds::sds::samples(&mut samples);
    samples.extend(crate::trace::zipkin_export::samples());
    samples.extend(crate::trace::datadog_export::samples());
    shared.runtime.samples(&mut samples);
    if let Some(d) = &shared.deferred_stats {
        d.hide_unused(&mut samples);
    }
    samples.sort();
    // Filters of connection managers sharing a stat prefix count under the same
    // names: one counter each, as in Envoy's store.
    samples.dedup_by(|next, kept| {
        let same = next.0 == kept.0;
        if same {
            kept.1 += next.1;
        }
        same
    });
    // A stat `stats_config.stats_matcher` rejects does not exist in Envoy
    // (it is never instantiated): courier counts it in its fixed slot and
    // leaves it out of every listing, which is all a user can see of it.
    shared.stat_names.keep_existing(&mut samples);
    samples
}

/// The virtual hosts' route and virtual-cluster stats: every route config in
/// force (inline in a listener's connection managers, or from RDS) has its
/// counters made first, so they are listed from the config's arrival, as in
/// Envoy, not from the first request that uses them.
fn vhost_samples(shared: &Shared, out: &mut Vec<stats::Sample>) {
    use courier_config::listener::hcm::RouteSpecifier;
    let snapshot = shared.snapshot.load();
    for rc in snapshot.route_configs.values() {
        stats::vhost::register(rc);
    }
    for l in &snapshot.listeners {
        for fc in l
            .filter_chains
            .iter()
            .chain(l.default_filter_chain.as_deref())
        {
            if let Some(RouteSpecifier::Inline(rc)) = fc.hcm().map(|h| &h.route_specifier) {
                stats::vhost::register(rc);
            }
        }
    }
    stats::vhost::samples(out);
}

/// A `filter` that is not a regex (answered 400, as Envoy).
struct InvalidFilter;

impl InvalidFilter {
    fn reply(self) -> Response<Body> {
        reply(StatusCode::BAD_REQUEST, "Invalid re2 regex")
    }
}

/// `?filter=<regex>`: the (RE2) regex a stat's full name must find a match
/// in to be listed, as Envoy's stats endpoints; none when absent or empty.
fn stat_filter(query: &str) -> Result<Option<regex::Regex>, InvalidFilter> {
    let Some(pattern) = query.split('&').find_map(|p| p.strip_prefix("filter=")) else {
        return Ok(None);
    };
    let pattern = runtime::percent_decode(pattern);
    if pattern.is_empty() {
        return Ok(None);
    }
    regex::Regex::new(&pattern)
        .map(Some)
        .map_err(|_| InvalidFilter)
}

/// The samples `filter` keeps.
fn filtered(mut samples: Vec<stats::Sample>, filter: Option<&regex::Regex>) -> Vec<stats::Sample> {
    if let Some(re) = filter {
        samples.retain(|(name, _)| re.is_match(name));
    }
    samples
}

fn prometheus(
    samples: &[stats::Sample],
    hists: &[stats::histograms::HistSample],
    endpoints: &[endpoint_stats::EndpointSample],
    shared: &Shared,
) -> Response<Body> {
    let mut text = stats::prometheus::render(samples, &shared.stat_names);
    text.push_str(&stats::prometheus::render_histograms(
        hists,
        &shared.stat_names,
    ));
    // After every other family, as Envoy writes them.
    text.push_str(&endpoint_stats::prometheus(endpoints));
    let mut r = reply(StatusCode::OK, text);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

fn json(v: serde_json::Value) -> Response<Body> {
    let mut r = reply(StatusCode::OK, format!("{v:#}\n"));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn server_info(shared: &Shared) -> serde_json::Value {
    let uptime = shared.started.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    let state = match shared.state() {
        State::Live => "LIVE",
        State::Initializing => "INITIALIZING",
        State::Draining => "DRAINING",
    };
    serde_json::json!({
        "version": concat!("courier/", env!("CARGO_PKG_VERSION")),
        "state": state,
        "uptime_current_epoch": format!("{uptime}s"),
        "uptime_all_epochs": format!("{uptime}s"),
        "command_line_options": { "concurrency": shared.concurrency },
    })
}
