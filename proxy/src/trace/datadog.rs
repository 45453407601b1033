//! The `envoy.tracers.datadog` tracer's side of a request, as Envoy 1.40's Datadog
//! driver (dd-trace-cpp v2.1.1 inside): Datadog and W3C trace context extraction
//! and injection (dd-trace-cpp's default styles, `datadog,tracecontext,baggage`;
//! baggage is not propagated by Envoy's spans), the sampling priority, and the
//! spans of a finished request as Datadog's msgpack.
//!
//! Envoy's rules, kept here: a caller's sampling priority wins; without one, a
//! request the connection manager does not trace is a user drop (-1), and a traced
//! one asks the agent-rate sampler (the rates the agent sent back, 100 % until it
//! has). Every trace goes to the agent, dropped ones too (the agent counts them).
//! A context that cannot be read starts a new trace. New traces have 128-bit ids,
//! the high half the start's Unix seconds (`_dd.p.tid`), the root span's id the
//! low half.

use super::{Inject, Span, Started, Upstream, tags_of};
use courier_config::listener::TrafficDirection;
use courier_config::tracing::{Datadog, Provider, RouteTracing, Tracing};
use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

const TRACE_ID: HeaderName = HeaderName::from_static("x-datadog-trace-id");
const PARENT_ID: HeaderName = HeaderName::from_static("x-datadog-parent-id");
const PRIORITY: HeaderName = HeaderName::from_static("x-datadog-sampling-priority");
const ORIGIN: HeaderName = HeaderName::from_static("x-datadog-origin");
const TAGS: HeaderName = HeaderName::from_static("x-datadog-tags");
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// `_dd.p.tid`: the trace id's high 64 bits.
const TID: &str = "_dd.p.tid";
/// `_dd.p.dm`: the decision maker (`-<mechanism>`).
const DM: &str = "_dd.p.dm";
/// `_dd.p.ksr`: the rate of an agent's (or rule's) keep decision.
const KSR: &str = "_dd.p.ksr";
/// `_dd.propagation_error`: what went wrong reading or writing the trace tags.
const PROPAGATION_ERROR: &str = "_dd.propagation_error";
/// Trace tags longer than this are neither read nor written (dd-trace-cpp's
/// `tags_header_size`).
const MAX_TAGS: usize = 512;
/// The Datadog member of `tracestate` is cut (at a `;`) to this many bytes.
const MAX_DD_TRACESTATE: usize = 256;

/// Sampling mechanisms (the `_dd.p.dm` values).
const DEFAULT: u8 = 0;
const AGENT_RATE: u8 = 1;

/// A caller's context, merged from the Datadog and W3C headers as dd-trace-cpp's
/// `extract_span`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Extracted {
    /// High and low halves of the trace id.
    pub trace_id: Option<(u64, u64)>,
    /// The caller's span.
    pub parent_id: Option<u64>,
    /// The caller's sampling priority.
    pub priority: Option<i32>,
    /// `x-datadog-origin` / `o:` of `tracestate`.
    pub origin: Option<String>,
    /// `_dd.p.*` tags, in the order read.
    pub trace_tags: Vec<(String, String)>,
    /// `p:` of the Datadog `tracestate` member (`_dd.parent_id`).
    pub w3c_parent: Option<String>,
    /// Other members of `tracestate`, kept for the upstream.
    pub other_tracestate: Option<String>,
    /// Unknown keys of the Datadog `tracestate` member, kept for the upstream.
    pub other_dd_tracestate: Option<String>,
    /// Tags for the local root about what could not be read.
    pub span_tags: Vec<(String, String)>,
}

