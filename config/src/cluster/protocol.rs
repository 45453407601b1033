//! The HTTP protocol spoken to upstream hosts: the typed
//! `envoy.extensions.upstreams.http.v3.HttpProtocolOptions` and the deprecated
//! cluster-level fields that mean the same.

use super::values;
use crate::core;
use crate::ctx::Ctx;
use crate::extensions;
use crate::listener::http_options::{HeaderCase, header_case};
use crate::path::Path;
use envoy_types::pb::envoy::config::cluster::v3 as pb;
use envoy_types::pb::envoy::config::core::v3 as cpb;
use envoy_types::pb::envoy::extensions::upstreams::http::v3 as hpb;
use std::time::Duration;

/// Envoy's default upstream `idle_timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);
/// Envoy's default HTTP/2 `max_concurrent_streams`.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 2_147_483_647;
/// Envoy's default HTTP/2 initial stream and connection window (256 MiB).
pub const DEFAULT_WINDOW_SIZE: u32 = 256 * 1024 * 1024;

/// How a cluster speaks HTTP to its hosts.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamHttp {
    /// Which protocol.
    pub protocol: UpstreamProtocol,
    /// HTTP/2 settings, used whenever a connection speaks HTTP/2.
    pub http2: Http2Options,
    /// Settings common to every protocol.
    pub common: HttpCommonOptions,
    /// `upstream_http_protocol_options`: the TLS server name and the SANs a new
    /// connection checks, taken from each request.
    pub auto_sni: AutoSni,
    /// `http_protocol_options.enable_trailers`: HTTP/1.1 connections carry
    /// trailers both ways (Envoy's HTTP/1 codec drops them otherwise; HTTP/2
    /// always carries them).
    pub enable_trailers: bool,
    /// `http_protocol_options.header_key_format`: the case of the response
    /// header names HTTP/1.1 connections read kept for the client (the
    /// request's are written as the connection manager read them).
    pub header_case: HeaderCase,
    /// `http_filters` but the terminal codec filter: run per upstream attempt.
    pub http_filters: Vec<super::upstream_filters::UpstreamFilter>,
}

/// `UpstreamHttpProtocolOptions`: a new TLS connection's SNI and the SAN its
/// server certificate must have, from the request's host (after the route's host
/// rewrite) or `override_auto_sni_header`, as Envoy's router sets them. Without
/// an upstream TLS transport socket there is nothing to set, as in Envoy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutoSni {
    /// `auto_sni`: send the host as SNI (not when it is an IP address).
    pub sni: bool,
    /// `auto_san_validation`: the server certificate must have the host as a SAN
    /// (in place of the configured SAN matchers).
    pub san_validation: bool,
    /// `override_auto_sni_header`, lower-cased: the header whose value (when
    /// present and not empty) is used instead of the host.
    pub header: Option<String>,
}

impl AutoSni {
    /// Whether either option takes a name from the request.
    pub fn any(&self) -> bool {
        self.sni || self.san_validation
    }
}

impl UpstreamHttp {
    /// Whether connections to the cluster may speak HTTP/2.
    pub fn may_use_http2(&self) -> bool {
        !matches!(self.protocol, UpstreamProtocol::Http1)
    }
}

impl UpstreamProtocol {
    /// The protocol a request goes upstream in (`downstream_h2`: it came in as
    /// HTTP/2): `UseDownstream` settled to HTTP/1.1 or HTTP/2, the others as
    /// they are.
    pub fn for_request(self, downstream_h2: bool) -> UpstreamProtocol {
        match self {
            UpstreamProtocol::UseDownstream => {
                if downstream_h2 {
                    UpstreamProtocol::Http2
                } else {
                    UpstreamProtocol::Http1
                }
            }
            other => other,
        }
    }
}

