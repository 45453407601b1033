//! HTTP tracing as Envoy 1.40's connection manager does it, with the
//! `envoy.tracers.opentelemetry` tracer (here) and the `envoy.tracers.zipkin` one
//! ([`zipkin`]: B3 propagation, Zipkin v2 JSON reports).
//!
//! Per request: the sampling decision is packed into `x-request-id` (Envoy's UUID
//! request-id extension: byte 14 is `9` sampled, `a` forced, `b` client, `4` not
//! traced) from `x-client-trace-id` / `client_sampling`, `x-envoy-force-trace`,
//! `random_sampling` (the id's first 8 hex digits mod 10 000) and
//! `overall_sampling` ([`decide`]). With a tracer, a SERVER span starts, child of a
//! valid incoming W3C `traceparent` ([`start`]); with `spawn_upstream_span` a CLIENT
//! span stands for the upstream request. `traceparent` / `tracestate` for the
//! upstream name the span sent there. Sampled spans are finished when the response
//! ends ([`Span::finish`], from the access log's end-of-stream hook) and handed to
//! this worker's exporter ([`export`]). The `envoy.tracers.datadog` tracer is in
//! [`datadog`] (Datadog and W3C propagation, msgpack reports to the agent).

pub mod datadog;
pub mod datadog_export;
pub mod export;
pub mod zipkin;
pub mod zipkin_export;

use crate::access_log::{Pending, ResponseSide};
use crate::stats::trace::TracingStats;
use courier_config::listener::TrafficDirection;
use courier_config::tracing::{
    CustomTag, Fraction, Provider, RouteTracing, Sampler, TagValue, Tracing,
};
use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const CLIENT_TRACE_ID: HeaderName = HeaderName::from_static("x-client-trace-id");
const FORCE_TRACE: HeaderName = HeaderName::from_static("x-envoy-force-trace");
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
const DOWNSTREAM_CLUSTER: HeaderName =
    HeaderName::from_static("x-envoy-downstream-service-cluster");
const ORIGINAL_PATH: HeaderName = HeaderName::from_static("x-envoy-original-path");
const FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// A gRPC content type (`application/grpc`, `+proto` and the like).
fn is_grpc(ct: &str) -> bool {
    ct.strip_prefix("application/grpc")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('+') || rest.starts_with(';'))
}

/// The span flags Envoy sets: the "is remote" bit is known (0x100), the parent is
/// remote (0x200), sampled (0x01).
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

/// Why a request is traced (Envoy's `Tracing::Reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    NotTraceable,
    Sampling,
    ServiceForced,
    ClientForced,
}

/// The trace reason packed in a UUID request id.
fn reason_of(id: &[u8]) -> Reason {
    if id.len() != 36 {
        return Reason::NotTraceable;
    }
    match id[14] {
        b'9' => Reason::Sampling,
        b'a' => Reason::ServiceForced,
        b'b' => Reason::ClientForced,
        _ => Reason::NotTraceable,
    }
}

/// The request id's first 8 hex digits (Envoy's `getInteger`).
fn id_integer(id: &[u8]) -> Option<u64> {
    let digits = id.get(..8)?;
    let text = std::str::from_utf8(digits).ok()?;
    u64::from_str_radix(text, 16).ok()
}

/// The node's id and zone (`node_id` / `zone` tags), set once at start.
static NODE: OnceLock<(String, String)> = OnceLock::new();

/// Sets the node's id and zone for the `node_id` and `zone` tags.
pub fn set_node(id: &str, zone: &str) {
    let _ = NODE.set((id.to_string(), zone.to_string()));
}

/// The bootstrap's tracer (`Bootstrap.tracing`), set once at start.
static DEFAULT_PROVIDER: OnceLock<Provider> = OnceLock::new();

/// Sets the tracer of connection managers whose `tracing` names none.
pub fn set_default_provider(p: Option<Provider>) {
    if let Some(p) = p {
        let _ = DEFAULT_PROVIDER.set(p);
    }
}

/// The tracer a connection manager's `tracing` uses: its own, else the bootstrap's.
pub fn provider_of(t: &Tracing) -> Option<&Provider> {
    t.provider.as_ref().or_else(|| DEFAULT_PROVIDER.get())
}

