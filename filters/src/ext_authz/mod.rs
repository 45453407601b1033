//! The ext_authz HTTP filter's runtime (`envoy.filters.http.ext_authz`, envoy-reference 3):
//! each request is checked with an external service before it goes on. The call is the
//! filter's [`Decision::Pending`] future, awaited on the request's own task: a worker
//! serves other requests while checks are outstanding. The transport is the proxy's
//! ([`AuthzTransport`]), so this crate holds no connection.

pub mod check_request;
pub mod cluster_stats;
pub mod grpc;
pub mod http_service;
pub mod metadata;
pub mod outcome;
pub mod wire;

use crate::chain::{BodyWanted, Decision, HttpFilter, LocalReply, Verdict};
use crate::per_worker::PerWorker;
use crate::request::RequestState;
use bytes::Bytes;
use courier_config::config_source::GrpcService;
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::ext_authz::{AuthzService, ExtAuthz, ExtAuthzPerRoute};
use courier_config::filters::http_uri::{CallRetryPolicy, HttpUri};
use envoy_types::pb::envoy::service::auth::v3::CheckResponse;
use http::{HeaderValue, StatusCode};
use outcome::Outcome;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The dynamic-metadata namespace ext_authz writes.
pub const FILTER_NAME: &str = "envoy.filters.http.ext_authz";

/// Tells the authorization service whether the body it got was cut.
const PARTIAL_BODY: &str = "x-envoy-auth-partial-body";

/// A check without a deadline (`timeout: 0s`) is still bounded, so a stalled server
/// cannot hold a request forever.
const UNBOUNDED: Duration = Duration::from_secs(3600);

/// A gRPC check in flight.
pub type CheckFuture<'a> = Pin<Box<dyn Future<Output = Result<CheckResponse, String>> + Send + 'a>>;
/// An HTTP check in flight.
pub type HttpCheckFuture<'a> =
    Pin<Box<dyn Future<Output = Result<http::Response<Bytes>, String>> + Send + 'a>>;

/// How checks reach the authorization service; implemented by the proxy over its
/// clusters (`envoy_grpc`, `http_service`) and direct channels (`google_grpc`).
pub trait AuthzTransport: Send + Sync {
    /// Calls `envoy.service.auth.v3.Authorization/Check` with `frame`, the `CheckRequest`
    /// as a length-prefixed gRPC message ([`wire::check_frame`]); `timeout` goes to the
    /// server as `grpc-timeout` (the filter bounds the call itself, retries included: an
    /// `envoy_grpc` service retries under its `retry_policy`). A non-OK gRPC status is an
    /// `Err`.
    fn check<'a>(
        &'a self,
        service: &'a GrpcService,
        timeout: Option<Duration>,
        frame: Bytes,
    ) -> CheckFuture<'a>;

    /// Sends an HTTP check request through `uri.cluster`, again under `retry` (the
    /// service's `retry_policy`) while its answer or failure is retriable.
    fn http<'a>(
        &'a self,
        uri: &'a HttpUri,
        retry: Option<&'a CallRetryPolicy>,
        req: http::Request<Bytes>,
    ) -> HttpCheckFuture<'a>;
}

/// ext_authz counters (`http.<p>.ext_authz.[<stat_prefix>.]<name>`).
#[derive(Debug, Default)]
pub struct ExtAuthzStats {
    /// Checks that allowed the request.
    pub ok: AtomicU64,
    /// Checks that denied it.
    pub denied: AtomicU64,
    /// Checks that failed (transport, timeout, 5xx, non-OK gRPC status).
    pub error: AtomicU64,
    /// Failed checks let through by `failure_mode_allow`.
    pub failure_mode_allowed: AtomicU64,
    /// Requests not checked because the filter was disabled at runtime.
    pub disabled: AtomicU64,
}

/// The ext_authz filter.
pub struct ExtAuthzFilter {
    /// `HttpFilter.name`: the key of its per-route configs.
    name: String,
    config: Arc<ExtAuthz>,
    transport: Arc<dyn AuthzTransport>,
    stats: Arc<PerWorker<ExtAuthzStats>>,
    /// The outcomes again per route target cluster (`cluster.<name>.ext_authz.…`).
    clusters: Arc<cluster_stats::PerCluster>,
}

impl std::fmt::Debug for ExtAuthzFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtAuthzFilter").finish_non_exhaustive()
    }
}

