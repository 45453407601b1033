//! The HTTP connection manager (`envoy.filters.network.http_connection_manager`).

use super::access_log::{self, AccessLog};
use super::http_options::{self, CommonHttpOptions, Http1Options, Http2Options};
use crate::config_source::{self, ConfigSource};
use crate::core;
use crate::ctx::Ctx;
use crate::extensions;
use crate::filters::{self, HttpFilter};
use crate::matcher::{self, Cidr};
use crate::path::Path;
use crate::route::{self, RouteConfig};
use crate::support::Support;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3 as pb;
use std::sync::Arc;
use std::time::Duration;

/// Fields of the connection-manager messages courier implements.
///
/// `HttpFilter` is the filters module's, `Tracing` the tracing module's; `scoped_routes`, `via`,
/// `local_reply_config`, the client-certificate forwarding options and the
/// other extension points are refused by their absence.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.SetCurrentClientCertDetails",
        &["subject", "cert", "chain", "dns", "uri"],
    ),
    (
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        &[
            "codec_type",
            "stat_prefix",
            "rds",
            "route_config",
            "http_filters",
            "early_header_mutation_extensions",
            "access_log",
            "stream_idle_timeout",
            "request_timeout",
            "request_headers_timeout",
            "drain_timeout",
            "http1_safe_max_connection_duration",
            "delayed_close_timeout",
            "max_request_headers_kb",
            "common_http_protocol_options",
            "http_protocol_options",
            "http2_protocol_options",
            "use_remote_address",
            "xff_num_trusted_hops",
            "skip_xff_append",
            "forward_client_cert_details",
            "set_current_client_cert_details",
            "generate_request_id",
            "preserve_external_request_id",
            "always_set_request_id_in_response",
            "server_name",
            "server_header_transformation",
            "normalize_path",
            "merge_slashes",
            "path_with_escaped_slashes_action",
            "upgrade_configs",
            "internal_address_config",
            "strip_matching_host_port",
            "strip_any_host_port",
            "strip_trailing_host_dot",
            "original_ip_detection_extensions",
            "proxy_100_continue",
            "tracing",
        ],
    ),
    (
        "envoy.extensions.filters.network.http_connection_manager.v3.Rds",
        &["config_source", "route_config_name"],
    ),
    (
        // `filters` (upgrade-specific filter chains) is refused by its absence.
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.UpgradeConfig",
        &["upgrade_type", "enabled"],
    ),
    (
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.InternalAddressConfig",
        &["cidr_ranges", "unix_sockets"],
    ),
    // Shared with the cluster module (upstream options); the downstream side's fields.
    (
        "envoy.config.core.v3.HttpProtocolOptions",
        &[
            "idle_timeout",
            "max_headers_count",
            "max_stream_duration",
            "max_connection_duration",
            "max_requests_per_connection",
            "headers_with_underscores_action",
        ],
    ),
    (
        // `allow_chunked_length` (Content-Length with chunked) belongs to the
        // strict-parsing work and is refused until then.
        "envoy.config.core.v3.Http1ProtocolOptions",
        &[
            "accept_http_10",
            "default_host_for_http_10",
            "enable_trailers",
            "header_key_format",
        ],
    ),
    (
        "envoy.config.core.v3.Http1ProtocolOptions.HeaderKeyFormat",
        &["stateful_formatter"],
    ),
    (
        "envoy.config.core.v3.Http2ProtocolOptions",
        &[
            "max_concurrent_streams",
            "initial_stream_window_size",
            "initial_connection_window_size",
            // Downstream only: a cluster's are refused by the cluster translation.
            "max_outbound_frames",
            "max_outbound_control_frames",
            "max_consecutive_inbound_frames_with_empty_payload",
            "max_inbound_priority_frames_per_stream",
            "max_inbound_window_update_frames_per_data_frame_sent",
        ],
    ),
];

/// Envoy's default `stream_idle_timeout`.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Envoy's default `drain_timeout`.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Envoy's default `delayed_close_timeout`.
pub const DEFAULT_DELAYED_CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Envoy's default `max_request_headers_kb`.
pub const DEFAULT_MAX_REQUEST_HEADERS_KB: u32 = 60;

