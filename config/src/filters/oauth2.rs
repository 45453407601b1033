//! The OAuth2 HTTP filter (`envoy.extensions.filters.http.oauth2.v3.OAuth2`) and its
//! per-route config (`OAuth2PerRoute`): an authorization-code flow (with PKCE, as Envoy
//! 1.40 always uses) against an authorization server, whose token endpoint is reached
//! through a cluster, and HMAC-signed cookies that let later requests through.
//!
//! The client secret and the HMAC key are static generic secrets
//! (`static_resources.secrets`), read once here. The filter-level `OAuth2` may have no
//! `config`: the filter then runs only on routes whose `OAuth2PerRoute` supplies one,
//! as Envoy 1.40 does.
//!
//! Not implemented, refused by the support table: `end_session_endpoint`,
//! `post_logout_redirect_uri`, `allow_failed_matcher`, `original_request_uri`,
//! `allowed_redirect_domains`, `use_access_token_expiry_for_id_token_cookie`,
//! `private_key_jwt_config`; in code: `auth_type: PRIVATE_KEY_JWT`, a `redirect_uri`
//! with command operators, secrets from SDS.

use super::http_uri::{self, CallRetryPolicy, HttpUri};
use crate::core;
use crate::ctx::Ctx;
use crate::matcher::{self, HeaderMatcher, StringMatcher};
use crate::path::Path;
use crate::support::{ALL, Support};
use envoy_types::pb::envoy::extensions::filters::http::oauth2::v3 as pb;
use envoy_types::pb::envoy::r#type::matcher::v3 as mpb;
use std::sync::Arc;
use std::time::Duration;

#[path = "oauth2_cookies.rs"]
mod cookies;

pub use cookies::{CookieConfigs, CookieNames, CookieSettings, SameSite};
use cookies::{cookie_configs, cookie_names, is_token};

/// Fields of the oauth2 messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.extensions.filters.http.oauth2.v3.OAuth2",
        &["config"],
    ),
    (
        "envoy.extensions.filters.http.oauth2.v3.OAuth2PerRoute",
        &["config"],
    ),
    (
        "envoy.extensions.filters.http.oauth2.v3.OAuth2Config",
        &[
            "token_endpoint",
            "retry_policy",
            "authorization_endpoint",
            "credentials",
            "redirect_uri",
            "redirect_path_matcher",
            "signout_path",
            "forward_bearer_token",
            "forward_id_token",
            "preserve_authorization_header",
            "pass_through_matcher",
            "auth_scopes",
            "resources",
            "auth_type",
            "use_refresh_token",
            "default_expires_in",
            "deny_redirect_matcher",
            "default_refresh_token_expires_in",
            "disable_id_token_set_cookie",
            "disable_access_token_set_cookie",
            "disable_refresh_token_set_cookie",
            "cookie_configs",
            "stat_prefix",
            "csrf_token_expires_in",
            "code_verifier_token_expires_in",
            "disable_token_encryption",
        ],
    ),
    (
        "envoy.extensions.filters.http.oauth2.v3.OAuth2Credentials",
        &[
            "client_id",
            "token_secret",
            "hmac_secret",
            "cookie_names",
            "cookie_domain",
        ],
    ),
    (
        "envoy.extensions.filters.http.oauth2.v3.OAuth2Credentials.CookieNames",
        ALL,
    ),
    ("envoy.extensions.filters.http.oauth2.v3.CookieConfigs", ALL),
    ("envoy.extensions.filters.http.oauth2.v3.CookieConfig", ALL),
    (
        "envoy.extensions.filters.http.oauth2.v3.OAuth2TokenForwarding",
        ALL,
    ),
];

/// How the client authenticates to the token endpoint (`auth_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthType {
    /// `client_id` and `client_secret` in the form body.
    UrlEncodedBody,
    /// `Authorization: Basic base64(client_id:client_secret)`.
    BasicAuth,
    /// mTLS with the cluster's client certificate: only `client_id` in the body.
    TlsClientAuth,
}

