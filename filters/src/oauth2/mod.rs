//! The OAuth2 filter (`envoy.filters.http.oauth2`), as Envoy 1.40's `OAuth2Filter`:
//!
//! 1. a request matching `pass_through_matcher` goes on untouched;
//! 2. `signout_path` deletes the session cookies and redirects to `<scheme>://<host>/`;
//! 3. valid session cookies (the HMAC over host or cookie domain, expiry and tokens,
//!    not expired) let the request through, with `Authorization: Bearer <access token>`
//!    under `forward_bearer_token`;
//! 4. otherwise a refresh token (with `use_refresh_token`) is exchanged for new tokens,
//!    a `deny_redirect_matcher` request gets 401, and any other request is redirected
//!    to the authorization endpoint with a CSRF nonce cookie, `state` and PKCE;
//! 5. the callback (`redirect_path_matcher`) checks `state` against the nonce cookie,
//!    exchanges the code at the token endpoint (through its cluster) and redirects to
//!    the original URL with the session cookies set.
//!
//! The token call goes through the proxy's cluster client ([`AuthzTransport::http`]).

mod cookies;
mod flow;
mod session;
mod token;

use crate::chain::{Decision, HttpFilter, LocalReply, Verdict};
use crate::ext_authz::AuthzTransport;
use crate::request::RequestState;
use arc_swap::ArcSwap;
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::oauth2::{OAuth2, OAuth2Config};
use http::{HeaderMap, HeaderValue, StatusCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The counters of one `stat_prefix` (Envoy's `ALL_OAUTH_FILTER_STATS`).
#[derive(Debug, Default)]
pub struct OAuth2Stats {
    /// `oauth_unauthorized_rq`: redirected to the authorization server.
    pub oauth_unauthorized_rq: AtomicU64,
    /// `oauth_failure`: answered 401.
    pub oauth_failure: AtomicU64,
    /// `oauth_passthrough`: `pass_through_matcher` matched.
    pub oauth_passthrough: AtomicU64,
    /// `oauth_success`: a valid session, or a completed flow.
    pub oauth_success: AtomicU64,
    /// `oauth_refreshtoken_success`.
    pub oauth_refreshtoken_success: AtomicU64,
    /// `oauth_refreshtoken_failure`.
    pub oauth_refreshtoken_failure: AtomicU64,
    /// Counters Envoy 1.40 has for features courier refuses (`allow_failed_matcher`,
    /// legacy CBC cookies, chunked token cookies): always zero.
    pub unused: AtomicU64,
}

/// The counters' names, in [`OAuth2Stats::all`] order.
pub const COUNTER_NAMES: [&str; 11] = [
    "oauth_unauthorized_rq",
    "oauth_failure",
    "oauth_passthrough",
    "oauth_success",
    "oauth_refreshtoken_success",
    "oauth_refreshtoken_failure",
    "oauth_allow_failed_passthrough",
    "oauth_legacy_cbc_decrypt",
    "oauth_token_cookie_chunked",
    "oauth_token_cookie_malformed_chunks",
    "oauth_token_cookie_oversized",
];

impl OAuth2Stats {
    /// The counters, in [`COUNTER_NAMES`] order.
    pub fn all(&self) -> [&AtomicU64; 11] {
        [
            &self.oauth_unauthorized_rq,
            &self.oauth_failure,
            &self.oauth_passthrough,
            &self.oauth_success,
            &self.oauth_refreshtoken_success,
            &self.oauth_refreshtoken_failure,
            &self.unused,
            &self.unused,
            &self.unused,
            &self.unused,
            &self.unused,
        ]
    }
}

/// Where a set of counters is rooted: Envoy roots the filter-level config's under the
/// connection manager (`http.<hcm prefix>.<stat_prefix>.`) and a per-route config's
/// at the top (`<stat_prefix>.`).
pub type StatsKey = (bool, String);

/// The counters by [`StatsKey`] (the filter's config and its per-route configs'),
/// a set made on first use of its key.
#[derive(Debug, Default)]
pub struct StatsByPrefix(ArcSwap<Vec<(StatsKey, Arc<OAuth2Stats>)>>);

impl StatsByPrefix {
    fn get(&self, under_hcm: bool, prefix: &str) -> Arc<OAuth2Stats> {
        let found = |sets: &[(StatsKey, Arc<OAuth2Stats>)]| {
            sets.iter()
                .find(|((u, p), _)| *u == under_hcm && p == prefix)
                .map(|(_, s)| Arc::clone(s))
        };
        if let Some(s) = found(&self.0.load()) {
            return s;
        }
        let mut out = None;
        self.0.rcu(|sets| {
            let mut next = Vec::clone(sets);
            let s = found(&next).unwrap_or_else(|| {
                let s = Arc::new(OAuth2Stats::default());
                next.push(((under_hcm, prefix.to_string()), Arc::clone(&s)));
                s
            });
            out = Some(s);
            next
        });
        out.unwrap_or_default()
    }

    /// Every set of counters.
    pub fn all(&self) -> Vec<(StatsKey, Arc<OAuth2Stats>)> {
        Vec::clone(&self.0.load())
    }
}

/// Headers only the filter may set: removed from every request first.
const STATUS_HEADERS: [&str; 2] = ["x-envoy-oauth-status", "x-envoy-oauth-failure-reason"];

/// A token call without a timeout is still bounded.
const UNBOUNDED: Duration = Duration::from_secs(3600);

/// The oauth2 filter.
pub struct OAuth2Filter {
    config: Option<Arc<OAuth2Config>>,
    transport: Arc<dyn AuthzTransport>,
    stats: Arc<StatsByPrefix>,
}

impl std::fmt::Debug for OAuth2Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth2Filter").finish_non_exhaustive()
    }
}