/// Which HTTP codec the connection manager speaks downstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodecType {
    /// HTTP/2 when ALPN says so or the client sends the h2 preface, else HTTP/1.1.
    Auto,
    /// HTTP/1.1 only.
    Http1,
    /// HTTP/2 only.
    Http2,
}

/// Where the route table comes from.
#[derive(Debug, Clone)]
pub enum RouteSpecifier {
    /// `route_config`: inline.
    Inline(Arc<RouteConfig>),
    /// `rds`: fetched by name.
    Rds {
        /// Where from.
        config_source: ConfigSource,
        /// The RouteConfiguration's name.
        route_config_name: String,
    },
}

/// How the `server` response header is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerHeaderTransformation {
    /// Always `server_name` (default).
    Overwrite,
    /// `server_name` unless the upstream set one.
    AppendIfAbsent,
    /// Whatever the upstream sent, or nothing.
    PassThrough,
}

/// What to do with `%2F`, `%5C` (any case) in the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EscapedSlashesAction {
    /// Leave the path as is (Envoy's default).
    KeepUnchanged,
    /// 400.
    RejectRequest,
    /// Unescape, then redirect the client to the new path.
    UnescapeAndRedirect,
    /// Unescape and carry on.
    UnescapeAndForward,
}

/// An enabled or disabled upgrade type (`websocket`, `CONNECT`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeConfig {
    /// The upgrade type, lower-cased (Envoy compares case-insensitively).
    pub upgrade_type: String,
    /// Whether upgrades of this type are allowed (default true; routes may override).
    pub enabled: bool,
}

/// Which peer addresses count as internal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InternalAddresses {
    /// Envoy's default: RFC 1918, RFC 4193 and loopback.
    Default,
    /// `internal_address_config.cidr_ranges`.
    Ranges(Vec<Cidr>),
}

/// How `:authority` ports are stripped before routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StripPort {
    /// Keep the port (default).
    None,
    /// Strip it when it equals the listener's port.
    Matching,
    /// Strip any port.
    Any,
}