/// A validated `OAuth2Config`.
#[derive(Debug, Clone)]
pub struct OAuth2Config {
    /// `token_endpoint`: where codes (and refresh tokens) are exchanged.
    pub token_endpoint: HttpUri,
    /// `retry_policy` of the token request.
    pub retry_policy: Option<CallRetryPolicy>,
    /// `authorization_endpoint`, as written.
    pub authorization_endpoint: String,
    /// `credentials.client_id`.
    pub client_id: String,
    /// The bytes of the `credentials.token_secret` generic secret.
    pub client_secret: Vec<u8>,
    /// The bytes of the `credentials.hmac_secret` generic secret.
    pub hmac_secret: Vec<u8>,
    /// `credentials.cookie_names`.
    pub cookie_names: CookieNames,
    /// `credentials.cookie_domain` (empty: none; the HMAC then covers the host).
    pub cookie_domain: String,
    /// `redirect_uri` (a literal: command operators are refused).
    pub redirect_uri: String,
    /// `redirect_path_matcher`: the callback path (query and fragment not matched).
    pub redirect_path_matcher: StringMatcher,
    /// `signout_path`.
    pub signout_path: StringMatcher,
    /// `forward_bearer_token`.
    pub forward_bearer_token: bool,
    /// `forward_id_token.header`, lower-cased.
    pub forward_id_token: Option<String>,
    /// `preserve_authorization_header`.
    pub preserve_authorization_header: bool,
    /// `pass_through_matcher`.
    pub pass_through_matcher: Vec<HeaderMatcher>,
    /// `deny_redirect_matcher`.
    pub deny_redirect_matcher: Vec<HeaderMatcher>,
    /// `auth_scopes` (`["user"]` when empty).
    pub auth_scopes: Vec<String>,
    /// `resources`.
    pub resources: Vec<String>,
    /// `auth_type`.
    pub auth_type: AuthType,
    /// `use_refresh_token` (default true).
    pub use_refresh_token: bool,
    /// `default_expires_in` (zero: none).
    pub default_expires_in: Duration,
    /// `default_refresh_token_expires_in` (default 604800 s).
    pub default_refresh_token_expires_in: Duration,
    /// `disable_id_token_set_cookie`.
    pub disable_id_token_set_cookie: bool,
    /// `disable_access_token_set_cookie`.
    pub disable_access_token_set_cookie: bool,
    /// `disable_refresh_token_set_cookie`.
    pub disable_refresh_token_set_cookie: bool,
    /// `cookie_configs`.
    pub cookie_configs: CookieConfigs,
    /// `stat_prefix`.
    pub stat_prefix: String,
    /// `csrf_token_expires_in` (default 600 s).
    pub csrf_token_expires_in: Duration,
    /// `code_verifier_token_expires_in` (default 600 s).
    pub code_verifier_token_expires_in: Duration,
    /// `disable_token_encryption`.
    pub disable_token_encryption: bool,
}

/// A validated `OAuth2`: `None` when it has no `config` (per-route configs supply it).
#[derive(Debug, Clone)]
pub struct OAuth2 {
    /// `config`.
    pub config: Option<Arc<OAuth2Config>>,
}

/// A validated `OAuth2PerRoute`.
#[derive(Debug, Clone)]
pub struct OAuth2PerRoute {
    /// `config` (required).
    pub config: Arc<OAuth2Config>,
}

/// Envoy's retry conditions for a token request whose `retry_on` is empty.
const DEFAULT_RETRY_ON: &str = "5xx,gateway-error,connect-failure,reset";

/// Translates an `OAuth2`.
pub fn translate(m: &pb::OAuth2, path: &Path<'_>, ctx: &mut Ctx) -> Option<OAuth2> {
    let config = match &m.config {
        None => None,
        Some(c) => Some(Arc::new(config(c, &path.field("config"), ctx)?)),
    };
    Some(OAuth2 { config })
}

/// Translates an `OAuth2PerRoute`; its `config` is required.
pub fn per_route(m: &pb::OAuth2PerRoute, path: &Path<'_>, ctx: &mut Ctx) -> Option<OAuth2PerRoute> {
    let p = path.field("config");
    let Some(c) = &m.config else {
        ctx.error(&p, "is required");
        return None;
    };
    Some(OAuth2PerRoute {
        config: Arc::new(config(c, &p, ctx)?),
    })
}

