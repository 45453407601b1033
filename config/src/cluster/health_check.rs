//! Active health checks (`health_checks[]`): HTTP, gRPC and TCP (connect, or a
//! payload sent and the answer searched for expected payloads).

use super::protocol::UpstreamHttp;
use super::values;
use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::core::v3 as cpb;
use envoy_types::pb::envoy::r#type::v3::{CodecClientType, Int64Range};
use std::ops::Range;
use std::time::Duration;

/// Envoy's default `no_traffic_interval`.
pub const DEFAULT_NO_TRAFFIC_INTERVAL: Duration = Duration::from_secs(60);

/// A validated active health check, every interval resolved to a concrete value.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthCheck {
    /// Time to wait for a check's answer.
    pub timeout: Duration,
    /// Period between checks of a healthy host.
    pub interval: Duration,
    /// Random delay before the first check (0).
    pub initial_jitter: Duration,
    /// Random extra time added to each interval, up to this (0).
    pub interval_jitter: Duration,
    /// Random extra time added to each interval, up to this percentage of it (0).
    pub interval_jitter_percent: u32,
    /// Failed checks before a host is unhealthy.
    pub unhealthy_threshold: u32,
    /// Passed checks before an unhealthy host is healthy again (a new host needs one).
    pub healthy_threshold: u32,
    /// Period between checks of an unhealthy host (default `interval`).
    pub unhealthy_interval: Duration,
    /// Delay of the next check after a host turns unhealthy (default `unhealthy_interval`).
    pub unhealthy_edge_interval: Duration,
    /// Delay of the next check after a host turns healthy (default `interval`).
    pub healthy_edge_interval: Duration,
    /// Period while the cluster has seen no traffic (default 60 s).
    pub no_traffic_interval: Duration,
    /// Period for healthy hosts while the cluster has seen no traffic
    /// (default `no_traffic_interval`).
    pub no_traffic_healthy_interval: Duration,
    /// Keep the connection between checks (default true).
    pub reuse_connection: bool,
    /// What a check sends and expects.
    pub kind: HealthCheckKind,
    /// `transport_socket_match_criteria`: the cluster's transport socket its
    /// connections use; `None` = each host's own.
    pub transport_socket: Option<super::socket_match::SocketIndex>,
    /// Files the check's events go to, one JSON `HealthCheckEvent` per line: the
    /// `envoy.health_check.event_sinks.file` sinks of `event_logger`, then the
    /// deprecated `event_log_path`.
    pub event_logs: Vec<String>,
    /// `always_log_health_check_failures`: every failed check is an event, not
    /// only a host's first.
    pub always_log_failures: bool,
    /// `always_log_health_check_success`: every passed check that changes
    /// nothing is an event.
    pub always_log_success: bool,
}

/// The kind of check.
#[derive(Debug, Clone, PartialEq)]
pub enum HealthCheckKind {
    /// An HTTP request.
    Http(HttpHealthCheck),
    /// `grpc.health.v1.Health/Check` over HTTP/2.
    Grpc(GrpcHealthCheck),
    /// A TCP check: connect, send `send`, pass once the bytes read hold every
    /// `receive` payload in order (no payload expected: pass on connect).
    Tcp(TcpHealthCheck),
}

/// A TCP health check's payloads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TcpHealthCheck {
    /// Written after connecting (empty: nothing).
    pub send: Vec<u8>,
    /// Expected in the bytes read, each after the previous one.
    pub receive: Vec<Vec<u8>>,
}

/// Envoy's default `response_buffer_size` of an HTTP check: bytes of the
/// response body searched for the `receive` payloads.
pub const DEFAULT_RESPONSE_BUFFER_SIZE: u64 = 1024;

