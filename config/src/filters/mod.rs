//! HTTP filter configs (jwt_authn, ext_authz, rbac, compressor, router) and their per-route
//! configs.

pub mod admission_control;
pub mod api_key_auth;
pub mod basic_auth;
pub mod buffer;
pub mod compressor;
pub mod credential_injector;
pub mod csrf;
pub mod custom_response;
pub mod dynamic_forward_proxy;
pub mod ext_authz;
pub mod ext_proc;
pub mod fault;
pub mod grpc;
pub mod header_mutation;
pub mod health_check;
pub mod http_uri;
pub mod jwt_authn;
pub mod local_ratelimit;
pub mod oauth2;
pub mod rate_limit_actions;
pub(crate) mod rate_limit_support;
pub mod ratelimit;
pub mod rbac;
pub mod rbac_index;
pub mod rbac_matcher;
pub mod router;

use crate::core;
use crate::ctx::Ctx;
use crate::extensions;
use crate::path::Path;
use crate::support::{ALL, Support};
use envoy_types::pb::envoy::config::route::v3 as route_pb;
use envoy_types::pb::envoy::extensions::filters::http::api_key_auth::v3 as api_key_auth_pb;
use envoy_types::pb::envoy::extensions::filters::http::basic_auth::v3 as basic_auth_pb;
use envoy_types::pb::envoy::extensions::filters::http::buffer::v3 as buffer_pb;
use envoy_types::pb::envoy::extensions::filters::http::compressor::v3 as compressor_pb;
use envoy_types::pb::envoy::extensions::filters::http::csrf::v3 as csrf_pb;
use envoy_types::pb::envoy::extensions::filters::http::custom_response::v3 as custom_response_pb;
use envoy_types::pb::envoy::extensions::filters::http::dynamic_forward_proxy::v3 as dfp_pb;
use envoy_types::pb::envoy::extensions::filters::http::ext_authz::v3 as ext_authz_pb;
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3 as ext_proc_pb;
use envoy_types::pb::envoy::extensions::filters::http::fault::v3 as fault_pb;
use envoy_types::pb::envoy::extensions::filters::http::grpc_stats::v3 as grpc_stats_pb;
use envoy_types::pb::envoy::extensions::filters::http::header_mutation::v3 as header_mutation_pb;
use envoy_types::pb::envoy::extensions::filters::http::health_check::v3 as health_check_pb;
use envoy_types::pb::envoy::extensions::filters::http::jwt_authn::v3 as jwt_pb;
use envoy_types::pb::envoy::extensions::filters::http::local_ratelimit::v3 as local_rl_pb;
use envoy_types::pb::envoy::extensions::filters::http::oauth2::v3 as oauth2_pb;
use envoy_types::pb::envoy::extensions::filters::http::ratelimit::v3 as rl_pb;
use envoy_types::pb::envoy::extensions::filters::http::rbac::v3 as rbac_pb;
use envoy_types::pb::envoy::extensions::filters::http::router::v3 as router_pb;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use envoy_types::pb::google::protobuf::Any;
use std::sync::Arc;

pub use compressor::{Compressor, CompressorPerRoute};
pub use ext_authz::{ExtAuthz, ExtAuthzPerRoute};
pub use http_uri::HttpUri;
pub use jwt_authn::{JwtAuthn, JwtPerRoute};
pub use local_ratelimit::LocalRateLimit;
pub use ratelimit::{RateLimitFilter, RateLimitPerRoute};
pub use rbac::{RbacFilter, RbacPerRoute};
pub use router::Router;

