//! The JWT authentication filter (`envoy.extensions.filters.http.jwt_authn.v3`).
//!
//! Refused through the support table (reported at their path): `filter_state_rules`
//! and the `extract_only_without_validation` requirement.

mod jwks;
mod rule_match;

pub use jwks::{Jwks, JwksKey, parse_jwks};
pub use rule_match::{PathMatch, QueryParameterMatch, RuleMatch};

use super::http_uri::{self, FetchRetryPolicy, HttpUri};
use crate::core;
use crate::ctx::Ctx;
use crate::matcher::{self, StringMatcher};
use crate::path::Path;
use envoy_types::pb::envoy::extensions::filters::http::jwt_authn::v3 as pb;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Default `remote_jwks.cache_duration`.
pub const DEFAULT_CACHE_DURATION: Duration = Duration::from_secs(600);
/// Default `async_fetch.failed_refetch_duration`.
pub const DEFAULT_FAILED_REFETCH_DURATION: Duration = Duration::from_secs(1);
/// Clock skew when `clock_skew_seconds` is 0 (unset).
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(60);
/// Default `jwt_cache_config.jwt_cache_size`.
pub const DEFAULT_JWT_CACHE_SIZE: u32 = 100;
/// Default `jwt_cache_config.jwt_max_token_size`.
pub const DEFAULT_JWT_MAX_TOKEN_SIZE: u32 = 4096;

/// A validated jwt_authn filter config.
#[derive(Debug, Clone)]
pub struct JwtAuthn {
    /// Providers, sorted by name; requirements refer to them by index.
    pub providers: Vec<JwtProvider>,
    /// Rules in config order; the first whose match matches decides.
    pub rules: Vec<JwtRule>,
    /// Named requirements for per-route `requirement_name`.
    pub requirement_map: BTreeMap<String, JwtRequirement>,
    /// Let CORS preflight requests (OPTIONS with `origin` and
    /// `access-control-request-method`) through unchecked.
    pub bypass_cors_preflight: bool,
    /// Failures answer 401/403 with no body and no `www-authenticate`.
    pub strip_failure_response: bool,
    /// Extra stats prefix.
    pub stat_prefix: String,
}

impl JwtAuthn {
    /// The index of provider `name` in [`JwtAuthn::providers`].
    pub fn provider_index(&self, name: &str) -> Option<usize> {
        self.providers
            .binary_search_by(|p| p.name.as_str().cmp(name))
            .ok()
    }
}

/// A rule: requests matching `matcher` must satisfy `requires`.
#[derive(Debug, Clone)]
pub struct JwtRule {
    /// The route match.
    pub matcher: RuleMatch,
    /// The requirement (`requirement_name` resolved); `None` = no check.
    pub requires: Option<JwtRequirement>,
}

/// A compiled `JwtRequirement`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtRequirement {
    /// An empty requirement: every request passes.
    AllowAll,
    /// A valid token of this provider is required.
    Provider {
        /// Index into [`JwtAuthn::providers`].
        provider: usize,
        /// `provider_and_audiences`: these audiences replace the provider's.
        audiences: Option<Vec<String>>,
    },
    /// One of these must pass (at least two).
    RequiresAny(Vec<JwtRequirement>),
    /// All of these must pass (at least two).
    RequiresAll(Vec<JwtRequirement>),
    /// Passes when no token is present; a bad token fails (provider chosen by `iss`).
    AllowMissing,
    /// Always passes; valid tokens still yield headers and metadata.
    AllowMissingOrFailed,
}

