//! The local rate limit filter (`envoy.filters.http.local_ratelimit`): token buckets kept in
//! this process and shared by every worker, chosen by the request's descriptors.
//!
//! Per request, with the config of the most specific route level that has one (else the
//! filter's): `filter_enabled` decides whether the filter looks at the request at all
//! (counted `enabled`); the config's `rate_limits`, else the route's and virtual host's
//! of its `stage`, make descriptors (only when it has `descriptors`); the [`Limiter`](limiter::Limiter) takes tokens. An allowed request is
//! counted `ok`; a limited one `rate_limited`, then let through if its bucket is in shadow
//! mode, or if `filter_enforced` says no; else (counted `enforced`) it is answered with
//! `status` (429), body `local_rate_limited` and the `RL` response flag (no
//! `x-envoy-ratelimited`: Envoy 1.40's local limiter does not add it). With `enable_x_ratelimit_headers`, the response (upstream or local) gets
//! `x-ratelimit-limit`, `-remaining` and `-reset` from the bucket that decided.
//!
//! Counters are `<stat_prefix>.http_local_rate_limit.<name>`, one set per stat prefix in
//! use (a per-route config may name its own), each kept per worker.

pub mod bucket;
pub mod descriptors;
pub mod limiter;

use crate::chain::{Decision, HttpFilter, LocalReply};
use crate::per_worker::PerWorker;
use crate::request::RequestState;
use arc_swap::ArcSwap;
use bucket::Bucket;
use courier_config::filters::{LocalRateLimit, PerRouteFilterConfig};
use courier_config::tracing::Fraction;
use http::{HeaderMap, HeaderValue, StatusCode};
use limiter::Limiter;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The filter's counters for one stat prefix.
#[derive(Debug, Default)]
pub struct LocalRateLimitStats {
    /// Requests the filter was enabled for.
    pub enabled: AtomicU64,
    /// Limited requests answered locally.
    pub enforced: AtomicU64,
    /// Requests over a limit.
    pub rate_limited: AtomicU64,
    /// Requests within the limits.
    pub ok: AtomicU64,
    /// Limited requests let through because their bucket is in shadow mode.
    pub shadow_mode: AtomicU64,
}

/// The counters of every stat prefix the filter (and its per-route configs) use.
#[derive(Debug, Default)]
pub struct StatsByPrefix {
    sets: ArcSwap<Vec<(String, Arc<PerWorker<LocalRateLimitStats>>)>>,
}

impl StatsByPrefix {
    /// The counters of `prefix`, made on first use (a per-route config's prefix).
    pub fn get(&self, prefix: &str) -> Arc<PerWorker<LocalRateLimitStats>> {
        if let Some((_, s)) = self.sets.load().iter().find(|(p, _)| p == prefix) {
            return Arc::clone(s);
        }
        let mut out = None;
        self.sets.rcu(|sets| {
            let mut next = Vec::clone(sets);
            let s = match next.iter().find(|(p, _)| p == prefix) {
                Some((_, s)) => Arc::clone(s),
                None => {
                    let s = Arc::new(PerWorker::default());
                    next.push((prefix.to_string(), Arc::clone(&s)));
                    s
                }
            };
            out = Some(s);
            next
        });
        out.unwrap_or_default()
    }

    /// Every prefix and its counters.
    pub fn all(&self) -> Vec<(String, Arc<PerWorker<LocalRateLimitStats>>)> {
        Vec::clone(&self.sets.load())
    }
}

/// What the response hook needs: the bucket that decided.
#[derive(Clone)]
struct Decided(Arc<Bucket>);

/// The filter.
pub struct LocalRateLimitFilter {
    config: Arc<LocalRateLimit>,
    stats: Arc<StatsByPrefix>,
    /// The filter's own prefix's counters, held so that requests under the filter's
    /// config need no lookup (a per-route config's prefix is looked up).
    own_stats: Arc<PerWorker<LocalRateLimitStats>>,
}