/// Fields of the HTTP filter messages courier implements.
///
/// `envoy.config.route.v3.RouteMatch` (jwt_authn rules) is deliberately absent: the router
/// owns that entry; jwt_authn's rule matcher refuses what it does not implement itself.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter",
        &["name", "typed_config", "is_optional", "disabled"],
    ),
    (
        "envoy.config.route.v3.FilterConfig",
        &["config", "is_optional", "disabled"],
    ),
    // Router.
    (
        "envoy.extensions.filters.http.router.v3.Router",
        &["dynamic_stats", "suppress_envoy_headers"],
    ),
    // Shared by jwt_authn and ext_authz.
    (
        "envoy.config.core.v3.HttpUri",
        &["uri", "cluster", "timeout"],
    ),
    // `retry_on` is ext_authz's (HTTP service, gRPC service); jwt_authn refuses it in code.
    (
        "envoy.config.core.v3.RetryPolicy",
        &["retry_back_off", "num_retries", "retry_on"],
    ),
    ("envoy.config.core.v3.BackoffStrategy", ALL),
    ("envoy.type.matcher.v3.ListStringMatcher", &["patterns"]),
    ("envoy.type.v3.HttpStatus", &["code"]),
    // jwt_authn.
    (
        "envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
        &[
            "providers",
            "rules",
            "bypass_cors_preflight",
            "requirement_map",
            "strip_failure_response",
            "stat_prefix",
        ],
    ),
    (
        "envoy.extensions.filters.http.jwt_authn.v3.JwtProvider",
        &[
            "issuer",
            "audiences",
            "subjects",
            "require_expiration",
            "max_lifetime",
            "remote_jwks",
            "local_jwks",
            "forward",
            "from_headers",
            "from_params",
            "from_cookies",
            "forward_payload_header",
            "pad_forward_payload_header",
            "payload_in_metadata",
            "normalize_payload_in_metadata",
            "header_in_metadata",
            "failed_status_in_metadata",
            "clock_skew_seconds",
            "jwt_cache_config",
            "claim_to_headers",
            "clear_route_cache",
        ],
    ),
    (
        "envoy.extensions.filters.http.jwt_authn.v3.JwtProvider.NormalizePayload",
        &["space_delimited_claims"],
    ),
    (
        "envoy.extensions.filters.http.jwt_authn.v3.RemoteJwks",
        &["http_uri", "cache_duration", "async_fetch", "retry_policy"],
    ),
    (
        "envoy.extensions.filters.http.jwt_authn.v3.JwksAsyncFetch",
        ALL,
    ),
    ("envoy.extensions.filters.http.jwt_authn.v3.JwtHeader", ALL),
    (
        "envoy.extensions.filters.http.jwt_authn.v3.JwtCacheConfig",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.jwt_authn.v3.JwtClaimToHeader",
        &["header_name", "claim_name", "claim_path"],
    ),
    (
        "envoy.extensions.filters.http.jwt_authn.v3.JwtClaimToHeader.PathSegment",
        &["key"],
    ),
    (
        "envoy.extensions.filters.http.jwt_authn.v3.JwtRequirement",
        &[
            "provider_name",
            "provider_and_audiences",
            "requires_any",
            "requires_all",
            "allow_missing_or_failed",
            "allow_missing",
        ],
    ),
    (
        "envoy.extensions.filters.http.jwt_authn.v3.ProviderWithAudiences",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.jwt_authn.v3.JwtRequirementOrList",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.jwt_authn.v3.JwtRequirementAndList",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.jwt_authn.v3.RequirementRule",
        &["match", "requires", "requirement_name"],
    ),
    (
        "envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig",
        ALL,
    ),
    // ext_authz.
    (
        "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
        &[
            "grpc_service",
            "http_service",
            "transport_api_version",
            "failure_mode_allow",
            "failure_mode_allow_header_add",
            "with_request_body",
            "clear_route_cache",
            "status_on_error",
            "validate_mutations",
            "metadata_context_namespaces",
            "route_metadata_context_namespaces",
            "include_peer_certificate",
            "stat_prefix",
            "allowed_headers",
            "disallowed_headers",
            "filter_enabled",
            "filter_enabled_metadata",
            "deny_at_disable",
        ],
    ),
    // ext_authz `deny_at_disable`: no runtime layer, so no `runtime_key`.
    (
        "envoy.config.core.v3.RuntimeFeatureFlag",
        &["default_value"],
    ),
    (
        "envoy.extensions.filters.http.ext_authz.v3.HttpService",
        &[
            "server_uri",
            "path_prefix",
            "authorization_request",
            "authorization_response",
            "retry_policy",
        ],
    ),
    (
        "envoy.extensions.filters.http.ext_authz.v3.AuthorizationRequest",
        &["allowed_headers", "headers_to_add"],
    ),
    (
        "envoy.extensions.filters.http.ext_authz.v3.AuthorizationResponse",
        &[
            "allowed_upstream_headers",
            "allowed_upstream_headers_to_append",
            "allowed_client_headers",
            "allowed_client_headers_on_success",
        ],
    ),
    (
        "envoy.extensions.filters.http.ext_authz.v3.BufferSettings",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute",
        &["disabled", "check_settings"],
    ),
    (
        "envoy.extensions.filters.http.ext_authz.v3.CheckSettings",
        &["context_extensions", "disable_request_body_buffering"],
    ),
    // rbac.
    (
        "envoy.extensions.filters.http.rbac.v3.RBAC",
        &[
            "rules",
            "rules_stat_prefix",
            "shadow_rules",
            "shadow_rules_stat_prefix",
            "track_per_rule_stats",
            "matcher",
            "shadow_matcher",
        ],
    ),
    // The RBAC unified matcher (filters/rbac_matcher.rs refuses in code what
    // these messages allow but it does not implement: trees, nested matchers,
    // other inputs and input matchers, `custom` string matchers).
    (
        "xds.type.matcher.v3.Matcher",
        &["matcher_list", "matcher_tree", "on_no_match"],
    ),
    ("xds.type.matcher.v3.Matcher.MatcherList", &["matchers"]),
    (
        "xds.type.matcher.v3.Matcher.MatcherList.FieldMatcher",
        &["predicate", "on_match"],
    ),
    (
        "xds.type.matcher.v3.Matcher.MatcherList.Predicate",
        &[
            "single_predicate",
            "or_matcher",
            "and_matcher",
            "not_matcher",
        ],
    ),
    (
        "xds.type.matcher.v3.Matcher.MatcherList.Predicate.SinglePredicate",
        &["input", "value_match", "custom_match"],
    ),
    (
        "xds.type.matcher.v3.Matcher.MatcherList.Predicate.PredicateList",
        &["predicate"],
    ),
    (
        "xds.type.matcher.v3.Matcher.OnMatch",
        &["action", "matcher", "keep_matching"],
    ),
    (
        "xds.core.v3.TypedExtensionConfig",
        &["name", "typed_config"],
    ),
    ("xds.type.matcher.v3.StringMatcher", ALL),
    ("xds.type.matcher.v3.RegexMatcher", &["regex", "google_re2"]),
    ("xds.type.matcher.v3.RegexMatcher.GoogleRE2", ALL),
    ("envoy.config.rbac.v3.Action", &["name", "action"]),
    (
        "envoy.extensions.matching.common_inputs.network.v3.SourceIPInput",
        ALL,
    ),
    (
        "envoy.extensions.matching.common_inputs.network.v3.DirectSourceIPInput",
        ALL,
    ),
    (
        "envoy.extensions.matching.common_inputs.network.v3.DestinationIPInput",
        ALL,
    ),
    (
        "envoy.extensions.matching.common_inputs.network.v3.DestinationPortInput",
        ALL,
    ),
    (
        "envoy.extensions.matching.common_inputs.network.v3.DynamicMetadataInput",
        &["filter", "path"],
    ),
    (
        "envoy.extensions.matching.common_inputs.network.v3.DynamicMetadataInput.PathSegment",
        &["key"],
    ),
    (
        "envoy.type.matcher.v3.HttpRequestHeaderMatchInput",
        &["header_name"],
    ),
    // `stat_prefix` names the matcher's `ip_parsing_failed` counter, which
    // counts inputs that are not addresses: courier takes Ip only on address
    // inputs, which always parse.
    (
        "envoy.extensions.matching.input_matchers.ip.v3.Ip",
        &["cidr_ranges", "stat_prefix"],
    ),
    (
        "envoy.extensions.matching.input_matchers.metadata.v3.Metadata",
        &["value", "invert"],
    ),
    (
        "envoy.extensions.filters.http.rbac.v3.RBACPerRoute",
        &["rbac"],
    ),
    ("envoy.config.rbac.v3.RBAC", &["action", "policies"]),
    (
        "envoy.config.rbac.v3.Policy",
        &[
            "permissions",
            "principals",
            "condition",
            "checked_condition",
        ],
    ),
    (
        "envoy.config.rbac.v3.Permission",
        &[
            "and_rules",
            "or_rules",
            "any",
            "header",
            "url_path",
            "destination_ip",
            "destination_port",
            "destination_port_range",
            "metadata",
            "not_rule",
            "requested_server_name",
            "sourced_metadata",
        ],
    ),
    ("envoy.config.rbac.v3.Permission.Set", ALL),
    (
        "envoy.config.rbac.v3.Principal",
        &[
            "and_ids",
            "or_ids",
            "any",
            "authenticated",
            "source_ip",
            "direct_remote_ip",
            "remote_ip",
            "header",
            "url_path",
            "metadata",
            "not_id",
            "sourced_metadata",
        ],
    ),
    ("envoy.config.rbac.v3.Principal.Set", ALL),
    (
        "envoy.config.rbac.v3.Principal.Authenticated",
        &["principal_name"],
    ),
    ("envoy.config.rbac.v3.SourcedMetadata", ALL),
    // compressor (filters/compressor.rs refuses in code the options it cannot honour).
    (
        "envoy.extensions.filters.http.compressor.v3.Compressor",
        &[
            "content_length",
            "content_type",
            "disable_on_etag_header",
            "remove_accept_encoding_header",
            "runtime_enabled",
            "compressor_library",
            "request_direction_config",
            "response_direction_config",
            "choose_first",
        ],
    ),
    (
        "envoy.extensions.filters.http.compressor.v3.Compressor.CommonDirectionConfig",
        &["enabled", "min_content_length", "content_type"],
    ),
    (
        "envoy.extensions.filters.http.compressor.v3.Compressor.RequestDirectionConfig",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.compressor.v3.Compressor.ResponseDirectionConfig",
        &[
            "common_config",
            "disable_on_etag_header",
            "weaken_etag_on_compress",
            "remove_accept_encoding_header",
            "uncompressible_response_codes",
        ],
    ),
    (
        "envoy.extensions.filters.http.compressor.v3.CompressorPerRoute",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.compressor.v3.CompressorOverrides",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.compressor.v3.ResponseDirectionOverrides",
        ALL,
    ),
    ("envoy.config.core.v3.TypedExtensionConfig", ALL),
    ("envoy.extensions.compression.gzip.compressor.v3.Gzip", ALL),
    (
        "envoy.extensions.compression.brotli.compressor.v3.Brotli",
        ALL,
    ),
    ("envoy.extensions.compression.zstd.compressor.v3.Zstd", ALL),
    // Upstream HTTP filters (a cluster's `http_filters`).
    (
        "envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.credential_injector.v3.CredentialInjector",
        ALL,
    ),
    (
        "envoy.extensions.http.injected_credentials.generic.v3.Generic",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.admission_control.v3.AdmissionControl",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.admission_control.v3.AdmissionControl.SuccessCriteria",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.admission_control.v3.AdmissionControl.SuccessCriteria.HttpCriteria",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.admission_control.v3.AdmissionControl.SuccessCriteria.GrpcCriteria",
        ALL,
    ),
    // No runtime layer for these: a `runtime_key` is refused.
    ("envoy.config.core.v3.RuntimePercent", &["default_value"]),
    ("envoy.config.core.v3.RuntimeUInt32", &["default_value"]),
];

