//! HCM `tracing` with the `envoy.tracers.datadog` provider, beside real Envoy.
//!
//! Each proxy runs from the same bootstrap with its own fake Datadog agent (an
//! HTTP/1.1 server on loopback recording every request's method, path, headers
//! and msgpack body, decoded here) and its own upstream (recording the headers it
//! receives, answering 503 to `/fail`). The same requests go through both, with and
//! without incoming `x-datadog-*` / `traceparent` contexts. Per request, the
//! propagation headers the upstream received and the spans the agent received are
//! rendered with generated ids replaced by their role (`S` the request's span, `C`
//! its upstream span; ids the client sent stay as they are), new traces' `_dd.p.tid`
//! (the start's Unix seconds) checked and replaced by `<tid>`, timestamps checked
//! and dropped; the renderings are compared, then the agent calls' method, path and
//! headers, and the `tracing.datadog.*` stats.
//!
//! The agent answers the first reports with sampling rates (`rate_by_service`, 0 for
//! the tracer's service), and a second round of requests shows both proxies
//! sampling with them.
//!
//! What courier does differently on purpose, replaced in both renderings:
//! - the `language` tag and `Datadog-Meta-Lang` header say `rust` (Envoy's
//!   dd-trace-cpp says `cpp`), `Datadog-Meta-Lang-Version` and
//!   `Datadog-Meta-Tracer-Version` and the `version` tag name courier's own
//!   (they describe the tracer that made the spans);
//! - `runtime-id` and `process_id` are the process's own;
//! - Envoy's async HTTP client adds `x-envoy-internal`, `x-forwarded-for`,
//!   `x-envoy-expected-rq-timeout-ms` and sends the body chunked; courier's own
//!   calls send a `content-length` and none of those (as its other collectors').
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test datadog_tracing_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "otlp_support.rs"]
#[allow(dead_code)]
mod otlp;

use bytes::Bytes;
use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, SystemTime};
use tokio::net::TcpListener;

/// A request a server received.
#[derive(Debug, Clone)]
struct Received {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

/// The agent's answer: a default rate of 1, and 0 for the tracer's service.
const AGENT_ANSWER: &str = r#"{"rate_by_service":{"service:,env:":1,"service:svc-dd,env:":0}}"#;

/// An HTTP/1.1 server reporting what it got; `answer` gives a path's status and body.
fn server(answer: fn(&str) -> (u16, &'static str)) -> (SocketAddr, mpsc::Receiver<Received>) {
    let (tx, rx) = mpsc::channel();
    let addr = otlp::on_runtime(move || async move {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let tx = tx.clone();
                let service = service_fn(move |req: hyper::Request<Incoming>| {
                    let tx = tx.clone();
                    async move {
                        let method = req.method().to_string();
                        let path = req.uri().path().to_string();
                        let headers = req
                            .headers()
                            .iter()
                            .map(|(k, v)| {
                                (k.to_string(), v.to_str().unwrap_or_default().to_string())
                            })
                            .collect();
                        let (status, body) = answer(&path);
                        let got = req.into_body().collect().await?.to_bytes().to_vec();
                        let _ = tx.send(Received {
                            method,
                            path,
                            headers,
                            body: got,
                        });
                        Ok::<_, hyper::Error>(
                            hyper::Response::builder()
                                .status(status)
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from_static(body.as_bytes())))
                                .unwrap(),
                        )
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), service),
                );
            }
        });
        addr
    });
    (addr, rx)
}

fn upstream_answer(path: &str) -> (u16, &'static str) {
    if path == "/fail" {
        (503, "no")
    } else {
        (200, "ok")
    }
}

fn agent_answer(_: &str) -> (u16, &'static str) {
    (200, AGENT_ANSWER)
}