impl Default for UpstreamHttp {
    fn default() -> Self {
        Self {
            protocol: UpstreamProtocol::Http1,
            http2: Http2Options::default(),
            common: HttpCommonOptions::default(),
            auto_sni: AutoSni::default(),
            enable_trailers: false,
            header_case: HeaderCase::Lower,
            http_filters: Vec::new(),
        }
    }
}

/// The upstream protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamProtocol {
    /// HTTP/1.1 (the default).
    Http1,
    /// HTTP/2 (h2c without TLS, h2 over TLS).
    Http2,
    /// The protocol of the downstream request: HTTP/2 for an HTTP/2 request,
    /// else HTTP/1.1 (Envoy 1.40 does so with or without `http2_protocol_options`;
    /// checked in tests/cluster_fields_differential.rs).
    UseDownstream,
    /// Chosen by ALPN over TLS: h2, else HTTP/1.1.
    Auto,
}

/// HTTP/2 settings (`Http2ProtocolOptions`).
#[derive(Debug, Clone, PartialEq)]
pub struct Http2Options {
    /// SETTINGS_MAX_CONCURRENT_STREAMS (default 2^31 - 1).
    pub max_concurrent_streams: u32,
    /// Initial stream window (default 256 MiB).
    pub initial_stream_window_size: u32,
    /// Initial connection window (default 256 MiB).
    pub initial_connection_window_size: u32,
    /// `connection_keepalive`: PINGs and their ACK timeout, when set.
    pub keepalive: Option<super::keepalive::Http2Keepalive>,
}

impl Default for Http2Options {
    fn default() -> Self {
        Self {
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            initial_stream_window_size: DEFAULT_WINDOW_SIZE,
            initial_connection_window_size: DEFAULT_WINDOW_SIZE,
            keepalive: None,
        }
    }
}

/// `common_http_protocol_options` for upstream connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpCommonOptions {
    /// Close a connection idle this long; `None` = never (default 1 h; `0s` disables).
    pub idle_timeout: Option<Duration>,
    /// Close a connection this long after it opened; `None` = never (the default).
    pub max_connection_duration: Option<Duration>,
    /// Requests per connection; `None` = unlimited (the default).
    pub max_requests_per_connection: Option<u32>,
    /// `max_stream_duration`: how long an upstream stream may last, from when
    /// its connection is ready until its response ends; `None` = no limit
    /// (the default; `0s` too, as Envoy).
    pub max_stream_duration: Option<Duration>,
}

impl Default for HttpCommonOptions {
    fn default() -> Self {
        Self {
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            max_connection_duration: None,
            max_requests_per_connection: None,
            max_stream_duration: None,
        }
    }
}

/// Translates the cluster's upstream HTTP settings.
pub(super) fn translate(c: &pb::Cluster, path: &Path<'_>, ctx: &mut Ctx) -> UpstreamHttp {
    let op = path.field("typed_extension_protocol_options");
    let mut typed = None;
    for (key, any) in &c.typed_extension_protocol_options {
        let kp = op.key(key);
        if key != extensions::HTTP_PROTOCOL_OPTIONS_KEY {
            ctx.unsupported(&kp, format!("protocol options {key}"));
            continue;
        }
        if let Some(o) = core::unpack::<hpb::HttpProtocolOptions>(any, &kp, ctx) {
            typed = Some(o);
        }
    }
    let mut out = match &typed {
        Some(o) => {
            let kp = op.key(extensions::HTTP_PROTOCOL_OPTIONS_KEY);
            // Envoy ignores the deprecated fields when the typed options are present.
            for (set, name) in [
                (c.http_protocol_options.is_some(), "http_protocol_options"),
                (c.http2_protocol_options.is_some(), "http2_protocol_options"),
                (
                    c.common_http_protocol_options.is_some(),
                    "common_http_protocol_options",
                ),
                (
                    c.protocol_selection
                        != pb::cluster::ClusterProtocolSelection::UseConfiguredProtocol as i32,
                    "protocol_selection",
                ),
                (
                    #[allow(deprecated)]
                    c.upstream_http_protocol_options.is_some(),
                    "upstream_http_protocol_options",
                ),
            ] {
                if set {
                    ctx.error(
                        &path.field(name),
                        format!(
                            "cannot be combined with typed_extension_protocol_options[\"{}\"], which supersedes it",
                            extensions::HTTP_PROTOCOL_OPTIONS_KEY
                        ),
                    );
                }
            }
            typed_options(o, c.transport_socket.is_some(), &kp, ctx)
        }
        None => legacy(c, path, ctx),
    };
    // The deprecated cluster-level limit.
    if let Some(m) = &c.max_requests_per_connection {
        if out.common.max_requests_per_connection.is_some() {
            ctx.error(
                &path.field("max_requests_per_connection"),
                "cannot be combined with common_http_protocol_options.max_requests_per_connection",
            );
        } else {
            out.common.max_requests_per_connection = (m.value != 0).then_some(m.value);
        }
    }
    out
}

