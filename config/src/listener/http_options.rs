//! The connection manager's protocol options: `common_http_protocol_options`,
//! `http_protocol_options` (HTTP/1) and `http2_protocol_options`, with Envoy's
//! defaults and PGV ranges.

use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::core::v3 as pb;
use std::time::Duration;

/// Envoy's default connection idle timeout (`common_http_protocol_options.idle_timeout`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);
/// Envoy's default `max_headers_count`.
pub const DEFAULT_MAX_HEADERS_COUNT: u32 = 100;
/// Envoy's default HTTP/2 `max_concurrent_streams`.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 1024;
/// Envoy's default HTTP/2 stream window (16 MiB).
pub const DEFAULT_STREAM_WINDOW: u32 = 16 * 1024 * 1024;
/// Envoy's default HTTP/2 connection window (24 MiB).
pub const DEFAULT_CONNECTION_WINDOW: u32 = 24 * 1024 * 1024;
/// Envoy's default `max_outbound_frames`.
pub const DEFAULT_MAX_OUTBOUND_FRAMES: u32 = 10_000;
/// Envoy's default `max_outbound_control_frames`.
pub const DEFAULT_MAX_OUTBOUND_CONTROL_FRAMES: u32 = 1000;
/// Envoy's default `max_consecutive_inbound_frames_with_empty_payload`.
pub const DEFAULT_MAX_CONSECUTIVE_EMPTY_FRAMES: u32 = 1;
/// Envoy's default `max_inbound_priority_frames_per_stream`.
pub const DEFAULT_MAX_PRIORITY_FRAMES_PER_STREAM: u32 = 100;
/// Envoy's default `max_inbound_window_update_frames_per_data_frame_sent`.
pub const DEFAULT_MAX_WINDOW_UPDATES_PER_DATA_FRAME: u32 = 10;

/// What to do with request headers whose names contain `_`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadersWithUnderscores {
    /// Pass them on (default).
    Allow,
    /// HTTP/1: 400 and close; HTTP/2: reset the stream.
    RejectRequest,
    /// Remove them before the filters see the request.
    DropHeader,
}

/// `common_http_protocol_options`, downstream side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommonHttpOptions {
    /// Close a connection with no active stream after this long (default 1 h; `0s` = never).
    pub idle_timeout: Option<Duration>,
    /// Request headers allowed per request (default 100).
    pub max_headers_count: u32,
    /// Longest a stream may live (default: unbounded).
    pub max_stream_duration: Option<Duration>,
    /// Longest a connection may live before it is drained (default: unbounded).
    pub max_connection_duration: Option<Duration>,
    /// Requests served per connection before it is drained (default: unbounded).
    pub max_requests_per_connection: Option<u32>,
    /// Underscore handling.
    pub headers_with_underscores_action: HeadersWithUnderscores,
}

impl Default for CommonHttpOptions {
    fn default() -> Self {
        Self {
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            max_headers_count: DEFAULT_MAX_HEADERS_COUNT,
            max_stream_duration: None,
            max_connection_duration: None,
            max_requests_per_connection: None,
            headers_with_underscores_action: HeadersWithUnderscores::Allow,
        }
    }
}

/// `http_protocol_options` (HTTP/1.x).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Http1Options {
    /// Accept HTTP/1.0 requests (default: refused with 426).
    pub accept_http_10: bool,
    /// `Host` for HTTP/1.0 requests that carry none (only with `accept_http_10`).
    pub default_host_for_http_10: Option<String>,
    /// Accept and forward chunked trailers.
    pub enable_trailers: bool,
    /// `header_key_format`: the case header names are written in.
    pub header_case: HeaderCase,
}

/// `Http1ProtocolOptions.header_key_format`: the case of the header names an
/// HTTP/1.1 codec writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HeaderCase {
    /// Lower case, as received over HTTP/2 or added by the proxy (Envoy's default).
    #[default]
    Lower,
    /// The `preserve_case` stateful formatter: a codec configured with it
    /// remembers the case of the header names it reads, and whichever codec
    /// writes those headers on uses it; names it did not read stay lower case.
    Preserve {
        /// `forward_reason_phrase`: an upstream response's reason phrase goes on
        /// to the client (otherwise the standard one for its status).
        forward_reason_phrase: bool,
    },
}

