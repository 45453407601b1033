//! The external authorization filter (`envoy.extensions.filters.http.ext_authz.v3`).
//!
//! `filter_enabled` and `deny_at_disable` take their `default_value` (there is no runtime
//! layer: `runtime_key` is refused). Refused through the support table (reported at their
//! path): the route and typed
//! metadata-context namespaces, `include_tls_session`, `bootstrap_metadata_labels_key`,
//! `charge_cluster_response_stats`, `encode_raw_headers`, `decoder_header_mutation_rules`,
//! `enable_dynamic_metadata_ingestion`, `filter_metadata`, `emit_filter_state_stats`,
//! `max_denied_response_body_bytes`, `enforce_response_header_limits`, `shadow_mode`,
//! `emit_client_span`; in `http_service`: `path_override`,
//! `authorization_response.dynamic_metadata_from_headers`; per route:
//! `check_settings.with_request_body`, the service overrides and `emit_client_span`.

use super::http_uri::{self, CallRetryPolicy, HttpUri};
use crate::config_source::{self, GrpcService};
use crate::ctx::Ctx;
use crate::matcher::{self, StringMatcher};
use crate::path::Path;
use envoy_types::pb::envoy::config::core::v3 as core_pb;
use envoy_types::pb::envoy::extensions::filters::http::ext_authz::v3 as pb;
use envoy_types::pb::envoy::r#type::matcher::v3 as mpb;
use envoy_types::pb::envoy::r#type::v3 as type_pb;
use std::collections::BTreeMap;
use std::time::Duration;

/// Default deadline of a gRPC check.
pub const DEFAULT_GRPC_TIMEOUT: Duration = Duration::from_millis(200);
/// Default status of a local reply when the check fails (`status_on_error`).
pub const DEFAULT_STATUS_ON_ERROR: u16 = 403;

/// A validated ext_authz filter config.
#[derive(Debug, Clone)]
pub struct ExtAuthz {
    /// Where checks are sent.
    pub service: AuthzService,
    /// On an error (transport failure, timeout, 5xx), let the request through.
    pub failure_mode_allow: bool,
    /// With `failure_mode_allow`, add `x-envoy-auth-failure-mode-allowed: true` upstream.
    pub failure_mode_allow_header_add: bool,
    /// Buffer the request body and send it with the check.
    pub with_request_body: Option<BufferSettings>,
    /// Re-select the route after a successful check mutated headers.
    pub clear_route_cache: bool,
    /// Status of the local reply on error (default 403).
    pub status_on_error: u16,
    /// Answer 500 when the server asks for invalid header mutations.
    pub validate_mutations: bool,
    /// Dynamic-metadata namespaces sent as `metadata_context`.
    pub metadata_context_namespaces: Vec<String>,
    /// Namespaces of the selected route's `metadata` sent as
    /// `route_metadata_context`.
    pub route_metadata_context_namespaces: Vec<String>,
    /// Send the peer certificate (PEM, URL-encoded) in the check.
    pub include_peer_certificate: bool,
    /// Extra stats prefix (`ext_authz.<stat_prefix>.`).
    pub stat_prefix: String,
    /// Only request headers whose name matches one of these are sent (`None`: all for gRPC;
    /// for the HTTP service, see [`AuthorizationRequest::allowed_headers`]).
    pub allowed_headers: Option<Vec<StringMatcher>>,
    /// Request headers whose name matches one of these are never sent.
    pub disallowed_headers: Option<Vec<StringMatcher>>,
    /// `filter_enabled`: the share of requests checked (`None`: all).
    pub filter_enabled: Option<f64>,
    /// `filter_enabled_metadata`: only requests whose dynamic metadata matches are checked.
    pub filter_enabled_metadata: Option<matcher::MetadataMatcher>,
    /// `deny_at_disable`: a request the filter is disabled for gets `status_on_error`.
    pub deny_at_disable: bool,
}