impl LocalRateLimitFilter {
    /// A filter for `config`.
    pub fn new(config: Arc<LocalRateLimit>) -> Self {
        let stats = Arc::new(StatsByPrefix::default());
        // The filter's own prefix exists from the start, as Envoy's counters do.
        let own_stats = stats.get(&config.stat_prefix);
        Self {
            config,
            stats,
            own_stats,
        }
    }

    /// The counters, for the proxy's stats.
    pub fn stats(&self) -> &Arc<StatsByPrefix> {
        &self.stats
    }
}

/// Envoy's `RuntimeFractionalPercent` without a runtime layer: absent means off.
fn admits(f: Option<&Fraction>) -> bool {
    f.is_some_and(|f| f.admits(fastrand::u64(..)))
}

/// The config's limiter, borrowed (no reference count touched per request).
fn limiter(cfg: &LocalRateLimit) -> Option<&Limiter> {
    cfg.state
        .get_or_init(|| Arc::new(Limiter::new(cfg)) as Arc<dyn std::any::Any + Send + Sync>)
        .downcast_ref::<Limiter>()
}

impl HttpFilter for LocalRateLimitFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        let cfg: &LocalRateLimit = match per_route {
            Some(PerRouteFilterConfig::LocalRateLimit(c)) => c,
            _ => &self.config,
        };
        if !admits(cfg.filter_enabled.as_ref()) {
            return Decision::Continue;
        }
        let route_stats;
        let stats = if cfg.stat_prefix == self.config.stat_prefix {
            &self.own_stats
        } else {
            route_stats = self.stats.get(&cfg.stat_prefix);
            &route_stats
        };
        let stats = stats.get(req.conn.worker);
        stats.enabled.fetch_add(1, Ordering::Relaxed);
        // Descriptors only matter when the config has some to match them against.
        let descriptors = if cfg.descriptors.is_empty() {
            Vec::new()
        } else if !cfg.rate_limits.is_empty() {
            descriptors::populate(&cfg.rate_limits, req)
        } else {
            descriptors::from_route(req, cfg.stage, cfg.vh_rate_limits, true)
        };
        let Some(limiter) = limiter(cfg) else {
            return Decision::Continue;
        };
        let outcome = limiter.request_allowed(&descriptors);
        if cfg.x_ratelimit_headers
            && let Some(b) = &outcome.bucket
        {
            req.filter_state.insert(Decided(Arc::clone(b)));
        }
        if outcome.allowed {
            stats.ok.fetch_add(1, Ordering::Relaxed);
            return Decision::Continue;
        }
        stats.rate_limited.fetch_add(1, Ordering::Relaxed);
        if outcome.bucket.as_ref().is_some_and(|b| b.shadow()) {
            stats.shadow_mode.fetch_add(1, Ordering::Relaxed);
            return Decision::Continue;
        }
        if !admits(cfg.filter_enforced.as_ref()) {
            return Decision::Continue;
        }
        stats.enforced.fetch_add(1, Ordering::Relaxed);
        let status = StatusCode::from_u16(cfg.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        let mut reply = LocalReply::new(status, "local_rate_limited", "local_rate_limited");
        reply.response_flag = Some("RL");
        if cfg.rate_limited_as_resource_exhausted {
            reply.grpc_status = Some(8);
        }
        Decision::Respond(reply)
    }

    fn encode_headers(&self, req: &RequestState<'_>, headers: &mut HeaderMap) {
        if let Some(Decided(b)) = req.filter_state.get::<Decided>() {
            headers.append("x-ratelimit-limit", HeaderValue::from(b.max_tokens()));
            headers.append("x-ratelimit-remaining", HeaderValue::from(b.remaining()));
            headers.append("x-ratelimit-reset", HeaderValue::from(b.reset_seconds()));
        }
    }
}

#[cfg(test)]
mod tests;
