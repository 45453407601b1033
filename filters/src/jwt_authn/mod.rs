//! The jwt_authn HTTP filter's runtime (`envoy.filters.http.jwt_authn`, envoy-reference 2).
//!
//! Synchronous whenever the keys are at hand (local JWKS, or a fresh remote JWKS); only a
//! request that needs a remote JWKS fetched returns a pending future.

pub mod extract;
pub mod jwks_cache;
pub mod requirement;
pub mod status;
pub mod token;
pub mod token_cache;

use crate::chain::{Decision, HttpFilter, LocalReply, Verdict};
use crate::per_worker::PerWorker;
use crate::request::RequestState;
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::jwt_authn::{
    JwksSource, JwtAuthn, JwtPerRoute, JwtProvider, JwtRequirement,
};
use extract::Location;
use http::StatusCode;
use http::header::{HeaderName, HeaderValue};
use jwks_cache::{FetchStats, JwksFetcher, RemoteKeys};
use requirement::{Eval, Failure, Fetched, Stop, Verified};
use serde_json::Value;
use status::Status;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use token_cache::TokenCache;

pub use jwks_cache::FetchFuture;

/// The dynamic-metadata namespace jwt_authn writes.
pub const METADATA_NAMESPACE: &str = "envoy.filters.http.jwt_authn";

/// jwt_authn counters (`http.<p>.jwt_authn.[<stat_prefix>.]<name>`).
#[derive(Debug, Default)]
pub struct JwtStats {
    /// Requests let through.
    pub allowed: AtomicU64,
    /// Requests refused.
    pub denied: AtomicU64,
    /// CORS preflights let through unchecked.
    pub cors_preflight_bypassed: AtomicU64,
    /// Verified-token cache hits.
    pub jwt_cache_hit: AtomicU64,
    /// Verified-token cache misses.
    pub jwt_cache_miss: AtomicU64,
}

/// Per-provider runtime state.
#[derive(Debug)]
struct ProviderRuntime {
    remote: Option<RemoteKeys>,
    cache: Option<TokenCache>,
}

/// The jwt_authn filter.
pub struct JwtAuthnFilter {
    config: Arc<JwtAuthn>,
    runtime: Vec<ProviderRuntime>,
    fetcher: Option<Arc<dyn JwksFetcher>>,
    stats: Arc<PerWorker<JwtStats>>,
    /// Remote JWKS fetches (on the main thread, and on a worker only on a miss).
    fetch_stats: Arc<FetchStats>,
    /// Headers the filter itself writes, removed from every checked request first so a
    /// client cannot spoof them.
    own_headers: Vec<HeaderName>,
}

impl std::fmt::Debug for JwtAuthnFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtAuthnFilter")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