fn header<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    // A value that is not text cannot be read by dd-trace-cpp either; treated
    // as absent.
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The Datadog headers (`extract_datadog`); `Err` for an id or priority that is
/// not a number.
fn extract_datadog(headers: &HeaderMap) -> Result<Extracted, ()> {
    let mut e = Extracted::default();
    let id = |name: &HeaderName| -> Result<Option<u64>, ()> {
        match header(headers, name) {
            None => Ok(None),
            // `from_chars`: digits only (Rust's `parse` would take a `+`).
            Some(v) if v.trim().starts_with('+') => Err(()),
            Some(v) => v.trim().parse::<u64>().map(Some).map_err(|_| ()),
        }
    };
    e.trace_id = id(&TRACE_ID)?.map(|low| (0, low));
    e.parent_id = id(&PARENT_ID)?;
    if let Some(p) = header(headers, &PRIORITY) {
        if p.trim().starts_with('+') {
            return Err(());
        }
        e.priority = Some(p.trim().parse::<i32>().map_err(|_| ())?);
    }
    e.origin = header(headers, &ORIGIN).map(str::to_string);
    if let Some(tags) = header(headers, &TAGS) {
        if tags.len() > MAX_TAGS {
            e.span_tags
                .push((PROPAGATION_ERROR.into(), "extract_max_size".into()));
        } else {
            trace_tags(tags, &mut e);
        }
    }
    Ok(e)
}

/// `x-datadog-tags`: `key=value` pairs split on `,`; only `_dd.p.*` kept, and
/// `_dd.p.tid` sets the trace id's high half.
fn trace_tags(value: &str, e: &mut Extracted) {
    let mut decoded = Vec::new();
    for entry in value.split(',').filter(|s| !s.is_empty()) {
        let Some((k, v)) = entry.split_once('=') else {
            e.span_tags
                .push((PROPAGATION_ERROR.into(), "decoding_error".into()));
            return;
        };
        decoded.push((k.to_string(), v.to_string()));
    }
    for (k, v) in decoded {
        if !k.starts_with("_dd.p.") {
            continue;
        }
        if k == TID {
            match parse_tid(&v) {
                Some(high) => {
                    if let Some((h, _)) = e.trace_id.as_mut() {
                        *h = high;
                    }
                }
                None => {
                    e.span_tags
                        .push((PROPAGATION_ERROR.into(), format!("malformed_tid {v}")));
                    continue;
                }
            }
        }
        e.trace_tags.push((k, v));
    }
}

/// `_dd.p.tid`: 16 lower-case hex digits.
fn parse_tid(v: &str) -> Option<u64> {
    if v.len() != 16
        || !v
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    u64::from_str_radix(v, 16).ok()
}

/// W3C `traceparent` / `tracestate` (`extract_w3c`); a `traceparent` that cannot
/// be read is no context (and a `_dd.w3c_extraction_error` tag).
fn extract_w3c(headers: &HeaderMap) -> Extracted {
    let mut e = Extracted::default();
    let Some(tp) = header(headers, &TRACEPARENT) else {
        return e;
    };
    match traceparent(tp.trim()) {
        Err(why) => {
            e.span_tags
                .push(("_dd.w3c_extraction_error".into(), why.into()));
            return e;
        }
        Ok((high, low, parent, sampled)) => {
            e.trace_id = Some((high, low));
            e.parent_id = Some(parent);
            e.priority = Some(i32::from(sampled));
        }
    }
    e.w3c_parent = Some("0000000000000000".into());
    if let Some(ts) = header(headers, &TRACESTATE).map(str::trim)
        && !ts.is_empty()
    {
        tracestate(ts, &mut e);
    }
    e
}

/// `version-traceid-parentid-flags` as dd-trace-cpp reads it.
fn traceparent(v: &str) -> Result<(u64, u64, u64, bool), &'static str> {
    let b = v.as_bytes();
    if b.len() < 55 {
        return Err("malformed_traceparent");
    }
    let hex = |c: u8| c.is_ascii_hexdigit();
    // The version: two hex digits, not `ff`.
    if b[2] != b'-' {
        return Err(if b[..2].iter().all(|&c| hex(c)) {
            "malformed_traceparent"
        } else {
            "invalid_version"
        });
    }
    if !b[..2].iter().all(|&c| hex(c)) || &v[..2] == "ff" {
        return Err("invalid_version");
    }
    if b[35] != b'-' {
        return Err("malformed_traceparent");
    }
    let tid = &v[3..35];
    if !tid.bytes().all(hex) {
        return Err("malformed_traceid");
    }
    let high = u64::from_str_radix(&tid[..16], 16).map_err(|_| "malformed_traceid")?;
    let low = u64::from_str_radix(&tid[16..], 16).map_err(|_| "malformed_traceid")?;
    if high == 0 && low == 0 {
        return Err("malformed_traceid");
    }
    if b[52] != b'-' {
        return Err("malformed_traceparent");
    }
    let pid = &v[36..52];
    if !pid.bytes().all(hex) {
        return Err("malformed_parentid");
    }
    let parent = u64::from_str_radix(pid, 16).map_err(|_| "malformed_parentid")?;
    if parent == 0 {
        return Err("malformed_parentid");
    }
    let rest = &v[53..];
    // Version 00 has exactly the flags; later ones may go on after a `-`.
    if rest.len() < 2 || (rest.len() > 2 && (&v[..2] == "00" || rest.as_bytes()[2] != b'-')) {
        return Err("malformed_traceparent");
    }
    let flags = u8::from_str_radix(&rest[..2], 16).map_err(|_| "malformed_traceflags")?;
    Ok((high, low, parent, flags & 1 == 1))
}

