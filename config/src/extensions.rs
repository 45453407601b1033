//! The extensions courier implements: their names (current and legacy) and type URLs.

/// `@type` prefix of every Envoy `Any`.
pub const TYPE_URL_PREFIX: &str = "type.googleapis.com/";

/// The HTTP router filter.
pub const ROUTER: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";
/// The JWT authentication HTTP filter.
pub const JWT_AUTHN: &str =
    "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication";
/// Per-route config of the JWT authentication filter.
pub const JWT_AUTHN_PER_ROUTE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig";
/// The external authorization HTTP filter.
pub const EXT_AUTHZ: &str =
    "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz";
/// Per-route config of the external authorization filter.
pub const EXT_AUTHZ_PER_ROUTE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute";
/// The RBAC HTTP filter.
pub const RBAC: &str = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC";
/// Per-route config of the RBAC filter.
pub const RBAC_PER_ROUTE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute";
/// The compressor HTTP filter.
pub const COMPRESSOR: &str =
    "type.googleapis.com/envoy.extensions.filters.http.compressor.v3.Compressor";
/// Per-route config of the compressor filter.
pub const COMPRESSOR_PER_ROUTE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.compressor.v3.CompressorPerRoute";
/// The local rate limit HTTP filter (also its per-route config).
pub const LOCAL_RATELIMIT: &str =
    "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit";
/// The fault injection HTTP filter (also its per-route config).
pub const FAULT: &str = "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault";
/// The health check HTTP filter.
pub const HEALTH_CHECK: &str =
    "type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck";
/// The custom_response HTTP filter (also its per-route config).
pub const CUSTOM_RESPONSE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.custom_response.v3.CustomResponse";
/// The buffer HTTP filter.
pub const BUFFER: &str = "type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer";
/// The buffer filter's per-route config.
pub const BUFFER_PER_ROUTE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.buffer.v3.BufferPerRoute";
/// The header_mutation HTTP filter.
pub const HEADER_MUTATION: &str =
    "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation";
/// The CSRF HTTP filter (also its per-route config).
pub const CSRF: &str = "type.googleapis.com/envoy.extensions.filters.http.csrf.v3.CsrfPolicy";
/// The Basic authentication HTTP filter.
pub const BASIC_AUTH: &str =
    "type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuth";
/// Per-route config of the Basic authentication filter.
pub const BASIC_AUTH_PER_ROUTE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuthPerRoute";
/// The API key authentication HTTP filter.
pub const API_KEY_AUTH: &str =
    "type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth";
/// Per-route config of the API key authentication filter.
pub const API_KEY_AUTH_PER_ROUTE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuthPerRoute";
/// The OAuth2 HTTP filter.
pub const OAUTH2: &str = "type.googleapis.com/envoy.extensions.filters.http.oauth2.v3.OAuth2";
/// Per-route config of the OAuth2 filter.
pub const OAUTH2_PER_ROUTE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.oauth2.v3.OAuth2PerRoute";
/// The external processing HTTP filter.
pub const EXT_PROC: &str =
    "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor";
/// Per-route config of the external processing filter.
pub const EXT_PROC_PER_ROUTE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute";
/// The gRPC-Web HTTP filter.
pub const GRPC_WEB: &str = "type.googleapis.com/envoy.extensions.filters.http.grpc_web.v3.GrpcWeb";
/// The gRPC statistics HTTP filter.
pub const GRPC_STATS: &str =
    "type.googleapis.com/envoy.extensions.filters.http.grpc_stats.v3.FilterConfig";
/// The global rate limit HTTP filter.
pub const RATELIMIT: &str =
    "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit";
/// Per-route config of the global rate limit filter.
pub const RATELIMIT_PER_ROUTE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute";
/// The generic per-route wrapper (`is_optional`, `disabled`).
pub const FILTER_CONFIG: &str = "type.googleapis.com/envoy.config.route.v3.FilterConfig";
/// The type the JSON reader gives an empty `Any` written as `{}` in a `FilterConfig`
/// (protobuf's binary form has no type there): a prefix no control plane uses, so it
/// cannot be mistaken for a configured `google.protobuf.Empty`.
pub const EMPTY_ANY: &str = "courier.invalid/google.protobuf.Empty";
/// The HTTP connection manager network filter.
pub const HTTP_CONNECTION_MANAGER: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
/// The connection limit network filter.
pub const CONNECTION_LIMIT: &str =
    "type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit";
/// The RBAC network filter.
pub const NETWORK_RBAC: &str = "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC";
/// The TCP proxy network filter.
pub const TCP_PROXY: &str =
    "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";
/// The UDP proxy listener filter (`envoy.filters.udp_listener.udp_proxy`).
pub const UDP_PROXY: &str =
    "type.googleapis.com/envoy.extensions.filters.udp.udp_proxy.v3.UdpProxyConfig";