/// Translates `header_key_format` (Envoy requires one of its formats).
pub fn header_case(
    o: Option<&pb::http1_protocol_options::HeaderKeyFormat>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> HeaderCase {
    use envoy_types::pb::envoy::extensions::http::header_formatters::preserve_case::v3 as pc;
    use pb::http1_protocol_options::header_key_format::HeaderFormat;
    let Some(o) = o else {
        return HeaderCase::Lower;
    };
    match &o.header_format {
        Some(HeaderFormat::StatefulFormatter(f)) => {
            let sf = path.field("stateful_formatter");
            let tp = sf.field("typed_config");
            let Some(any) = &f.typed_config else {
                ctx.error(&tp, "is required");
                return HeaderCase::Lower;
            };
            if any.type_url != <pc::PreserveCaseFormatterConfig as prost::Name>::type_url() {
                ctx.unsupported(&tp, format!("stateful header formatter {}", any.type_url));
                return HeaderCase::Lower;
            }
            let Some(c) = core::unpack::<pc::PreserveCaseFormatterConfig>(any, &tp, ctx) else {
                return HeaderCase::Lower;
            };
            if c.formatter_type_on_envoy_headers != 0 {
                ctx.unsupported(
                    &tp.field("formatter_type_on_envoy_headers"),
                    "formatter_type_on_envoy_headers PROPER_CASE",
                );
            }
            HeaderCase::Preserve {
                forward_reason_phrase: c.forward_reason_phrase,
            }
        }
        // Refused by the support table (only `stateful_formatter` is listed).
        Some(HeaderFormat::ProperCaseWords(_)) => HeaderCase::Lower,
        None => {
            ctx.error(
                path,
                "one of proper_case_words or stateful_formatter is required",
            );
            HeaderCase::Lower
        }
    }
}

/// `http2_protocol_options`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http2Options {
    /// Concurrent streams per connection (default 1024).
    pub max_concurrent_streams: u32,
    /// Initial stream flow-control window (default 16 MiB).
    pub initial_stream_window_size: u32,
    /// Initial connection flow-control window (default 24 MiB).
    pub initial_connection_window_size: u32,
    /// Envoy's HTTP/2 flood limits.
    pub flood: H2FloodLimits,
}

impl Default for Http2Options {
    fn default() -> Self {
        Self {
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            initial_stream_window_size: DEFAULT_STREAM_WINDOW,
            initial_connection_window_size: DEFAULT_CONNECTION_WINDOW,
            flood: H2FloodLimits::default(),
        }
    }
}

/// The flood limits of `http2_protocol_options` (Envoy's defaults when unset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2FloodLimits {
    /// Frames of every kind queued for the peer (`max_outbound_frames`).
    pub outbound_frames: u32,
    /// PING/SETTINGS ACKs and RST_STREAMs queued (`max_outbound_control_frames`).
    pub outbound_control_frames: u32,
    /// Empty HEADERS/CONTINUATION/DATA frames in a row without END_STREAM
    /// (`max_consecutive_inbound_frames_with_empty_payload`).
    pub consecutive_empty_frames: u32,
    /// PRIORITY frames per stream opened (`max_inbound_priority_frames_per_stream`).
    pub priority_frames_per_stream: u32,
    /// WINDOW_UPDATE frames per DATA frame sent
    /// (`max_inbound_window_update_frames_per_data_frame_sent`).
    pub window_updates_per_data_frame: u32,
}

impl Default for H2FloodLimits {
    fn default() -> Self {
        Self {
            outbound_frames: DEFAULT_MAX_OUTBOUND_FRAMES,
            outbound_control_frames: DEFAULT_MAX_OUTBOUND_CONTROL_FRAMES,
            consecutive_empty_frames: DEFAULT_MAX_CONSECUTIVE_EMPTY_FRAMES,
            priority_frames_per_stream: DEFAULT_MAX_PRIORITY_FRAMES_PER_STREAM,
            window_updates_per_data_frame: DEFAULT_MAX_WINDOW_UPDATES_PER_DATA_FRAME,
        }
    }
}