/// The `dd=` member of `tracestate` (priority, origin, parent, `t.*` trace tags);
/// the other members are kept.
fn tracestate(ts: &str, e: &mut Extracted) {
    let mut others = Vec::new();
    let mut dd = None;
    for member in ts.split(',') {
        let m = member.trim();
        if dd.is_none()
            && let Some(v) = m.strip_prefix("dd=")
        {
            dd = Some(v);
            continue;
        }
        others.push(member);
    }
    let Some(dd) = dd else {
        e.other_tracestate = Some(ts.to_string());
        return;
    };
    let others = others.join(",");
    if !others.is_empty() {
        e.other_tracestate = Some(others);
    }
    if dd.len() > MAX_DD_TRACESTATE * 2 {
        e.span_tags
            .push((PROPAGATION_ERROR.into(), "extract_max_size".into()));
        return;
    }
    let mut unknown: Vec<&str> = Vec::new();
    for pair in dd.split(';').filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once(':') else {
            continue;
        };
        match k {
            "o" => e.origin = Some(v.replace('~', "=")),
            "s" => {
                if let Ok(p) = v.parse::<i32>()
                    && e.priority.is_none_or(|old| (old > 0) == (p > 0))
                {
                    e.priority = Some(p);
                }
            }
            "p" => e.w3c_parent = Some(v.to_string()),
            "ts" => {}
            _ => match k.strip_prefix("t.") {
                Some(suffix) => e
                    .trace_tags
                    .push((format!("_dd.p.{suffix}"), v.replace('~', "="))),
                None => unknown.push(pair),
            },
        }
    }
    if !unknown.is_empty() {
        e.other_dd_tracestate = Some(unknown.join(";"));
    }
}

/// The caller's context (`extract_span`): `Ok(None)` without one, `Err` for one
/// that cannot be used (the request then starts a new trace, as Envoy's).
pub(super) fn extract(headers: &HeaderMap) -> Result<Option<Extracted>, ()> {
    let dd = extract_datadog(headers)?;
    let w3c = extract_w3c(headers);
    let mut merged = if dd.trace_id.is_some() {
        let mut m = dd.clone();
        // W3C's context of the same trace brings its tracestate, and its parent
        // when that differs (the Datadog one kept as `_dd.parent_id`).
        if w3c.trace_id == m.trace_id {
            m.other_tracestate = w3c.other_tracestate.clone();
            m.other_dd_tracestate = w3c.other_dd_tracestate.clone();
            if m.parent_id != w3c.parent_id {
                m.w3c_parent = match &w3c.w3c_parent {
                    Some(p) if p != "0000000000000000" => Some(p.clone()),
                    _ => dd.parent_id.map(|p| format!("{p:016x}")),
                };
                m.parent_id = w3c.parent_id;
            }
        }
        m.span_tags.extend(w3c.span_tags);
        m
    } else if w3c.trace_id.is_some() {
        let mut m = w3c;
        let mut tags = dd.span_tags;
        tags.extend(m.span_tags);
        m.span_tags = tags;
        m
    } else if dd.parent_id.is_some() {
        // A parent without a trace: an error.
        return Err(());
    } else {
        return Ok(None);
    };
    let Some((high, low)) = merged.trace_id else {
        return Ok(None);
    };
    if merged.parent_id.is_none() {
        // A trace id alone is a root only with an origin (synthetics).
        if merged.origin.is_none() {
            return Err(());
        }
        merged.parent_id = Some(0);
    }
    if high == 0 && low == 0 {
        return Err(());
    }
    if high != 0 {
        let hex = format!("{high:016x}");
        match merged.trace_tags.iter_mut().find(|(k, _)| k == TID) {
            None => merged.trace_tags.push((TID.into(), hex)),
            Some((_, v)) if *v != hex => {
                let why = if parse_tid(v).is_none() {
                    "malformed_tid"
                } else {
                    "inconsistent_tid"
                };
                merged
                    .span_tags
                    .push((PROPAGATION_ERROR.into(), format!("{why} {v}")));
                *v = hex;
            }
            Some(_) => {}
        }
    }
    Ok(Some(merged))
}

