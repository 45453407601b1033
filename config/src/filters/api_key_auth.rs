//! The API key authentication HTTP filter
//! (`envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth`) and its per-route
//! config (`ApiKeyAuthPerRoute`): the API keys and their clients, where a request's
//! key is looked for (headers, query parameters, cookies, in order), what goes
//! upstream (`forwarding`) and, per route, which clients may pass.

use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::{ALL, Support};
use envoy_types::pb::envoy::extensions::filters::http::api_key_auth::v3 as pb;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Fields of the api_key_auth messages courier implements (all of them).
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuthPerRoute",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.api_key_auth.v3.Credential",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.api_key_auth.v3.KeySource",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.api_key_auth.v3.Forwarding",
        ALL,
    ),
];

/// API key -> client.
pub type Credentials = HashMap<String, String>;

/// Where a key is looked for (the first of `header`, `query`, `cookie` that is set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A request header (lower-cased): its first value, without a `Bearer ` prefix.
    Header(String),
    /// A query parameter (percent-decoded): its first value.
    Query(String),
    /// A cookie: its first value, without surrounding double quotes.
    Cookie(String),
}

/// `Forwarding`: what goes upstream after a request authenticated.
#[derive(Debug, Clone, Default)]
pub struct Forwarding {
    /// `header` (lower-cased): set to the client; `None` when unset.
    pub header: Option<String>,
    /// `hide_credentials`: the key is removed from every key source.
    pub hide_credentials: bool,
}

/// The part of `ApiKeyAuth` a route can override.
#[derive(Debug, Clone)]
pub struct ApiKeyAuthConfig {
    /// `credentials`; `None` when empty (a request is then refused).
    pub credentials: Option<Arc<Credentials>>,
    /// `key_sources`; `None` when empty (a request is then refused).
    pub key_sources: Option<Arc<[KeySource]>>,
    /// `forwarding`. Envoy 1.40 holds one even when the field is unset (doing
    /// nothing), so a route's config always replaces the filter's.
    pub forwarding: Forwarding,
}

/// A validated `ApiKeyAuthPerRoute`.
#[derive(Debug, Clone)]
pub struct ApiKeyAuthPerRoute {
    /// The overrides: credentials and key sources when not empty, forwarding always.
    pub config: ApiKeyAuthConfig,
    /// `allowed_clients`; empty admits every authenticated client.
    pub allowed_clients: HashSet<String>,
}