/// Whether `data` holds each of `expected`, in order and not overlapping (Envoy's
/// `PayloadMatcher::match`). No payload matches anything.
pub fn payloads_match(expected: &[Vec<u8>], data: &[u8]) -> bool {
    let mut from = 0;
    for want in expected {
        let Some(at) = find(&data[from.min(data.len())..], want) else {
            return false;
        };
        from += at + want.len();
    }
    true
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// An HTTP health check.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpHealthCheck {
    /// `Host` (`:authority`); `None` = the cluster name (or the endpoint's health-check hostname).
    pub host: Option<String>,
    /// Request path.
    pub path: String,
    /// Request method (upper case; default GET).
    pub method: &'static str,
    /// Statuses that pass (default `[200, 201)`); half-open ranges.
    pub expected_statuses: Vec<StatusRange>,
    /// Statuses that count towards `unhealthy_threshold` instead of failing at once.
    pub retriable_statuses: Vec<StatusRange>,
    /// Headers added to each check request, in order.
    pub request_headers_to_add: Vec<RequestHeader>,
    /// Headers removed from each check request (lower case).
    pub request_headers_to_remove: Vec<String>,
    /// The HTTP version of the check.
    pub codec: HealthCheckCodec,
    /// `send`: the request body (with its `content-length`); `None` = no body.
    pub send: Option<Vec<u8>>,
    /// `receive`: payloads the response body must hold, in order, within its first
    /// `response_buffer_size` bytes; checked before the status.
    pub receive: Vec<Vec<u8>>,
    /// Bytes of the body kept for `receive` (0 = all).
    pub response_buffer_size: u64,
}

/// A half-open range of HTTP statuses, `start..end`.
pub type StatusRange = Range<u16>;

/// The HTTP version of a health check (`codec_client_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthCheckCodec {
    /// HTTP/1.1.
    Http1,
    /// HTTP/2.
    Http2,
}

/// A header added to health-check requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    /// Lower-case name.
    pub name: String,
    /// Value, literally (no `%` formatting).
    pub value: String,
    /// How it combines with a header of the same name.
    pub append: HeaderAppend,
    /// Add it even when the value is empty.
    pub keep_empty_value: bool,
}

/// `HeaderValueOption.append_action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderAppend {
    /// Append to an existing value, or add.
    AppendIfExistsOrAdd,
    /// Add only when absent.
    AddIfAbsent,
    /// Replace an existing value, or add.
    OverwriteIfExistsOrAdd,
    /// Replace an existing value only.
    OverwriteIfExists,
}

/// A gRPC health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcHealthCheck {
    /// `HealthCheckRequest.service` (empty = the server as a whole).
    pub service_name: String,
    /// `:authority`; `None` = the cluster name.
    pub authority: Option<String>,
}

