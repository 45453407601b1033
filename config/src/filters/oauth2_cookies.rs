//! The OAuth2 filter's cookie settings: `credentials.cookie_names` (Envoy's defaults
//! where empty) and `cookie_configs` (each cookie's `SameSite`, path and
//! `Partitioned`).

use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::extensions::filters::http::oauth2::v3 as pb;

/// The cookie names (`credentials.cookie_names`, Envoy's defaults where empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookieNames {
    /// The access token (`BearerToken`).
    pub bearer_token: String,
    /// The HMAC over the other cookies (`OauthHMAC`).
    pub oauth_hmac: String,
    /// The expiry time, seconds since the epoch (`OauthExpires`).
    pub oauth_expires: String,
    /// The ID token (`IdToken`).
    pub id_token: String,
    /// The refresh token (`RefreshToken`).
    pub refresh_token: String,
    /// The CSRF token of a flow (`OauthNonce`).
    pub oauth_nonce: String,
    /// The encrypted PKCE code verifier of a flow (`CodeVerifier`).
    pub code_verifier: String,
}

/// `SameSite` of a cookie (`CookieConfig.same_site`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameSite {
    /// No attribute.
    Disabled,
    /// `SameSite=Strict`.
    Strict,
    /// `SameSite=Lax`.
    Lax,
    /// `SameSite=None`.
    None,
}

/// One cookie's attributes (`CookieConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookieSettings {
    /// `same_site`.
    pub same_site: SameSite,
    /// `path` (`/` when empty).
    pub path: String,
    /// `partitioned`.
    pub partitioned: bool,
}

impl Default for CookieSettings {
    fn default() -> Self {
        Self {
            same_site: SameSite::Disabled,
            path: "/".into(),
            partitioned: false,
        }
    }
}

/// Each cookie's attributes (`cookie_configs`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CookieConfigs {
    /// The access token cookie.
    pub bearer_token: CookieSettings,
    /// The HMAC cookie.
    pub oauth_hmac: CookieSettings,
    /// The expiry cookie.
    pub oauth_expires: CookieSettings,
    /// The ID token cookie.
    pub id_token: CookieSettings,
    /// The refresh token cookie.
    pub refresh_token: CookieSettings,
    /// The CSRF (nonce) cookie.
    pub oauth_nonce: CookieSettings,
    /// The code verifier cookie.
    pub code_verifier: CookieSettings,
}

pub(super) fn or_default(s: &str, default: &str) -> String {
    if s.is_empty() {
        default.into()
    } else {
        s.into()
    }
}

fn cookie_settings(
    c: Option<&pb::CookieConfig>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<CookieSettings> {
    let Some(c) = c else {
        return Some(CookieSettings::default());
    };
    use pb::cookie_config::SameSite as S;
    let same_site = match S::try_from(c.same_site) {
        Ok(S::Disabled) => SameSite::Disabled,
        Ok(S::Strict) => SameSite::Strict,
        Ok(S::Lax) => SameSite::Lax,
        Ok(S::None) => SameSite::None,
        Err(_) => {
            ctx.error(
                &path.field("same_site"),
                format!("{} is not a defined value", c.same_site),
            );
            return None;
        }
    };
    if c.path.bytes().any(|b| b == b';' || b.is_ascii_control()) {
        ctx.error(
            &path.field("path"),
            "must not hold ';' or control characters",
        );
        return None;
    }
    Some(CookieSettings {
        same_site,
        path: or_default(&c.path, "/"),
        partitioned: c.partitioned,
    })
}

pub(super) fn cookie_configs(
    c: Option<&pb::CookieConfigs>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<CookieConfigs> {
    let Some(c) = c else {
        return Some(CookieConfigs::default());
    };
    let mut one =
        |v: &Option<pb::CookieConfig>, f: &str| cookie_settings(v.as_ref(), &path.field(f), ctx);
    Some(CookieConfigs {
        bearer_token: one(&c.bearer_token_cookie_config, "bearer_token_cookie_config")?,
        oauth_hmac: one(&c.oauth_hmac_cookie_config, "oauth_hmac_cookie_config")?,
        oauth_expires: one(
            &c.oauth_expires_cookie_config,
            "oauth_expires_cookie_config",
        )?,
        id_token: one(&c.id_token_cookie_config, "id_token_cookie_config")?,
        refresh_token: one(
            &c.refresh_token_cookie_config,
            "refresh_token_cookie_config",
        )?,
        oauth_nonce: one(&c.oauth_nonce_cookie_config, "oauth_nonce_cookie_config")?,
        code_verifier: one(
            &c.code_verifier_cookie_config,
            "code_verifier_cookie_config",
        )?,
    })
}

/// Whether `s` can be a cookie name (an HTTP token) as courier must write it.
pub(super) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(crate::filters::ext_authz::is_header_name_byte)
}

pub(super) fn cookie_names(
    c: Option<&pb::o_auth2_credentials::CookieNames>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<CookieNames> {
    let d = pb::o_auth2_credentials::CookieNames::default();
    let c = c.unwrap_or(&d);
    let mut ok = true;
    let mut one = |v: &str, default: &str, f: &str| {
        let name = or_default(v, default);
        // PGV: `well_known_regex: HTTP_HEADER_NAME, strict: false`; courier needs a
        // token to write it in Set-Cookie.
        if !is_token(&name) {
            ctx.error(
                &path.field(f),
                format!("\"{name}\" is not a valid cookie name"),
            );
            ok = false;
        }
        name
    };
    let names = CookieNames {
        bearer_token: one(&c.bearer_token, "BearerToken", "bearer_token"),
        oauth_hmac: one(&c.oauth_hmac, "OauthHMAC", "oauth_hmac"),
        oauth_expires: one(&c.oauth_expires, "OauthExpires", "oauth_expires"),
        id_token: one(&c.id_token, "IdToken", "id_token"),
        refresh_token: one(&c.refresh_token, "RefreshToken", "refresh_token"),
        oauth_nonce: one(&c.oauth_nonce, "OauthNonce", "oauth_nonce"),
        code_verifier: one(&c.code_verifier, "CodeVerifier", "code_verifier"),
    };
    ok.then_some(names)
}