/// A validated HTTP connection manager.
#[derive(Debug, Clone)]
pub struct HttpConnectionManager {
    /// Downstream codec.
    pub codec_type: CodecType,
    /// Stats prefix (`http.<stat_prefix>.`).
    pub stat_prefix: String,
    /// Route table source.
    pub route_specifier: RouteSpecifier,
    /// HTTP filters in config order (the router, when present, is last).
    pub http_filters: Vec<HttpFilter>,
    /// `early_header_mutation_extensions`: rules applied to the request
    /// headers before anything else reads them (route selection included).
    pub early_header_mutations: Vec<crate::filters::header_mutation::MutationRule>,
    /// `http_filters` was empty, so courier routes with the router alone.
    /// (Envoy 1.40 accepts an empty list but then never answers a request:
    /// courier deliberately behaves as if the router were configured.)
    pub implicit_router: bool,
    /// The router's `suppress_envoy_headers`: it adds none of its own
    /// `x-envoy-*` headers (`x-envoy-upstream-service-time`,
    /// `x-envoy-expected-rq-timeout-ms`, `x-envoy-original-path`,
    /// `x-envoy-overloaded`).
    pub suppress_envoy_headers: bool,
    /// Access logs of this connection manager.
    pub access_log: Vec<AccessLog>,
    /// Idle time per stream (default 5 min; `None` = off).
    pub stream_idle_timeout: Option<Duration>,
    /// Time to receive the whole request (default off).
    pub request_timeout: Option<Duration>,
    /// Time to receive the request headers (default off).
    pub request_headers_timeout: Option<Duration>,
    /// Grace period of the HTTP/2 GOAWAY sequence on drain (default 5 s).
    pub drain_timeout: Duration,
    /// Wait for the peer to close after a local close (default 1 s; `None` = off).
    pub delayed_close_timeout: Option<Duration>,
    /// Request header size limit in KiB (default 60; 1..=8192).
    pub max_request_headers_kb: u32,
    /// Common HTTP options.
    pub common_http_protocol_options: CommonHttpOptions,
    /// HTTP/1 options.
    pub http_protocol_options: Http1Options,
    /// HTTP/2 options.
    pub http2_protocol_options: Http2Options,
    /// Use the peer address (not XFF) as the client address, and append it to XFF.
    pub use_remote_address: bool,
    /// Trusted XFF hops.
    pub xff_num_trusted_hops: u32,
    /// Do not append the peer to XFF.
    pub skip_xff_append: bool,
    /// `forward_client_cert_details`: what becomes of a request's
    /// `x-forwarded-client-cert`.
    pub forward_client_cert: ForwardClientCert,
    /// `set_current_client_cert_details`.
    pub client_cert_details: ClientCertDetails,
    /// Generate `x-request-id` when missing (default true).
    pub generate_request_id: bool,
    /// Keep an external request's `x-request-id`.
    pub preserve_external_request_id: bool,
    /// Echo `x-request-id` in responses.
    pub always_set_request_id_in_response: bool,
    /// `server` header value (default `envoy`).
    pub server_name: String,
    /// How the `server` header is set.
    pub server_header_transformation: ServerHeaderTransformation,
    /// RFC 3986 path normalisation.
    pub normalize_path: bool,
    /// Merge adjacent slashes in the path.
    pub merge_slashes: bool,
    /// Escaped-slash handling.
    pub path_with_escaped_slashes_action: EscapedSlashesAction,
    /// Upgrade types.
    pub upgrade_configs: Vec<UpgradeConfig>,
    /// Internal addresses.
    pub internal_addresses: InternalAddresses,
    /// `internal_address_config.unix_sockets`: requests from a pipe listener's
    /// peers are internal (false: they are not, as in Envoy).
    pub internal_unix_sockets: bool,
    /// Port stripping.
    pub strip_port: StripPort,
    /// `strip_trailing_host_dot`: `example.com.` is routed and forwarded as
    /// `example.com`.
    pub strip_trailing_host_dot: bool,
    /// `original_ip_detection_extensions` (only without `use_remote_address`
    /// and `xff_num_trusted_hops`); none: the XFF rules of those fields.
    pub ip_detection: Vec<super::ip_detection::IpDetection>,
    /// Forward `100 Continue` from upstream instead of answering it locally.
    pub proxy_100_continue: bool,
    /// Its listener's `bypass_overload_manager`: the overload manager's actions
    /// (refused requests, keep-alive off, reduced timeouts) do not apply.
    pub bypass_overload_manager: bool,
    /// `http1_safe_max_connection_duration`: at `max_connection_duration` an
    /// HTTP/1 connection waits for its next request and closes after
    /// answering it `connection: close`, instead of Envoy's drain sequence
    /// (closed `drain_timeout` later).
    pub http1_safe_max_connection_duration: bool,
    /// `tracing`: sampling decisions and spans (none: no tracing).
    pub tracing: Option<crate::tracing::Tracing>,
}

/// What the connection manager does with a request's `x-forwarded-client-cert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardClientCert {
    /// `SANITIZE` (Envoy's default): removed.
    #[default]
    Sanitize,
    /// `FORWARD_ONLY`: kept on a mutual-TLS connection (one whose client
    /// presented a certificate), removed on others.
    ForwardOnly,
    /// `ALWAYS_FORWARD_ONLY`: always kept as it came.
    AlwaysForwardOnly,
    /// `APPEND_FORWARD`: on a mutual-TLS connection the client certificate's
    /// details are appended (removed on others).
    AppendForward,
    /// `SANITIZE_SET`: on a mutual-TLS connection replaced by the client
    /// certificate's details (removed on others).
    SanitizeSet,
}

/// `set_current_client_cert_details`: what `APPEND_FORWARD` and
/// `SANITIZE_SET` write besides `By` and `Hash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClientCertDetails {
    /// `Subject="..."`.
    pub subject: bool,
    /// `Cert="<URL-encoded PEM>"`.
    pub cert: bool,
    /// `Chain="<URL-encoded PEM chain>"`.
    pub chain: bool,
    /// `DNS=` per DNS SAN.
    pub dns: bool,
    /// `URI=` per URI SAN.
    pub uri: bool,
}

/// `forward_client_cert_details`.
fn forward_client_cert(v: i32, path: &Path<'_>, ctx: &mut Ctx) -> ForwardClientCert {
    use pb::http_connection_manager::ForwardClientCertDetails as F;
    match F::try_from(v) {
        Ok(F::Sanitize) => ForwardClientCert::Sanitize,
        Ok(F::ForwardOnly) => ForwardClientCert::ForwardOnly,
        Ok(F::AlwaysForwardOnly) => ForwardClientCert::AlwaysForwardOnly,
        Ok(F::AppendForward) => ForwardClientCert::AppendForward,
        Ok(F::SanitizeSet) => ForwardClientCert::SanitizeSet,
        Err(_) => {
            ctx.error(path, format!("unknown value {v}"));
            ForwardClientCert::Sanitize
        }
    }
}