/// A validated HTTP filter.
#[derive(Debug, Clone)]
pub struct HttpFilter {
    /// The filter's name (the key of per-route configs).
    pub name: String,
    /// The filter's own config.
    pub config: HttpFilterConfig,
    /// Disabled unless a route's per-filter config enables it (`HttpFilter.disabled`).
    pub disabled: bool,
    /// `HttpFilter.is_optional` as written (courier implements every filter it accepts).
    pub is_optional: bool,
}

/// The config of one of the HTTP filters courier implements.
#[derive(Debug, Clone)]
pub enum HttpFilterConfig {
    /// The terminal router filter.
    Router(Router),
    /// JWT authentication.
    JwtAuthn(Box<JwtAuthn>),
    /// External authorization.
    ExtAuthz(Box<ExtAuthz>),
    /// Role-based access control.
    Rbac(Box<RbacFilter>),
    /// Response compression (gzip, brotli, zstd).
    Compressor(Box<Compressor>),
    /// Local (in-process) rate limiting.
    LocalRateLimit(Box<LocalRateLimit>),
    /// Global rate limiting through a rate limit service.
    RateLimit(Box<RateLimitFilter>),
    /// Cross-site request forgery checks.
    Csrf(Box<csrf::CsrfPolicy>),
    /// Whole request bodies read before the request goes on.
    Buffer(buffer::Buffer),
    /// Ordered request and response header mutations.
    HeaderMutation(Box<header_mutation::HeaderMutationFilter>),
    /// Responses replaced by local ones where a matcher says so.
    CustomResponse(Arc<custom_response::CustomResponse>),
    /// HTTP Basic authentication against an htpasswd user list.
    BasicAuth(Box<basic_auth::BasicAuth>),
    /// OAuth2 authorization-code flow with cookie sessions.
    OAuth2(Box<oauth2::OAuth2>),
    /// API key authentication.
    ApiKeyAuth(Box<api_key_auth::ApiKeyAuthConfig>),
    /// External processing (only modes that never call the processor).
    ExtProc(Box<ext_proc::ExtProc>),
    /// Fault injection (delays, aborts).
    Fault(Box<fault::Fault>),
    /// Health checks answered (or passed on) by the proxy.
    HealthCheck(Box<health_check::HealthCheck>),
    /// gRPC-Web to gRPC translation (`GrpcWeb` has no fields).
    GrpcWeb,
    /// gRPC statistics.
    GrpcStats(Box<grpc::GrpcStats>),
    /// Dynamic forward proxy: the host resolved before the router goes on.
    DynamicForwardProxy(Box<dynamic_forward_proxy::DynamicForwardProxy>),
    /// A credential set as a request header (also a cluster's upstream filter).
    CredentialInjector(Arc<credential_injector::CredentialInjector>),
}