/// dd-trace-cpp's `knuth_hash` of the trace id's low half against the rate.
pub(super) fn keeps(trace_low: u64, rate: f64) -> bool {
    let threshold = if rate >= 1.0 {
        u64::MAX
    } else {
        (rate.max(0.0) * u64::MAX as f64) as u64
    };
    trace_low.wrapping_mul(1_111_111_111_111_111_111) <= threshold
}

/// A rate with at most 6 decimals, trailing zeros and point dropped (`1`, `0.5`).
pub(super) fn format_rate(rate: f64) -> String {
    let s = format!("{rate:.6}");
    let s = s.trim_end_matches('0');
    s.trim_end_matches('.').to_string()
}

/// Sets trace tag `key` (replacing one of the same key).
fn set_tag(tags: &mut Vec<(String, String)>, key: &str, value: String) {
    match tags.iter_mut().find(|(k, _)| k == key) {
        Some((_, v)) => *v = value,
        None => tags.push((key.to_string(), value)),
    }
}

/// A trace's Datadog state: what its local root carries and what is propagated.
#[derive(Debug, Clone)]
pub(super) struct Trace {
    pub config: Arc<Datadog>,
    /// The sampling priority.
    pub priority: i32,
    /// The rate behind a local agent-rate (or default) decision (`_dd.agent_psr`).
    pub agent_rate: Option<f64>,
    /// `_dd.p.*` trace tags, propagated and put on the local root.
    pub trace_tags: Vec<(String, String)>,
    /// `_dd.origin`.
    pub origin: Option<String>,
    /// Tags of the local root only (`_dd.parent_id`, errors).
    pub root_tags: Vec<(String, String)>,
    other_tracestate: Option<String>,
    other_dd_tracestate: Option<String>,
}

impl Trace {
    /// The local decision when no caller sent one (`make_sampling_decision_if_null`):
    /// a request Envoy does not trace is a user drop (mechanism manual, no
    /// `_dd.p.dm`); a traced one asks the agent's rate for the service.
    fn decide(&mut self, traced: bool, trace_low: u64) {
        if !traced {
            self.priority = -1;
            self.trace_tags.retain(|(k, _)| k != DM);
            return;
        }
        let (rate, mechanism) = match super::datadog_export::agent_rate(&self.config.service) {
            Some(r) => (r, AGENT_RATE),
            None => (1.0, DEFAULT),
        };
        self.priority = i32::from(keeps(trace_low, rate));
        if self.priority > 0 {
            set_tag(&mut self.trace_tags, DM, format!("-{mechanism}"));
        } else {
            self.trace_tags.retain(|(k, _)| k != DM);
        }
        if mechanism != DEFAULT {
            self.trace_tags.push((KSR.into(), format_rate(rate)));
        }
        self.agent_rate = Some(rate);
    }