/// A compiled `JwtProvider`.
#[derive(Debug, Clone)]
pub struct JwtProvider {
    /// The provider's name (map key).
    pub name: String,
    /// Required `iss`; empty = not checked.
    pub issuer: String,
    /// Allowed audiences, normalised (scheme `http://`/`https://` and one trailing `/`
    /// removed), as Envoy compares them; empty = not checked.
    pub audiences: Vec<String>,
    /// `sub` must match.
    pub subjects: Option<StringMatcher>,
    /// Tokens without `exp` are refused.
    pub require_expiration: bool,
    /// `exp - iat` (or `exp - nbf`) may not exceed this.
    pub max_lifetime: Option<Duration>,
    /// Where the keys come from.
    pub jwks: JwksSource,
    /// Keep the token in the request after verification.
    pub forward: bool,
    /// Headers searched for a token (defaults applied: `authorization` with `Bearer `
    /// when no location is configured).
    pub from_headers: Vec<JwtHeader>,
    /// Query parameters searched for a token (default `access_token`).
    pub from_params: Vec<String>,
    /// Cookies searched for a token.
    pub from_cookies: Vec<String>,
    /// Header (lower-case) receiving the base64url payload.
    pub forward_payload_header: Option<String>,
    /// Pad that payload with `=`.
    pub pad_forward_payload_header: bool,
    /// Dynamic-metadata key receiving the payload.
    pub payload_in_metadata: Option<String>,
    /// `normalize_payload_in_metadata.space_delimited_claims`: top-level string claims
    /// written to the payload metadata as lists of their space-separated words.
    pub space_delimited_claims: Vec<String>,
    /// Dynamic-metadata key receiving the JWT header.
    pub header_in_metadata: Option<String>,
    /// Dynamic-metadata key receiving the failure status.
    pub failed_status_in_metadata: Option<String>,
    /// Allowed clock skew for `exp`/`nbf` (0 in the config means 60 s).
    pub clock_skew: Duration,
    /// A cache of verified tokens, if configured.
    pub jwt_cache: Option<JwtCacheConfig>,
    /// Claims copied into request headers.
    pub claim_to_headers: Vec<ClaimToHeader>,
    /// Re-select the route after headers were added.
    pub clear_route_cache: bool,
}

/// Where a provider's keys come from.
#[derive(Debug, Clone)]
pub enum JwksSource {
    /// Parsed at load time.
    Local(Arc<Jwks>),
    /// Fetched over HTTP through a cluster (parse with [`parse_jwks`]).
    Remote(RemoteJwks),
}

/// `RemoteJwks`.
#[derive(Debug, Clone)]
pub struct RemoteJwks {
    /// The JWKS URI, cluster and fetch timeout.
    pub http_uri: HttpUri,
    /// How long a fetched JWKS stays valid (default 10 min).
    pub cache_duration: Duration,
    /// Fetch in the background (at start and before expiry) instead of on demand.
    pub async_fetch: Option<AsyncFetch>,
    /// Retries of a failed fetch; `None` = no retry.
    pub retry_policy: Option<FetchRetryPolicy>,
}

/// `JwksAsyncFetch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncFetch {
    /// Start the listener without waiting for the first fetch.
    pub fast_listener: bool,
    /// Wait before refetching after a failed fetch (default 1 s).
    pub failed_refetch_duration: Duration,
}

/// A header carrying a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtHeader {
    /// Lower-case header name.
    pub name: String,
    /// The token follows this prefix (searched anywhere in the value); empty = whole value.
    pub value_prefix: String,
}

/// `JwtCacheConfig` with defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JwtCacheConfig {
    /// Number of tokens (default 100).
    pub jwt_cache_size: u32,
    /// Longest token cached, in bytes (default 4096).
    pub jwt_max_token_size: u32,
}

/// `JwtClaimToHeader`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimToHeader {
    /// Lower-case header name.
    pub header_name: String,
    /// The claim's path: `claim_name` split at `.`, or `claim_path`'s keys
    /// (each matched whole, so a key may contain dots).
    pub claim_path: Vec<String>,
}

/// Per-route jwt_authn config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtPerRoute {
    /// No JWT check on the route.
    Disabled,
    /// Use this entry of `requirement_map` (an unknown name answers 403 at run time, as Envoy).
    RequirementName(String),
}