/// msgpack, decoded to JSON (integers as numbers, doubles as floats).
fn decode(b: &[u8], at: &mut usize) -> Value {
    let take = |at: &mut usize, n: usize| {
        let s = &b[*at..*at + n];
        *at += n;
        s
    };
    let be = |s: &[u8]| s.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x));
    let t = take(at, 1)[0];
    let len = |at: &mut usize, n: usize| be(take(at, n)) as usize;
    let string =
        |at: &mut usize, n: usize| Value::String(String::from_utf8(take(at, n).to_vec()).unwrap());
    let array = |at: &mut usize, n: usize| Value::Array((0..n).map(|_| decode(b, at)).collect());
    let map = |at: &mut usize, n: usize| {
        let mut m = Map::new();
        for _ in 0..n {
            let Value::String(k) = decode(b, at) else {
                panic!("a map key that is not a string");
            };
            m.insert(k, decode(b, at));
        }
        Value::Object(m)
    };
    match t {
        0x00..=0x7f => json!(t),
        0x80..=0x8f => map(at, usize::from(t & 0xf)),
        0x90..=0x9f => array(at, usize::from(t & 0xf)),
        0xa0..=0xbf => string(at, usize::from(t & 0x1f)),
        0xc0 => Value::Null,
        0xc2 => json!(false),
        0xc3 => json!(true),
        0xcb => json!(f64::from_bits(be(take(at, 8)))),
        0xcc => json!(be(take(at, 1))),
        0xcd => json!(be(take(at, 2))),
        0xce => json!(be(take(at, 4))),
        0xcf => json!(be(take(at, 8))),
        0xd0 => json!(i64::from(take(at, 1)[0] as i8)),
        0xd3 => json!(be(take(at, 8)) as i64),
        0xd9 => {
            let n = len(at, 1);
            string(at, n)
        }
        0xda => {
            let n = len(at, 2);
            string(at, n)
        }
        0xdb => {
            let n = len(at, 4);
            string(at, n)
        }
        0xdc => {
            let n = len(at, 2);
            array(at, n)
        }
        0xdd => {
            let n = len(at, 4);
            array(at, n)
        }
        0xde => {
            let n = len(at, 2);
            map(at, n)
        }
        0xdf => {
            let n = len(at, 4);
            map(at, n)
        }
        0xe0..=0xff => json!(i64::from(t as i8)),
        other => panic!("msgpack type {other:#x}"),
    }
}

fn cluster(name: &str, addr: SocketAddr) -> String {
    format!(
        "- name: {name}\n  connect_timeout: 2s\n  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
        addr.port()
    )
}

const VHOSTS: &str = r#"- name: traced
  domains: ["*"]
  routes:
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

/// The connection manager's `tracing` with the Datadog provider.
fn hcm(spawn: bool, random: u32) -> String {
    format!(
        r#"generate_request_id: true
tracing:
  random_sampling: {{ value: {random} }}
  spawn_upstream_span: {spawn}
  custom_tags:
  - {{ tag: literal1, literal: {{ value: value1 }} }}
  - {{ tag: resource.name, request_header: {{ name: x-resource }} }}
  provider:
    name: envoy.tracers.datadog
    typed_config:
      "@type": type.googleapis.com/envoy.config.trace.v3.DatadogConfig
      collector_cluster: agent
      collector_hostname: agent.example
      service_name: svc-dd
"#
    )
}

fn yaml(hcm: &str, up: SocketAddr, agent: SocketAddr) -> String {
    let clusters = [cluster("up", up), cluster("agent", agent)].concat();
    format!(
        "node: {{ id: node-1, cluster: svc-a, locality: {{ zone: zone-1 }} }}\n{}  clusters:\n{}",
        bootstrap(&[hcm_listener("traced", hcm, VHOSTS)]),
        indent(&clusters, 2)
    )
}

const TRACE128: &str = "0af7651916cd43dd8448eb211c80319c";

type Req = (&'static str, &'static [(&'static str, &'static str)]);

