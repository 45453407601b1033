//! The `envoy.tracers.zipkin` tracer's side of a request, as Envoy 1.40's Zipkin
//! driver: B3 propagation (the `x-b3-*` headers or the single `b3` header), the
//! request's span ids, and the Zipkin v2 JSON of a finished span.
//!
//! Envoy's rules, kept here: the sampled flag a caller sends (`x-b3-sampled`, or the
//! flag in `b3`) wins over the connection manager's decision; an unreadable context
//! means no span and nothing injected; with `shared_span_context` (the default) an
//! ingress span takes its caller's span id; a caller that used the single `b3`
//! header gets the context back in that form, any other in `x-b3-*` headers.

use super::{Inject, Span, Started, Upstream, nonzero_id, tags_of};
use courier_config::listener::TrafficDirection;
use courier_config::tracing::{Provider, RouteTracing, Tracing, Zipkin};
use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use serde_json::{Map, Value as Json, json};
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

const B3: HeaderName = HeaderName::from_static("b3");
const TRACE_ID: HeaderName = HeaderName::from_static("x-b3-traceid");
const SPAN_ID: HeaderName = HeaderName::from_static("x-b3-spanid");
const PARENT_SPAN_ID: HeaderName = HeaderName::from_static("x-b3-parentspanid");
const SAMPLED: HeaderName = HeaderName::from_static("x-b3-sampled");

/// A caller's B3 context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Context {
    trace_high: u64,
    trace_low: u64,
    span: u64,
    /// Zero when the caller sent none.
    parent: u64,
}

/// A sampling flag of the B3 formats: `0`, `1` or `d` (debug, sampled).
fn flag(c: u8) -> Option<bool> {
    match c {
        b'0' => Some(false),
        b'1' | b'd' => Some(true),
        _ => None,
    }
}

/// The caller's sampling decision, if it sent one (Envoy's `extractSampled`): the
/// flag inside `b3` (by its length), else `x-b3-sampled` (`1` or `true`).
fn extract_sampled(headers: &HeaderMap) -> Option<bool> {
    if let Some(b3) = headers.get(&B3) {
        let b3 = b3.as_bytes();
        let pos = match b3.len() {
            1 => 0,
            35 | 52 => 34,
            51 | 68 => 50,
            _ => return None,
        };
        return flag(b3[pos]);
    }
    let v = headers.get(&SAMPLED)?;
    Some(v.as_bytes() == b"1" || v.as_bytes() == b"true")
}

/// A hex number as Envoy's `atoull(.., 16)` reads it: all of it, at most 64 bits.
fn hex_u64(s: &[u8]) -> Result<u64, ()> {
    if s.is_empty() || s.len() > 16 {
        return Err(());
    }
    let text = std::str::from_utf8(s).map_err(|_| ())?;
    u64::from_str_radix(text, 16).map_err(|_| ())
}

/// The caller's context (Envoy's `extractSpanContext`): `Ok(None)` without one,
/// `Err` for one that cannot be read (the request then has no span).
fn extract(headers: &HeaderMap) -> Result<Option<Context>, ()> {
    if let Some(b3) = headers.get(&B3) {
        return single(b3.as_bytes());
    }
    let (Some(trace), Some(span)) = (headers.get(&TRACE_ID), headers.get(&SPAN_ID)) else {
        return Ok(None);
    };
    let trace = trace.as_bytes();
    let (trace_high, trace_low) = if trace.len() == 32 {
        (hex_u64(&trace[..16])?, hex_u64(&trace[16..])?)
    } else {
        (0, hex_u64(trace)?)
    };
    let span = hex_u64(span.as_bytes())?;
    let parent = match headers.get(&PARENT_SPAN_ID) {
        Some(p) if !p.is_empty() => hex_u64(p.as_bytes())?,
        _ => 0,
    };
    Ok(Some(Context {
        trace_high,
        trace_low,
        span,
        parent,
    }))
}