/// Translates an `HttpConnectionManager`.
pub fn translate(
    h: &pb::HttpConnectionManager,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<HttpConnectionManager> {
    use pb::http_connection_manager::{
        CodecType as C, PathWithEscapedSlashesAction as E, ServerHeaderTransformation as S,
        StripPortMode,
    };
    let codec_type = match C::try_from(h.codec_type) {
        Ok(C::Http1) => CodecType::Http1,
        Ok(C::Http2) => CodecType::Http2,
        Ok(C::Http3) => {
            ctx.unsupported(&path.field("codec_type"), "HTTP3");
            CodecType::Auto
        }
        _ => CodecType::Auto,
    };
    if h.stat_prefix.is_empty() {
        ctx.error(&path.field("stat_prefix"), "must not be empty");
    }
    let route_specifier = route_specifier(h, path, ctx);
    let (http_filters, implicit_router) =
        http_filters(&h.http_filters, &path.field("http_filters"), ctx);
    let suppress_envoy_headers = http_filters.iter().any(|f| {
        matches!(&f.config, crate::filters::HttpFilterConfig::Router(r) if r.suppress_envoy_headers)
    });
    let access_log = access_log::translate_all(&h.access_log, &path.field("access_log"), ctx);
    let max_request_headers_kb = core::u32_or(
        h.max_request_headers_kb.as_ref(),
        DEFAULT_MAX_REQUEST_HEADERS_KB,
    );
    if !(1..=8192).contains(&max_request_headers_kb) {
        ctx.error(
            &path.field("max_request_headers_kb"),
            format!("{max_request_headers_kb} is out of range 1..=8192"),
        );
    }
    let common_http_protocol_options = h
        .common_http_protocol_options
        .as_ref()
        .map(|o| http_options::common(o, &path.field("common_http_protocol_options"), ctx))
        .unwrap_or_default();
    let http_protocol_options = h
        .http_protocol_options
        .as_ref()
        .map(|o| http_options::http1(o, &path.field("http_protocol_options"), ctx))
        .unwrap_or_default();
    let http2_protocol_options = h
        .http2_protocol_options
        .as_ref()
        .map(|o| http_options::http2(o, &path.field("http2_protocol_options"), ctx))
        .unwrap_or_default();
    let server_header_transformation = match S::try_from(h.server_header_transformation) {
        Ok(S::AppendIfAbsent) => ServerHeaderTransformation::AppendIfAbsent,
        Ok(S::PassThrough) => ServerHeaderTransformation::PassThrough,
        _ => ServerHeaderTransformation::Overwrite,
    };
    let path_with_escaped_slashes_action = match E::try_from(h.path_with_escaped_slashes_action) {
        Ok(E::RejectRequest) => EscapedSlashesAction::RejectRequest,
        Ok(E::UnescapeAndRedirect) => EscapedSlashesAction::UnescapeAndRedirect,
        Ok(E::UnescapeAndForward) => EscapedSlashesAction::UnescapeAndForward,
        // IMPLEMENTATION_SPECIFIC_DEFAULT is KEEP_UNCHANGED in Envoy.
        _ => EscapedSlashesAction::KeepUnchanged,
    };
    let strip_any = matches!(
        h.strip_port_mode,
        Some(StripPortMode::StripAnyHostPort(true))
    );
    let strip_port = match (h.strip_matching_host_port, strip_any) {
        (true, true) => {
            // Envoy's wording.
            ctx.error(
                &path.field("strip_any_host_port"),
                "Only one of `strip_matching_host_port` or `strip_any_host_port` can be set.",
            );
            StripPort::None
        }
        (true, false) => StripPort::Matching,
        (false, true) => StripPort::Any,
        (false, false) => StripPort::None,
    };
    let internal_addresses = internal_addresses(h, path, ctx);
    let ip_detection = super::ip_detection::translate(
        &h.original_ip_detection_extensions,
        &path.field("original_ip_detection_extensions"),
        ctx,
    );
    if !h.original_ip_detection_extensions.is_empty() {
        // Envoy's wording.
        if h.use_remote_address.as_ref().is_some_and(|b| b.value) {
            ctx.error(
                &path.field("original_ip_detection_extensions"),
                "Original IP detection extensions and use_remote_address may not be mixed",
            );
        }
        if h.xff_num_trusted_hops > 0 {
            ctx.error(
                &path.field("original_ip_detection_extensions"),
                "Original IP detection extensions and xff_num_trusted_hops may not be mixed",
            );
        }
    }
    let upgrade_configs = upgrade_configs(&h.upgrade_configs, &path.field("upgrade_configs"), ctx);
    let hcm = HttpConnectionManager {
        codec_type,
        stat_prefix: h.stat_prefix.clone(),
        route_specifier: route_specifier?,
        http_filters,
        early_header_mutations: h
            .early_header_mutation_extensions
            .iter()
            .enumerate()
            .flat_map(|(i, e)| {
                crate::filters::header_mutation::early(
                    e,
                    &path.field("early_header_mutation_extensions").index(i),
                    ctx,
                )
            })
            .collect(),
        implicit_router,
        suppress_envoy_headers,
        access_log,
        stream_idle_timeout: core::optional_timeout(
            h.stream_idle_timeout.as_ref(),
            Some(DEFAULT_STREAM_IDLE_TIMEOUT),
            &path.field("stream_idle_timeout"),
            ctx,
        ),
        request_timeout: core::optional_timeout(
            h.request_timeout.as_ref(),
            None,
            &path.field("request_timeout"),
            ctx,
        ),
        request_headers_timeout: core::optional_timeout(
            h.request_headers_timeout.as_ref(),
            None,
            &path.field("request_headers_timeout"),
            ctx,
        ),
        drain_timeout: core::duration_or(
            h.drain_timeout.as_ref(),
            DEFAULT_DRAIN_TIMEOUT,
            &path.field("drain_timeout"),
            ctx,
        ),
        delayed_close_timeout: core::optional_timeout(
            h.delayed_close_timeout.as_ref(),
            Some(DEFAULT_DELAYED_CLOSE_TIMEOUT),
            &path.field("delayed_close_timeout"),
            ctx,
        ),
        max_request_headers_kb,
        common_http_protocol_options,
        http_protocol_options,
        http2_protocol_options,
        use_remote_address: core::bool_or(h.use_remote_address.as_ref(), false),
        xff_num_trusted_hops: h.xff_num_trusted_hops,
        skip_xff_append: h.skip_xff_append,
        forward_client_cert: forward_client_cert(
            h.forward_client_cert_details,
            &path.field("forward_client_cert_details"),
            ctx,
        ),
        client_cert_details: h.set_current_client_cert_details.as_ref().map_or_else(
            ClientCertDetails::default,
            |d| ClientCertDetails {
                subject: d.subject.as_ref().is_some_and(|b| b.value),
                cert: d.cert,
                chain: d.chain,
                dns: d.dns,
                uri: d.uri,
            },
        ),
        generate_request_id: core::bool_or(h.generate_request_id.as_ref(), true),
        preserve_external_request_id: h.preserve_external_request_id,
        always_set_request_id_in_response: h.always_set_request_id_in_response,
        server_name: if h.server_name.is_empty() {
            "envoy".to_string()
        } else {
            h.server_name.clone()
        },
        server_header_transformation,
        normalize_path: core::bool_or(h.normalize_path.as_ref(), false),
        merge_slashes: h.merge_slashes,
        path_with_escaped_slashes_action,
        upgrade_configs,
        internal_addresses,
        internal_unix_sockets: h
            .internal_address_config
            .as_ref()
            .is_some_and(|c| c.unix_sockets),
        strip_port,
        strip_trailing_host_dot: h.strip_trailing_host_dot,
        ip_detection,
        proxy_100_continue: h.proxy_100_continue,
        // Set by the listener (listener::translate).
        bypass_overload_manager: false,
        http1_safe_max_connection_duration: h.http1_safe_max_connection_duration,
        tracing: h
            .tracing
            .as_ref()
            .map(|t| crate::tracing::translate(t, &path.field("tracing"), ctx)),
    };
    Some(hcm)
}

fn route_specifier(
    h: &pb::HttpConnectionManager,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<RouteSpecifier> {
    use pb::http_connection_manager::RouteSpecifier as R;
    match &h.route_specifier {
        Some(R::RouteConfig(rc)) => route::translate_inline(rc, &path.field("route_config"), ctx)
            .map(|rc| RouteSpecifier::Inline(Arc::new(rc))),
        Some(R::Rds(rds)) => {
            let rp = path.field("rds");
            if rds.route_config_name.is_empty() {
                ctx.error(&rp.field("route_config_name"), "must not be empty");
            }
            let config_source = match &rds.config_source {
                Some(cs) => config_source::translate(cs, &rp.field("config_source"), ctx),
                None => {
                    ctx.error(&rp.field("config_source"), "is required");
                    None
                }
            };
            Some(RouteSpecifier::Rds {
                config_source: config_source?,
                route_config_name: rds.route_config_name.clone(),
            })
        }
        // Refused by the support table.
        Some(R::ScopedRoutes(_)) => None,
        None => {
            ctx.error(path, "one of route_config or rds is required");
            None
        }
    }
}

/// The factory name Envoy reports for a filter's `@type` (known types only).
fn filter_type_name(type_url: &str) -> Option<&'static str> {
    Some(match type_url {
        extensions::ROUTER => "envoy.filters.http.router",
        extensions::JWT_AUTHN => "envoy.filters.http.jwt_authn",
        extensions::EXT_AUTHZ => "envoy.filters.http.ext_authz",
        extensions::RBAC => "envoy.filters.http.rbac",
        _ => return None,
    })
}

/// Translates `http_filters` and checks that the router, and only it, ends the chain.
fn http_filters(
    list: &[pb::HttpFilter],
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> (Vec<HttpFilter>, bool) {
    use pb::http_filter::ConfigType;
    let last = list.len().saturating_sub(1);
    let mut out = Vec::with_capacity(list.len());
    for (i, f) in list.iter().enumerate() {
        let p = path.index(i);
        let type_url = match &f.config_type {
            Some(ConfigType::TypedConfig(any)) => any.type_url.as_str(),
            _ => "",
        };
        let is_router = type_url == extensions::ROUTER;
        if is_router && i != last {
            ctx.error(
                &p,
                format!(
                    "terminal filter named {} of type envoy.filters.http.router must be the last filter in a http filter chain",
                    f.name
                ),
            );
        } else if !is_router
            && i == last
            && let Some(kind) = filter_type_name(type_url)
        {
            ctx.error(
                &p,
                format!(
                    "non-terminal filter named {} of type {kind} is the last filter in a http filter chain (the router must end it)",
                    f.name
                ),
            );
        }
        if let Some(f) = filters::http_filter(f, &p, ctx) {
            out.push(f);
        }
    }
    (out, list.is_empty())
}

fn internal_addresses(
    h: &pb::HttpConnectionManager,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> InternalAddresses {
    let Some(c) = &h.internal_address_config else {
        return InternalAddresses::Default;
    };
    if c.cidr_ranges.is_empty() {
        return InternalAddresses::Default;
    }
    let cp = path.field("internal_address_config.cidr_ranges");
    InternalAddresses::Ranges(
        c.cidr_ranges
            .iter()
            .enumerate()
            .filter_map(|(i, r)| matcher::cidr(r, &cp.index(i), ctx))
            .collect(),
    )
}

fn upgrade_configs(
    list: &[pb::http_connection_manager::UpgradeConfig],
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Vec<UpgradeConfig> {
    let mut out: Vec<UpgradeConfig> = Vec::with_capacity(list.len());
    for (i, u) in list.iter().enumerate() {
        let p = path.index(i);
        if u.upgrade_type.is_empty() {
            ctx.error(&p.field("upgrade_type"), "must not be empty");
            continue;
        }
        let upgrade_type = u.upgrade_type.to_ascii_lowercase();
        if out.iter().any(|o| o.upgrade_type == upgrade_type) {
            // Envoy's wording.
            ctx.error(
                &p.field("upgrade_type"),
                format!(
                    "multiple upgrade configs with the same name: '{}'",
                    u.upgrade_type
                ),
            );
            continue;
        }
        out.push(UpgradeConfig {
            upgrade_type,
            enabled: core::bool_or(u.enabled.as_ref(), true),
        });
    }
    out
}