/// A validated per-route filter config (`typed_per_filter_config` entry).
#[derive(Debug, Clone)]
pub struct PerRouteConfig {
    /// The filter's own per-route config; `None` for a `FilterConfig` with only `disabled`.
    pub config: Option<PerRouteFilterConfig>,
    /// `FilterConfig.disabled`: the filter is off on this route.
    pub disabled: bool,
    /// `FilterConfig.is_optional` as written.
    pub is_optional: bool,
}

/// A filter's per-route config.
#[derive(Debug, Clone)]
pub enum PerRouteFilterConfig {
    /// jwt_authn `PerRouteConfig`.
    JwtAuthn(JwtPerRoute),
    /// ext_authz `ExtAuthzPerRoute`.
    ExtAuthz(ExtAuthzPerRoute),
    /// rbac `RBACPerRoute`.
    Rbac(Box<RbacPerRoute>),
    /// compressor `CompressorPerRoute`.
    Compressor(CompressorPerRoute),
    /// local_ratelimit `LocalRateLimit`.
    LocalRateLimit(Box<LocalRateLimit>),
    /// ratelimit `RateLimitPerRoute`.
    RateLimit(RateLimitPerRoute),
    /// csrf `CsrfPolicy`.
    Csrf(Box<csrf::CsrfPolicy>),
    /// buffer `BufferPerRoute`.
    Buffer(buffer::BufferPerRoute),
    /// basic_auth `BasicAuthPerRoute`.
    BasicAuth(basic_auth::BasicAuthPerRoute),
    /// oauth2 `OAuth2PerRoute`.
    OAuth2(oauth2::OAuth2PerRoute),
    /// api_key_auth `ApiKeyAuthPerRoute`.
    ApiKeyAuth(Box<api_key_auth::ApiKeyAuthPerRoute>),
    /// ext_proc `ExtProcPerRoute`.
    ExtProc(Box<ext_proc::ExtProcPerRoute>),
    /// fault `HTTPFault`.
    Fault(Box<fault::Fault>),
    /// custom_response `CustomResponse` (the route's matcher).
    CustomResponse(Arc<custom_response::CustomResponse>),
    /// dynamic_forward_proxy `PerRouteConfig` (`None`: no rewrite).
    DynamicForwardProxy(Option<dynamic_forward_proxy::HostRewrite>),
}