/// The authorization service.
#[derive(Debug, Clone)]
pub enum AuthzService {
    /// `envoy.service.auth.v3.Authorization/Check` over gRPC.
    Grpc {
        /// The service.
        service: GrpcService,
        /// The deadline of a check (the service's `timeout`, default 200 ms); `None` for `0s`.
        timeout: Option<Duration>,
    },
    /// A plain HTTP authorization server.
    Http(HttpService),
}

/// `HttpService`.
#[derive(Debug, Clone)]
pub struct HttpService {
    /// The server, its cluster and the check's deadline.
    pub server_uri: HttpUri,
    /// Prepended to the request's path in the check request.
    pub path_prefix: String,
    /// What the check request carries.
    pub authorization_request: AuthorizationRequest,
    /// Which response headers go where.
    pub authorization_response: AuthorizationResponse,
    /// `retry_policy`: retries of a failed check (`None`: no retries).
    pub retry_policy: Option<CallRetryPolicy>,
}

/// `AuthorizationRequest`.
#[derive(Debug, Clone, Default)]
pub struct AuthorizationRequest {
    /// Deprecated per-service allow list of client headers sent to the server (beside the
    /// always-sent `authorization`, `:method`, `:path`, `:authority`).
    pub allowed_headers: Option<Vec<StringMatcher>>,
    /// Headers added to every check request (lower-cased name, value).
    pub headers_to_add: Vec<(String, String)>,
}

/// `AuthorizationResponse`: each list matches header names of the server's answer.
#[derive(Debug, Clone, Default)]
pub struct AuthorizationResponse {
    /// On OK, set on the upstream request.
    pub allowed_upstream_headers: Option<Vec<StringMatcher>>,
    /// On OK, appended to the upstream request.
    pub allowed_upstream_headers_to_append: Option<Vec<StringMatcher>>,
    /// On denial, sent to the client (`None`: all but `host`).
    pub allowed_client_headers: Option<Vec<StringMatcher>>,
    /// On OK, added to the client response.
    pub allowed_client_headers_on_success: Option<Vec<StringMatcher>>,
}

/// `BufferSettings` (`with_request_body`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferSettings {
    /// At most this many body bytes are buffered (> 0).
    pub max_request_bytes: u32,
    /// Send what was buffered when the limit is hit instead of answering 413.
    pub allow_partial_message: bool,
    /// Send the body as `raw_body` bytes instead of a UTF-8 string.
    pub pack_as_bytes: bool,
}

/// Per-route ext_authz config (`ExtAuthzPerRoute`).
#[derive(Debug, Clone)]
pub enum ExtAuthzPerRoute {
    /// `disabled: true` turns the filter off on the route; `false` turns a filter that is
    /// disabled by default on.
    Disabled(bool),
    /// Route-specific check settings.
    CheckSettings(CheckSettings),
}

/// `CheckSettings`.
#[derive(Debug, Clone, Default)]
pub struct CheckSettings {
    /// Merged (less to more specific) into the check's `context_extensions`.
    pub context_extensions: BTreeMap<String, String>,
    /// Do not buffer the body on this route even with `with_request_body`.
    pub disable_request_body_buffering: bool,
}

