//! The session and flow steps of the OAuth2 filter: reading and checking the session
//! cookies, the authorization redirect, the callback's checks, sign-out, and the
//! cookies a completed exchange sets.

use super::cookies;
use super::flow;
use super::token::Tokens;
use crate::chain::LocalReply;
use crate::request::RequestState;
use courier_config::filters::oauth2::OAuth2Config;
use http::header::SET_COOKIE;
use http::{HeaderMap, HeaderValue, StatusCode};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn add(h: &mut HeaderMap, v: String) {
    if let Ok(v) = HeaderValue::from_str(&v) {
        h.append(SET_COOKIE, v);
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The host or cookie domain the HMAC covers.
fn hmac_domain<'a>(cfg: &'a OAuth2Config, host: &'a str) -> &'a str {
    if cfg.cookie_domain.is_empty() {
        host
    } else {
        &cfg.cookie_domain
    }
}

/// The session cookies of a request (tokens already decrypted).
#[derive(Debug, Default)]
pub(crate) struct Session {
    host: String,
    expires: String,
    access_token: String,
    id_token: String,
    pub refresh_token: String,
    hmac: String,
}

impl Session {
    /// Reads the session cookies (Envoy's `OAuth2CookieValidator::setParams`).
    pub fn read(cfg: &OAuth2Config, req: &RequestState<'_>) -> Self {
        let c = cookies::parse(&req.head.headers);
        let n = &cfg.cookie_names;
        let get = |name: &str| cookies::value(&c, name).unwrap_or_default().to_string();
        Self {
            host: req.authority().to_string(),
            expires: get(&n.oauth_expires),
            access_token: get(&n.bearer_token),
            id_token: get(&n.id_token),
            refresh_token: get(&n.refresh_token),
            hmac: get(&n.oauth_hmac),
        }
    }

    /// A valid HMAC (either form) and an expiry in the future.
    pub fn valid(&self, cfg: &OAuth2Config) -> bool {
        let parts = [
            hmac_domain(cfg, &self.host),
            &self.expires,
            &self.access_token,
            &self.id_token,
            &self.refresh_token,
        ];
        let mac_ok = cookies::same(&cookies::session_hmac(&cfg.hmac_secret, parts), &self.hmac)
            || cookies::same(
                &cookies::session_hmac_hex(&cfg.hmac_secret, parts),
                &self.hmac,
            );
        mac_ok && self.expires.parse::<u64>().is_ok_and(|e| e > now())
    }

    /// The tokens forwarded upstream on a valid session.
    pub fn forward(&self, cfg: &OAuth2Config, headers: &mut HeaderMap) {
        if cfg.forward_bearer_token && !self.access_token.is_empty() {
            set_bearer(headers, &self.access_token);
        }
        forward_id_token(cfg, headers, &self.id_token);
    }
}

fn set_bearer(headers: &mut HeaderMap, token: &str) {
    if let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}")) {
        headers.insert(http::header::AUTHORIZATION, v);
    }
}

/// `forward_id_token`: `Bearer <id token>` in `authorization`, the raw token elsewhere.
fn forward_id_token(cfg: &OAuth2Config, headers: &mut HeaderMap, id_token: &str) {
    let Some(h) = &cfg.forward_id_token else {
        return;
    };
    if id_token.is_empty() {
        return;
    }
    if h == "authorization" {
        set_bearer(headers, id_token);
    } else if let (Ok(n), Ok(v)) = (
        http::HeaderName::from_bytes(h.as_bytes()),
        HeaderValue::from_str(id_token),
    ) {
        headers.insert(n, v);
    }
}

/// Envoy's `decryptAndUpdateOAuthTokenCookies`.
pub(crate) fn decrypt_cookies(cfg: &OAuth2Config, headers: &mut HeaderMap) {
    let mut c = cookies::parse(headers);
    let n = &cfg.cookie_names;
    let mut changed = false;
    for (k, v) in c.iter_mut() {
        if !v.is_empty() && (*k == n.bearer_token || *k == n.id_token || *k == n.refresh_token) {
            *v = cookies::decrypt_token(v, &cfg.hmac_secret);
            changed = true;
        }
    }
    if changed {
        cookies::write(headers, &c);
    }
}