/// Envoy's `mutateTracingRequestHeader` then `shouldTraceRequest`: marks the trace
/// reason in `x-request-id`, counts it, and says whether the request is traced.
/// The route's `tracing` replaces the connection manager's percentages.
pub fn decide(
    t: &Tracing,
    route: Option<&RouteTracing>,
    headers: &mut HeaderMap,
    stats: &TracingStats,
) -> bool {
    let (client, random, overall) = match route {
        Some(r) => (r.client_sampling, r.random_sampling, r.overall_sampling),
        None => (t.client_sampling, t.random_sampling, t.overall_sampling),
    };
    let reason = match headers.get(&REQUEST_ID) {
        None => Reason::NotTraceable,
        Some(v) => {
            let current = reason_of(v.as_bytes());
            match id_integer(v.as_bytes()) {
                // Envoy skips an id it cannot read as an integer: not traced.
                None => Reason::NotTraceable,
                Some(n) => {
                    let result = n % 10_000;
                    let next = mark(current, result, headers, (client, random, overall));
                    if next != current
                        && let Some(v) = headers.get(&REQUEST_ID)
                        && v.len() == 36
                    {
                        let mut id = [0u8; 36];
                        id.copy_from_slice(v.as_bytes());
                        id[14] = match next {
                            Reason::Sampling => b'9',
                            Reason::ServiceForced => b'a',
                            Reason::ClientForced => b'b',
                            Reason::NotTraceable => b'4',
                        };
                        if let Ok(v) = HeaderValue::from_bytes(&id) {
                            headers.insert(REQUEST_ID, v);
                        }
                        next
                    } else {
                        // An id that is not a UUID carries no reason.
                        headers
                            .get(&REQUEST_ID)
                            .map_or(Reason::NotTraceable, |v| reason_of(v.as_bytes()))
                    }
                }
            }
        }
    };
    match reason {
        Reason::NotTraceable => stats.not_traceable.inc(),
        Reason::Sampling => stats.random_sampling.inc(),
        Reason::ServiceForced => stats.service_forced.inc(),
        Reason::ClientForced => stats.client_enabled.inc(),
    }
    reason != Reason::NotTraceable
}

/// The reason Envoy packs: a request already traced keeps its reason; otherwise the
/// client's `x-client-trace-id` (at `client_sampling`), then `x-envoy-force-trace`,
/// then `random_sampling` of the id's integer; `overall_sampling` can veto any.
fn mark(
    current: Reason,
    result: u64,
    headers: &HeaderMap,
    (client, random, overall): (Fraction, Fraction, Fraction),
) -> Reason {
    let mut next = current;
    if current == Reason::NotTraceable {
        if headers.contains_key(&CLIENT_TRACE_ID) && client.admits(fastrand::u64(..)) {
            next = Reason::ClientForced;
        } else if headers.contains_key(&FORCE_TRACE) {
            next = Reason::ServiceForced;
        } else if random.admits(result) {
            next = Reason::Sampling;
        }
    }
    if !overall.admits(result) {
        next = Reason::NotTraceable;
    }
    next
}

/// An incoming W3C trace context.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Parent {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    sampled: bool,
    tracestate: String,
}

/// Envoy's `SpanContextExtractor`: `None` without a `traceparent`, `Some(Err)` for one
/// it cannot read (no span then, and nothing injected).
fn extract(headers: &HeaderMap) -> Option<Result<Parent, ()>> {
    let v = headers.get(&TRACEPARENT)?;
    Some(
        parse_traceparent(v.as_bytes()).map(|(trace_id, span_id, sampled)| {
            let tracestate = headers
                .get_all(&TRACESTATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect::<Vec<_>>()
                .join(",");
            Parent {
                trace_id,
                span_id,
                sampled,
                tracestate,
            }
        }),
    )
}

/// `version-traceid-spanid-flags`, 55 bytes, hex; all-zero ids refused.
fn parse_traceparent(v: &[u8]) -> Result<([u8; 16], [u8; 8], bool), ()> {
    if v.len() != 55 || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return Err(());
    }
    let hex = |s: &[u8], out: &mut [u8]| -> Result<(), ()> {
        for (i, pair) in s.chunks(2).enumerate() {
            let text = std::str::from_utf8(pair).map_err(|_| ())?;
            let b = u8::from_str_radix(text, 16).map_err(|_| ())?;
            *out.get_mut(i).ok_or(())? = b;
        }
        Ok(())
    };
    let mut version = [0u8; 1];
    let mut trace_id = [0u8; 16];
    let mut span_id = [0u8; 8];
    let mut flags = [0u8; 1];
    hex(&v[..2], &mut version)?;
    hex(&v[3..35], &mut trace_id)?;
    hex(&v[36..52], &mut span_id)?;
    hex(&v[53..], &mut flags)?;
    if trace_id == [0; 16] || span_id == [0; 8] {
        return Err(());
    }
    Ok((trace_id, span_id, flags[0] & 1 == 1))
}