    /// The headers for a request sent as span `span_id` of trace `(high, low)`.
    pub(super) fn inject(&mut self, (high, low): (u64, u64), span_id: u64) -> Inject {
        let value = |s: String| HeaderValue::from_str(&s).ok();
        let mut h = Vec::with_capacity(7);
        let mut push = |name: HeaderName, v: Option<HeaderValue>| {
            if let Some(v) = v {
                h.push((name, v));
            }
        };
        push(TRACE_ID, value(low.to_string()));
        push(PARENT_ID, value(span_id.to_string()));
        push(PRIORITY, value(self.priority.to_string()));
        if let Some(o) = &self.origin {
            push(ORIGIN, value(o.clone()));
        }
        let tags = self
            .trace_tags
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        if tags.len() > MAX_TAGS {
            set_tag(
                &mut self.root_tags,
                PROPAGATION_ERROR,
                "inject_max_size".into(),
            );
        } else if !tags.is_empty() {
            push(TAGS, value(tags));
        }
        push(
            TRACEPARENT,
            value(format!(
                "00-{high:016x}{low:016x}-{span_id:016x}-{}",
                if self.priority > 0 { "01" } else { "00" }
            )),
        );
        push(TRACESTATE, value(self.tracestate(span_id)));
        Inject::Datadog(h)
    }

    /// `dd=s:<priority>;p:<span>[;o:<origin>][;t.<tag>:<value>]...`, then the
    /// other vendors' members.
    fn tracestate(&self, span_id: u64) -> String {
        let clean = |s: &str, banned: &[u8]| -> String {
            s.bytes()
                .map(|b| {
                    if !(0x20..=0x7e).contains(&b) || banned.contains(&b) {
                        '_'
                    } else {
                        char::from(b)
                    }
                })
                .collect()
        };
        let mut dd = format!("dd=s:{};p:{span_id:016x}", self.priority);
        if let Some(o) = &self.origin {
            dd.push_str(";o:");
            dd.push_str(&clean(o, b",;~").replace('=', "~"));
        }
        for (k, v) in &self.trace_tags {
            let Some(suffix) = k.strip_prefix("_dd.p.") else {
                continue;
            };
            if k == TID {
                continue;
            }
            dd.push_str(";t.");
            dd.push_str(&clean(suffix, b" ,;="));
            dd.push(':');
            dd.push_str(&clean(v, b",;~").replace('=', "~"));
        }
        if let Some(extra) = &self.other_dd_tracestate {
            dd.push(';');
            dd.push_str(extra);
        }
        while dd.len() > MAX_DD_TRACESTATE {
            match dd.rfind(';') {
                Some(i) => dd.truncate(i),
                None => break,
            }
        }
        if let Some(o) = &self.other_tracestate {
            dd.push(',');
            dd.push_str(o);
        }
        dd
    }
}

/// Starts the request's span with a Datadog tracer (Envoy's `startSpan`).
pub(super) fn start(
    d: &Arc<Datadog>,
    t: &Tracing,
    route: Option<&RouteTracing>,
    traced: bool,
    (uri, headers): (&http::Uri, &HeaderMap),
    direction: TrafficDirection,
) -> Started {
    super::datadog_export::configured();
    let start = SystemTime::now();
    let mut trace = Trace {
        config: Arc::clone(d),
        priority: 0,
        agent_rate: None,
        trace_tags: Vec::new(),
        origin: None,
        root_tags: Vec::new(),
        other_tracestate: None,
        other_dd_tracestate: None,
    };
    let span_id = u64::from_be_bytes(super::nonzero_id());
    // An unusable context is a new trace (Envoy logs it).
    let (high, low, parent, decided) = match extract(headers).ok().flatten() {
        Some(e) => {
            let (high, low) = e.trace_id.unwrap_or((0, 0));
            trace.trace_tags = e.trace_tags;
            trace.origin = e.origin;
            trace.other_tracestate = e.other_tracestate;
            trace.other_dd_tracestate = e.other_dd_tracestate;
            trace.root_tags = e.span_tags;
            if let Some(p) = e.w3c_parent {
                trace.root_tags.push(("_dd.parent_id".into(), p));
            }
            if let Some(p) = e.priority {
                trace.priority = p;
            }
            (high, low, e.parent_id.unwrap_or(0), e.priority.is_some())
        }
        None => {
            // dd-trace-cpp's 128-bit ids: the high half is the Unix time in
            // seconds, shifted up 32 bits; the root span's id is the low half.
            let secs = start
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let high = (secs & 0xffff_ffff) << 32;
            trace.trace_tags.push((TID.into(), format!("{high:016x}")));
            (high, span_id, 0, false)
        }
    };
    if !decided {
        trace.decide(traced, low);
    }
    let upstream = t.spawn_upstream_span.then(|| Upstream {
        span_id: super::nonzero_id(),
        sampled: true,
    });
    let sent = upstream
        .as_ref()
        .map_or(span_id, |u| u64::from_be_bytes(u.span_id));
    let inject = trace.inject((high, low), sent);
    let egress = direction == TrafficDirection::Outbound;
    let name = if egress {
        let host = crate::request::conn::authority_of(uri, headers).unwrap_or("");
        format!("egress {host}")
    } else {
        "ingress".to_string()
    };
    let mut trace_id = [0u8; 16];
    trace_id[..8].copy_from_slice(&high.to_be_bytes());
    trace_id[8..].copy_from_slice(&low.to_be_bytes());
    Started {
        span: Some(Box::new(Span {
            provider: Provider::Datadog(Arc::clone(d)),
            name,
            kind: if egress {
                SpanKind::Client
            } else {
                SpanKind::Server
            },
            trace_id,
            span_id: span_id.to_be_bytes(),
            parent: Some(parent.to_be_bytes()),
            tracestate: String::new(),
            // Every trace is reported: the agent counts dropped ones too.
            sampled: true,
            start,
            upstream,
            tags: tags_of(t, route, headers),
            max_path: t.max_path_tag_length,
            trace_128: true,
            datadog: Some(Box::new(trace)),
        })),
        inject: Some(inject),
    }
}