/// Translates `common_http_protocol_options` of a connection manager.
pub fn common(o: &pb::HttpProtocolOptions, path: &Path<'_>, ctx: &mut Ctx) -> CommonHttpOptions {
    use pb::http_protocol_options::HeadersWithUnderscoresAction as A;
    let max_headers_count = core::u32_or(o.max_headers_count.as_ref(), DEFAULT_MAX_HEADERS_COUNT);
    if max_headers_count < 1 {
        ctx.error(&path.field("max_headers_count"), "must be at least 1");
    }
    let headers_with_underscores_action = match A::try_from(o.headers_with_underscores_action) {
        Ok(A::RejectRequest) => HeadersWithUnderscores::RejectRequest,
        Ok(A::DropHeader) => HeadersWithUnderscores::DropHeader,
        _ => HeadersWithUnderscores::Allow,
    };
    CommonHttpOptions {
        idle_timeout: core::optional_timeout(
            o.idle_timeout.as_ref(),
            Some(DEFAULT_IDLE_TIMEOUT),
            &path.field("idle_timeout"),
            ctx,
        ),
        max_headers_count,
        max_stream_duration: core::optional_timeout(
            o.max_stream_duration.as_ref(),
            None,
            &path.field("max_stream_duration"),
            ctx,
        ),
        max_connection_duration: core::optional_timeout(
            o.max_connection_duration.as_ref(),
            None,
            &path.field("max_connection_duration"),
            ctx,
        ),
        // 0 means unlimited, as when unset.
        max_requests_per_connection: o
            .max_requests_per_connection
            .as_ref()
            .map(|v| v.value)
            .filter(|v| *v > 0),
        headers_with_underscores_action,
    }
}

/// Translates `http_protocol_options`.
pub fn http1(o: &pb::Http1ProtocolOptions, path: &Path<'_>, ctx: &mut Ctx) -> Http1Options {
    Http1Options {
        accept_http_10: o.accept_http_10,
        default_host_for_http_10: Some(o.default_host_for_http_10.clone())
            .filter(|h| !h.is_empty()),
        enable_trailers: o.enable_trailers,
        header_case: header_case(
            o.header_key_format.as_ref(),
            &path.field("header_key_format"),
            ctx,
        ),
    }
}

/// Translates `http2_protocol_options`, checking Envoy's ranges.
pub fn http2(o: &pb::Http2ProtocolOptions, path: &Path<'_>, ctx: &mut Ctx) -> Http2Options {
    const MAX: u32 = 2_147_483_647;
    // Accepted by the (per-message) support table for upstream connections;
    // downstream, courier's server sends no keepalive PINGs.
    if o.connection_keepalive.is_some() {
        ctx.unsupported(
            &path.field("connection_keepalive"),
            "connection_keepalive on downstream connections",
        );
    }
    // Accepted by the (per-message) support table for upstream connections.
    if o.override_stream_error_on_invalid_http_message.is_some() {
        ctx.unsupported(
            &path.field("override_stream_error_on_invalid_http_message"),
            "override_stream_error_on_invalid_http_message on downstream connections",
        );
    }
    let mut ranged = |v: Option<&envoy_types::pb::google::protobuf::UInt32Value>,
                      default: u32,
                      min: u32,
                      field: &str| {
        let value = core::u32_or(v, default);
        if !(min..=MAX).contains(&value) {
            ctx.error(
                &path.field(field),
                format!("{value} is out of range {min}..={MAX}"),
            );
            return default;
        }
        value
    };
    Http2Options {
        max_concurrent_streams: ranged(
            o.max_concurrent_streams.as_ref(),
            DEFAULT_MAX_CONCURRENT_STREAMS,
            1,
            "max_concurrent_streams",
        ),
        initial_stream_window_size: ranged(
            o.initial_stream_window_size.as_ref(),
            DEFAULT_STREAM_WINDOW,
            65_535,
            "initial_stream_window_size",
        ),
        initial_connection_window_size: ranged(
            o.initial_connection_window_size.as_ref(),
            DEFAULT_CONNECTION_WINDOW,
            65_535,
            "initial_connection_window_size",
        ),
        flood: H2FloodLimits {
            // PGV: both outbound limits are at least 1; the inbound ones may be 0.
            outbound_frames: ranged(
                o.max_outbound_frames.as_ref(),
                DEFAULT_MAX_OUTBOUND_FRAMES,
                1,
                "max_outbound_frames",
            ),
            outbound_control_frames: ranged(
                o.max_outbound_control_frames.as_ref(),
                DEFAULT_MAX_OUTBOUND_CONTROL_FRAMES,
                1,
                "max_outbound_control_frames",
            ),
            consecutive_empty_frames: core::u32_or(
                o.max_consecutive_inbound_frames_with_empty_payload.as_ref(),
                DEFAULT_MAX_CONSECUTIVE_EMPTY_FRAMES,
            ),
            priority_frames_per_stream: core::u32_or(
                o.max_inbound_priority_frames_per_stream.as_ref(),
                DEFAULT_MAX_PRIORITY_FRAMES_PER_STREAM,
            ),
            window_updates_per_data_frame: core::u32_or(
                o.max_inbound_window_update_frames_per_data_frame_sent
                    .as_ref(),
                DEFAULT_MAX_WINDOW_UPDATES_PER_DATA_FRAME,
            ),
        },
    }
}