/// Translates an `ExtAuthz` filter config.
pub fn translate(e: &pb::ExtAuthz, path: &Path<'_>, ctx: &mut Ctx) -> Option<ExtAuthz> {
    use pb::ext_authz::Services;
    let before = ctx.error_count();
    if e.transport_api_version == core_pb::ApiVersion::V2 as i32 {
        ctx.unsupported(&path.field("transport_api_version"), "the v2 ext_authz API");
    } else if core_pb::ApiVersion::try_from(e.transport_api_version).is_err() {
        ctx.error(
            &path.field("transport_api_version"),
            format!("{} is not a defined API version", e.transport_api_version),
        );
    }
    let service = match e.services.as_ref() {
        Some(Services::GrpcService(g)) => {
            let gp = path.field("grpc_service");
            config_source::grpc_service_retrying(g, &gp, ctx).map(|service| {
                let timeout = match g.timeout {
                    None => Some(DEFAULT_GRPC_TIMEOUT),
                    Some(_) => service.timeout.filter(|d| !d.is_zero()),
                };
                AuthzService::Grpc { service, timeout }
            })
        }
        Some(Services::HttpService(h)) => {
            http_service(h, &path.field("http_service"), ctx).map(AuthzService::Http)
        }
        None => {
            ctx.error(path, "one of grpc_service or http_service is required");
            None
        }
    };
    let with_request_body = e
        .with_request_body
        .as_ref()
        .and_then(|b| buffer_settings(b, &path.field("with_request_body"), ctx));
    let status_on_error = http_status(
        e.status_on_error.as_ref(),
        DEFAULT_STATUS_ON_ERROR,
        &path.field("status_on_error"),
        ctx,
    );
    let allowed_headers = list_matcher(
        e.allowed_headers.as_ref(),
        &path.field("allowed_headers"),
        ctx,
    );
    let disallowed_headers = list_matcher(
        e.disallowed_headers.as_ref(),
        &path.field("disallowed_headers"),
        ctx,
    );
    let filter_enabled = e.filter_enabled.as_ref().map(|f| {
        f.default_value
            .as_ref()
            .map_or(1.0, crate::core::fractional_percent)
    });
    let filter_enabled_metadata = e
        .filter_enabled_metadata
        .as_ref()
        .and_then(|m| matcher::metadata_matcher(m, &path.field("filter_enabled_metadata"), ctx));
    let deny_at_disable = match e.deny_at_disable.as_ref() {
        None => false,
        Some(f) => match f.default_value {
            Some(v) => v.value,
            None => {
                ctx.error(
                    &path.field("deny_at_disable").field("default_value"),
                    "is required",
                );
                false
            }
        },
    };
    let service = service?;
    if ctx.error_count() > before {
        return None;
    }
    Some(ExtAuthz {
        service,
        failure_mode_allow: e.failure_mode_allow,
        failure_mode_allow_header_add: e.failure_mode_allow_header_add,
        with_request_body,
        clear_route_cache: e.clear_route_cache,
        status_on_error,
        validate_mutations: e.validate_mutations,
        metadata_context_namespaces: e.metadata_context_namespaces.clone(),
        route_metadata_context_namespaces: e.route_metadata_context_namespaces.clone(),
        include_peer_certificate: e.include_peer_certificate,
        stat_prefix: e.stat_prefix.clone(),
        allowed_headers,
        disallowed_headers,
        filter_enabled,
        filter_enabled_metadata,
        deny_at_disable,
    })
}

fn http_service(h: &pb::HttpService, path: &Path<'_>, ctx: &mut Ctx) -> Option<HttpService> {
    let server_uri = http_uri::http_uri(h.server_uri.as_ref(), &path.field("server_uri"), ctx);
    let authorization_request = match h.authorization_request.as_ref() {
        None => AuthorizationRequest::default(),
        Some(r) => {
            let rp = path.field("authorization_request");
            let hp = rp.field("headers_to_add");
            let mut headers_to_add = Vec::with_capacity(r.headers_to_add.len());
            for (i, hv) in r.headers_to_add.iter().enumerate() {
                if let Some(h) = header_value(hv, &hp.index(i), ctx) {
                    headers_to_add.push(h);
                }
            }
            AuthorizationRequest {
                allowed_headers: list_matcher(
                    r.allowed_headers.as_ref(),
                    &rp.field("allowed_headers"),
                    ctx,
                ),
                headers_to_add,
            }
        }
    };
    let authorization_response = match h.authorization_response.as_ref() {
        None => AuthorizationResponse::default(),
        Some(r) => {
            let rp = path.field("authorization_response");
            AuthorizationResponse {
                allowed_upstream_headers: list_matcher(
                    r.allowed_upstream_headers.as_ref(),
                    &rp.field("allowed_upstream_headers"),
                    ctx,
                ),
                allowed_upstream_headers_to_append: list_matcher(
                    r.allowed_upstream_headers_to_append.as_ref(),
                    &rp.field("allowed_upstream_headers_to_append"),
                    ctx,
                ),
                allowed_client_headers: list_matcher(
                    r.allowed_client_headers.as_ref(),
                    &rp.field("allowed_client_headers"),
                    ctx,
                ),
                allowed_client_headers_on_success: list_matcher(
                    r.allowed_client_headers_on_success.as_ref(),
                    &rp.field("allowed_client_headers_on_success"),
                    ctx,
                ),
            }
        }
    };
    let retry_policy = match h.retry_policy.as_ref() {
        None => None,
        Some(r) => Some(http_uri::call_retry_policy(
            r,
            &path.field("retry_policy"),
            ctx,
        )?),
    };
    Some(HttpService {
        server_uri: server_uri?,
        retry_policy,
        path_prefix: h.path_prefix.clone(),
        authorization_request,
        authorization_response,
    })
}