/// The message name of a type URL (`type.googleapis.com/<name>`).
fn type_name(url: &str) -> &str {
    url.rsplit_once('/').map_or(url, |(_, n)| n)
}

/// Translates one `HttpFilter`.
pub fn http_filter(f: &hcm::HttpFilter, path: &Path<'_>, ctx: &mut Ctx) -> Option<HttpFilter> {
    use hcm::http_filter::ConfigType;
    if f.name.is_empty() {
        ctx.error(&path.field("name"), "must not be empty");
    }
    let any = match f.config_type.as_ref() {
        Some(ConfigType::TypedConfig(any)) => any,
        // Refused by the support table at `config_discovery` (ECDS).
        Some(ConfigType::ConfigDiscovery(_)) => return None,
        // The loader filled `typed_config` for the filters courier knows by name.
        None => {
            ctx.unsupported(path, format!("HTTP filter {}", f.name));
            return None;
        }
    };
    let tp = path.field("typed_config");
    let url = any.type_url.as_str();
    let config = if url == extensions::ROUTER {
        HttpFilterConfig::Router(router::translate(&core::unpack::<router_pb::Router>(
            any, &tp, ctx,
        )?))
    } else if url == extensions::JWT_AUTHN {
        let m = core::unpack::<jwt_pb::JwtAuthentication>(any, &tp, ctx)?;
        HttpFilterConfig::JwtAuthn(Box::new(jwt_authn::translate(&m, &tp, ctx)?))
    } else if url == extensions::EXT_AUTHZ {
        let m = core::unpack::<ext_authz_pb::ExtAuthz>(any, &tp, ctx)?;
        HttpFilterConfig::ExtAuthz(Box::new(ext_authz::translate(&m, &tp, ctx)?))
    } else if url == extensions::RBAC {
        let m = core::unpack::<rbac_pb::Rbac>(any, &tp, ctx)?;
        HttpFilterConfig::Rbac(Box::new(rbac::translate(&m, &tp, ctx)?))
    } else if url == extensions::COMPRESSOR {
        let m = core::unpack::<compressor_pb::Compressor>(any, &tp, ctx)?;
        HttpFilterConfig::Compressor(Box::new(compressor::translate(&m, &tp, ctx)?))
    } else if url == extensions::LOCAL_RATELIMIT {
        let m = core::unpack::<local_rl_pb::LocalRateLimit>(any, &tp, ctx)?;
        HttpFilterConfig::LocalRateLimit(Box::new(local_ratelimit::translate(&m, false, &tp, ctx)?))
    } else if url == extensions::FAULT {
        let m = core::unpack::<fault_pb::HttpFault>(any, &tp, ctx)?;
        HttpFilterConfig::Fault(Box::new(fault::translate(&m, &tp, ctx)?))
    } else if url == extensions::CSRF {
        let m = core::unpack::<csrf_pb::CsrfPolicy>(any, &tp, ctx)?;
        HttpFilterConfig::Csrf(Box::new(csrf::translate(&m, &tp, ctx)?))
    } else if url == extensions::BUFFER {
        let m = core::unpack::<buffer_pb::Buffer>(any, &tp, ctx)?;
        HttpFilterConfig::Buffer(buffer::translate(&m, &tp, ctx)?)
    } else if url == extensions::HEADER_MUTATION {
        let m = core::unpack::<header_mutation_pb::HeaderMutation>(any, &tp, ctx)?;
        HttpFilterConfig::HeaderMutation(Box::new(header_mutation::translate(&m, &tp, ctx)?))
    } else if url == extensions::CUSTOM_RESPONSE {
        let m = core::unpack::<custom_response_pb::CustomResponse>(any, &tp, ctx)?;
        HttpFilterConfig::CustomResponse(Arc::new(custom_response::translate(&m, &tp, ctx)?))
    } else if url == extensions::BASIC_AUTH {
        let m = core::unpack::<basic_auth_pb::BasicAuth>(any, &tp, ctx)?;
        HttpFilterConfig::BasicAuth(Box::new(basic_auth::translate(&m, &tp, ctx)?))
    } else if url == extensions::OAUTH2 {
        let m = core::unpack::<oauth2_pb::OAuth2>(any, &tp, ctx)?;
        HttpFilterConfig::OAuth2(Box::new(oauth2::translate(&m, &tp, ctx)?))
    } else if url == extensions::API_KEY_AUTH {
        let m = core::unpack::<api_key_auth_pb::ApiKeyAuth>(any, &tp, ctx)?;
        HttpFilterConfig::ApiKeyAuth(Box::new(api_key_auth::translate(&m, &tp, ctx)?))
    } else if url == extensions::EXT_PROC {
        let m = core::unpack::<ext_proc_pb::ExternalProcessor>(any, &tp, ctx)?;
        HttpFilterConfig::ExtProc(Box::new(ext_proc::translate(&m, &tp, ctx)?))
    } else if url == extensions::HEALTH_CHECK {
        let m = core::unpack::<health_check_pb::HealthCheck>(any, &tp, ctx)?;
        HttpFilterConfig::HealthCheck(Box::new(health_check::translate(&m, &tp, ctx)?))
    } else if url == extensions::GRPC_WEB {
        HttpFilterConfig::GrpcWeb
    } else if url == extensions::GRPC_STATS {
        let m = core::unpack::<grpc_stats_pb::FilterConfig>(any, &tp, ctx)?;
        HttpFilterConfig::GrpcStats(Box::new(grpc::translate_stats(&m, &tp, ctx)?))
    } else if url == extensions::DFP_FILTER {
        let m = core::unpack::<dfp_pb::FilterConfig>(any, &tp, ctx)?;
        HttpFilterConfig::DynamicForwardProxy(Box::new(dynamic_forward_proxy::translate(
            &m, &tp, ctx,
        )?))
    } else if url == extensions::CREDENTIAL_INJECTOR {
        use envoy_types::pb::envoy::extensions::filters::http::credential_injector::v3 as ci_pb;
        let m = core::unpack::<ci_pb::CredentialInjector>(any, &tp, ctx)?;
        HttpFilterConfig::CredentialInjector(Arc::new(credential_injector::translate(
            &m, &tp, ctx,
        )?))
    } else if url == extensions::RATELIMIT {
        let m = core::unpack::<rl_pb::RateLimit>(any, &tp, ctx)?;
        HttpFilterConfig::RateLimit(Box::new(ratelimit::translate(&m, &tp, ctx)?))
    } else {
        let what = format!("HTTP filter {} ({})", f.name, type_name(url));
        if f.is_optional {
            // Envoy would skip an optional filter it lacks; courier refuses it so that no
            // configured filter is silently left out.
            ctx.error(
                path,
                format!("{what} is not supported (is_optional does not make courier skip it)"),
            );
        } else {
            ctx.unsupported(path, what);
        }
        return None;
    };
    if f.name.is_empty() {
        return None;
    }
    Some(HttpFilter {
        name: f.name.clone(),
        config,
        disabled: f.disabled,
        is_optional: f.is_optional,
    })
}