/// The first round: before the agent has answered.
const FIRST: &[Req] = &[
    ("/root", &[("user-agent", "ua/1")]),
    (
        "/dd",
        &[
            ("x-datadog-trace-id", "12345"),
            ("x-datadog-parent-id", "678"),
            ("x-datadog-sampling-priority", "1"),
            ("x-datadog-origin", "synthetics"),
            (
                "x-datadog-tags",
                "_dd.p.dm=-4,_dd.p.tid=640cfd8d00000000,other=x",
            ),
        ],
    ),
    (
        "/dd-no-priority",
        &[
            ("x-datadog-trace-id", "12345"),
            ("x-datadog-parent-id", "678"),
        ],
    ),
    (
        "/dd-user-drop",
        &[
            ("x-datadog-trace-id", "777"),
            ("x-datadog-parent-id", "888"),
            ("x-datadog-sampling-priority", "-1"),
        ],
    ),
    (
        "/w3c",
        &[
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            ("tracestate", "dd=s:2;o:rum;t.usr.id:u~1,foo=bar"),
        ],
    ),
    (
        "/w3c-unsampled",
        &[(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        )],
    ),
    (
        "/both",
        &[
            ("x-datadog-trace-id", "9532127138774266268"),
            ("x-datadog-parent-id", "99"),
            ("x-datadog-sampling-priority", "1"),
            ("x-datadog-tags", "_dd.p.tid=0af7651916cd43dd"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            ("tracestate", "dd=s:1;p:00000000000000aa"),
        ],
    ),
    // Unreadable: a new trace.
    (
        "/bad",
        &[("x-datadog-trace-id", "zz"), ("x-datadog-parent-id", "678")],
    ),
    ("/fail", &[("x-resource", "custom-resource")]),
];

/// The second round: after the agent sent its rates (0 for `svc-dd`).
const SECOND: &[Req] = &[("/after-rates", &[])];

struct Run {
    /// Per request: its rendering.
    views: Vec<String>,
    /// The agent calls: method, path, headers (some replaced).
    calls: Vec<String>,
    stats: Vec<String>,
}

/// Ids by role: a u64 and its name.
#[derive(Default)]
struct Roles(Vec<(u64, String)>);

impl Roles {
    fn name(&self, id: u64) -> String {
        self.0
            .iter()
            .find(|(i, _)| *i == id)
            .map_or_else(|| id.to_string(), |(_, r)| r.clone())
    }
    fn hex(&self, hex: &str) -> String {
        match u64::from_str_radix(hex, 16) {
            Ok(id) if self.0.iter().any(|(i, _)| *i == id) => self.name(id),
            _ => hex.to_string(),
        }
    }
}

fn send(p: &Proxy, reqs: &[Req], up_rx: &mpsc::Receiver<Received>) -> Vec<Received> {
    let mut seen = Vec::new();
    for (path, headers) in reqs {
        let r = client::send(
            p.listener("traced").unwrap(),
            Protocol::Http1,
            &Request {
                method: "GET".into(),
                path: (*path).into(),
                authority: "example.com".into(),
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                body: Vec::new(),
            },
        )
        .unwrap();
        assert_eq!(r.status, if *path == "/fail" { 503 } else { 200 }, "{path}");
        let got = up_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(&got.path, path);
        seen.push(got);
    }
    seen
}

/// The agent's reports until none came for 3 s (reports go every 2 s).
fn reports(agent_rx: &mpsc::Receiver<Received>) -> Vec<Received> {
    let mut out = Vec::new();
    while let Ok(r) = agent_rx.recv_timeout(Duration::from_secs(3)) {
        out.push(r);
    }
    out
}

fn run(kind: Kind, bin: &std::path::Path, hcm: &str) -> Run {
    let (up, up_rx) = server(upstream_answer);
    let (agent, agent_rx) = server(agent_answer);
    let p = Proxy::start(kind, bin, &yaml(hcm, up, agent), &["traced"]).unwrap();
    let started = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    let mut seen = send(&p, FIRST, &up_rx);
    let mut got = reports(&agent_rx);
    assert!(!got.is_empty(), "{kind:?}: no report");
    seen.extend(send(&p, SECOND, &up_rx));
    got.extend(reports(&agent_rx));
    let ended = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    let mut traces: Vec<Value> = Vec::new();
    let mut calls = Vec::new();
    for r in &got {
        let mut at = 0;
        let Value::Array(list) = decode(&r.body, &mut at) else {
            panic!("not a msgpack array");
        };
        assert_eq!(at, r.body.len(), "trailing bytes");
        assert_eq!(
            r.headers.get("x-datadog-trace-count"),
            Some(&list.len().to_string())
        );
        let mut headers = r.headers.clone();
        for (h, why) in [
            ("datadog-meta-lang", "<lang>"),
            ("datadog-meta-lang-version", "<lang-version>"),
            ("datadog-meta-tracer-version", "<tracer-version>"),
            // How many traces each report carries depends on the flush timer.
            ("x-datadog-trace-count", "<count>"),
        ] {
            assert!(headers.contains_key(h), "{h}");
            headers.insert(h.into(), why.into());
        }
        // Envoy's async client's own headers, not the tracer's (see the top).
        for h in [
            "x-envoy-internal",
            "x-forwarded-for",
            "x-envoy-expected-rq-timeout-ms",
            "transfer-encoding",
            "content-length",
        ] {
            headers.remove(h);
        }
        let call = format!("{} {} {headers:?}", r.method, r.path);
        if !calls.contains(&call) {
            calls.push(call);
        }
        traces.extend(list);
    }
    let all: Vec<(&str, &Received)> = FIRST
        .iter()
        .chain(SECOND)
        .map(|(p, _)| *p)
        .zip(&seen)
        .collect();
    // Every request's trace, one each, and nothing else.
    assert_eq!(traces.len(), all.len(), "{kind:?}: {traces:#?}");
    let mut views = Vec::new();
    for (path, up) in all {
        let url = format!("http://example.com{path}");
        let trace = traces
            .iter()
            .find(|t| t[0]["meta"]["http.url"] == Value::String(url.clone()))
            .unwrap_or_else(|| panic!("{kind:?}: no trace for {path}"));
        views.push(view(path, up, trace, (started.as_secs(), ended.as_secs())));
    }
    let stats = client::get(&p.admin, "/stats").unwrap();
    let stats = String::from_utf8_lossy(&stats.body)
        .lines()
        .filter(|l| l.starts_with("tracing.datadog."))
        // How many reports went depends on the flush timer; that they were
        // all sent does not.
        .map(|l| match l.split_once(": ") {
            Some((k, v)) if k.ends_with("reports_sent") && v != "0" => format!("{k}: >0"),
            _ => l.to_string(),
        })
        .collect();
    Run {
        views,
        calls,
        stats,
    }
}

fn sent_headers(path: &str) -> &'static [(&'static str, &'static str)] {
    FIRST
        .iter()
        .chain(SECOND)
        .find(|(p, _)| *p == path)
        .map_or(&[], |(_, h)| *h)
}