/// A sampler's decision: `parent_based` follows a parent, else the wrapped sampler;
/// `trace_id_ratio_based` takes the trace id's first 8 bytes (as a little-endian
/// integer, as Envoy's `memcpy` on x86) against the fraction.
fn sample(s: &Sampler, parent: Option<bool>, trace_id: &[u8; 16]) -> bool {
    match s {
        Sampler::ParentBased(wrapped) => match parent {
            Some(sampled) => sampled,
            None => sample(wrapped, None, trace_id),
        },
        Sampler::TraceIdRatio(f) => {
            let mut first = [0u8; 8];
            first.copy_from_slice(&trace_id[..8]);
            f.numerator > 0 && f.admits(u64::from_le_bytes(first))
        }
    }
}

/// The span courier sends upstream under `spawn_upstream_span`.
#[derive(Debug)]
struct Upstream {
    span_id: [u8; 8],
    sampled: bool,
}

/// A request's span, from its start to the end of its response.
#[derive(Debug)]
pub struct Span {
    provider: Provider,
    name: String,
    kind: SpanKind,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    tracestate: String,
    sampled: bool,
    start: SystemTime,
    /// The upstream request's own span.
    upstream: Option<Upstream>,
    /// Custom tags (route's after the connection manager's, by name).
    tags: Vec<KeyValue>,
    /// `max_path_tag_length`.
    max_path: usize,
    /// Zipkin: the trace id has 128 bits (written as 32 hex digits, else 16).
    trace_128: bool,
    /// Datadog: the trace's sampling priority, trace tags and origin.
    datadog: Option<Box<datadog::Trace>>,
}

/// The trace context for the upstream request.
#[derive(Debug, Clone)]
pub enum Inject {
    /// OpenTelemetry: `traceparent` and `tracestate`.
    W3c(HeaderValue, HeaderValue),
    /// Zipkin: the B3 headers (the single `b3` one, or the `x-b3-*` ones).
    B3(Vec<(HeaderName, HeaderValue)>),
    /// Datadog: the `x-datadog-*` headers, `traceparent` and `tracestate`.
    Datadog(Vec<(HeaderName, HeaderValue)>),
}

/// A request's trace: its span (when sampled) and the headers for the upstream.
#[derive(Debug, Default)]
pub struct Started {
    /// The span to finish when the response ends (sampled spans only).
    pub span: Option<Box<Span>>,
    /// The trace context for the upstream request.
    pub inject: Option<Inject>,
}