/// Translates one `typed_per_filter_config` entry; `name` is the map key (the HTTP filter's
/// name) and `path` the entry's path.
pub fn per_route_config(
    name: &str,
    any: &Any,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<PerRouteConfig> {
    if any.type_url == extensions::FILTER_CONFIG {
        let fc = core::unpack::<route_pb::FilterConfig>(any, path, ctx)?;
        let config = match fc.config.as_ref() {
            // An empty `Any` (`config: {}`) enables the filter with its HCM config, as
            // Envoy's per-filter configs read it.
            Some(inner)
                if inner.value.is_empty()
                    && (inner.type_url.is_empty() || inner.type_url == extensions::EMPTY_ANY) =>
            {
                None
            }
            Some(inner) => Some(per_filter(name, inner, &path.field("config"), ctx)?),
            None if fc.disabled => None,
            None => {
                ctx.error(&path.field("config"), "is required unless disabled is true");
                return None;
            }
        };
        return Some(PerRouteConfig {
            config,
            disabled: fc.disabled,
            is_optional: fc.is_optional,
        });
    }
    Some(PerRouteConfig {
        config: Some(per_filter(name, any, path, ctx)?),
        disabled: false,
        is_optional: false,
    })
}

fn per_filter(
    name: &str,
    any: &Any,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<PerRouteFilterConfig> {
    let url = any.type_url.as_str();
    Some(if url == extensions::JWT_AUTHN_PER_ROUTE {
        let m = core::unpack::<jwt_pb::PerRouteConfig>(any, path, ctx)?;
        PerRouteFilterConfig::JwtAuthn(jwt_authn::per_route(&m, path, ctx)?)
    } else if url == extensions::EXT_AUTHZ_PER_ROUTE {
        let m = core::unpack::<ext_authz_pb::ExtAuthzPerRoute>(any, path, ctx)?;
        PerRouteFilterConfig::ExtAuthz(ext_authz::per_route(&m, path, ctx)?)
    } else if url == extensions::RBAC_PER_ROUTE {
        let m = core::unpack::<rbac_pb::RbacPerRoute>(any, path, ctx)?;
        PerRouteFilterConfig::Rbac(Box::new(rbac::per_route(&m, path, ctx)?))
    } else if url == extensions::COMPRESSOR_PER_ROUTE {
        let m = core::unpack::<compressor_pb::CompressorPerRoute>(any, path, ctx)?;
        PerRouteFilterConfig::Compressor(compressor::per_route(&m, path, ctx)?)
    } else if url == extensions::LOCAL_RATELIMIT {
        let m = core::unpack::<local_rl_pb::LocalRateLimit>(any, path, ctx)?;
        PerRouteFilterConfig::LocalRateLimit(Box::new(local_ratelimit::translate(
            &m, true, path, ctx,
        )?))
    } else if url == extensions::FAULT {
        let m = core::unpack::<fault_pb::HttpFault>(any, path, ctx)?;
        PerRouteFilterConfig::Fault(Box::new(fault::translate(&m, path, ctx)?))
    } else if url == extensions::CSRF {
        let m = core::unpack::<csrf_pb::CsrfPolicy>(any, path, ctx)?;
        PerRouteFilterConfig::Csrf(Box::new(csrf::translate(&m, path, ctx)?))
    } else if url == extensions::BUFFER_PER_ROUTE {
        let m = core::unpack::<buffer_pb::BufferPerRoute>(any, path, ctx)?;
        PerRouteFilterConfig::Buffer(buffer::per_route(&m, path, ctx)?)
    } else if url == extensions::CUSTOM_RESPONSE {
        let m = core::unpack::<custom_response_pb::CustomResponse>(any, path, ctx)?;
        PerRouteFilterConfig::CustomResponse(Arc::new(custom_response::translate(&m, path, ctx)?))
    } else if url == extensions::BASIC_AUTH_PER_ROUTE {
        let m = core::unpack::<basic_auth_pb::BasicAuthPerRoute>(any, path, ctx)?;
        PerRouteFilterConfig::BasicAuth(basic_auth::per_route(&m, path, ctx)?)
    } else if url == extensions::OAUTH2_PER_ROUTE {
        let m = core::unpack::<oauth2_pb::OAuth2PerRoute>(any, path, ctx)?;
        PerRouteFilterConfig::OAuth2(oauth2::per_route(&m, path, ctx)?)
    } else if url == extensions::API_KEY_AUTH_PER_ROUTE {
        let m = core::unpack::<api_key_auth_pb::ApiKeyAuthPerRoute>(any, path, ctx)?;
        PerRouteFilterConfig::ApiKeyAuth(Box::new(api_key_auth::per_route(&m, path, ctx)?))
    } else if url == extensions::EXT_PROC_PER_ROUTE {
        let m = core::unpack::<ext_proc_pb::ExtProcPerRoute>(any, path, ctx)?;
        PerRouteFilterConfig::ExtProc(Box::new(ext_proc::per_route(&m, path, ctx)?))
    } else if url == extensions::DFP_PER_ROUTE {
        let m = core::unpack::<dfp_pb::PerRouteConfig>(any, path, ctx)?;
        PerRouteFilterConfig::DynamicForwardProxy(dynamic_forward_proxy::per_route(&m, path, ctx)?)
    } else if url == extensions::RATELIMIT_PER_ROUTE {
        let m = core::unpack::<rl_pb::RateLimitPerRoute>(any, path, ctx)?;
        PerRouteFilterConfig::RateLimit(ratelimit::per_route(&m, path, ctx)?)
    } else {
        ctx.unsupported(
            path,
            format!("per-route config {} for {name}", type_name(url)),
        );
        return None;
    })
}

#[cfg(test)]
mod test_util;

#[cfg(test)]
mod tests;