/// One request's rendering: the context the upstream got, then its spans.
fn view(path: &str, up: &Received, trace: &Value, (t0, t1): (u64, u64)) -> String {
    let spans = trace.as_array().unwrap();
    let mut roles = Roles::default();
    let sent = sent_headers(path);
    let sent_ids: Vec<u64> = sent
        .iter()
        .filter(|(k, _)| k.ends_with("-id"))
        .filter_map(|(_, v)| v.parse().ok())
        .collect();
    // The local root first; its child, if any, after.
    let root_id = spans[0]["span_id"].as_u64().unwrap();
    roles.0.push((root_id, "S".into()));
    if let Some(c) = spans.get(1) {
        assert_eq!(c["parent_id"].as_u64(), Some(root_id), "{path}");
        roles.0.push((c["span_id"].as_u64().unwrap(), "C".into()));
    }
    assert!(!sent_ids.contains(&root_id), "{path}: a new span id");
    let mut out = format!("{path}:");
    for h in [
        "x-datadog-trace-id",
        "x-datadog-parent-id",
        "x-datadog-sampling-priority",
        "x-datadog-origin",
        "x-datadog-tags",
        "traceparent",
        "tracestate",
    ] {
        let Some(v) = up.headers.get(h) else {
            continue;
        };
        let v = match h {
            "x-datadog-trace-id" | "x-datadog-parent-id" => roles.name(v.parse().unwrap()),
            "traceparent" => v
                .split('-')
                .map(|p| match p.len() {
                    32 => format!("{}{}", tid(&p[..16], sent, (t0, t1)), roles.hex(&p[16..])),
                    16 => roles.hex(p),
                    _ => p.to_string(),
                })
                .collect::<Vec<_>>()
                .join("-"),
            "tracestate" => v
                .split(';')
                .map(|p| match p.strip_prefix("p:") {
                    Some(id) => format!("p:{}", roles.hex(id)),
                    None => p.to_string(),
                })
                .collect::<Vec<_>>()
                .join(";"),
            "x-datadog-tags" => tags(v, sent, (t0, t1)),
            _ => v.clone(),
        };
        out.push_str(&format!("\n  {h}={v}"));
    }
    for (i, s) in spans.iter().enumerate() {
        let mut s = s.clone();
        let o = s.as_object_mut().unwrap();
        let start = o.remove("start").unwrap().as_u64().unwrap();
        let duration = o.remove("duration").unwrap().as_u64().unwrap();
        assert!(
            start / 1_000_000_000 >= t0 && (start + duration) / 1_000_000_000 <= t1,
            "{path}: {start} {duration} not in {t0}..={t1}"
        );
        for k in ["trace_id", "span_id", "parent_id"] {
            let id = o[k].as_u64().unwrap();
            o.insert(k.into(), Value::String(roles.name(id)));
        }
        let meta = o.get_mut("meta").unwrap().as_object_mut().unwrap();
        if i == 0 {
            assert_eq!(
                meta.get("guid:x-request-id").and_then(Value::as_str),
                up.headers.get("x-request-id").map(String::as_str),
                "{path}"
            );
            meta.insert("guid:x-request-id".into(), "<rid>".into());
        }
        for k in ["peer.address", "upstream_address"] {
            if let Some(Value::String(v)) = meta.get(k)
                && v.contains(':')
            {
                meta.insert(k.into(), "<upstream>".into());
            }
        }
        // The tracer's own identity differs on purpose (see the top).
        let runtime = meta.get("runtime-id").and_then(Value::as_str).unwrap();
        assert_eq!(
            runtime.split('-').map(str::len).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12],
            "{path}: {runtime}"
        );
        for (k, v) in [
            ("runtime-id", "<runtime-id>"),
            ("language", "<language>"),
            ("version", "<version>"),
        ] {
            assert!(meta.contains_key(k), "{path}: {k}");
            meta.insert(k.into(), v.into());
        }
        if let Some(Value::String(v)) = meta.get("_dd.p.tid").cloned() {
            meta.insert("_dd.p.tid".into(), Value::String(tid(&v, sent, (t0, t1))));
        }
        let metrics = o.get_mut("metrics").unwrap().as_object_mut().unwrap();
        assert!(
            metrics.get("process_id").and_then(Value::as_f64).is_some(),
            "{path}"
        );
        metrics.insert("process_id".into(), "<pid>".into());
        out.push_str(&format!("\n  {}", canon(&s)));
    }
    out
}