impl OAuth2Filter {
    /// The filter for `config`, calling the token endpoint through `transport`.
    pub fn new(config: &OAuth2, transport: Arc<dyn AuthzTransport>) -> Self {
        let stats = Arc::new(StatsByPrefix::default());
        if let Some(c) = &config.config {
            // Envoy creates the filter-level counters with the filter.
            stats.get(true, &c.stat_prefix);
        }
        Self {
            config: config.config.clone(),
            transport,
            stats,
        }
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<StatsByPrefix> {
        &self.stats
    }
}

/// Envoy's `sendUnauthorizedResponse`: 401 `OAuth flow failed.`, deleting the flow's
/// cookies when its id is known.
fn unauthorized(
    cfg: &OAuth2Config,
    stats: &OAuth2Stats,
    flow_id: &str,
    details: String,
) -> LocalReply {
    stats.oauth_failure.fetch_add(1, Ordering::Relaxed);
    let mut r = LocalReply::new(StatusCode::UNAUTHORIZED, "OAuth flow failed.", details);
    if !flow_id.is_empty() {
        session::delete_flow_cookies(cfg, &mut r.headers, flow_id);
    }
    r
}

/// A 302 to `location` with `set_cookies`.
fn found(location: &str, headers: HeaderMap, details: &'static str) -> LocalReply {
    let mut r = LocalReply::new(StatusCode::FOUND, "", details);
    r.headers = headers;
    if let Ok(v) = HeaderValue::from_str(location) {
        r.headers.insert(http::header::LOCATION, v);
    }
    r
}

impl HttpFilter for OAuth2Filter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        for h in STATUS_HEADERS {
            req.head.headers.remove(h);
        }
        let (cfg, under_hcm) = match per_route {
            Some(PerRouteFilterConfig::OAuth2(p)) => (Arc::clone(&p.config), false),
            _ => match &self.config {
                Some(c) => (Arc::clone(c), true),
                None => return Decision::Continue,
            },
        };
        let stats = self.stats.get(under_hcm, &cfg.stat_prefix);
        if cfg
            .pass_through_matcher
            .iter()
            .any(|m| m.matches(req.header(&m.name).as_deref()))
        {
            stats.oauth_passthrough.fetch_add(1, Ordering::Relaxed);
            return Decision::Continue;
        }
        if !cfg.disable_token_encryption {
            session::decrypt_cookies(&cfg, &mut req.head.headers);
        }
        if !cfg.preserve_authorization_header {
            req.head.headers.remove(http::header::AUTHORIZATION);
        }
        let path = req.path().to_string();
        let on_callback = cfg.redirect_path_matcher.matches(flow::path_only(&path));
        if cfg.signout_path.matches(flow::path_only(&path)) {
            return Decision::Respond(session::sign_out(&cfg, req));
        }
        let session = session::Session::read(&cfg, req);
        if session.valid(&cfg) {
            stats.oauth_success.fetch_add(1, Ordering::Relaxed);
            session.forward(&cfg, &mut req.head.headers);
            if on_callback {
                return Decision::Respond(match session::callback(&cfg, req, &path) {
                    Err((flow_id, why)) => unauthorized(&cfg, &stats, &flow_id, why),
                    Ok(cb) => {
                        let original = flow::path_of_url(&cb.state.url);
                        if cfg.redirect_path_matcher.matches(flow::path_only(original)) {
                            let why = format!(
                                "State url query params matches the redirect path matcher: {original}"
                            );
                            unauthorized(&cfg, &stats, "", why)
                        } else {
                            let mut h = HeaderMap::new();
                            session::delete_flow_cookies(&cfg, &mut h, &cb.state.flow_id);
                            found(&cb.state.url, h, "oauth.race_redirect")
                        }
                    }
                });
            }
            session::remove_flow_cookies(&cfg, &mut req.head.headers);
            return Decision::Continue;
        }
        if !on_callback {
            if cfg.use_refresh_token && !session.refresh_token.is_empty() {
                let refresh = session.refresh_token.clone();
                return Decision::Pending(Box::pin(self.refresh(cfg, stats, req, refresh)));
            }
            if cfg
                .deny_redirect_matcher
                .iter()
                .any(|m| m.matches(req.header(&m.name).as_deref()))
            {
                let why =
                    format!("Unauthorized, and redirecting to OAuth server is not allowed: {path}");
                return Decision::Respond(unauthorized(&cfg, &stats, "", why));
            }
            stats.oauth_unauthorized_rq.fetch_add(1, Ordering::Relaxed);
            return Decision::Respond(session::redirect_to_server(&cfg, req));
        }
        let cb = match session::callback(&cfg, req, &path) {
            Ok(cb) => cb,
            Err((flow_id, why)) => {
                return Decision::Respond(unauthorized(&cfg, &stats, &flow_id, why));
            }
        };
        Decision::Pending(Box::pin(self.exchange(cfg, stats, req, cb)))
    }
}