fn typed_options(
    o: &hpb::HttpProtocolOptions,
    has_tls: bool,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> UpstreamHttp {
    use hpb::http_protocol_options::UpstreamProtocolOptions as U;
    use hpb::http_protocol_options::explicit_http_config::ProtocolConfig as P;
    let common = common(
        o.common_http_protocol_options.as_ref(),
        &path.field("common_http_protocol_options"),
        ctx,
    );
    // Each protocol choice has its own `http_protocol_options`.
    let (mut enable_trailers, mut header_case) = (false, HeaderCase::Lower);
    let mut h1_options = |h1: Option<&cpb::Http1ProtocolOptions>, path: Path<'_>, ctx: &mut Ctx| {
        if let Some(h1) = h1 {
            (enable_trailers, header_case) = upstream_http1(h1, &path, ctx);
        }
    };
    let (protocol, http2) = match &o.upstream_protocol_options {
        Some(U::ExplicitHttpConfig(e)) => {
            let ep = path.field("explicit_http_config");
            match &e.protocol_config {
                Some(P::HttpProtocolOptions(h1)) => {
                    h1_options(Some(h1), ep.field("http_protocol_options"), ctx);
                    (UpstreamProtocol::Http1, Http2Options::default())
                }
                Some(P::Http2ProtocolOptions(h2)) => (
                    UpstreamProtocol::Http2,
                    http2(h2, &ep.field("http2_protocol_options"), ctx),
                ),
                // Refused by the support table ("http3_protocol_options is not supported").
                Some(P::Http3ProtocolOptions(_)) => {
                    (UpstreamProtocol::Http1, Http2Options::default())
                }
                None => {
                    ctx.error(
                        &ep,
                        "one of http_protocol_options or http2_protocol_options is required",
                    );
                    (UpstreamProtocol::Http1, Http2Options::default())
                }
            }
        }
        Some(U::UseDownstreamProtocolConfig(d)) => {
            h1_options(
                d.http_protocol_options.as_ref(),
                path.field("use_downstream_protocol_config.http_protocol_options"),
                ctx,
            );
            (
                UpstreamProtocol::UseDownstream,
                optional_http2(
                    d.http2_protocol_options.as_ref(),
                    &path.field("use_downstream_protocol_config.http2_protocol_options"),
                    ctx,
                ),
            )
        }
        Some(U::AutoConfig(a)) => {
            h1_options(
                a.http_protocol_options.as_ref(),
                path.field("auto_config.http_protocol_options"),
                ctx,
            );
            if !has_tls {
                ctx.error(
                    &path.field("auto_config"),
                    "needs a TLS transport_socket: ALPN chooses the protocol",
                );
            }
            (
                UpstreamProtocol::Auto,
                optional_http2(
                    a.http2_protocol_options.as_ref(),
                    &path.field("auto_config.http2_protocol_options"),
                    ctx,
                ),
            )
        }
        None => {
            ctx.error(
                path,
                "one of explicit_http_config, use_downstream_protocol_config or auto_config is required",
            );
            (UpstreamProtocol::Http1, Http2Options::default())
        }
    };
    UpstreamHttp {
        protocol,
        http2,
        common,
        auto_sni: auto_sni(
            o.upstream_http_protocol_options.as_ref(),
            &path.field("upstream_http_protocol_options"),
            ctx,
        ),
        enable_trailers,
        header_case,
        http_filters: super::upstream_filters::translate(
            &o.http_filters,
            &path.field("http_filters"),
            ctx,
        ),
    }
}