/// The UDP proxy's matcher action naming a cluster.
pub const UDP_PROXY_ROUTE: &str =
    "type.googleapis.com/envoy.extensions.filters.udp.udp_proxy.v3.Route";
/// The TLS transport socket, downstream side.
pub const DOWNSTREAM_TLS: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";
/// The TLS transport socket, upstream side.
pub const UPSTREAM_TLS: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
/// Upstream HTTP protocol options (`typed_extension_protocol_options`).
pub const HTTP_PROTOCOL_OPTIONS: &str =
    "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions";
/// Key under which `typed_extension_protocol_options` holds the HTTP options.
pub const HTTP_PROTOCOL_OPTIONS_KEY: &str =
    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";
/// File access logger.
pub const FILE_ACCESS_LOG: &str =
    "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog";
/// Stdout access logger.
pub const STDOUT_ACCESS_LOG: &str =
    "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog";
/// Stderr access logger.
pub const STDERR_ACCESS_LOG: &str =
    "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StderrAccessLog";
/// The HTTP gRPC access logger (Envoy's access log service client).
pub const HTTP_GRPC_ACCESS_LOG: &str =
    "type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig";
/// OpenTelemetry (OTLP logs over gRPC) access logger.
pub const OTEL_ACCESS_LOG: &str = "type.googleapis.com/envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig";
/// The DNS cluster extension (`cluster_type`), Envoy's form of STRICT_DNS and
/// LOGICAL_DNS.
pub const DNS_CLUSTER: &str = "type.googleapis.com/envoy.extensions.clusters.dns.v3.DnsCluster";
/// The internal-listener bootstrap extension.
pub const INTERNAL_LISTENER: &str =
    "type.googleapis.com/envoy.extensions.bootstrap.internal_listener.v3.InternalListener";
/// The Google RE2 regex engine (`default_regex_engine`).
pub const GOOGLE_RE2: &str = "type.googleapis.com/envoy.extensions.regex_engines.v3.GoogleRE2";
/// The dynamic forward proxy cluster's config.
pub const DFP_CLUSTER: &str =
    "type.googleapis.com/envoy.extensions.clusters.dynamic_forward_proxy.v3.ClusterConfig";
/// The dynamic forward proxy HTTP filter.
pub const DFP_FILTER: &str =
    "type.googleapis.com/envoy.extensions.filters.http.dynamic_forward_proxy.v3.FilterConfig";
/// The dynamic forward proxy HTTP filter's per-route config.
pub const DFP_PER_ROUTE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.dynamic_forward_proxy.v3.PerRouteConfig";
/// The SNI dynamic forward proxy network filter.
pub const SNI_DFP: &str = "type.googleapis.com/envoy.extensions.filters.network.sni_dynamic_forward_proxy.v3.FilterConfig";
/// The cluster-provided typed load-balancing policy.
pub const LB_CLUSTER_PROVIDED: &str = "type.googleapis.com/envoy.extensions.load_balancing_policies.cluster_provided.v3.ClusterProvided";
/// Typed load-balancing policies that map onto courier's built-in balancers.
pub const LB_ROUND_ROBIN: &str =
    "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin";
/// Least-request typed load-balancing policy.
pub const LB_LEAST_REQUEST: &str =
    "type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest";
/// Ring-hash typed load-balancing policy.
pub const LB_RING_HASH: &str =
    "type.googleapis.com/envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash";
/// Maglev typed load-balancing policy.
pub const LB_MAGLEV: &str =
    "type.googleapis.com/envoy.extensions.load_balancing_policies.maglev.v3.Maglev";
/// Random typed load-balancing policy.
pub const LB_RANDOM: &str =
    "type.googleapis.com/envoy.extensions.load_balancing_policies.random.v3.Random";

/// The `@type` an HTTP filter stands for when it is configured by name alone.
///
/// Envoy resolves a filter without `typed_config` through its factory name; the
/// legacy names (`envoy.router`, `envoy.ext_authz`) are still accepted by Envoy.
pub fn http_filter_type_by_name(name: &str) -> Option<&'static str> {
    Some(match name {
        "envoy.filters.http.router" | "envoy.router" => ROUTER,
        "envoy.filters.http.jwt_authn" | "envoy.extensions.filters.http.jwt_authn" => JWT_AUTHN,
        "envoy.filters.http.ext_authz" | "envoy.ext_authz" => EXT_AUTHZ,
        "envoy.filters.http.rbac" | "envoy.rbac" => RBAC,
        _ => return None,
    })
}
/// The upstream codec filter that ends a cluster's upstream HTTP filters.
pub const UPSTREAM_CODEC: &str =
    "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec";
/// The credential injector HTTP filter.
pub const CREDENTIAL_INJECTOR: &str =
    "type.googleapis.com/envoy.extensions.filters.http.credential_injector.v3.CredentialInjector";
/// The admission control HTTP filter.
pub const ADMISSION_CONTROL: &str =
    "type.googleapis.com/envoy.extensions.filters.http.admission_control.v3.AdmissionControl";