impl OAuth2Filter {
    async fn call(
        &self,
        cfg: &OAuth2Config,
        req: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, String> {
        let uri = &cfg.token_endpoint;
        let call = self.transport.http(uri, cfg.retry_policy.as_ref(), req);
        match tokio::time::timeout(uri.timeout.unwrap_or(UNBOUNDED), call).await {
            Ok(r) => r,
            Err(_) => Err("timeout".into()),
        }
    }

    async fn exchange(
        &self,
        cfg: Arc<OAuth2Config>,
        stats: Arc<OAuth2Stats>,
        req: &mut RequestState<'_>,
        cb: session::Callback,
    ) -> Verdict {
        let flow_id = cb.state.flow_id.clone();
        let token_req = match token::code_request(&cfg, &cb.code, &cfg.redirect_uri, &cb.verifier) {
            Ok(r) => r,
            Err(e) => return Verdict::Respond(unauthorized(&cfg, &stats, &flow_id, e)),
        };
        let tokens = match self.call(&cfg, token_req).await {
            Ok(resp) => token::response(&resp, cfg.default_expires_in),
            Err(_) => Err("Failed to get access token due to HTTP request failure".into()),
        };
        match tokens {
            Err(why) => Verdict::Respond(unauthorized(&cfg, &stats, &flow_id, why)),
            Ok(t) => {
                let mut h = HeaderMap::new();
                let issued = session::Issued::new(&cfg, req.authority(), &t);
                issued.set_cookies(&cfg, req, &mut h);
                session::delete_flow_cookies(&cfg, &mut h, &flow_id);
                stats.oauth_success.fetch_add(1, Ordering::Relaxed);
                Verdict::Respond(found(&cb.state.url, h, "oauth.logged_in"))
            }
        }
    }

    async fn refresh(
        &self,
        cfg: Arc<OAuth2Config>,
        stats: Arc<OAuth2Stats>,
        req: &mut RequestState<'_>,
        refresh_token: String,
    ) -> Verdict {
        let tokens = match token::refresh_request(&cfg, &refresh_token) {
            Err(e) => Err(e),
            Ok(r) => match self.call(&cfg, r).await {
                Ok(resp) => token::response(&resp, cfg.default_expires_in),
                Err(e) => Err(e),
            },
        };
        match tokens {
            Ok(mut t) => {
                if t.refresh_token.is_empty() {
                    // No new refresh token: the old one stays in the session.
                    t.refresh_token = refresh_token;
                }
                let issued = session::Issued::new(&cfg, req.authority(), &t);
                let mut h = HeaderMap::new();
                issued.set_cookies(&cfg, req, &mut h);
                issued.update_request(&cfg, &mut req.head.headers);
                for v in h.get_all(http::header::SET_COOKIE) {
                    req.response_headers
                        .append(http::header::SET_COOKIE, v.clone());
                }
                stats
                    .oauth_refreshtoken_success
                    .fetch_add(1, Ordering::Relaxed);
                stats.oauth_success.fetch_add(1, Ordering::Relaxed);
                session::remove_flow_cookies(&cfg, &mut req.head.headers);
                Verdict::Continue
            }
            Err(_) => {
                stats
                    .oauth_refreshtoken_failure
                    .fetch_add(1, Ordering::Relaxed);
                let path = req.path().to_string();
                if cfg
                    .deny_redirect_matcher
                    .iter()
                    .any(|m| m.matches(req.header(&m.name).as_deref()))
                {
                    let why = format!(
                        "Failed to refresh the access token, and redirecting to OAuth server is not allowed: {path}"
                    );
                    return Verdict::Respond(unauthorized(&cfg, &stats, "", why));
                }
                stats.oauth_unauthorized_rq.fetch_add(1, Ordering::Relaxed);
                Verdict::Respond(session::redirect_to_server(&cfg, req))
            }
        }
    }
}