/// Starts the request's span with the connection manager's tracer (Envoy's
/// OpenTelemetry driver): a child of a valid incoming `traceparent`, a new trace
/// without one, nothing for an unreadable one. Sampled when the request is traced
/// and the sampler (or, without one, the parent's flag) agrees.
pub fn start(
    t: &Tracing,
    route: Option<&RouteTracing>,
    traced: bool,
    (uri, headers): (&http::Uri, &HeaderMap),
    direction: TrafficDirection,
) -> Started {
    let provider = match provider_of(t) {
        None => return Started::default(),
        Some(Provider::Zipkin(z)) => {
            return zipkin::start(z, t, route, traced, (uri, headers), direction);
        }
        Some(Provider::Datadog(d)) => {
            return datadog::start(d, t, route, traced, (uri, headers), direction);
        }
        Some(Provider::OpenTelemetry(o)) => o,
    };
    export::configured();
    let parent = match extract(headers) {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(())) => return Started::default(),
    };
    let (trace_id, parent_id, tracestate) = match &parent {
        Some(p) => (p.trace_id, Some(p.span_id), p.tracestate.clone()),
        None => (fastrand::u128(..).to_be_bytes(), None, String::new()),
    };
    let sampled = traced
        && match &provider.sampler {
            Some(s) => sample(s, parent.as_ref().map(|p| p.sampled), &trace_id),
            None => parent.as_ref().is_none_or(|p| p.sampled),
        };
    let span_id = nonzero_id();
    let upstream = t.spawn_upstream_span.then(|| Upstream {
        span_id: nonzero_id(),
        // The child asks the sampler with the request's span as its parent.
        sampled: match &provider.sampler {
            Some(s) => sample(s, Some(sampled), &trace_id),
            None => sampled,
        },
    });
    let (sent_id, sent_sampled) = match &upstream {
        Some(u) => (u.span_id, u.sampled),
        None => (span_id, sampled),
    };
    let state = if tracestate.is_empty() {
        HeaderValue::from_static("")
    } else {
        HeaderValue::from_str(&tracestate).unwrap_or(HeaderValue::from_static(""))
    };
    let inject = Some(Inject::W3c(
        traceparent(&trace_id, &sent_id, sent_sampled),
        state,
    ));
    if !sampled && !upstream.as_ref().is_some_and(|u| u.sampled) {
        return Started { span: None, inject };
    }
    let egress = direction == TrafficDirection::Outbound;
    let kind = if t.spawn_upstream_span || !egress {
        SpanKind::Server
    } else {
        SpanKind::Client
    };
    let name = if egress {
        let host = crate::request::conn::authority_of(uri, headers).unwrap_or("");
        format!("egress {host}")
    } else {
        "ingress".to_string()
    };
    Started {
        span: Some(Box::new(Span {
            provider: Provider::OpenTelemetry(Arc::clone(provider)),
            name,
            kind,
            trace_id,
            span_id,
            parent: parent_id,
            tracestate,
            sampled,
            start: SystemTime::now(),
            upstream,
            tags: tags_of(t, route, headers),
            max_path: t.max_path_tag_length,
            trace_128: true,
            datadog: None,
        })),
        inject,
    }
}

/// The request's custom tags: the route's after the connection manager's, by name.
fn tags_of(t: &Tracing, route: Option<&RouteTracing>, headers: &HeaderMap) -> Vec<KeyValue> {
    let mut tags = Vec::with_capacity(t.custom_tags.len());
    let route_tags = route.map_or(&[][..], |r| &r.custom_tags[..]);
    for tag in t.custom_tags.iter().chain(route_tags) {
        if let Some(v) = custom_value(tag, headers) {
            set(&mut tags, &tag.tag, v);
        }
    }
    tags
}

/// A custom tag's value for this request (none: the tag is not set).
fn custom_value(tag: &CustomTag, headers: &HeaderMap) -> Option<String> {
    match &tag.value {
        TagValue::Literal(v) => Some(v.clone()),
        TagValue::RequestHeader { name, default } => {
            match headers.get(name.as_str()).and_then(|v| v.to_str().ok()) {
                Some(v) => Some(v.to_string()),
                None => (!default.is_empty()).then(|| default.clone()),
            }
        }
    }
}

/// A random non-zero span id.
fn nonzero_id() -> [u8; 8] {
    fastrand::u64(1..).to_be_bytes()
}

fn hex(bytes: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
}

/// `00-<trace id>-<span id>-<flags>`.
fn traceparent(trace_id: &[u8; 16], span_id: &[u8; 8], sampled: bool) -> HeaderValue {
    let mut s = String::with_capacity(55);
    s.push_str("00-");
    hex(trace_id, &mut s);
    s.push('-');
    hex(span_id, &mut s);
    s.push_str(if sampled { "-01" } else { "-00" });
    HeaderValue::from_str(&s).unwrap_or(HeaderValue::from_static(""))
}