/// `UpstreamHttpProtocolOptions`.
fn auto_sni(
    o: Option<&cpb::UpstreamHttpProtocolOptions>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> AutoSni {
    let Some(o) = o else {
        return AutoSni::default();
    };
    let header = if o.override_auto_sni_header.is_empty() {
        None
    } else {
        let h = &o.override_auto_sni_header;
        // Envoy's rule: ^:?[0-9a-zA-Z!#$%&'*+-.^_|~`]+$
        let name = h.strip_prefix(':').unwrap_or(h);
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            ctx.error(
                &path.field("override_auto_sni_header"),
                format!("\"{h}\" is not a valid header name"),
            );
        }
        Some(h.to_ascii_lowercase())
    };
    AutoSni {
        sni: o.auto_sni,
        san_validation: o.auto_san_validation,
        header,
    }
}

/// A byte of Envoy's header-name pattern (`[0-9a-zA-Z!#$%&'*+-.^_|~\`]`, where
/// `+-.` is the range `+ , - .`).
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+,-.^_|~`".contains(&b)
}

/// The deprecated cluster-level fields (still valid v3 config).
fn legacy(c: &pb::Cluster, path: &Path<'_>, ctx: &mut Ctx) -> UpstreamHttp {
    let (enable_trailers, header_case) = c
        .http_protocol_options
        .as_ref()
        .map_or((false, HeaderCase::Lower), |h1| {
            upstream_http1(h1, &path.field("http_protocol_options"), ctx)
        });
    let downstream =
        c.protocol_selection == pb::cluster::ClusterProtocolSelection::UseDownstreamProtocol as i32;
    let protocol = if downstream {
        UpstreamProtocol::UseDownstream
    } else if c.http2_protocol_options.is_some() {
        UpstreamProtocol::Http2
    } else {
        UpstreamProtocol::Http1
    };
    UpstreamHttp {
        protocol,
        http2: optional_http2(
            c.http2_protocol_options.as_ref(),
            &path.field("http2_protocol_options"),
            ctx,
        ),
        common: common(
            c.common_http_protocol_options.as_ref(),
            &path.field("common_http_protocol_options"),
            ctx,
        ),
        #[allow(deprecated)]
        auto_sni: auto_sni(
            c.upstream_http_protocol_options.as_ref(),
            &path.field("upstream_http_protocol_options"),
            ctx,
        ),
        enable_trailers,
        header_case,
        http_filters: Vec::new(),
    }
}

/// A cluster's `Http1ProtocolOptions`: whether its connections carry trailers,
/// and the case of the header names they read.
/// The support table is keyed by message, and the connection manager implements
/// the HTTP/1.0 fields downstream; upstream, courier does not.
fn upstream_http1(
    o: &cpb::Http1ProtocolOptions,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> (bool, HeaderCase) {
    for (set, field) in [
        (o.accept_http_10, "accept_http_10"),
        (
            !o.default_host_for_http_10.is_empty(),
            "default_host_for_http_10",
        ),
    ] {
        if set {
            ctx.unsupported(
                &path.field(field),
                format!("{field} on upstream connections"),
            );
        }
    }
    let case = header_case(
        o.header_key_format.as_ref(),
        &path.field("header_key_format"),
        ctx,
    );
    (o.enable_trailers, case)
}

fn common(
    o: Option<&cpb::HttpProtocolOptions>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> HttpCommonOptions {
    let Some(o) = o else {
        return HttpCommonOptions::default();
    };
    // Listed in the (per-message) support table for the connection manager,
    // which implements them downstream; upstream they are not implemented.
    for (set, field) in [
        (o.max_headers_count.is_some(), "max_headers_count"),
        (
            o.headers_with_underscores_action != 0,
            "headers_with_underscores_action",
        ),
    ] {
        if set {
            ctx.unsupported(
                &path.field(field),
                format!("{field} on upstream connections"),
            );
        }
    }
    HttpCommonOptions {
        idle_timeout: core::optional_timeout(
            o.idle_timeout.as_ref(),
            Some(DEFAULT_IDLE_TIMEOUT),
            &path.field("idle_timeout"),
            ctx,
        ),
        max_connection_duration: core::optional_timeout(
            o.max_connection_duration.as_ref(),
            None,
            &path.field("max_connection_duration"),
            ctx,
        ),
        max_requests_per_connection: o
            .max_requests_per_connection
            .as_ref()
            .and_then(|m| (m.value != 0).then_some(m.value)),
        max_stream_duration: core::optional_timeout(
            o.max_stream_duration.as_ref(),
            None,
            &path.field("max_stream_duration"),
            ctx,
        ),
    }
}

fn optional_http2(
    o: Option<&cpb::Http2ProtocolOptions>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Http2Options {
    o.map_or_else(Http2Options::default, |o| http2(o, path, ctx))
}

fn http2(o: &cpb::Http2ProtocolOptions, path: &Path<'_>, ctx: &mut Ctx) -> Http2Options {
    const MAX: u32 = 2_147_483_647;
    // hyper's client resets only the stream of a malformed response and keeps
    // the connection: Envoy's behaviour with the override on. Off, Envoy
    // closes the connection, which courier does not do.
    if o.override_stream_error_on_invalid_http_message
        .as_ref()
        .is_some_and(|v| !v.value)
    {
        ctx.unsupported(
            &path.field("override_stream_error_on_invalid_http_message"),
            "override_stream_error_on_invalid_http_message false (a malformed response closing its connection)",
        );
    }
    // The support table accepts these for a connection manager (the same
    // message); upstream connections do not enforce them.
    for (set, field) in [
        (o.max_outbound_frames.is_some(), "max_outbound_frames"),
        (
            o.max_outbound_control_frames.is_some(),
            "max_outbound_control_frames",
        ),
        (
            o.max_consecutive_inbound_frames_with_empty_payload
                .is_some(),
            "max_consecutive_inbound_frames_with_empty_payload",
        ),
        (
            o.max_inbound_priority_frames_per_stream.is_some(),
            "max_inbound_priority_frames_per_stream",
        ),
        (
            o.max_inbound_window_update_frames_per_data_frame_sent
                .is_some(),
            "max_inbound_window_update_frames_per_data_frame_sent",
        ),
    ] {
        if set {
            ctx.unsupported(&path.field(field), field);
        }
    }
    Http2Options {
        max_concurrent_streams: values::u32_in(
            o.max_concurrent_streams.as_ref(),
            DEFAULT_MAX_CONCURRENT_STREAMS,
            1,
            MAX,
            &path.field("max_concurrent_streams"),
            ctx,
        ),
        initial_stream_window_size: values::u32_in(
            o.initial_stream_window_size.as_ref(),
            DEFAULT_WINDOW_SIZE,
            65535,
            MAX,
            &path.field("initial_stream_window_size"),
            ctx,
        ),
        initial_connection_window_size: values::u32_in(
            o.initial_connection_window_size.as_ref(),
            DEFAULT_WINDOW_SIZE,
            65535,
            MAX,
            &path.field("initial_connection_window_size"),
            ctx,
        ),
        keepalive: o
            .connection_keepalive
            .as_ref()
            .and_then(|k| super::keepalive::translate(k, &path.field("connection_keepalive"), ctx)),
    }
}