/// Envoy's `removeOAuthFlowCookies`: the nonce and code verifier cookies do not go
/// upstream.
pub(crate) fn remove_flow_cookies(cfg: &OAuth2Config, headers: &mut HeaderMap) {
    let n = &cfg.cookie_names;
    let c = cookies::parse(headers);
    let before = c.len();
    let kept: Vec<_> = c
        .into_iter()
        .filter(|(k, _)| {
            !cookies::matches_base(k, &n.oauth_nonce) && !cookies::matches_base(k, &n.code_verifier)
        })
        .collect();
    if kept.len() != before {
        cookies::write(headers, &kept);
    }
}

/// Envoy's `addFlowCookieDeletionHeaders`.
pub(crate) fn delete_flow_cookies(cfg: &OAuth2Config, h: &mut HeaderMap, flow_id: &str) {
    let n = &cfg.cookie_names;
    let cc = &cfg.cookie_configs;
    for (base, path) in [
        (&n.oauth_nonce, &cc.oauth_nonce.path),
        (&n.code_verifier, &cc.code_verifier.path),
    ] {
        if !flow_id.is_empty() {
            add(
                h,
                cookies::delete(&format!("{base}.{flow_id}"), path, &cfg.cookie_domain),
            );
        }
        add(h, cookies::delete(base, path, &cfg.cookie_domain));
    }
}

/// Envoy's `signOutUser`: the session cookies and any flow cookies deleted, then a
/// redirect to `<scheme>://<host>/`.
pub(crate) fn sign_out(cfg: &OAuth2Config, req: &RequestState<'_>) -> LocalReply {
    let n = &cfg.cookie_names;
    let cc = &cfg.cookie_configs;
    let mut list: Vec<(String, &str)> = vec![
        (n.oauth_hmac.clone(), &cc.oauth_hmac.path),
        (n.bearer_token.clone(), &cc.bearer_token.path),
        (n.id_token.clone(), &cc.id_token.path),
        (n.refresh_token.clone(), &cc.refresh_token.path),
        (n.oauth_expires.clone(), &cc.oauth_expires.path),
    ];
    for (k, _) in cookies::parse(&req.head.headers) {
        if cookies::matches_base(&k, &n.oauth_nonce) {
            list.push((k, &cc.oauth_nonce.path));
        } else if cookies::matches_base(&k, &n.code_verifier) {
            list.push((k, &cc.code_verifier.path));
        }
    }
    let mut r = LocalReply::new(StatusCode::FOUND, "", "oauth.sign_out");
    for (name, path) in list {
        add(
            &mut r.headers,
            cookies::delete(&name, path, &cfg.cookie_domain),
        );
    }
    let location = format!("{}://{}/", req.scheme(), req.authority());
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers.insert(http::header::LOCATION, v);
    }
    r
}

/// Envoy's `redirectToOAuthServer`.
pub(crate) fn redirect_to_server(cfg: &OAuth2Config, req: &RequestState<'_>) -> LocalReply {
    let scheme = if req.scheme().eq_ignore_ascii_case("http") {
        "http"
    } else {
        "https"
    };
    let original = format!("{scheme}://{}{}", req.authority(), req.path());
    let n = &cfg.cookie_names;
    let cc = &cfg.cookie_configs;
    let flow_id = flow::random_hex();
    let csrf = cookies::csrf_token(&cfg.hmac_secret, &flow_id);
    let mut r = LocalReply::new(StatusCode::FOUND, "", "oauth.missing_credentials");
    let csrf_tail = cookies::tail(
        &cc.oauth_nonce,
        &cfg.csrf_token_expires_in.as_secs().to_string(),
        &cfg.cookie_domain,
    );
    add(
        &mut r.headers,
        format!("{}.{flow_id}={csrf}{csrf_tail}", n.oauth_nonce),
    );
    add(
        &mut r.headers,
        format!("{}={csrf}{csrf_tail}", n.oauth_nonce),
    );
    let state = flow::encode_state(&original, &csrf, &flow_id);
    let (verifier, challenge) = flow::pkce();
    let verifier_tail = cookies::tail(
        &cc.code_verifier,
        &cfg.code_verifier_token_expires_in.as_secs().to_string(),
        &cfg.cookie_domain,
    );
    let encrypted = cookies::encrypt(&verifier, &cfg.hmac_secret).unwrap_or_default();
    add(
        &mut r.headers,
        format!("{}.{flow_id}={encrypted}{verifier_tail}", n.code_verifier),
    );
    add(
        &mut r.headers,
        format!("{}={encrypted}{verifier_tail}", n.code_verifier),
    );
    let location = flow::authorization_location(cfg, &state, &challenge);
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers.insert(http::header::LOCATION, v);
    }
    r
}