impl ExtAuthzFilter {
    /// A filter named `name` for `config`, calling out through `transport`.
    pub fn new(name: &str, config: Arc<ExtAuthz>, transport: Arc<dyn AuthzTransport>) -> Self {
        Self {
            name: name.to_string(),
            config,
            transport,
            stats: Arc::default(),
            clusters: Arc::default(),
        }
    }

    /// The filter's counters.
    pub fn stats(&self) -> &Arc<PerWorker<ExtAuthzStats>> {
        &self.stats
    }

    /// The filter's counters per route target cluster.
    pub fn cluster_stats(&self) -> &Arc<cluster_stats::PerCluster> {
        &self.clusters
    }

    /// `filter_enabled` (a share of requests, drawn per request) and
    /// `filter_enabled_metadata` (the request's dynamic metadata so far) both allow a check.
    fn enabled(&self, req: &RequestState<'_>) -> bool {
        let cfg = &*self.config;
        cfg.filter_enabled.is_none_or(|p| fastrand::f64() < p)
            && cfg
                .filter_enabled_metadata
                .as_ref()
                .is_none_or(|m| m.matches(&req.metadata))
    }

    async fn call(
        &self,
        req: &RequestState<'_>,
        context: BTreeMap<String, String>,
        body: Option<Bytes>,
    ) -> Outcome {
        let cfg = &*self.config;
        match &cfg.service {
            AuthzService::Grpc { service, timeout } => {
                let check = wire::check_frame(req, cfg, &context, body.as_deref());
                let call = self.transport.check(service, *timeout, check);
                match tokio::time::timeout(timeout.unwrap_or(UNBOUNDED), call).await {
                    Ok(Ok(resp)) => grpc::outcome(&resp),
                    Ok(Err(_)) | Err(_) => Outcome::Error(None),
                }
            }
            AuthzService::Http(svc) => {
                let Ok(check) = http_service::request(req, cfg, svc, body) else {
                    return Outcome::Error(None);
                };
                let call = self
                    .transport
                    .http(&svc.server_uri, svc.retry_policy.as_ref(), check);
                let timeout = svc.server_uri.timeout.unwrap_or(UNBOUNDED);
                match tokio::time::timeout(timeout, call).await {
                    Ok(Ok(resp)) => http_service::outcome(&resp, svc),
                    Ok(Err(_)) | Err(_) => Outcome::Error(None),
                }
            }
        }
    }

    async fn run(
        &self,
        req: &mut RequestState<'_>,
        context: BTreeMap<String, String>,
        with_body: bool,
    ) -> Verdict {
        let cfg = &*self.config;
        let body = match (with_body, cfg.with_request_body) {
            (true, Some(s)) => req.body.clone().map(|b| {
                let max = s.max_request_bytes as usize;
                let partial = b.len() > max;
                if s.allow_partial_message {
                    req.head.headers.insert(
                        PARTIAL_BODY,
                        HeaderValue::from_static(if partial { "true" } else { "false" }),
                    );
                }
                if partial { b.slice(..max) } else { b }
            }),
            _ => None,
        };
        // The route's cluster as the check starts (Envoy's `clusterInfo()` then).
        let cluster = req.route.and_then(|r| r.cluster);
        let count = |which: fn(&cluster_stats::ClusterAuthzStats) -> &AtomicU64| {
            if let Some(c) = cluster {
                self.clusters.count(c, which);
            }
        };
        let started = tokio::time::Instant::now();
        let outcome = self.call(req, context, body).await;
        let stats = self.stats.get(req.conn.worker);
        // The check saw `x-envoy-auth-partial-body`; the upstream does not (as Envoy).
        if cfg
            .with_request_body
            .is_some_and(|s| s.allow_partial_message)
        {
            req.head.headers.remove(PARTIAL_BODY);
        }
        match outcome {
            Outcome::Ok(mut allow) => {
                stats.ok.fetch_add(1, Ordering::Relaxed);
                count(|s| &s.ok);
                // Envoy adds the call's duration (ms) to the metadata an answer carries.
                if let Some(md) = allow.metadata.as_mut().filter(|m| !m.is_empty()) {
                    md.insert(
                        "ext_authz_duration".into(),
                        serde_json::Value::from(started.elapsed().as_millis() as u64),
                    );
                }
                if outcome::apply(req, &allow) && cfg.clear_route_cache {
                    req.clear_route_cache();
                }
                if !allow.response_headers.is_empty() {
                    let mut pending = req
                        .filter_state
                        .remove::<outcome::PendingResponseHeaders>()
                        .unwrap_or_default();
                    pending.0.push((
                        self.name.clone(),
                        outcome::ResponseHeaders(allow.response_headers),
                    ));
                    req.filter_state.insert(pending);
                }
                Verdict::Continue
            }
            Outcome::Denied(reply) => {
                stats.denied.fetch_add(1, Ordering::Relaxed);
                count(|s| &s.denied);
                Verdict::Respond(reply)
            }
            Outcome::Error(reply) => {
                stats.error.fetch_add(1, Ordering::Relaxed);
                count(|s| &s.error);
                if cfg.failure_mode_allow {
                    stats.failure_mode_allowed.fetch_add(1, Ordering::Relaxed);
                    count(|s| &s.failure_mode_allowed);
                    if cfg.failure_mode_allow_header_add {
                        req.head.headers.insert(
                            "x-envoy-auth-failure-mode-allowed",
                            HeaderValue::from_static("true"),
                        );
                    }
                    return Verdict::Continue;
                }
                Verdict::Respond(reply.unwrap_or_else(|| {
                    LocalReply::new(
                        StatusCode::from_u16(cfg.status_on_error).unwrap_or(StatusCode::FORBIDDEN),
                        Bytes::new(),
                        "ext_authz_error",
                    )
                }))
            }
        }
    }
}