fn path_matcher(
    m: Option<&mpb::PathMatcher>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<StringMatcher> {
    let Some(m) = m else {
        ctx.error(path, "is required");
        return None;
    };
    match &m.rule {
        Some(mpb::path_matcher::Rule::Path(sm)) => {
            matcher::string_matcher(sm, &path.field("path"), ctx)
        }
        None => {
            ctx.error(&path.field("path"), "is required");
            None
        }
    }
}

fn header_matchers(
    list: &[envoy_types::pb::envoy::config::route::v3::HeaderMatcher],
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Vec<HeaderMatcher>> {
    let before = ctx.error_count();
    let out: Vec<_> = list
        .iter()
        .enumerate()
        .filter_map(|(i, h)| matcher::header_matcher(h, &path.index(i), ctx))
        .collect();
    (ctx.error_count() == before).then_some(out)
}

fn secs_or(
    d: Option<&envoy_types::pb::google::protobuf::Duration>,
    default: u64,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Duration> {
    match d {
        None => Some(Duration::from_secs(default)),
        Some(d) => core::duration(d, path, ctx),
    }
}

/// Envoy's `Http::Utility::Url::initialize` for the authorization endpoint: an absolute
/// `http`/`https` URL with a host.
fn valid_url(u: &str) -> bool {
    let Some((scheme, rest)) = u.split_once("://") else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        && !host.is_empty()
        && !u.bytes().any(|b| b.is_ascii_control() || b == b' ')
}

fn config(c: &pb::OAuth2Config, path: &Path<'_>, ctx: &mut Ctx) -> Option<OAuth2Config> {
    let before = ctx.error_count();
    let token_endpoint = http_uri::http_uri(
        c.token_endpoint.as_ref(),
        &path.field("token_endpoint"),
        ctx,
    );
    let retry_policy = match &c.retry_policy {
        None => None,
        Some(r) => {
            let rp = path.field("retry_policy");
            let mut r = r.clone();
            if r.retry_on.is_empty() {
                r.retry_on = DEFAULT_RETRY_ON.into();
            }
            http_uri::call_retry_policy(&r, &rp, ctx)
        }
    };
    if c.authorization_endpoint.is_empty() {
        ctx.error(&path.field("authorization_endpoint"), "must not be empty");
    } else if !valid_url(&c.authorization_endpoint) {
        // Envoy's wording.
        ctx.error(
            &path.field("authorization_endpoint"),
            format!(
                "OAuth2 filter: invalid authorization endpoint URL '{}' in config.",
                c.authorization_endpoint
            ),
        );
    }
    let cp = path.field("credentials");
    let (client_id, client_secret, hmac_secret, names, cookie_domain) = match &c.credentials {
        None => {
            ctx.error(&cp, "is required");
            (String::new(), None, None, None, String::new())
        }
        Some(cr) => {
            if cr.client_id.is_empty() {
                ctx.error(&cp.field("client_id"), "must not be empty");
            }
            let secret = match &cr.token_secret {
                Some(s) => crate::tls::secrets::generic(s, &cp.field("token_secret"), ctx),
                None if c.auth_type == pb::o_auth2_config::AuthType::TlsClientAuth as i32 => {
                    Some(Vec::new())
                }
                None => {
                    // Envoy's wording.
                    ctx.error(
                        &cp.field("token_secret"),
                        "token_secret is required for auth_type other than TLS_CLIENT_AUTH",
                    );
                    None
                }
            };
            use pb::o_auth2_credentials::TokenFormation;
            let hmac = match &cr.token_formation {
                Some(TokenFormation::HmacSecret(s)) => {
                    crate::tls::secrets::generic(s, &cp.field("hmac_secret"), ctx)
                }
                None => {
                    ctx.error(&cp.field("hmac_secret"), "is required");
                    None
                }
            };
            if cr
                .cookie_domain
                .bytes()
                .any(|b| b == b';' || b.is_ascii_control() || b == b' ')
            {
                ctx.error(
                    &cp.field("cookie_domain"),
                    "must not hold ';', spaces or control characters",
                );
            }
            let names = cookie_names(cr.cookie_names.as_ref(), &cp.field("cookie_names"), ctx);
            (
                cr.client_id.clone(),
                secret,
                hmac,
                names,
                cr.cookie_domain.clone(),
            )
        }
    };
    if c.redirect_uri.is_empty() {
        ctx.error(&path.field("redirect_uri"), "must not be empty");
    } else if c.redirect_uri.contains('%') {
        ctx.unsupported(
            &path.field("redirect_uri"),
            "a redirect_uri with command operators (%...%)",
        );
    }
    let redirect = path_matcher(
        c.redirect_path_matcher.as_ref(),
        &path.field("redirect_path_matcher"),
        ctx,
    );
    let signout = path_matcher(c.signout_path.as_ref(), &path.field("signout_path"), ctx);
    let forward_id_token = match &c.forward_id_token {
        None => None,
        Some(f) => {
            let fwd = path.field("forward_id_token");
            let h = f.header.to_ascii_lowercase();
            if h.starts_with(':') || h == "host" {
                // Envoy's wording.
                ctx.error(
                    &fwd.field("header"),
                    format!("invalid forward_id_token configuration: header '{}' can not be used to forward the ID token; pseudo-headers and the Host header are not allowed", f.header),
                );
            } else if !is_token(&h) {
                ctx.error(
                    &fwd.field("header"),
                    format!(
                        "\"{}\" is not a valid header name (courier cannot send it)",
                        f.header
                    ),
                );
            }
            Some(h)
        }
    };
    let on_authorization = [
        c.forward_bearer_token,
        c.preserve_authorization_header,
        forward_id_token.as_deref() == Some("authorization"),
    ];
    if on_authorization.iter().filter(|b| **b).count() > 1 {
        // Envoy's wording.
        ctx.error(path, "invalid OAuth2 configuration: at most one of forward_bearer_token, preserve_authorization_header, or forward_id_token (when forwarding the ID token on the Authorization header) may be set, as they all use the Authorization header");
    }
    let pass = header_matchers(
        &c.pass_through_matcher,
        &path.field("pass_through_matcher"),
        ctx,
    );
    let deny = header_matchers(
        &c.deny_redirect_matcher,
        &path.field("deny_redirect_matcher"),
        ctx,
    );
    use pb::o_auth2_config::AuthType as A;
    let auth_type = match A::try_from(c.auth_type) {
        Ok(A::UrlEncodedBody) => Some(AuthType::UrlEncodedBody),
        Ok(A::BasicAuth) => Some(AuthType::BasicAuth),
        Ok(A::TlsClientAuth) => Some(AuthType::TlsClientAuth),
        Ok(A::PrivateKeyJwt) => {
            ctx.unsupported(&path.field("auth_type"), "auth_type PRIVATE_KEY_JWT");
            None
        }
        Err(_) => {
            ctx.error(
                &path.field("auth_type"),
                format!("{} is not a defined value", c.auth_type),
            );
            None
        }
    };
    let default_expires_in = secs_or(
        c.default_expires_in.as_ref(),
        0,
        &path.field("default_expires_in"),
        ctx,
    );
    let refresh_in = secs_or(
        c.default_refresh_token_expires_in.as_ref(),
        604_800,
        &path.field("default_refresh_token_expires_in"),
        ctx,
    );
    let csrf_in = secs_or(
        c.csrf_token_expires_in.as_ref(),
        600,
        &path.field("csrf_token_expires_in"),
        ctx,
    );
    let verifier_in = secs_or(
        c.code_verifier_token_expires_in.as_ref(),
        600,
        &path.field("code_verifier_token_expires_in"),
        ctx,
    );
    let cookies = cookie_configs(
        c.cookie_configs.as_ref(),
        &path.field("cookie_configs"),
        ctx,
    );
    if ctx.error_count() != before {
        return None;
    }
    Some(OAuth2Config {
        token_endpoint: token_endpoint?,
        retry_policy,
        authorization_endpoint: c.authorization_endpoint.clone(),
        client_id,
        client_secret: client_secret?,
        hmac_secret: hmac_secret?,
        cookie_names: names?,
        cookie_domain,
        redirect_uri: c.redirect_uri.clone(),
        redirect_path_matcher: redirect?,
        signout_path: signout?,
        forward_bearer_token: c.forward_bearer_token,
        forward_id_token,
        preserve_authorization_header: c.preserve_authorization_header,
        pass_through_matcher: pass?,
        deny_redirect_matcher: deny?,
        auth_scopes: if c.auth_scopes.is_empty() {
            vec!["user".into()]
        } else {
            c.auth_scopes.clone()
        },
        resources: c.resources.clone(),
        auth_type: auth_type?,
        use_refresh_token: core::bool_or(c.use_refresh_token.as_ref(), true),
        default_expires_in: default_expires_in?,
        default_refresh_token_expires_in: refresh_in?,
        disable_id_token_set_cookie: c.disable_id_token_set_cookie,
        disable_access_token_set_cookie: c.disable_access_token_set_cookie,
        disable_refresh_token_set_cookie: c.disable_refresh_token_set_cookie,
        cookie_configs: cookies?,
        stat_prefix: c.stat_prefix.clone(),
        csrf_token_expires_in: csrf_in?,
        code_verifier_token_expires_in: verifier_in?,
        disable_token_encryption: c.disable_token_encryption,
    })
}

#[cfg(test)]
#[path = "oauth2_tests.rs"]
mod tests;