/// The single `b3` header: `{trace}-{span}[-{flag}[-{parent}]]`, or a lone flag.
fn single(b3: &[u8]) -> Result<Option<Context>, ()> {
    if b3.len() == 1 {
        return flag(b3[0]).map(|_| None).ok_or(());
    }
    // traceid64-spanid at least; traceid128-spanid-flag-parentid at most.
    if b3.len() < 33 || b3.len() > 68 {
        return Err(());
    }
    let (trace_high, trace_low, mut pos) = if b3.get(32) == Some(&b'-') {
        (hex_u64(&b3[..16])?, hex_u64(&b3[16..32])?, 32)
    } else {
        (0, hex_u64(&b3[..16])?, 16)
    };
    if b3.get(pos) != Some(&b'-') {
        return Err(());
    }
    pos += 1;
    let span = hex_u64(b3.get(pos..pos + 16).ok_or(())?)?;
    pos += 16;
    let mut parent = 0;
    if b3.len() > pos {
        if b3.len() == pos + 1 || b3[pos] != b'-' {
            return Err(());
        }
        pos += 1;
        let lone = b3.len() == pos + 1 || b3.get(pos + 1) == Some(&b'-');
        if !lone || flag(b3[pos]).is_none() {
            return Err(());
        }
        pos += 1;
        if b3.len() > pos {
            if b3.len() != pos + 17 {
                return Err(());
            }
            parent = hex_u64(&b3[pos + 1..])?;
        }
    }
    Ok(Some(Context {
        trace_high,
        trace_low,
        span,
        parent,
    }))
}

fn hex16(n: u64) -> String {
    format!("{n:016x}")
}

/// The trace id as Zipkin writes it: 32 hex digits for a 128-bit id, else 16.
fn trace_hex(trace_id: &[u8; 16], is_128: bool) -> String {
    let mut s = String::with_capacity(32);
    let from = if is_128 { 0 } else { 8 };
    super::hex(&trace_id[from..], &mut s);
    s
}

/// Starts the request's span with a Zipkin tracer.
pub(super) fn start(
    z: &Arc<Zipkin>,
    t: &Tracing,
    route: Option<&RouteTracing>,
    traced: bool,
    (uri, headers): (&http::Uri, &HeaderMap),
    direction: TrafficDirection,
) -> Started {
    super::zipkin_export::configured();
    let caller_sampled = extract_sampled(headers);
    let Ok(context) = extract(headers) else {
        return Started::default();
    };
    let sampled = caller_sampled.unwrap_or(traced);
    let egress = direction == TrafficDirection::Outbound;
    let (trace_high, trace_low, span_id, parent) = match context {
        None => {
            // A new trace: its (low) id is the root span's id, as Envoy's.
            let id = u64::from_be_bytes(nonzero_id());
            let high = if z.trace_id_128bit {
                u64::from_be_bytes(nonzero_id())
            } else {
                0
            };
            (high, id, id, 0)
        }
        Some(c) if egress || !z.shared_span_context => (
            c.trace_high,
            c.trace_low,
            u64::from_be_bytes(nonzero_id()),
            c.span,
        ),
        Some(c) => (c.trace_high, c.trace_low, c.span, c.parent),
    };
    let mut trace_id = [0u8; 16];
    trace_id[..8].copy_from_slice(&trace_high.to_be_bytes());
    trace_id[8..].copy_from_slice(&trace_low.to_be_bytes());
    let upstream = t.spawn_upstream_span.then(|| Upstream {
        span_id: nonzero_id(),
        sampled,
    });
    let (sent, sent_parent) = match &upstream {
        Some(u) => (u64::from_be_bytes(u.span_id), span_id),
        None => (span_id, parent),
    };
    let is_128 = trace_high != 0;
    let trace = trace_hex(&trace_id, is_128);
    let flag = if sampled { "1" } else { "0" };
    let value = |s: String| HeaderValue::from_str(&s).unwrap_or(HeaderValue::from_static(""));
    let inject = if headers.contains_key(&B3) {
        let mut b3 = format!("{trace}-{}-{flag}", hex16(sent));
        if sent_parent != 0 {
            b3.push('-');
            b3.push_str(&hex16(sent_parent));
        }
        Inject::B3(vec![(B3, value(b3))])
    } else {
        let mut h = vec![(TRACE_ID, value(trace)), (SPAN_ID, value(hex16(sent)))];
        if sent_parent != 0 {
            h.push((PARENT_SPAN_ID, value(hex16(sent_parent))));
        }
        h.push((SAMPLED, HeaderValue::from_static(flag)));
        Inject::B3(h)
    };
    if !sampled {
        return Started {
            span: None,
            inject: Some(inject),
        };
    }
    let host = crate::request::conn::authority_of(uri, headers).unwrap_or("");
    Started {
        span: Some(Box::new(Span {
            provider: Provider::Zipkin(Arc::clone(z)),
            name: host.to_string(),
            kind: if egress {
                SpanKind::Client
            } else {
                SpanKind::Server
            },
            trace_id,
            span_id: span_id.to_be_bytes(),
            parent: (parent != 0).then(|| parent.to_be_bytes()),
            tracestate: String::new(),
            sampled,
            start: SystemTime::now(),
            upstream,
            tags: tags_of(t, route, headers),
            max_path: t.max_path_tag_length,
            trace_128: is_128,
            datadog: None,
        })),
        inject: Some(inject),
    }
}