impl HttpFilter for ExtAuthzFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        // No route: nothing to authorize for (the router answers 404), as Envoy.
        if req.route.is_none() {
            return Decision::Continue;
        }
        let mut with_body = true;
        let mut context = BTreeMap::new();
        // Merged less to more specific: the per-route levels from the least specific.
        if let Some(route) = req.route {
            for level in route.per_filter.iter().rev().flatten() {
                if let Some(PerRouteFilterConfig::ExtAuthz(ExtAuthzPerRoute::CheckSettings(s))) =
                    level.get(&self.name).and_then(|c| c.config.as_ref())
                {
                    context.extend(
                        s.context_extensions
                            .iter()
                            .map(|(k, v)| (k.clone(), v.clone())),
                    );
                }
            }
        }
        match per_route {
            Some(PerRouteFilterConfig::ExtAuthz(ExtAuthzPerRoute::Disabled(true))) => {
                return Decision::Continue;
            }
            _ if !self.enabled(req) => {
                self.stats
                    .get(req.conn.worker)
                    .disabled
                    .fetch_add(1, Ordering::Relaxed);
                if !self.config.deny_at_disable {
                    return Decision::Continue;
                }
                // Envoy: status_on_error, empty body, flagged UAEX.
                let status = StatusCode::from_u16(self.config.status_on_error)
                    .unwrap_or(StatusCode::FORBIDDEN);
                return Decision::Respond(LocalReply::new(status, Bytes::new(), "ext_authz_error"));
            }
            Some(PerRouteFilterConfig::ExtAuthz(ExtAuthzPerRoute::CheckSettings(s))) => {
                with_body = !s.disable_request_body_buffering;
            }
            _ => {}
        }
        Decision::Pending(Box::pin(self.run(req, context, with_body)))
    }

    fn wants_body(&self) -> Option<BodyWanted> {
        self.config.with_request_body.map(|s| BodyWanted {
            max_bytes: s.max_request_bytes,
            allow_partial: s.allow_partial_message,
        })
    }

    fn wants_body_on(&self, per_route: Option<&PerRouteFilterConfig>) -> Option<BodyWanted> {
        match per_route {
            Some(PerRouteFilterConfig::ExtAuthz(ExtAuthzPerRoute::Disabled(true))) => None,
            Some(PerRouteFilterConfig::ExtAuthz(ExtAuthzPerRoute::CheckSettings(s)))
                if s.disable_request_body_buffering =>
            {
                None
            }
            _ => self.wants_body(),
        }
    }

    /// The OK answer's `response_headers_to_add` (Envoy applies them in its encodeHeaders,
    /// so they act on the upstream's response headers or a later local reply).
    fn encode_headers(&self, req: &RequestState<'_>, headers: &mut http::HeaderMap) {
        if let Some(pending) = req.filter_state.get::<outcome::PendingResponseHeaders>() {
            for (name, ops) in &pending.0 {
                if *name == self.name {
                    ops.apply(headers);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