/// A checked callback: the code, the decoded state and the decrypted code verifier.
pub(crate) struct Callback {
    pub code: String,
    pub state: flow::State,
    pub verifier: String,
}

/// Envoy's `validateOAuthCallback` (and the code verifier cookie read): `Err` holds the
/// flow id to clean up (when known) and the failure detail.
pub(crate) fn callback(
    cfg: &OAuth2Config,
    req: &RequestState<'_>,
    path: &str,
) -> Result<Callback, (String, String)> {
    let q = flow::query(path);
    let first = |k: &str| q.get(k).and_then(|v| v.first()).cloned();
    let raw_query = path.split_once('?').map_or("", |(_, q)| q);
    if first("error").is_some() {
        let flow_id = first("state")
            .and_then(|s| check_state(cfg, req, &s).ok())
            .map(|s| s.flow_id)
            .unwrap_or_default();
        return Err((
            flow_id,
            format!("OAuth server returned an error: {raw_query}"),
        ));
    }
    let (Some(code), Some(state)) = (first("code"), first("state")) else {
        return Err((
            String::new(),
            format!("Code or state query param does not exist: {raw_query}"),
        ));
    };
    let state = check_state(cfg, req, &state).map_err(|e| (String::new(), e))?;
    let c = cookies::parse(&req.head.headers);
    let base = &cfg.cookie_names.code_verifier;
    let encrypted = cookies::value(&c, &format!("{base}.{}", state.flow_id))
        .or_else(|| cookies::value(&c, base));
    let Some(encrypted) = encrypted else {
        return Err((
            state.flow_id,
            "Code verifier cookie is missing in the request".into(),
        ));
    };
    let Some(verifier) = cookies::decrypt(encrypted, &cfg.hmac_secret) else {
        return Err((
            state.flow_id,
            format!("Failed to decrypt code verifier: {encrypted}"),
        ));
    };
    Ok(Callback {
        code,
        state,
        verifier,
    })
}

/// Envoy's `validateState` with its CSRF check against the nonce cookie.
fn check_state(
    cfg: &OAuth2Config,
    req: &RequestState<'_>,
    state: &str,
) -> Result<flow::State, String> {
    let st = flow::decode_state(state)?;
    let c = cookies::parse(&req.head.headers);
    let base = &cfg.cookie_names.oauth_nonce;
    let nonce =
        cookies::value(&c, &format!("{base}.{}", st.flow_id)).or_else(|| cookies::value(&c, base));
    let ok = nonce.is_some_and(|n| cookies::same(n, &st.csrf_token))
        && cookies::csrf_valid(&cfg.hmac_secret, &st.csrf_token);
    if !ok {
        return Err("CSRF token validation failed".into());
    }
    if !flow::is_url(&st.url) {
        return Err(format!("State url can not be initialized: {}", st.url));
    }
    Ok(st)
}

/// The exp claim of a JWT, if it is one.
fn jwt_exp(token: &str) -> Option<u64> {
    use base64::Engine as _;
    let mut parts = token.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&raw).ok()?;
    v.get("exp")?.as_u64().filter(|e| *e != 0)
}

/// The lifetime of a JWT-bearing cookie: until its exp (0 once past), else `fallback`.
fn lifetime(token: &str, fallback: Duration) -> String {
    match jwt_exp(token) {
        Some(exp) => exp.saturating_sub(now()).to_string(),
        None => fallback.as_secs().to_string(),
    }
}

/// The session a token exchange issues (Envoy's `updateTokens`).
pub(crate) struct Issued {
    access_token: String,
    id_token: String,
    refresh_token: String,
    expires_in: String,
    new_expires: String,
    refresh_in: String,
    id_in: String,
    hmac: String,
}