/// Translates one `HealthCheck`. `protocol` is the cluster's, to check that gRPC
/// checks have HTTP/2; `sockets` its `transport_socket_matches`.
pub(super) fn translate(
    h: &cpb::HealthCheck,
    protocol: &UpstreamHttp,
    sockets: &[super::socket_match::TransportSocketMatch],
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<HealthCheck> {
    let errors = ctx.error_count();
    let timeout = required_positive(h.timeout.as_ref(), &path.field("timeout"), ctx);
    let interval = required_positive(h.interval.as_ref(), &path.field("interval"), ctx);
    let unhealthy_threshold = required_u32(
        h.unhealthy_threshold.as_ref(),
        &path.field("unhealthy_threshold"),
        ctx,
    );
    let healthy_threshold = required_u32(
        h.healthy_threshold.as_ref(),
        &path.field("healthy_threshold"),
        ctx,
    );
    let kind = kind(h, protocol, path, ctx);
    let opt = |d: Option<&envoy_types::pb::google::protobuf::Duration>, name, ctx: &mut Ctx| {
        values::optional_positive(d, &path.field(name), ctx)
    };
    let unhealthy_interval = opt(h.unhealthy_interval.as_ref(), "unhealthy_interval", ctx);
    let unhealthy_edge_interval = opt(
        h.unhealthy_edge_interval.as_ref(),
        "unhealthy_edge_interval",
        ctx,
    );
    let healthy_edge_interval = opt(
        h.healthy_edge_interval.as_ref(),
        "healthy_edge_interval",
        ctx,
    );
    let no_traffic_interval = opt(h.no_traffic_interval.as_ref(), "no_traffic_interval", ctx)
        .unwrap_or(DEFAULT_NO_TRAFFIC_INTERVAL);
    let no_traffic_healthy_interval = opt(
        h.no_traffic_healthy_interval.as_ref(),
        "no_traffic_healthy_interval",
        ctx,
    )
    .unwrap_or(no_traffic_interval);
    let initial_jitter = core::duration_or(
        h.initial_jitter.as_ref(),
        Duration::ZERO,
        &path.field("initial_jitter"),
        ctx,
    );
    let interval_jitter = core::duration_or(
        h.interval_jitter.as_ref(),
        Duration::ZERO,
        &path.field("interval_jitter"),
        ctx,
    );
    let event_logs = event_logs(h, path, ctx);
    if ctx.error_count() != errors {
        return None;
    }
    let (timeout, interval, kind) = (timeout?, interval?, kind?);
    let unhealthy_interval = unhealthy_interval.unwrap_or(interval);
    Some(HealthCheck {
        timeout,
        interval,
        initial_jitter,
        interval_jitter,
        interval_jitter_percent: h.interval_jitter_percent,
        unhealthy_threshold: unhealthy_threshold?,
        healthy_threshold: healthy_threshold?,
        unhealthy_interval,
        unhealthy_edge_interval: unhealthy_edge_interval.unwrap_or(unhealthy_interval),
        healthy_edge_interval: healthy_edge_interval.unwrap_or(interval),
        no_traffic_interval,
        no_traffic_healthy_interval,
        reuse_connection: core::bool_or(h.reuse_connection.as_ref(), true),
        kind,
        transport_socket: h
            .transport_socket_match_criteria
            .as_ref()
            .map(|c| super::socket_match::health_check_socket(sockets, c)),
        event_logs,
        always_log_failures: h.always_log_health_check_failures,
        always_log_success: h.always_log_health_check_success,
    })
}

/// The event files of `event_logger` (file sinks only) and `event_log_path`.
fn event_logs(h: &cpb::HealthCheck, path: &Path<'_>, ctx: &mut Ctx) -> Vec<String> {
    use envoy_types::pb::envoy::extensions::health_check::event_sinks::file::v3::HealthCheckEventFileSink;
    const FILE_SINK: &str = "type.googleapis.com/envoy.extensions.health_check.event_sinks.file.v3.HealthCheckEventFileSink";
    let mut logs = Vec::new();
    let lp = path.field("event_logger");
    for (i, sink) in h.event_logger.iter().enumerate() {
        let ip = lp.index(i);
        let sp = ip.field("typed_config");
        match sink.typed_config.as_ref() {
            Some(any) if any.type_url == FILE_SINK => {
                if let Some(f) = core::unpack::<HealthCheckEventFileSink>(any, &sp, ctx) {
                    if f.event_log_path.is_empty() {
                        ctx.error(&sp.field("event_log_path"), "must not be empty");
                    } else {
                        logs.push(f.event_log_path);
                    }
                }
            }
            Some(any) => ctx.unsupported(&sp, format!("health check event sink {}", any.type_url)),
            None => ctx.error(&sp, "is required"),
        }
    }
    if !h.event_log_path.is_empty() {
        logs.push(h.event_log_path.clone());
    }
    logs
}

fn required_positive(
    d: Option<&envoy_types::pb::google::protobuf::Duration>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Duration> {
    let Some(d) = d else {
        ctx.error(path, "is required");
        return None;
    };
    values::positive(d, path, ctx)
}

fn required_u32(
    v: Option<&envoy_types::pb::google::protobuf::UInt32Value>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<u32> {
    if v.is_none() {
        ctx.error(path, "is required");
    }
    v.map(|v| v.value)
}

fn kind(
    h: &cpb::HealthCheck,
    protocol: &UpstreamHttp,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<HealthCheckKind> {
    use cpb::health_check::HealthChecker as H;
    match &h.health_checker {
        Some(H::HttpHealthCheck(http)) => {
            http_check(http, &path.field("http_health_check"), ctx).map(HealthCheckKind::Http)
        }
        Some(H::GrpcHealthCheck(g)) => {
            let gp = path.field("grpc_health_check");
            if !protocol.may_use_http2() {
                ctx.error(
                    &gp,
                    "needs a cluster that supports HTTP/2 (gRPC health checking runs over HTTP/2)",
                );
            }
            if !values::is_header_value(&g.authority) {
                ctx.error(&gp.field("authority"), "is not a valid header value");
            }
            Some(HealthCheckKind::Grpc(GrpcHealthCheck {
                service_name: g.service_name.clone(),
                authority: (!g.authority.is_empty()).then(|| g.authority.clone()),
            }))
        }
        Some(H::TcpHealthCheck(t)) => {
            let tp = path.field("tcp_health_check");
            let send = t
                .send
                .as_ref()
                .and_then(|p| payload(p, &tp.field("send"), ctx))
                .unwrap_or_default();
            let receive = payloads(&t.receive, &tp.field("receive"), ctx);
            Some(HealthCheckKind::Tcp(TcpHealthCheck { send, receive }))
        }
        // Refused by the support table ("custom_health_check is not supported").
        Some(H::CustomHealthCheck(_)) => None,
        None => {
            ctx.error(
                path,
                "one of http_health_check, grpc_health_check or tcp_health_check is required",
            );
            None
        }
    }
}

fn http_check(
    http: &cpb::health_check::HttpHealthCheck,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<HttpHealthCheck> {
    let pp = path.field("path");
    if http.path.is_empty() {
        ctx.error(&pp, "must not be empty");
    } else if !values::is_header_value(&http.path) {
        ctx.error(&pp, "is not a valid header value");
    }
    if !values::is_header_value(&http.host) {
        ctx.error(&path.field("host"), "is not a valid header value");
    }
    let method = method(http.method, &path.field("method"), ctx);
    let codec = match CodecClientType::try_from(http.codec_client_type) {
        Ok(CodecClientType::Http1) => HealthCheckCodec::Http1,
        Ok(CodecClientType::Http2) => HealthCheckCodec::Http2,
        Ok(CodecClientType::Http3) => {
            ctx.unsupported(&path.field("codec_client_type"), "HTTP3");
            HealthCheckCodec::Http1
        }
        Err(_) => {
            ctx.error(
                &path.field("codec_client_type"),
                format!("unknown codec_client_type {}", http.codec_client_type),
            );
            HealthCheckCodec::Http1
        }
    };
    let mut expected_statuses = ranges(
        &http.expected_statuses,
        &path.field("expected_statuses"),
        ctx,
    );
    if expected_statuses.is_empty() {
        expected_statuses.push(200..201);
    }
    let retriable_statuses = ranges(
        &http.retriable_statuses,
        &path.field("retriable_statuses"),
        ctx,
    );
    if http.request_headers_to_add.len() > 1000 {
        ctx.error(
            &path.field("request_headers_to_add"),
            "must have at most 1000 items",
        );
    }
    let ap = path.field("request_headers_to_add");
    let request_headers_to_add = http
        .request_headers_to_add
        .iter()
        .enumerate()
        .filter_map(|(i, h)| request_header(h, &ap.index(i), ctx))
        .collect();
    let rp = path.field("request_headers_to_remove");
    let mut request_headers_to_remove = Vec::with_capacity(http.request_headers_to_remove.len());
    for (i, name) in http.request_headers_to_remove.iter().enumerate() {
        if values::is_header_name(name) {
            request_headers_to_remove.push(name.to_ascii_lowercase());
        } else {
            ctx.error(
                &rp.index(i),
                format!("\"{name}\" is not a valid header name"),
            );
        }
    }
    let send = http.send.as_ref().and_then(|p| {
        let sp = path.field("send");
        if matches!(method, "GET" | "HEAD" | "DELETE" | "TRACE") {
            // Envoy's words: only methods that carry a request body may send one.
            ctx.error(
                &sp,
                format!(
                    "cannot be used with method {method}: only methods that support a request \
                     body (POST, PUT, PATCH, OPTIONS) can send a payload"
                ),
            );
            return None;
        }
        payload(p, &sp, ctx)
    });
    let receive = payloads(&http.receive, &path.field("receive"), ctx);
    let response_buffer_size = http
        .response_buffer_size
        .map_or(DEFAULT_RESPONSE_BUFFER_SIZE, |v| v.value);
    let expected_len: u64 = receive.iter().map(|r| r.len() as u64).sum();
    if response_buffer_size != 0 && expected_len > response_buffer_size {
        ctx.error(
            &path.field("receive"),
            format!(
                "the expected response length {expected_len} is over the response buffer size \
                 {response_buffer_size}"
            ),
        );
    }
    Some(HttpHealthCheck {
        host: (!http.host.is_empty()).then(|| http.host.clone()),
        path: http.path.clone(),
        method,
        expected_statuses,
        retriable_statuses,
        request_headers_to_add,
        request_headers_to_remove,
        codec,
        send,
        receive,
        response_buffer_size,
    })
}

/// One `Payload`: `text` is hex (`"70696e67"` = `ping`), `binary` raw bytes.
fn payload(p: &cpb::health_check::Payload, path: &Path<'_>, ctx: &mut Ctx) -> Option<Vec<u8>> {
    use cpb::health_check::payload::Payload as P;
    match &p.payload {
        Some(P::Text(t)) => match hex_decode(t) {
            Some(bytes) if !bytes.is_empty() => Some(bytes),
            _ => {
                ctx.error(&path.field("text"), format!("invalid hex string \"{t}\""));
                None
            }
        },
        Some(P::Binary(b)) => Some(b.clone()),
        None => {
            ctx.error(path, "one of text or binary is required");
            None
        }
    }
}

fn payloads(ps: &[cpb::health_check::Payload], path: &Path<'_>, ctx: &mut Ctx) -> Vec<Vec<u8>> {
    ps.iter()
        .enumerate()
        .filter_map(|(i, p)| payload(p, &path.index(i), ctx))
        .collect()
}

/// Hex digits (either case), two per byte, as Envoy's `Hex::decode`.
fn hex_decode(t: &str) -> Option<Vec<u8>> {
    if !t.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    t.as_bytes()
        .chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

fn method(v: i32, path: &Path<'_>, ctx: &mut Ctx) -> &'static str {
    use cpb::RequestMethod as M;
    match M::try_from(v) {
        Ok(M::MethodUnspecified | M::Get) => "GET",
        Ok(M::Head) => "HEAD",
        Ok(M::Post) => "POST",
        Ok(M::Put) => "PUT",
        Ok(M::Delete) => "DELETE",
        Ok(M::Options) => "OPTIONS",
        Ok(M::Trace) => "TRACE",
        Ok(M::Patch) => "PATCH",
        // PGV `not_in: [CONNECT]`.
        Ok(M::Connect) => {
            ctx.error(path, "CONNECT cannot be used for health checks");
            "GET"
        }
        Err(_) => {
            ctx.error(path, format!("unknown method {v}"));
            "GET"
        }
    }
}

/// Status ranges as Envoy checks them: `100 <= start < end <= 600`.
fn ranges(rs: &[Int64Range], path: &Path<'_>, ctx: &mut Ctx) -> Vec<StatusRange> {
    let mut out = Vec::with_capacity(rs.len());
    for (i, r) in rs.iter().enumerate() {
        let ip = path.index(i);
        if r.start < 100 {
            ctx.error(
                &ip.field("start"),
                format!("must be at least 100, found {}", r.start),
            );
        } else if r.end > 600 {
            ctx.error(
                &ip.field("end"),
                format!("must be at most 600, found {}", r.end),
            );
        } else if r.start >= r.end {
            ctx.error(
                &ip,
                format!(
                    "start must be below end, found start={} and end={}",
                    r.start, r.end
                ),
            );
        } else {
            // In 100..=600 after the checks above.
            out.push(r.start as u16..r.end as u16);
        }
    }
    out
}

fn request_header(
    h: &cpb::HeaderValueOption,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<RequestHeader> {
    use cpb::header_value_option::HeaderAppendAction as A;
    let hp = path.field("header");
    let Some(hv) = &h.header else {
        ctx.error(&hp, "is required");
        return None;
    };
    let name = hv.key.to_ascii_lowercase();
    let mut ok = true;
    if !values::is_header_name(&name) {
        ctx.error(
            &hp.field("key"),
            format!("\"{}\" is not a valid header name", hv.key),
        );
        ok = false;
    }
    let value = if hv.raw_value.is_empty() {
        hv.value.clone()
    } else if hv.value.is_empty() {
        String::from_utf8_lossy(&hv.raw_value).into_owned()
    } else {
        ctx.error(&hp, "only one of value and raw_value may be set");
        return None;
    };
    if !values::is_header_value(&value) {
        ctx.error(&hp.field("value"), "is not a valid header value");
        ok = false;
    } else if value.contains('%') {
        // Envoy expands %COMMAND% operators here; courier sends values literally.
        ctx.unsupported(
            &hp.field("value"),
            "header value formatting (%...%) in health check headers",
        );
        ok = false;
    }
    let action = A::try_from(h.append_action).unwrap_or(A::AppendIfExistsOrAdd);
    let append = match (&h.append, action) {
        (Some(_), a) if a != A::AppendIfExistsOrAdd => {
            ctx.error(path, "append and append_action cannot both be set");
            ok = false;
            HeaderAppend::AppendIfExistsOrAdd
        }
        (Some(b), _) if !b.value => HeaderAppend::OverwriteIfExistsOrAdd,
        (_, A::AppendIfExistsOrAdd) => HeaderAppend::AppendIfExistsOrAdd,
        (_, A::AddIfAbsent) => HeaderAppend::AddIfAbsent,
        (_, A::OverwriteIfExistsOrAdd) => HeaderAppend::OverwriteIfExistsOrAdd,
        (_, A::OverwriteIfExists) => HeaderAppend::OverwriteIfExists,
    };
    ok.then_some(RequestHeader {
        name,
        value,
        append,
        keep_empty_value: h.keep_empty_value,
    })
}