/// The process's `runtime-id` (a random UUID) and the tracer's `version` tag.
fn runtime_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let b = fastrand::u128(..).to_be_bytes();
        let mut s = String::with_capacity(32);
        super::hex(&b, &mut s);
        // A version 4, variant 1 UUID.
        format!(
            "{}-{}-4{}-{:x}{}-{}",
            &s[..8],
            &s[8..12],
            &s[13..16],
            (b[8] & 0x3) | 0x8,
            &s[17..20],
            &s[20..32]
        )
    })
}

/// What courier says its tracer is (the `version` tag; Envoy's says
/// `envoy <its version>`).
pub(super) const VERSION: &str = concat!("courier ", env!("CARGO_PKG_VERSION"));
/// The language the reports name (Envoy's dd-trace-cpp says `cpp`).
pub(super) const LANGUAGE: &str = "rust";

/// msgpack as dd-trace-cpp writes it: 32-bit lengths for strings, arrays and maps,
/// 64-bit integers, doubles.
pub(super) mod msgpack {
    /// An array of `n` items follows.
    pub fn array(out: &mut Vec<u8>, n: usize) {
        out.push(0xdd);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    /// A map of `n` pairs follows.
    pub fn map(out: &mut Vec<u8>, n: usize) {
        out.push(0xdf);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    /// A string.
    pub fn str(out: &mut Vec<u8>, s: &str) {
        out.push(0xdb);
        out.extend_from_slice(&(s.len() as u32).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    /// An unsigned 64-bit integer.
    pub fn u64(out: &mut Vec<u8>, v: u64) {
        out.push(0xcf);
        out.extend_from_slice(&v.to_be_bytes());
    }
    /// A signed 64-bit integer.
    pub fn i64(out: &mut Vec<u8>, v: i64) {
        out.push(0xd3);
        out.extend_from_slice(&v.to_be_bytes());
    }
    /// A double.
    pub fn f64(out: &mut Vec<u8>, v: f64) {
        out.push(0xcb);
        out.extend_from_slice(&v.to_bits().to_be_bytes());
    }
}

/// One span's fields, in Datadog's terms.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct DdSpan {
    pub service: String,
    pub resource: String,
    pub trace_id: u64,
    pub span_id: u64,
    pub parent_id: u64,
    pub start: u64,
    pub duration: u64,
    pub error: bool,
    pub meta: Vec<(String, String)>,
    pub metrics: Vec<(String, f64)>,
}

impl DdSpan {
    /// The span as a msgpack map (dd-trace-cpp's `msgpack_encode`).
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        msgpack::map(out, 12);
        msgpack::str(out, "service");
        msgpack::str(out, &self.service);
        msgpack::str(out, "name");
        // Datadog's operation name; Envoy's operation is the resource.
        msgpack::str(out, "envoy.proxy");
        msgpack::str(out, "resource");
        msgpack::str(out, &self.resource);
        msgpack::str(out, "trace_id");
        msgpack::u64(out, self.trace_id);
        msgpack::str(out, "span_id");
        msgpack::u64(out, self.span_id);
        msgpack::str(out, "parent_id");
        msgpack::u64(out, self.parent_id);
        msgpack::str(out, "start");
        msgpack::u64(out, self.start);
        msgpack::str(out, "duration");
        msgpack::u64(out, self.duration);
        msgpack::str(out, "error");
        msgpack::i64(out, i64::from(self.error));
        msgpack::str(out, "meta");
        msgpack::map(out, self.meta.len());
        for (k, v) in &self.meta {
            msgpack::str(out, k);
            msgpack::str(out, v);
        }
        msgpack::str(out, "metrics");
        msgpack::map(out, self.metrics.len());
        for (k, v) in &self.metrics {
            msgpack::str(out, k);
            msgpack::f64(out, *v);
        }
        msgpack::str(out, "type");
        msgpack::str(out, "web");
    }
}

/// The finished spans of one request (local root first) as a Datadog trace chunk:
/// Envoy's tags become `meta` (`error` becomes the span's error flag), the trace
/// tags, origin and sampling priority go on the local root, the process's on all.
pub(super) fn chunk(
    trace: &Trace,
    spans: Vec<opentelemetry_proto::tonic::trace::v1::Span>,
    root_id: [u8; 8],
) -> Vec<DdSpan> {
    let u64_of = |b: &[u8]| {
        let mut a = [0u8; 8];
        if b.len() == 8 {
            a.copy_from_slice(b);
        }
        u64::from_be_bytes(a)
    };
    let mut out: Vec<DdSpan> = spans
        .into_iter()
        .map(|s| {
            let mut meta = Vec::with_capacity(s.attributes.len() + 8);
            let mut error = false;
            for kv in &s.attributes {
                let Some(Value::StringValue(v)) = kv.value.as_ref().and_then(|v| v.value.as_ref())
                else {
                    continue;
                };
                match kv.key.as_str() {
                    // Envoy's Datadog span turns these into the span's fields.
                    "error" => error |= v == "true",
                    "resource.name" => {}
                    _ => set_tag(&mut meta, &kv.key, v.clone()),
                }
            }
            let resource = s
                .attributes
                .iter()
                .find(|kv| kv.key == "resource.name")
                .and_then(
                    |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(Value::StringValue(v)) => Some(v.clone()),
                        _ => None,
                    },
                )
                .unwrap_or(s.name);
            if let Some(o) = &trace.origin {
                set_tag(&mut meta, "_dd.origin", o.clone());
            }
            set_tag(&mut meta, "language", LANGUAGE.into());
            set_tag(&mut meta, "runtime-id", runtime_id().into());
            set_tag(&mut meta, "version", VERSION.into());
            DdSpan {
                service: trace.config.service.clone(),
                resource,
                trace_id: u64_of(&s.trace_id[s.trace_id.len().saturating_sub(8)..]),
                span_id: u64_of(&s.span_id),
                parent_id: u64_of(&s.parent_span_id),
                start: s.start_time_unix_nano,
                duration: s.end_time_unix_nano.saturating_sub(s.start_time_unix_nano),
                error,
                meta,
                metrics: vec![("process_id".into(), f64::from(std::process::id()))],
            }
        })
        .collect();
    // The local root first, as dd-trace-cpp's chunk.
    let root = u64::from_be_bytes(root_id);
    out.sort_by_key(|s| s.span_id != root);
    if let Some(r) = out.first_mut().filter(|s| s.span_id == root) {
        for (k, v) in trace.trace_tags.iter().chain(&trace.root_tags) {
            set_tag(&mut r.meta, k, v.clone());
        }
        r.metrics
            .push(("_sampling_priority_v1".into(), f64::from(trace.priority)));
        if let Some(rate) = trace.agent_rate {
            r.metrics.push(("_dd.agent_psr".into(), rate));
        }
    }
    out
}

#[cfg(test)]
#[path = "datadog_tests.rs"]
mod tests;