/// A `HeaderValue` to add: the name lower-cased and valid, the value from `value` or
/// `raw_value`.
fn header_value(
    hv: &core_pb::HeaderValue,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<(String, String)> {
    let key = hv.key.to_ascii_lowercase();
    if key.is_empty() || !key.bytes().all(is_header_name_byte) {
        ctx.error(
            &path.field("key"),
            format!("\"{}\" is not a valid header name", hv.key),
        );
        return None;
    }
    let value = if hv.value.is_empty() && !hv.raw_value.is_empty() {
        match String::from_utf8(hv.raw_value.clone()) {
            Ok(v) => v,
            Err(_) => {
                ctx.error(&path.field("raw_value"), "must be valid UTF-8");
                return None;
            }
        }
    } else {
        hv.value.clone()
    };
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        ctx.error(&path.field("value"), "must not contain CR, LF or NUL");
        return None;
    }
    Some((key, value))
}

/// Bytes of an HTTP header name (RFC 9110 token).
pub(crate) fn is_header_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn buffer_settings(
    b: &pb::BufferSettings,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<BufferSettings> {
    if b.max_request_bytes == 0 {
        ctx.error(&path.field("max_request_bytes"), "must be greater than 0");
        return None;
    }
    Some(BufferSettings {
        max_request_bytes: b.max_request_bytes,
        allow_partial_message: b.allow_partial_message,
        pack_as_bytes: b.pack_as_bytes,
    })
}

/// An `envoy.type.v3.HttpStatus` as a status code.
pub(crate) fn http_status(
    s: Option<&type_pb::HttpStatus>,
    default: u16,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> u16 {
    let Some(s) = s else { return default };
    match type_pb::StatusCode::try_from(s.code) {
        Ok(type_pb::StatusCode::Empty) | Err(_) => {
            ctx.error(
                &path.field("code"),
                format!("{} is not an HTTP status code known to Envoy", s.code),
            );
            default
        }
        // Every defined StatusCode value is its own HTTP status (100..=511).
        Ok(_) => u16::try_from(s.code).unwrap_or(default),
    }
}

/// Compiles an optional `ListStringMatcher` (at least one pattern).
pub(crate) fn list_matcher(
    l: Option<&mpb::ListStringMatcher>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Vec<StringMatcher>> {
    let l = l?;
    let pp = path.field("patterns");
    if l.patterns.is_empty() {
        ctx.error(&pp, "at least one pattern is required");
        return None;
    }
    let out: Vec<StringMatcher> = l
        .patterns
        .iter()
        .enumerate()
        .filter_map(|(i, p)| matcher::string_matcher(p, &pp.index(i), ctx))
        .collect();
    (out.len() == l.patterns.len()).then_some(out)
}

/// Translates an `ExtAuthzPerRoute`.
pub fn per_route(
    r: &pb::ExtAuthzPerRoute,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<ExtAuthzPerRoute> {
    use pb::ext_authz_per_route::Override;
    match r.r#override.as_ref() {
        Some(Override::Disabled(d)) => Some(ExtAuthzPerRoute::Disabled(*d)),
        Some(Override::CheckSettings(c)) => Some(ExtAuthzPerRoute::CheckSettings(CheckSettings {
            context_extensions: c
                .context_extensions
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            disable_request_body_buffering: c.disable_request_body_buffering,
        })),
        None => {
            ctx.error(path, "one of disabled or check_settings is required");
            None
        }
    }
}

#[cfg(test)]
#[path = "ext_authz_tests.rs"]
mod tests;
