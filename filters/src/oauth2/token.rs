//! The token endpoint call (Envoy's `OAuth2ClientImpl`): the form-encoded POST for
//! an authorization code or a refresh token, and the JSON answer.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use courier_config::filters::oauth2::{AuthType, OAuth2Config};
use std::time::Duration;

/// What Envoy escapes in form values.
const RESERVED: &str = ":/=&?+";

/// The tokens of a successful exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tokens {
    pub access_token: String,
    pub id_token: String,
    pub refresh_token: String,
    pub expires_in: Duration,
}

fn post(cfg: &OAuth2Config, body: String, basic: bool) -> Result<http::Request<Bytes>, String> {
    let uri = &cfg.token_endpoint;
    let mut b = http::Request::builder()
        .method(http::Method::POST)
        .uri(uri.path.as_str())
        .header(http::header::HOST, uri.host.as_str())
        .header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .header(http::header::ACCEPT, "application/json");
    if basic {
        let mut cred = cfg.client_id.as_bytes().to_vec();
        cred.push(b':');
        cred.extend_from_slice(&cfg.client_secret);
        b = b.header(
            http::header::AUTHORIZATION,
            format!("Basic {}", STANDARD.encode(cred)),
        );
    }
    b = b.header(http::header::CONTENT_LENGTH, body.len());
    b.body(Bytes::from(body)).map_err(|e| e.to_string())
}

fn secret(cfg: &OAuth2Config) -> String {
    String::from_utf8_lossy(&cfg.client_secret).into_owned()
}

/// The code exchange request (Envoy's `asyncGetAccessToken`).
pub(crate) fn code_request(
    cfg: &OAuth2Config,
    code: &str,
    redirect_uri: &str,
    verifier: &str,
) -> Result<http::Request<Bytes>, String> {
    let cb = super::flow::form_encode(redirect_uri, RESERVED);
    let id = super::flow::form_encode(&cfg.client_id, RESERVED);
    let (body, basic) = match cfg.auth_type {
        AuthType::UrlEncodedBody => (
            format!(
                "grant_type=authorization_code&code={code}&client_id={id}&client_secret={}&redirect_uri={cb}&code_verifier={verifier}",
                super::flow::form_encode(&secret(cfg), RESERVED)
            ),
            false,
        ),
        AuthType::BasicAuth => (
            format!(
                "grant_type=authorization_code&code={code}&redirect_uri={cb}&code_verifier={verifier}"
            ),
            true,
        ),
        AuthType::TlsClientAuth => (
            format!(
                "grant_type=authorization_code&code={code}&client_id={id}&redirect_uri={cb}&code_verifier={verifier}"
            ),
            false,
        ),
    };
    post(cfg, body, basic)
}

/// The refresh request (Envoy's `asyncRefreshAccessToken`).
pub(crate) fn refresh_request(
    cfg: &OAuth2Config,
    refresh_token: &str,
) -> Result<http::Request<Bytes>, String> {
    let id = super::flow::form_encode(&cfg.client_id, RESERVED);
    let (body, basic) = match cfg.auth_type {
        AuthType::UrlEncodedBody => (
            format!(
                "grant_type=refresh_token&refresh_token={}&client_id={id}&client_secret={}",
                super::flow::form_encode(refresh_token, RESERVED),
                super::flow::form_encode(&secret(cfg), RESERVED)
            ),
            false,
        ),
        // Envoy escapes with the default reserved set (`%`) here.
        AuthType::BasicAuth => (
            format!(
                "grant_type=refresh_token&refresh_token={}",
                super::flow::form_encode(refresh_token, "%")
            ),
            true,
        ),
        AuthType::TlsClientAuth => (
            format!(
                "grant_type=refresh_token&refresh_token={}&client_id={id}",
                super::flow::form_encode(refresh_token, RESERVED)
            ),
            false,
        ),
    };
    post(cfg, body, basic)
}

/// Reads the token endpoint's answer; `Err` is the failure detail.
pub(crate) fn response(
    resp: &http::Response<Bytes>,
    default_expires_in: Duration,
) -> Result<Tokens, String> {
    if resp.status() != http::StatusCode::OK {
        return Err(format!(
            "Failed to get access token: response code: {}",
            resp.status().as_u16()
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(resp.body())
        .map_err(|e| format!("Failed to parse oauth response body: {e}"))?;
    let Some(m) = v.as_object() else {
        return Err("Failed to parse oauth response body".into());
    };
    let s = |k: &str| m.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let Some(access_token) = s("access_token") else {
        return Err("No access token found in the token exchange response".into());
    };
    // `expires_in` is a `UInt64Value`: a number or a decimal string in JSON.
    let expires_in = match m.get("expires_in") {
        None | Some(serde_json::Value::Null) => default_expires_in,
        Some(serde_json::Value::Number(n)) => {
            Duration::from_secs(n.as_u64().ok_or("Failed to parse oauth response body")?)
        }
        Some(serde_json::Value::String(t)) => Duration::from_secs(
            t.parse()
                .map_err(|_| "Failed to parse oauth response body".to_string())?,
        ),
        Some(_) => return Err("Failed to parse oauth response body".into()),
    };
    if expires_in.is_zero() {
        return Err(
            "No default or explicit access token expiration found in the token exchange response"
                .into(),
        );
    }
    Ok(Tokens {
        access_token,
        id_token: s("id_token").unwrap_or_default(),
        refresh_token: s("refresh_token").unwrap_or_default(),
        expires_in,
    })
}