pub(crate) fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl JwtAuthnFilter {
    /// A filter for `config`. `fetcher` serves remote JWKS; without one, providers with
    /// `remote_jwks` fail with `Jwks remote fetch is failed`.
    pub fn new(config: Arc<JwtAuthn>, fetcher: Option<Arc<dyn JwksFetcher>>) -> Self {
        let runtime = config
            .providers
            .iter()
            .map(|p| ProviderRuntime {
                remote: match &p.jwks {
                    JwksSource::Remote(r) => Some(RemoteKeys::new(r.clone())),
                    JwksSource::Local(_) => None,
                },
                cache: p
                    .jwt_cache
                    .map(|c| TokenCache::new(c.jwt_cache_size, c.jwt_max_token_size)),
            })
            .collect();
        let mut own_headers: Vec<HeaderName> = config
            .providers
            .iter()
            .flat_map(|p| {
                p.forward_payload_header
                    .iter()
                    .chain(p.claim_to_headers.iter().map(|c| &c.header_name))
            })
            .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
            .collect();
        own_headers.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        own_headers.dedup();
        Self {
            config,
            runtime,
            fetcher,
            stats: Arc::default(),
            fetch_stats: Arc::default(),
            own_headers,
        }
    }

    /// The filter's counters.
    pub fn stats(&self) -> &Arc<PerWorker<JwtStats>> {
        &self.stats
    }

    /// The filter's remote JWKS fetch counters.
    pub fn fetch_stats(&self) -> &Arc<FetchStats> {
        &self.fetch_stats
    }

    /// The filter's config (stat prefix for rendering).
    pub fn config(&self) -> &JwtAuthn {
        &self.config
    }

    /// The first fetch of every `async_fetch` provider without `fast_listener`: Envoy's
    /// listener waits for it (success or failure). Requests arriving meanwhile join it.
    /// Returns whether every fetch succeeded.
    pub async fn prefetch(&self) -> bool {
        let mut ok = true;
        for (p, r) in self.config.providers.iter().zip(&self.runtime) {
            let waits = matches!(&p.jwks,
                JwksSource::Remote(rj) if rj.async_fetch.is_some_and(|a| !a.fast_listener));
            if let (true, Some(remote)) = (waits, &r.remote) {
                ok &= match &self.fetcher {
                    Some(fetcher) => remote
                        .fetch(fetcher.as_ref(), &self.fetch_stats)
                        .await
                        .is_some(),
                    None => false,
                };
            }
        }
        ok
    }

    pub(crate) fn provider(&self, i: usize) -> Option<&JwtProvider> {
        self.config.providers.get(i)
    }

    /// The requirement for this request: per-route config first, then the first matching
    /// rule. `Err` = answer now (unknown `requirement_name`); `Ok(None)` = no check.
    fn requirement<'r>(
        &'r self,
        req: &RequestState<'_>,
        per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Result<Option<&'r JwtRequirement>, Box<LocalReply>> {
        match per_route {
            Some(PerRouteFilterConfig::JwtAuthn(JwtPerRoute::Disabled)) => return Ok(None),
            Some(PerRouteFilterConfig::JwtAuthn(JwtPerRoute::RequirementName(n))) => {
                return match self.config.requirement_map.get(n) {
                    Some(r) => Ok(Some(r)),
                    None => {
                        let names: Vec<&str> = self
                            .config
                            .requirement_map
                            .keys()
                            .map(String::as_str)
                            .collect();
                        let body = format!(
                            "Failed JWT authentication: Wrong requirement_name: {n}. It should be one of [{}]",
                            names.join(",")
                        );
                        Err(Box::new(LocalReply::new(
                            StatusCode::FORBIDDEN,
                            body,
                            "jwt_authn_access_denied{Wrong_requirement_name}",
                        )))
                    }
                };
            }
            _ => {}
        }
        let path = req.path();
        Ok(self
            .config
            .rules
            .iter()
            .find(|r| r.matcher.matches(path, |n| req.first_header(n)))
            .and_then(|r| r.requires.as_ref()))
    }

    fn is_cors_preflight(req: &RequestState<'_>) -> bool {
        req.head.method == http::Method::OPTIONS
            && req.head.headers.contains_key(http::header::ORIGIN)
            && req
                .head
                .headers
                .contains_key(http::header::ACCESS_CONTROL_REQUEST_METHOD)
    }

    /// The verdict after evaluation finished: apply the verified tokens' effects or answer.
    fn finish(
        &self,
        req: &mut RequestState<'_>,
        outcome: Result<Vec<Verified<'_>>, Status>,
        failed: &[Failure],
    ) -> Verdict {
        self.record_failures(req, failed);
        match outcome {
            Ok(verified) => {
                self.stats
                    .get(req.conn.worker)
                    .allowed
                    .fetch_add(1, Ordering::Relaxed);
                for v in verified {
                    self.apply(req, &v);
                }
                Verdict::Continue
            }
            Err(status) => {
                self.stats
                    .get(req.conn.worker)
                    .denied
                    .fetch_add(1, Ordering::Relaxed);
                Verdict::Respond(self.failure(req, status))
            }
        }
    }

    /// `failed_status_in_metadata`: each failed token's `{code, message}` under the key of
    /// the provider it was checked against, or of the only provider when none was
    /// resolved (Envoy's `getSingleProvider`). Envoy writes the metadata whatever the
    /// outcome, so it is visible in access logs of refused requests too.
    fn record_failures(&self, req: &mut RequestState<'_>, failed: &[Failure]) {
        let providers = &self.config.providers;
        for (provider, status) in failed {
            let p = match provider {
                Some(i) => providers.get(*i),
                None if providers.len() == 1 => providers.first(),
                None => None,
            };
            if let Some(key) = p.and_then(|p| p.failed_status_in_metadata.as_ref()) {
                req.set_metadata(
                    METADATA_NAMESPACE,
                    key.clone(),
                    serde_json::json!({"code": status.code(), "message": status.message()}),
                );
            }
        }
    }

    /// Envoy's failure answer (envoy-reference 2.3).
    fn failure(&self, req: &RequestState<'_>, status: Status) -> LocalReply {
        let code = if status == Status::AudienceNotAllowed {
            StatusCode::FORBIDDEN
        } else {
            StatusCode::UNAUTHORIZED
        };
        let msg = status.message();
        let details = format!("jwt_authn_access_denied{{{}}}", msg.replace(' ', "_"));
        if self.config.strip_failure_response {
            return LocalReply::new(code, "", details);
        }
        let mut reply = LocalReply::new(code, msg, details);
        let path = req.path();
        let mut cut = path.len().min(256);
        while !path.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut www = format!(
            "Bearer realm=\"{}://{}{}\"",
            req.scheme(),
            req.authority(),
            &path[..cut]
        );
        if status != Status::Missing {
            www.push_str(", error=\"invalid_token\"");
        }
        if let Ok(v) = HeaderValue::from_str(&www) {
            reply.headers.insert(http::header::WWW_AUTHENTICATE, v);
        }
        reply
    }

    /// The effects of one verified token (envoy-reference 2.2 step 5).
    fn apply(&self, req: &mut RequestState<'_>, v: &Verified<'_>) {
        let Some(p) = self.provider(v.provider) else {
            return;
        };
        let headers = &mut req.head.headers;
        if let Some(name) = &p.forward_payload_header {
            let mut payload = v.jwt.payload_segment(&v.token).to_string();
            if p.pad_forward_payload_header {
                while !payload.len().is_multiple_of(4) {
                    payload.push('=');
                }
            }
            if let (Ok(n), Ok(val)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&payload),
            ) {
                headers.insert(n, val);
            }
        }
        for c in &p.claim_to_headers {
            let value = claim(&v.jwt.payload, &c.claim_path);
            if let Some(s) = value
                && let (Ok(n), Ok(val)) = (
                    HeaderName::from_bytes(c.header_name.as_bytes()),
                    HeaderValue::from_str(&s),
                )
            {
                headers.insert(n, val);
            }
        }
        if !p.forward
            && let Location::Header(name) = v.location
        {
            headers.remove(name);
        }
        if let Some(key) = &p.payload_in_metadata {
            req.set_metadata(
                METADATA_NAMESPACE,
                key.clone(),
                Value::Object(normalized_payload(
                    &v.jwt.payload,
                    &p.space_delimited_claims,
                )),
            );
        }
        if let Some(key) = &p.header_in_metadata {
            req.set_metadata(
                METADATA_NAMESPACE,
                key.clone(),
                Value::Object(v.jwt.header.clone()),
            );
        }
        if p.clear_route_cache {
            req.clear_route_cache();
        }
    }

    async fn fetch_and_finish(
        &self,
        req: &mut RequestState<'_>,
        requirement: &JwtRequirement,
        first: usize,
    ) -> Verdict {
        let mut fetched: Vec<(usize, Option<Arc<courier_config::filters::jwt_authn::Jwks>>)> =
            Vec::new();
        let mut need = first;
        // Each round fetches one provider's keys; a requirement names each provider at most
        // once per round, so this ends within the number of providers.
        for _ in 0..=self.config.providers.len() {
            let keys = match (
                self.runtime.get(need).and_then(|r| r.remote.as_ref()),
                &self.fetcher,
            ) {
                (Some(remote), Some(fetcher)) => {
                    remote.fetch(fetcher.as_ref(), &self.fetch_stats).await
                }
                _ => None,
            };
            fetched.push((need, keys));
            let mut failed = Vec::new();
            let outcome = Eval {
                filter: self,
                head: &req.head,
                fetched: &fetched,
                worker: req.conn.worker,
            }
            .run(requirement, &mut failed);
            match outcome {
                Ok(v) => return self.finish(req, Ok(v), &failed),
                Err(Stop::Failed(s)) => return self.finish(req, Err(s), &failed),
                Err(Stop::NeedFetch(p)) => need = p,
            }
        }
        self.finish(req, Err(Status::FetchFail), &[])
    }
}