impl Issued {
    /// The session for tokens `t` on `host`.
    pub fn new(cfg: &OAuth2Config, host: &str, t: &Tokens) -> Self {
        let access_token = if cfg.disable_access_token_set_cookie {
            ""
        } else {
            &t.access_token
        };
        let id_token = if cfg.disable_id_token_set_cookie {
            ""
        } else {
            &t.id_token
        };
        let refresh_token = if cfg.use_refresh_token && !cfg.disable_refresh_token_set_cookie {
            &t.refresh_token
        } else {
            ""
        };
        let new_expires = (now() + t.expires_in.as_secs()).to_string();
        let refresh_in = if cfg.use_refresh_token {
            lifetime(&t.refresh_token, cfg.default_refresh_token_expires_in)
        } else {
            t.expires_in.as_secs().to_string()
        };
        let id_in = if t.id_token.is_empty() {
            t.expires_in.as_secs().to_string()
        } else {
            lifetime(&t.id_token, t.expires_in)
        };
        let hmac = cookies::session_hmac(
            &cfg.hmac_secret,
            [
                hmac_domain(cfg, host),
                &new_expires,
                access_token,
                id_token,
                refresh_token,
            ],
        );
        Self {
            access_token: access_token.into(),
            id_token: id_token.into(),
            refresh_token: refresh_token.into(),
            expires_in: t.expires_in.as_secs().to_string(),
            new_expires,
            refresh_in,
            id_in,
            hmac,
        }
    }

    fn seal(&self, cfg: &OAuth2Config, token: &str) -> String {
        if cfg.disable_token_encryption {
            token.to_string()
        } else {
            cookies::encrypt(token, &cfg.hmac_secret).unwrap_or_default()
        }
    }

    /// Envoy's `setOAuthResponseCookies`.
    pub fn set_cookies(&self, cfg: &OAuth2Config, req: &RequestState<'_>, h: &mut HeaderMap) {
        let n = &cfg.cookie_names;
        let cc = &cfg.cookie_configs;
        let d = &cfg.cookie_domain;
        add(
            h,
            format!(
                "{}={}{}",
                n.oauth_hmac,
                self.hmac,
                cookies::tail(&cc.oauth_hmac, &self.expires_in, d)
            ),
        );
        add(
            h,
            format!(
                "{}={}{}",
                n.oauth_expires,
                self.new_expires,
                cookies::tail(&cc.oauth_expires, &self.expires_in, d)
            ),
        );
        let present = cookies::parse(&req.head.headers);
        let has = |name: &str| present.iter().any(|(k, _)| k == name);
        for (name, token, settings, max_age) in [
            (
                &n.bearer_token,
                &self.access_token,
                &cc.bearer_token,
                &self.expires_in,
            ),
            (&n.id_token, &self.id_token, &cc.id_token, &self.id_in),
            (
                &n.refresh_token,
                &self.refresh_token,
                &cc.refresh_token,
                &self.refresh_in,
            ),
        ] {
            if !token.is_empty() {
                add(
                    h,
                    format!(
                        "{name}={}{}",
                        self.seal(cfg, token),
                        cookies::tail(settings, max_age, d)
                    ),
                );
            } else if has(name) {
                let del = format!(
                    "{name}=deleted; path={}; expires=Thu, 01 Jan 1970 00:00:00 GMT{}",
                    settings.path,
                    cookies::domain_attr(d)
                );
                add(h, del);
            }
        }
    }

    /// Envoy's `finishRefreshAccessTokenFlow`: the request goes on with the new session
    /// in its cookies (and its bearer token).
    pub fn update_request(&self, cfg: &OAuth2Config, headers: &mut HeaderMap) {
        let n = &cfg.cookie_names;
        let mut c = cookies::parse(headers);
        let mut put = |k: &str, v: &str| match c.iter_mut().find(|(n, _)| n == k) {
            Some(e) => e.1 = v.to_string(),
            None => c.push((k.to_string(), v.to_string())),
        };
        put(&n.oauth_expires, &self.new_expires);
        if !self.access_token.is_empty() {
            put(&n.bearer_token, &self.access_token);
        }
        if !self.id_token.is_empty() {
            put(&n.id_token, &self.id_token);
        }
        if !self.refresh_token.is_empty() {
            put(&n.refresh_token, &self.refresh_token);
        }
        put(&n.oauth_hmac, &self.hmac);
        cookies::write(headers, &c);
        if cfg.forward_bearer_token && !self.access_token.is_empty() {
            set_bearer(headers, &self.access_token);
        }
        forward_id_token(cfg, headers, &self.id_token);
    }
}