/// Translates a `JwtAuthentication`.
pub fn translate(j: &pb::JwtAuthentication, path: &Path<'_>, ctx: &mut Ctx) -> Option<JwtAuthn> {
    let before = ctx.error_count();
    let pp = path.field("providers");
    let mut names: Vec<&String> = j.providers.keys().collect();
    names.sort();
    let mut providers = Vec::with_capacity(names.len());
    for name in &names {
        if let Some(p) = j.providers.get(*name)
            && let Some(p) = provider(name, p, &pp.key(name), ctx)
        {
            providers.push(p);
        }
    }
    // Requirements index into `names`, so resolve against every configured name even when
    // a provider failed to translate (its error is already recorded).
    let resolve = Resolver { names: &names };
    let mp = path.field("requirement_map");
    let mut requirement_map = BTreeMap::new();
    for (name, r) in &j.requirement_map {
        if let Some(r) = resolve.requirement(r, &mp.key(name), ctx) {
            requirement_map.insert(name.clone(), r);
        }
    }
    let rp = path.field("rules");
    let mut rules = Vec::with_capacity(j.rules.len());
    for (i, rule) in j.rules.iter().enumerate() {
        let at = rp.index(i);
        let matcher = match rule.r#match.as_ref() {
            Some(m) => rule_match::rule_match(m, &at.field("match"), ctx),
            None => {
                ctx.error(&at.field("match"), "is required");
                None
            }
        };
        use pb::requirement_rule::RequirementType as T;
        let requires = match rule.requirement_type.as_ref() {
            None => Some(None),
            Some(T::Requires(r)) => resolve.requirement(r, &at.field("requires"), ctx).map(Some),
            Some(T::RequirementName(n)) => {
                let np = at.field("requirement_name");
                if n.is_empty() {
                    ctx.error(&np, "must not be empty");
                    None
                } else if let Some(r) = requirement_map.get(n) {
                    Some(Some(r.clone()))
                } else if j.requirement_map.contains_key(n) {
                    None // the named requirement has its own error
                } else {
                    ctx.error(&np, format!("'{n}' is not in requirement_map"));
                    None
                }
            }
        };
        if let (Some(matcher), Some(requires)) = (matcher, requires) {
            rules.push(JwtRule { matcher, requires });
        }
    }
    if ctx.error_count() > before {
        return None;
    }
    Some(JwtAuthn {
        providers,
        rules,
        requirement_map,
        bypass_cors_preflight: j.bypass_cors_preflight,
        strip_failure_response: j.strip_failure_response,
        stat_prefix: j.stat_prefix.clone(),
    })
}

struct Resolver<'a> {
    names: &'a [&'a String],
}

impl Resolver<'_> {
    fn provider(&self, name: &str, path: &Path<'_>, ctx: &mut Ctx) -> Option<usize> {
        let found = self.names.binary_search_by(|n| n.as_str().cmp(name)).ok();
        if found.is_none() {
            ctx.error(path, format!("unknown provider '{name}'"));
        }
        found
    }

    fn requirement(
        &self,
        r: &pb::JwtRequirement,
        path: &Path<'_>,
        ctx: &mut Ctx,
    ) -> Option<JwtRequirement> {
        use pb::jwt_requirement::RequiresType as T;
        Some(match r.requires_type.as_ref() {
            None => JwtRequirement::AllowAll,
            Some(T::ProviderName(n)) => JwtRequirement::Provider {
                provider: self.provider(n, &path.field("provider_name"), ctx)?,
                audiences: None,
            },
            Some(T::ProviderAndAudiences(pa)) => {
                let at = path.field("provider_and_audiences");
                JwtRequirement::Provider {
                    provider: self.provider(&pa.provider_name, &at.field("provider_name"), ctx)?,
                    audiences: Some(pa.audiences.iter().map(|a| normalize_audience(a)).collect()),
                }
            }
            Some(T::RequiresAny(l)) => JwtRequirement::RequiresAny(self.list(
                &l.requirements,
                &path.field("requires_any.requirements"),
                ctx,
            )?),
            Some(T::RequiresAll(l)) => JwtRequirement::RequiresAll(self.list(
                &l.requirements,
                &path.field("requires_all.requirements"),
                ctx,
            )?),
            Some(T::AllowMissing(_)) => JwtRequirement::AllowMissing,
            Some(T::AllowMissingOrFailed(_)) => JwtRequirement::AllowMissingOrFailed,
            // Refused by the support table at its path.
            Some(T::ExtractOnlyWithoutValidation(_)) => return None,
        })
    }

    fn list(
        &self,
        items: &[pb::JwtRequirement],
        path: &Path<'_>,
        ctx: &mut Ctx,
    ) -> Option<Vec<JwtRequirement>> {
        if items.len() < 2 {
            ctx.error(path, "at least two requirements are required");
            return None;
        }
        let out: Vec<JwtRequirement> = items
            .iter()
            .enumerate()
            .filter_map(|(i, r)| self.requirement(r, &path.index(i), ctx))
            .collect();
        (out.len() == items.len()).then_some(out)
    }
}

/// Envoy compares audiences without `http://`/`https://` and without one trailing `/`.
fn normalize_audience(a: &str) -> String {
    let a = a
        .strip_prefix("http://")
        .or_else(|| a.strip_prefix("https://"))
        .unwrap_or(a);
    a.strip_suffix('/').unwrap_or(a).to_string()
}