/// Sets attribute `key` (replacing one of the same key, as Envoy's `setTag`).
fn set(attrs: &mut Vec<KeyValue>, key: &str, value: String) {
    if key.is_empty() {
        return;
    }
    let value = Some(AnyValue {
        value: Some(Value::StringValue(value)),
    });
    match attrs.iter_mut().find(|kv| kv.key == key) {
        Some(kv) => kv.value = value,
        None => attrs.push(KeyValue {
            key: key.to_string(),
            value,
            ..Default::default()
        }),
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Envoy's `http.url`: `<x-forwarded-proto>://<host><path>`, the path (the original
/// one if a rewrite kept it) cut to `max_path_tag_length` bytes.
fn url(req: &Pending, max_path: usize) -> String {
    let h = |n: &HeaderName| req.headers.get(n).and_then(|v| v.to_str().ok());
    let path = h(&ORIGINAL_PATH)
        .or_else(|| req.uri.path_and_query().map(|p| p.as_str()))
        .unwrap_or("");
    let mut cut = path.len().min(max_path);
    while !path.is_char_boundary(cut) {
        cut -= 1;
    }
    let host = crate::request::conn::authority_of(&req.uri, &req.headers).unwrap_or("");
    format!(
        "{}://{host}{}",
        h(&FORWARDED_PROTO).unwrap_or(""),
        &path[..cut]
    )
}

impl Span {
    /// The trace's and this span's ids (an OpenTelemetry access log record's).
    pub fn ids(&self) -> (Vec<u8>, Vec<u8>) {
        (self.trace_id.to_vec(), self.span_id.to_vec())
    }

    /// Finishes the request's span (and its upstream span) with what the response
    /// was, and hands the sampled ones to this worker's exporter.
    pub fn finish(&self, req: &Pending, resp: &ResponseSide, bytes_received: u64) {
        let end = nanos(SystemTime::now());
        let start = nanos(self.start);
        let status = resp.status;
        let flags = resp.flag.unwrap_or("-");
        let upstream_host = resp
            .upstream
            .as_ref()
            .and_then(|u| u.host.as_ref().map(|h| (u, h)));
        // What both spans carry (Envoy's `setCommonTags`).
        let common = |attrs: &mut Vec<KeyValue>| {
            set(attrs, "component", "proxy".into());
            set(attrs, "http.status_code", status.to_string());
            set(attrs, "response_flags", flags.to_string());
            if let Some((u, _)) = upstream_host {
                set(attrs, "upstream_cluster", u.cluster.name.clone());
                set(
                    attrs,
                    "upstream_cluster.name",
                    u.cluster.stat_name().to_string(),
                );
            }
            if (500..600).contains(&status) {
                set(attrs, "error", "true".into());
            }
            // Envoy's `onUpstreamResponseHeaders` / `...Trailers`: the gRPC status
            // and message of the answer, wherever it carries them.
            for map in std::iter::once(&resp.headers).chain(resp.trailers.as_ref()) {
                if let Some(code) = map.get(&GRPC_STATUS).and_then(|v| v.to_str().ok()) {
                    set(attrs, "grpc.status_code", code.into());
                    if let Some(m) = map.get(&GRPC_MESSAGE).and_then(|v| v.to_str().ok()) {
                        set(attrs, "grpc.message", m.into());
                    }
                }
            }
        };
        let mut spans = Vec::with_capacity(2);
        if let Some(u) = &self.upstream
            && u.sampled
            && let Some((up, host)) = upstream_host
        {
            let mut attrs = Vec::with_capacity(12);
            let protocol = match up.cluster.http.protocol {
                courier_config::cluster::UpstreamProtocol::Http2 => "HTTP/2",
                courier_config::cluster::UpstreamProtocol::UseDownstream => {
                    crate::router::headers::protocol(req.version)
                }
                _ => "HTTP/1.1",
            };
            set(&mut attrs, "http.protocol", protocol.into());
            set(&mut attrs, "peer.address", host.address_text().to_string());
            common(&mut attrs);
            set(
                &mut attrs,
                "upstream_address",
                host.address_text().to_string(),
            );
            for kv in &self.tags {
                // Replacing a tag of the same name, as Envoy's `setTag`.
                match attrs.iter_mut().find(|a| a.key == kv.key) {
                    Some(a) => a.value = kv.value.clone(),
                    None => attrs.push(kv.clone()),
                }
            }
            spans.push(self.otel_span(
                format!("router {} egress", up.cluster.name),
                SpanKind::Client,
                u.span_id,
                Some(self.span_id),
                false,
                (start, end),
                attrs,
            ));
        }
        if self.sampled {
            let mut attrs = Vec::with_capacity(24);
            let h = |n: &HeaderName| req.headers.get(n).and_then(|v| v.to_str().ok());
            if let Some(id) = h(&REQUEST_ID) {
                set(&mut attrs, "guid:x-request-id", id.into());
            }
            set(&mut attrs, "http.url", url(req, self.max_path));
            set(&mut attrs, "http.method", req.method.as_str().into());
            set(
                &mut attrs,
                "downstream_cluster",
                h(&DOWNSTREAM_CLUSTER).unwrap_or("-").into(),
            );
            set(
                &mut attrs,
                "user_agent",
                h(&http::header::USER_AGENT).unwrap_or("-").into(),
            );
            set(
                &mut attrs,
                "http.protocol",
                crate::router::headers::protocol(req.version).into(),
            );
            set(&mut attrs, "peer.address", peer_ip(&req.peer));
            if let Some(id) = h(&CLIENT_TRACE_ID) {
                set(&mut attrs, "guid:x-client-trace-id", id.into());
            }
            if let Some(ct) = h(&http::header::CONTENT_TYPE).filter(|ct| is_grpc(ct)) {
                // Envoy's `addGrpcRequestTags`.
                let path = req.uri.path_and_query().map_or("", |p| p.as_str());
                set(&mut attrs, "grpc.path", path.into());
                let host = crate::request::conn::authority_of(&req.uri, &req.headers);
                set(&mut attrs, "grpc.authority", host.unwrap_or("").into());
                set(&mut attrs, "grpc.content_type", ct.into());
                if let Some(t) = h(&GRPC_TIMEOUT) {
                    set(&mut attrs, "grpc.timeout", t.into());
                }
            }
            for kv in &self.tags {
                // Replacing a tag of the same name, as Envoy's `setTag`.
                match attrs.iter_mut().find(|a| a.key == kv.key) {
                    Some(a) => a.value = kv.value.clone(),
                    None => attrs.push(kv.clone()),
                }
            }
            set(&mut attrs, "request_size", bytes_received.to_string());
            set(&mut attrs, "response_size", resp.bytes_sent.to_string());
            common(&mut attrs);
            let (node, zone) = NODE
                .get()
                .map_or(("", ""), |(n, z)| (n.as_str(), z.as_str()));
            set(&mut attrs, "node_id", node.into());
            set(&mut attrs, "zone", zone.into());
            spans.push(self.otel_span(
                self.name.clone(),
                self.kind,
                self.span_id,
                self.parent,
                self.parent.is_some(),
                (start, end),
                attrs,
            ));
        }
        match &self.provider {
            Provider::OpenTelemetry(p) => {
                for s in spans {
                    export::record(p, s);
                }
            }
            Provider::Zipkin(z) => {
                for s in spans {
                    zipkin_export::record(z, zipkin::json(z, &s, self.trace_128));
                }
            }
            Provider::Datadog(d) => {
                if let Some(trace) = &self.datadog {
                    datadog_export::record(d, &datadog::chunk(trace, spans, self.span_id));
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn otel_span(
        &self,
        name: String,
        kind: SpanKind,
        span_id: [u8; 8],
        parent: Option<[u8; 8]>,
        remote_parent: bool,
        (start, end): (u64, u64),
        attributes: Vec<KeyValue>,
    ) -> opentelemetry_proto::tonic::trace::v1::Span {
        opentelemetry_proto::tonic::trace::v1::Span {
            trace_id: self.trace_id.to_vec(),
            span_id: span_id.to_vec(),
            trace_state: self.tracestate.clone(),
            parent_span_id: parent.map(|p| p.to_vec()).unwrap_or_default(),
            flags: 1 | HAS_IS_REMOTE | if remote_parent { IS_REMOTE } else { 0 },
            name,
            kind: kind as i32,
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            attributes,
            ..Default::default()
        }
    }
}

/// The downstream peer's IP, or a pipe's path (Envoy's `peer.address` of the
/// request's span).
fn peer_ip(peer: &crate::request::conn::Peer) -> String {
    peer.without_port().to_string()
}

/// Puts the trace context for the upstream in the request headers.
pub fn inject(headers: &mut HeaderMap, values: &Inject) {
    match values {
        Inject::W3c(parent, state) => {
            headers.insert(TRACEPARENT, parent.clone());
            headers.insert(TRACESTATE, state.clone());
        }
        Inject::B3(b3) | Inject::Datadog(b3) => {
            for (name, value) in b3 {
                headers.insert(name.clone(), value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests;