/// The address and service name Zipkin spans carry as their `localEndpoint`:
/// Envoy's local address (the first non-loopback IPv4 address of an interface)
/// and the node's cluster.
static LOCAL: OnceLock<(Option<IpAddr>, String)> = OnceLock::new();

/// Sets the service name (the node's cluster) and finds the local address.
pub fn set_local(service_cluster: &str) {
    let _ = LOCAL.set((local_ipv4(), service_cluster.to_string()));
}

/// The first IPv4 address of an interface that is not loopback (Envoy's
/// `getLocalAddress`). `getifaddrs` has no safe wrapper among courier's crates.
#[allow(unsafe_code)]
fn local_ipv4() -> Option<IpAddr> {
    let mut addrs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `addrs` with a list freed below by freeifaddrs.
    if unsafe { libc::getifaddrs(&mut addrs) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = addrs;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points at a sockaddr of its family.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        if family != libc::AF_INET {
            continue;
        }
        // SAFETY: an AF_INET address is a sockaddr_in.
        let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
        let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        if !ip.is_loopback() {
            found = Some(IpAddr::V4(ip));
            break;
        }
    }
    // SAFETY: `addrs` came from getifaddrs.
    unsafe { libc::freeifaddrs(addrs) };
    found
}

/// One finished span as Zipkin v2 JSON (Envoy's `JsonV2Serializer`): the span with
/// its kind, start and duration in microseconds, `localEndpoint`, non-empty tags,
/// and the end annotation (`ss` for a server span, `cr` for a client one).
pub(super) fn json(
    z: &Zipkin,
    s: &opentelemetry_proto::tonic::trace::v1::Span,
    is_128: bool,
) -> Json {
    let mut trace = [0u8; 16];
    if s.trace_id.len() == 16 {
        trace.copy_from_slice(&s.trace_id);
    }
    let id = |b: &[u8]| {
        let mut s = String::with_capacity(16);
        super::hex(b, &mut s);
        s
    };
    let server = s.kind == SpanKind::Server as i32;
    let start = s.start_time_unix_nano / 1000;
    let end = s.end_time_unix_nano / 1000;
    let mut span = Map::new();
    span.insert("traceId".into(), Json::String(trace_hex(&trace, is_128)));
    span.insert("id".into(), Json::String(id(&s.span_id)));
    if !s.parent_span_id.is_empty() {
        span.insert("parentId".into(), Json::String(id(&s.parent_span_id)));
    }
    span.insert(
        "kind".into(),
        Json::String(if server { "SERVER" } else { "CLIENT" }.into()),
    );
    if !s.name.is_empty() {
        span.insert("name".into(), Json::String(s.name.clone()));
    }
    if server && z.shared_span_context {
        span.insert("shared".into(), Json::Bool(true));
    }
    span.insert("timestamp".into(), json!(start));
    span.insert("duration".into(), json!(end.saturating_sub(start)));
    let mut endpoint = Map::new();
    if let Some((addr, service)) = LOCAL.get() {
        match addr {
            Some(IpAddr::V4(a)) => {
                endpoint.insert("ipv4".into(), Json::String(a.to_string()));
                endpoint.insert("port".into(), json!(0));
            }
            Some(IpAddr::V6(a)) => {
                endpoint.insert("ipv6".into(), Json::String(a.to_string()));
                endpoint.insert("port".into(), json!(0));
            }
            None => {}
        }
        if !service.is_empty() {
            endpoint.insert("serviceName".into(), Json::String(service.clone()));
        }
    }
    span.insert("localEndpoint".into(), Json::Object(endpoint));
    let mut tags = Map::new();
    for kv in &s.attributes {
        // Envoy's Zipkin span keeps no tag with an empty name or value.
        if let Some(Value::StringValue(v)) = kv.value.as_ref().and_then(|v| v.value.as_ref())
            && !v.is_empty()
            && !kv.key.is_empty()
        {
            tags.insert(kv.key.clone(), Json::String(v.clone()));
        }
    }
    if !tags.is_empty() {
        span.insert("tags".into(), Json::Object(tags));
    }
    span.insert(
        "annotations".into(),
        json!([{"timestamp": end, "value": if server { "ss" } else { "cr" }}]),
    );
    Json::Object(span)
}

#[cfg(test)]
#[path = "zipkin_tests.rs"]
mod tests;