/// The payload as `payload_in_metadata` writes it: each listed top-level claim that is a
/// string with at least one word becomes the list of its space-separated words (Envoy's
/// `normalize_payload_in_metadata`; `scope: "a b"` -> `["a", "b"]`, as RFC 8693 reads
/// `scope`). Other claims, and a listed claim of only spaces, are left as they are.
fn normalized_payload(
    payload: &serde_json::Map<String, Value>,
    space_delimited: &[String],
) -> serde_json::Map<String, Value> {
    let mut out = payload.clone();
    for name in space_delimited {
        let Some(Value::String(s)) = payload.get(name) else {
            continue;
        };
        let words: Vec<Value> = s
            .split(' ')
            .filter(|w| !w.is_empty())
            .map(|w| Value::String(w.to_string()))
            .collect();
        if !words.is_empty() {
            out.insert(name.clone(), Value::Array(words));
        }
    }
    out
}

/// A claim rendered for a header: strings as they are, integral numbers without decimals,
/// other numbers and booleans as JSON prints them; objects, arrays and null give nothing.
fn claim(payload: &serde_json::Map<String, Value>, path: &[String]) -> Option<String> {
    let (first, rest) = path.split_first()?;
    let mut v = payload.get(first)?;
    for k in rest {
        v = v.as_object()?.get(k)?;
    }
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15 => {
                format!("{}", f as i64)
            }
            _ => n.to_string(),
        }),
        _ => None,
    }
}