/// JSON with sorted keys (the tracers' maps have no order).
fn canon(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let sorted: BTreeMap<&String, String> = m.iter().map(|(k, v)| (k, canon(v))).collect();
            let fields: Vec<String> = sorted
                .into_iter()
                .map(|(k, v)| format!("{}:{v}", Value::String(k.clone())))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        other => other.to_string(),
    }
}

/// A trace id's high half: kept when the client sent it, `<tid>` when it is a new
/// trace's (the start's Unix seconds, shifted up 32 bits).
fn tid(hex: &str, sent: &[(&str, &str)], (t0, t1): (u64, u64)) -> String {
    if sent.iter().any(|(_, v)| v.contains(hex)) {
        return hex.to_string();
    }
    match u64::from_str_radix(hex, 16) {
        Ok(v) if v & 0xffff_ffff == 0 && (t0..=t1).contains(&(v >> 32)) => "<tid>".into(),
        _ => hex.to_string(),
    }
}

/// `x-datadog-tags` with a new trace's `_dd.p.tid` replaced.
fn tags(v: &str, sent: &[(&str, &str)], times: (u64, u64)) -> String {
    v.split(',')
        .map(|kv| match kv.strip_prefix("_dd.p.tid=") {
            Some(h) => format!("_dd.p.tid={}", tid(h, sent, times)),
            None => kv.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn compare(hcm: &str, expect: impl Fn(&Run)) {
    let courier = run(Kind::Courier, &courier_bin(), hcm);
    println!(
        "courier:\n{}\n{:#?}\n{:#?}",
        courier.views.join("\n"),
        courier.calls,
        courier.stats
    );
    expect(&courier);
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED the Envoy comparison: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let envoy = run(Kind::Envoy, &envoy, hcm);
    println!(
        "envoy:\n{}\n{:#?}\n{:#?}",
        envoy.views.join("\n"),
        envoy.calls,
        envoy.stats
    );
    for (c, e) in courier.views.iter().zip(&envoy.views) {
        assert_eq!(c, e);
    }
    assert_eq!(courier.calls, envoy.calls);
    assert_eq!(courier.stats, envoy.stats);
}

fn view_of<'a>(r: &'a Run, path: &str) -> &'a str {
    let i = FIRST
        .iter()
        .chain(SECOND)
        .position(|(p, _)| *p == path)
        .unwrap();
    &r.views[i]
}

#[test]
fn traced_requests_without_upstream_spans() {
    compare(&hcm(false, 100), |r| {
        let root = view_of(r, "/root");
        // A new trace: its low half is the root span's id, sampled by the
        // default rate before the agent answered.
        assert!(
            root.contains(
                "x-datadog-trace-id=S\n  x-datadog-parent-id=S\n  x-datadog-sampling-priority=1"
            ),
            "{root}"
        );
        assert!(
            root.contains("x-datadog-tags=_dd.p.tid=<tid>,_dd.p.dm=-0"),
            "{root}"
        );
        assert!(root.contains("traceparent=00-<tid>S-S-01"), "{root}");
        assert!(root.contains("\"_dd.agent_psr\":1.0"), "{root}");
        assert!(root.contains("\"name\":\"envoy.proxy\""), "{root}");
        assert!(root.contains("\"resource\":\"ingress\""), "{root}");
        assert!(root.contains("\"service\":\"svc-dd\""), "{root}");
        // The caller's context continues: same trace, courier's span as parent.
        let dd = view_of(r, "/dd");
        assert!(
            dd.contains("x-datadog-trace-id=12345\n  x-datadog-parent-id=S"),
            "{dd}"
        );
        assert!(dd.contains("\"parent_id\":\"678\""), "{dd}");
        assert!(
            dd.contains("tracestate=dd=s:1;p:S;o:synthetics;t.dm:-4"),
            "{dd}"
        );
        // A W3C caller: its trace, its priority and origin, other vendors kept.
        let w3c = view_of(r, "/w3c");
        assert!(
            w3c.contains("tracestate=dd=s:2;p:S;o:rum;t.usr.id:u~1,foo=bar"),
            "{w3c}"
        );
        assert!(
            w3c.contains(&format!("traceparent=00-{TRACE128}-S-01")),
            "{w3c}"
        );
        // A 503 is an error span.
        let fail = view_of(r, "/fail");
        assert!(fail.contains("\"error\":1"), "{fail}");
        assert!(fail.contains("\"resource\":\"custom-resource\""), "{fail}");
        // The agent's rate of 0 for the service drops the next trace.
        let after = view_of(r, "/after-rates");
        assert!(after.contains("x-datadog-sampling-priority=0"), "{after}");
        assert!(after.contains("\"_dd.p.ksr\":\"0\""), "{after}");
        assert_eq!(r.calls.len(), 1, "{:?}", r.calls);
        assert!(r.calls[0].starts_with("POST /v0.4/traces"), "{:?}", r.calls);
        assert!(
            r.calls[0].contains("\"host\": \"agent.example\""),
            "{:?}",
            r.calls
        );
    });
}

#[test]
fn untraced_requests_with_upstream_spans() {
    compare(&hcm(true, 0), |r| {
        // Not traced by the connection manager: a user drop, still reported;
        // the upstream's parent is the upstream span.
        let root = view_of(r, "/root");
        assert!(
            root.contains(
                "x-datadog-trace-id=S\n  x-datadog-parent-id=C\n  x-datadog-sampling-priority=-1"
            ),
            "{root}"
        );
        assert!(root.contains("\"resource\":\"router up egress\""), "{root}");
        // A caller's decision wins over the connection manager's.
        let dd = view_of(r, "/dd");
        assert!(dd.contains("x-datadog-sampling-priority=1"), "{dd}");
    });
}