fn provider(
    name: &str,
    p: &pb::JwtProvider,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<JwtProvider> {
    use pb::jwt_provider::JwksSourceSpecifier as S;
    let before = ctx.error_count();
    let jwks = match p.jwks_source_specifier.as_ref() {
        Some(S::LocalJwks(ds)) => local_jwks(ds, &path.field("local_jwks"), ctx),
        Some(S::RemoteJwks(r)) => remote_jwks(r, &path.field("remote_jwks"), ctx),
        None => {
            ctx.error(path, "one of remote_jwks or local_jwks is required");
            None
        }
    };
    let subjects = p
        .subjects
        .as_ref()
        .and_then(|s| matcher::string_matcher(s, &path.field("subjects"), ctx));
    let max_lifetime = p
        .max_lifetime
        .as_ref()
        .and_then(|d| core::duration(d, &path.field("max_lifetime"), ctx));
    let hp = path.field("from_headers");
    let mut from_headers = Vec::with_capacity(p.from_headers.len());
    for (i, h) in p.from_headers.iter().enumerate() {
        let at = hp.index(i);
        let name = header_name(&h.name, &at.field("name"), ctx);
        if h.value_prefix
            .bytes()
            .any(|b| matches!(b, 0 | b'\r' | b'\n'))
        {
            ctx.error(&at.field("value_prefix"), "must not contain NUL, CR or LF");
        }
        if let Some(name) = name {
            from_headers.push(JwtHeader {
                name,
                value_prefix: h.value_prefix.clone(),
            });
        }
    }
    let mut from_params = p.from_params.clone();
    if p.from_headers.is_empty() && p.from_params.is_empty() && p.from_cookies.is_empty() {
        from_headers.push(JwtHeader {
            name: "authorization".into(),
            value_prefix: "Bearer ".into(),
        });
        from_params.push("access_token".into());
    }
    let forward_payload_header = if p.forward_payload_header.is_empty() {
        None
    } else {
        header_name(
            &p.forward_payload_header,
            &path.field("forward_payload_header"),
            ctx,
        )
    };
    let cp = path.field("claim_to_headers");
    let mut claim_to_headers = Vec::with_capacity(p.claim_to_headers.len());
    for (i, c) in p.claim_to_headers.iter().enumerate() {
        let at = cp.index(i);
        let header_name = header_name(&c.header_name, &at.field("header_name"), ctx);
        let claim_path = claim_path(c, &at, ctx);
        if let (Some(header_name), Some(claim_path)) = (header_name, claim_path) {
            claim_to_headers.push(ClaimToHeader {
                header_name,
                claim_path,
            });
        }
    }
    let jwt_cache = p.jwt_cache_config.as_ref().map(|c| JwtCacheConfig {
        jwt_cache_size: nonzero_or(c.jwt_cache_size, DEFAULT_JWT_CACHE_SIZE),
        jwt_max_token_size: nonzero_or(c.jwt_max_token_size, DEFAULT_JWT_MAX_TOKEN_SIZE),
    });
    let jwks = jwks?;
    if ctx.error_count() > before {
        return None;
    }
    let non_empty = |s: &String| (!s.is_empty()).then(|| s.clone());
    Some(JwtProvider {
        name: name.to_string(),
        issuer: p.issuer.clone(),
        audiences: p.audiences.iter().map(|a| normalize_audience(a)).collect(),
        subjects,
        require_expiration: p.require_expiration,
        max_lifetime,
        jwks,
        forward: p.forward,
        from_headers,
        from_params,
        from_cookies: p.from_cookies.clone(),
        forward_payload_header,
        pad_forward_payload_header: p.pad_forward_payload_header,
        payload_in_metadata: non_empty(&p.payload_in_metadata),
        space_delimited_claims: p
            .normalize_payload_in_metadata
            .as_ref()
            .map(|n| n.space_delimited_claims.clone())
            .unwrap_or_default(),
        header_in_metadata: non_empty(&p.header_in_metadata),
        failed_status_in_metadata: non_empty(&p.failed_status_in_metadata),
        clock_skew: if p.clock_skew_seconds == 0 {
            DEFAULT_CLOCK_SKEW
        } else {
            Duration::from_secs(u64::from(p.clock_skew_seconds))
        },
        jwt_cache,
        claim_to_headers,
        clear_route_cache: p.clear_route_cache,
    })
}

/// The claim a `JwtClaimToHeader` copies: exactly one of `claim_name` (split at
/// `.`) and `claim_path` (keys matched whole), as Envoy requires.
fn claim_path(c: &pb::JwtClaimToHeader, at: &Path<'_>, ctx: &mut Ctx) -> Option<Vec<String>> {
    match (c.claim_name.is_empty(), c.claim_path.is_empty()) {
        (false, true) => Some(c.claim_name.split('.').map(str::to_string).collect()),
        (true, false) => {
            let pp = at.field("claim_path");
            let mut ok = true;
            for (j, segment) in c.claim_path.iter().enumerate() {
                if segment.key.is_empty() {
                    ctx.error(&pp.index(j).field("key"), "must not be empty");
                    ok = false;
                }
            }
            ok.then(|| c.claim_path.iter().map(|s| s.key.clone()).collect())
        }
        _ => {
            ctx.error(at, "exactly one of claim_name and claim_path must be set");
            None
        }
    }
}

fn nonzero_or(v: u32, default: u32) -> u32 {
    if v == 0 { default } else { v }
}

/// A header name: non-empty, token characters; returned lower-cased.
fn header_name(name: &str, path: &Path<'_>, ctx: &mut Ctx) -> Option<String> {
    if name.is_empty() {
        ctx.error(path, "must not be empty");
        return None;
    }
    if !name.bytes().all(super::ext_authz::is_header_name_byte) {
        ctx.error(path, format!("\"{name}\" is not a valid header name"));
        return None;
    }
    Some(name.to_ascii_lowercase())
}

fn local_jwks(
    ds: &envoy_types::pb::envoy::config::core::v3::DataSource,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<JwksSource> {
    let bytes = core::data_source(Some(ds), path, ctx)?;
    match parse_jwks(&bytes) {
        Ok(jwks) => Some(JwksSource::Local(Arc::new(jwks))),
        Err(e) => {
            ctx.error(path, e);
            None
        }
    }
}

fn remote_jwks(r: &pb::RemoteJwks, path: &Path<'_>, ctx: &mut Ctx) -> Option<JwksSource> {
    let http_uri = http_uri::http_uri(r.http_uri.as_ref(), &path.field("http_uri"), ctx);
    let cp = path.field("cache_duration");
    let cache_duration = match r.cache_duration.as_ref() {
        None => Some(DEFAULT_CACHE_DURATION),
        Some(d) => core::duration(d, &cp, ctx).and_then(|d| {
            if d < Duration::from_millis(1) || d >= Duration::from_secs(9_000_000_000) {
                ctx.error(&cp, "must be at least 1ms and below 9000000000s");
                None
            } else {
                Some(d)
            }
        }),
    };
    let async_fetch = r.async_fetch.as_ref().map(|a| AsyncFetch {
        fast_listener: a.fast_listener,
        failed_refetch_duration: core::duration_or(
            a.failed_refetch_duration.as_ref(),
            DEFAULT_FAILED_REFETCH_DURATION,
            &path.field("async_fetch.failed_refetch_duration"),
            ctx,
        ),
    });
    let retry_policy = match r.retry_policy.as_ref() {
        None => None,
        Some(rp) => Some(http_uri::retry_policy(
            rp,
            &path.field("retry_policy"),
            ctx,
        )?),
    };
    Some(JwksSource::Remote(RemoteJwks {
        http_uri: http_uri?,
        cache_duration: cache_duration?,
        async_fetch,
        retry_policy,
    }))
}

/// Translates a jwt_authn `PerRouteConfig`.
pub fn per_route(r: &pb::PerRouteConfig, path: &Path<'_>, ctx: &mut Ctx) -> Option<JwtPerRoute> {
    use pb::per_route_config::RequirementSpecifier as S;
    match r.requirement_specifier.as_ref() {
        Some(S::Disabled(true)) => Some(JwtPerRoute::Disabled),
        Some(S::Disabled(false)) => {
            ctx.error(&path.field("disabled"), "must be true");
            None
        }
        Some(S::RequirementName(n)) if n.is_empty() => {
            ctx.error(&path.field("requirement_name"), "must not be empty");
            None
        }
        Some(S::RequirementName(n)) => Some(JwtPerRoute::RequirementName(n.clone())),
        None => {
            ctx.error(path, "one of disabled or requirement_name is required");
            None
        }
    }
}

#[cfg(test)]
mod tests;