impl HttpFilter for JwtAuthnFilter {
    fn init(&self) -> Option<crate::chain::InitFuture<'_>> {
        let any_waits = self.config.providers.iter().any(|p| {
            matches!(&p.jwks,
                JwksSource::Remote(r) if r.async_fetch.is_some_and(|a| !a.fast_listener))
        });
        any_waits.then(|| Box::pin(self.prefetch()) as crate::chain::InitFuture<'_>)
    }

    fn background(&self) -> Vec<crate::chain::BackgroundFuture<'_>> {
        let Some(fetcher) = &self.fetcher else {
            return Vec::new();
        };
        let stats = &self.fetch_stats;
        self.runtime
            .iter()
            .filter_map(|r| r.remote.as_ref())
            .filter(|r| r.async_fetch())
            .map(|remote| {
                Box::pin(remote.refresh_loop(fetcher.as_ref(), stats))
                    as crate::chain::BackgroundFuture<'_>
            })
            .collect()
    }

    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        if self.config.bypass_cors_preflight && Self::is_cors_preflight(req) {
            self.stats
                .get(req.conn.worker)
                .cors_preflight_bypassed
                .fetch_add(1, Ordering::Relaxed);
            return Decision::Continue;
        }
        let requirement = match self.requirement(req, per_route) {
            Ok(Some(r)) => r,
            Ok(None) => return Decision::Continue,
            Err(reply) => {
                self.stats
                    .get(req.conn.worker)
                    .denied
                    .fetch_add(1, Ordering::Relaxed);
                return Decision::Respond(*reply);
            }
        };
        for h in &self.own_headers {
            req.head.headers.remove(h);
        }
        let fetched: &Fetched = &[];
        let mut failed = Vec::new();
        let outcome = Eval {
            filter: self,
            head: &req.head,
            fetched,
            worker: req.conn.worker,
        }
        .run(requirement, &mut failed);
        let verdict = match outcome {
            Ok(v) => self.finish(req, Ok(v), &failed),
            Err(Stop::Failed(s)) => self.finish(req, Err(s), &failed),
            Err(Stop::NeedFetch(p)) => {
                return Decision::Pending(Box::pin(self.fetch_and_finish(req, requirement, p)));
            }
        };
        match verdict {
            Verdict::Continue => Decision::Continue,
            Verdict::Respond(r) => Decision::Respond(r),
        }
    }
}

#[cfg(test)]
mod tests;