fn key_sources(
    list: &[pb::KeySource],
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Option<Arc<[KeySource]>>> {
    let mut out = Vec::with_capacity(list.len());
    for (i, s) in list.iter().enumerate() {
        out.push(if !s.header.is_empty() {
            KeySource::Header(s.header.to_ascii_lowercase())
        } else if !s.query.is_empty() {
            KeySource::Query(s.query.clone())
        } else if !s.cookie.is_empty() {
            KeySource::Cookie(s.cookie.clone())
        } else {
            ctx.error(
                &path.index(i),
                "One of 'header'/'query'/'cookie' must be set.",
            );
            return None;
        });
    }
    Some((!out.is_empty()).then(|| out.into()))
}

fn credentials(
    list: &[pb::Credential],
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Option<Arc<Credentials>>> {
    let mut out = Credentials::with_capacity(list.len());
    let mut ok = true;
    for (i, c) in list.iter().enumerate() {
        let p = path.index(i);
        if c.key.is_empty() {
            ctx.error(
                &p.field("key"),
                "value length must be at least 1 characters",
            );
            ok = false;
        }
        if c.client.is_empty() {
            ctx.error(
                &p.field("client"),
                "value length must be at least 1 characters",
            );
            ok = false;
        }
        if out.insert(c.key.clone(), c.client.clone()).is_some() {
            ctx.error(
                &p.field("key"),
                format!("Duplicated credential key: '{}'", c.key),
            );
            ok = false;
        }
    }
    ok.then(|| (!out.is_empty()).then(|| Arc::new(out)))
}

fn forwarding(f: Option<&pb::Forwarding>, path: &Path<'_>, ctx: &mut Ctx) -> Option<Forwarding> {
    let Some(f) = f else {
        return Some(Forwarding::default());
    };
    let header = if f.header.is_empty() {
        None
    } else if f.header.bytes().all(super::ext_authz::is_header_name_byte) {
        Some(f.header.to_ascii_lowercase())
    } else {
        // Envoy accepts it and sends a header no HTTP message can carry.
        ctx.error(
            &path.field("header"),
            format!(
                "\"{}\" is not a valid header name (courier cannot send it)",
                f.header
            ),
        );
        return None;
    };
    Some(Forwarding {
        header,
        hide_credentials: f.hide_credentials,
    })
}

fn config(
    creds: &[pb::Credential],
    sources: &[pb::KeySource],
    fwd: Option<&pb::Forwarding>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<ApiKeyAuthConfig> {
    let credentials = credentials(creds, &path.field("credentials"), ctx);
    let key_sources = key_sources(sources, &path.field("key_sources"), ctx);
    let forwarding = forwarding(fwd, &path.field("forwarding"), ctx);
    Some(ApiKeyAuthConfig {
        credentials: credentials?,
        key_sources: key_sources?,
        forwarding: forwarding?,
    })
}

/// Translates an `ApiKeyAuth`. Empty credentials or key sources are valid (Envoy
/// then refuses every request the route does not give them to).
pub fn translate(m: &pb::ApiKeyAuth, path: &Path<'_>, ctx: &mut Ctx) -> Option<ApiKeyAuthConfig> {
    config(
        &m.credentials,
        &m.key_sources,
        m.forwarding.as_ref(),
        path,
        ctx,
    )
}

/// Translates an `ApiKeyAuthPerRoute`.
pub fn per_route(
    m: &pb::ApiKeyAuthPerRoute,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<ApiKeyAuthPerRoute> {
    Some(ApiKeyAuthPerRoute {
        config: config(
            &m.credentials,
            &m.key_sources,
            m.forwarding.as_ref(),
            path,
            ctx,
        )?,
        allowed_clients: m.allowed_clients.iter().cloned().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::KeySource;
    use crate::filters::test_util::{errors, filter, per_route};
    use crate::filters::{HttpFilterConfig, PerRouteFilterConfig};

    const HEAD: &str = "name: envoy.filters.http.api_key_auth\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth\n";
    const PR: &str = "\"@type\": type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuthPerRoute\n";

    #[test]
    fn envoy_gateway_config() {
        let f = filter(&format!(
            "{HEAD}  credentials: [{{client: client-1, key: key1}}]\n  forwarding: {{header: X-API-KEY-CLIENT-ID, hideCredentials: true}}\n  keySources: [{{header: X-API-KEY}}, {{query: X-API-KEY-2}}, {{cookie: c, header: h}}]\n"
        ))
        .unwrap();
        let HttpFilterConfig::ApiKeyAuth(c) = f.config else {
            panic!("api_key_auth")
        };
        assert_eq!(c.credentials.as_ref().unwrap()["key1"], "client-1");
        assert_eq!(
            &*c.key_sources.unwrap(),
            &[
                KeySource::Header("x-api-key".into()),
                KeySource::Query("X-API-KEY-2".into()),
                KeySource::Header("h".into()),
            ]
        );
        assert_eq!(c.forwarding.header.as_deref(), Some("x-api-key-client-id"));
        assert!(c.forwarding.hide_credentials);

        let f = filter(HEAD).unwrap();
        let HttpFilterConfig::ApiKeyAuth(c) = f.config else {
            panic!("api_key_auth")
        };
        assert!(c.credentials.is_none() && c.key_sources.is_none());

        let p = per_route(
            "envoy.filters.http.api_key_auth",
            &format!("{PR}allowed_clients: [a, b]\n"),
        )
        .unwrap();
        let Some(PerRouteFilterConfig::ApiKeyAuth(p)) = p.config else {
            panic!("per-route")
        };
        assert!(p.allowed_clients.contains("b"));
        assert!(p.config.forwarding.header.is_none());
    }

    #[test]
    fn envoy_refusals() {
        assert_eq!(
            errors(filter(&format!(
                "{HEAD}  credentials: [{{key: k, client: a}}, {{key: k, client: b}}]\n"
            ))),
            vec!["typed_config.credentials[1].key: Duplicated credential key: 'k'".to_string()]
        );
        assert_eq!(
            errors(filter(&format!(
                "{HEAD}  credentials: [{{key: \"\", client: a}}]\n"
            ))),
            vec![
                "typed_config.credentials[0].key: value length must be at least 1 characters"
                    .to_string()
            ]
        );
        assert_eq!(
            errors(per_route(
                "envoy.filters.http.api_key_auth",
                &format!("{PR}key_sources: [{{header: x}}, {{}}]\n")
            )),
            vec!["key_sources[1]: One of 'header'/'query'/'cookie' must be set.".to_string()]
        );
        assert_eq!(
            errors(filter(&format!(
                "{HEAD}  forwarding: {{header: \"a b\"}}\n"
            ))),
            vec![
                "typed_config.forwarding.header: \"a b\" is not a valid header name (courier cannot send it)"
                    .to_string()
            ]
        );
    }
}
