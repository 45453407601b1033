//! HCM `tracing` with the `envoy.tracers.zipkin` provider (and the bootstrap's
//! `tracing` as the default provider), beside real Envoy.
//!
//! Each proxy runs from the same bootstrap with its own Zipkin collector (an HTTP/1.1
//! server on loopback that answers `202 Accepted`) and its own upstream; the same
//! requests go through both. Per request, what the upstream received in B3 headers
//! and the Zipkin v2 JSON spans reported are rendered with generated ids replaced by
//! their role (the server span `S`, the upstream span `C`, a new trace `T<digits>`;
//! ids the client sent stay as they are), timestamps checked and dropped, and the
//! renderings compared; then the report calls' path, host and content type, and the
//! `tracing.*` stats. Without Envoy (`COURIER_ENVOY`) only courier is checked.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test zipkin_differential -- --nocapture
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
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;
use tokio::net::TcpListener;

/// A request a server received: path, lower-cased headers, body.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

/// An HTTP/1.1 server answering `status` to everything and reporting what it got.
fn server(status: u16) -> (SocketAddr, mpsc::Receiver<Received>) {
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
                        let path = req.uri().path().to_string();
                        let headers = req
                            .headers()
                            .iter()
                            .map(|(k, v)| {
                                (k.to_string(), v.to_str().unwrap_or_default().to_string())
                            })
                            .collect();
                        let body = req.into_body().collect().await?.to_bytes().to_vec();
                        let _ = tx.send(Received {
                            path,
                            headers,
                            body,
                        });
                        Ok::<_, hyper::Error>(
                            hyper::Response::builder()
                                .status(status)
                                .body(Full::new(Bytes::from_static(b"ok")))
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

/// The Zipkin provider with `options` (e.g. `trace_id_128bit: true`).
fn provider(options: &str) -> String {
    format!(
        r#"name: envoy.traces.zipkin
typed_config:
  "@type": type.googleapis.com/envoy.config.trace.v3.ZipkinConfig
  collector_cluster: zipkin
  collector_endpoint: /api/v2/spans
  collector_endpoint_version: HTTP_JSON
{}"#,
        indent(options, 2)
    )
}

/// The connection manager's `tracing`; `provider` indented under it unless empty.
fn hcm(spawn: bool, provider: Option<&str>) -> String {
    let provider = provider.map_or(String::new(), |p| format!("  provider:\n{}", indent(p, 4)));
    format!(
        r#"generate_request_id: true
tracing:
  random_sampling: {{ value: 100 }}
  spawn_upstream_span: {spawn}
  custom_tags:
  - {{ tag: literal1, literal: {{ value: value1 }} }}
  - {{ tag: req1, request_header: {{ name: x-custom, default_value: "-" }} }}
{provider}"#
    )
}

fn yaml(hcm: &str, bootstrap_tracing: Option<&str>, up: SocketAddr, zipkin: SocketAddr) -> String {
    let clusters = [cluster("up", up), cluster("zipkin", zipkin)].concat();
    let tracing = bootstrap_tracing.map_or(String::new(), |p| {
        format!("tracing:\n  http:\n{}\n", indent(p, 4))
    });
    format!(
        "node: {{ id: node-1, cluster: svc-a, locality: {{ zone: zone-1 }} }}\n{tracing}{}  clusters:\n{}\nlayered_runtime:\n  layers:\n  - name: s\n    static_layer:\n      tracing.zipkin.min_flush_spans: 1\n",
        bootstrap(&[hcm_listener("traced", hcm, VHOSTS)]),
        indent(&clusters, 2)
    )
}

const TRACE128: &str = "463ac35c9f6413ad48485a3953bb6124";

/// The requests: path, headers.
const REQUESTS: &[(&str, &[(&str, &str)])] = &[
    ("/root", &[("x-custom", "cv"), ("user-agent", "ua/1")]),
    (
        "/multi",
        &[
            ("x-b3-traceid", TRACE128),
            ("x-b3-spanid", "a2fb4a1d1a96d312"),
            ("x-b3-parentspanid", "0020000000000001"),
            ("x-b3-sampled", "1"),
        ],
    ),
    (
        "/single",
        &[(
            "b3",
            "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90",
        )],
    ),
    ("/single-flag", &[("b3", "1")]),
    (
        "/single-short",
        &[("b3", "80f198ee56343ba8-e457b5a2e4d86bd1")],
    ),
    ("/unsampled", &[("x-b3-sampled", "0")]),
    (
        "/unsampled-parent",
        &[
            ("x-b3-traceid", "463ac35c9f6413ad"),
            ("x-b3-spanid", "a2fb4a1d1a96d312"),
            ("x-b3-sampled", "0"),
        ],
    ),
    (
        "/short-ids",
        &[
            ("x-b3-traceid", "abc"),
            ("x-b3-spanid", "1"),
            ("x-b3-sampled", "true"),
        ],
    ),
    // Unreadable: no span, nothing injected.
    (
        "/bad",
        &[("x-b3-traceid", "zz"), ("x-b3-spanid", "a2fb4a1d1a96d312")],
    ),
    (
        "/bad-single",
        &[("b3", "80f198ee56343ba8-e457b5a2e4d86bd1-x")],
    ),
    // W3C context is not Zipkin's: a new trace.
    (
        "/w3c",
        &[(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )],
    ),
    (
        "/forced-unsampled",
        &[("x-envoy-force-trace", "1"), ("x-b3-sampled", "0")],
    ),
    (
        "/h2",
        &[
            ("x-b3-traceid", "463ac35c9f6413ad"),
            ("x-b3-spanid", "a2fb4a1d1a96d312"),
        ],
    ),
];

struct Run {
    /// Per request: its rendering.
    views: Vec<String>,
    /// The report calls: path, host, content type.
    calls: Vec<String>,
    stats: Vec<String>,
}

/// Replaces ids by their role, as the table says; unknown new ids become `?<n>`.
fn label(id: &str, roles: &mut Vec<(String, String)>, fresh: &str) -> String {
    if let Some((_, r)) = roles.iter().find(|(i, _)| i == id) {
        return r.clone();
    }
    let r = format!("{fresh}{}", id.len());
    roles.push((id.to_string(), r.clone()));
    r
}

fn run(kind: Kind, bin: &std::path::Path, hcm: &str, bootstrap_tracing: Option<&str>) -> Run {
    let (up, up_rx) = server(200);
    let (zipkin, zipkin_rx) = server(202);
    let y = yaml(hcm, bootstrap_tracing, up, zipkin);
    let p = Proxy::start(kind, bin, &y, &["traced"]).unwrap();
    let mut seen = Vec::new();
    for (path, headers) in REQUESTS {
        let r = client::send(
            p.listener("traced").unwrap(),
            if *path == "/h2" {
                Protocol::H2c
            } else {
                Protocol::Http1
            },
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
        assert_eq!(r.status, 200, "{path}");
        seen.push(up_rx.recv_timeout(Duration::from_secs(5)).unwrap());
    }
    // min_flush_spans is 1: each span is its own report, sent as it ends.
    let mut reports = Vec::new();
    while let Ok(r) = zipkin_rx.recv_timeout(Duration::from_millis(1000)) {
        reports.push(r);
    }
    let mut spans: Vec<Value> = Vec::new();
    let mut calls = Vec::new();
    for r in &reports {
        calls.push(format!(
            "{} host={:?} content-type={:?}",
            r.path,
            r.headers.get("host"),
            r.headers.get("content-type")
        ));
        let Value::Array(list) = serde_json::from_slice(&r.body).unwrap() else {
            panic!("not a JSON array: {:?}", String::from_utf8_lossy(&r.body));
        };
        spans.extend(list);
    }
    let mut views = Vec::new();
    for ((path, _), up) in REQUESTS.iter().zip(&seen) {
        assert_eq!(&up.path, path);
        let url = format!("http://example.com{path}");
        let server = spans
            .iter()
            .find(|s| s["tags"]["http.url"] == Value::String(url.clone()));
        let mut mine: Vec<&Value> = server.into_iter().collect();
        if let Some(s) = server {
            mine.extend(
                spans
                    .iter()
                    .filter(|c| c["kind"] == "CLIENT" && c["parentId"] == s["id"]),
            );
        }
        views.push(view(path, up, &mine));
    }
    let stats = client::get(&p.admin, "/stats").unwrap();
    let stats = String::from_utf8_lossy(&stats.body)
        .lines()
        .filter(|l| l.starts_with("http.traced.tracing.") || l.starts_with("tracing."))
        .map(str::to_string)
        .collect();
    Run {
        views,
        calls,
        stats,
    }
}

/// One request's rendering: the B3 headers the upstream got, then its spans.
fn view(path: &str, up: &Received, spans: &[&Value]) -> String {
    // Ids the client sent keep their value; the spans' own ids get roles.
    let mut roles: Vec<(String, String)> = Vec::new();
    for s in spans {
        let role = if s["kind"] == "CLIENT" && s.get("parentId").is_some() && spans.len() > 1 {
            "C"
        } else {
            "S"
        };
        let id = s["id"].as_str().unwrap().to_string();
        let sent = REQUESTS
            .iter()
            .find(|(p, _)| *p == path)
            .is_some_and(|(_, h)| h.iter().any(|(_, v)| v.contains(id.as_str())));
        if !sent {
            let role = format!("{role}{}", id.len());
            roles.push((id, role));
        }
    }
    let is_sent = |v: &str| {
        REQUESTS
            .iter()
            .find(|(p, _)| *p == path)
            .is_some_and(|(_, h)| h.iter().any(|(_, hv)| hv.contains(v)))
    };
    let id = |v: &str, roles: &mut Vec<(String, String)>| {
        if is_sent(v) {
            v.to_string()
        } else {
            label(v, roles, "T")
        }
    };
    let mut out = format!("{path}:");
    for h in [
        "b3",
        "x-b3-traceid",
        "x-b3-spanid",
        "x-b3-parentspanid",
        "x-b3-sampled",
        "x-b3-flags",
        "traceparent",
    ] {
        if let Some(v) = up.headers.get(h) {
            let v = if h == "b3" {
                v.split('-')
                    .map(|p| {
                        if p.len() >= 16 {
                            id(p, &mut roles)
                        } else {
                            p.to_string()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("-")
            } else if h.ends_with("id") {
                id(v, &mut roles)
            } else {
                v.clone()
            };
            out.push_str(&format!(" {h}={v}"));
        }
    }
    for s in spans {
        let mut s = (*s).clone();
        let o = s.as_object_mut().unwrap();
        // Timestamps: the span's start, its duration, the end annotation after both.
        let start = o.remove("timestamp").unwrap().as_u64().unwrap();
        let duration = o.remove("duration").unwrap().as_u64().unwrap();
        let annotations = o.remove("annotations").unwrap();
        let end = annotations[0]["timestamp"].as_u64().unwrap();
        assert!(end >= start, "{path}: {annotations}");
        assert!(duration <= end - start + 1_000, "{path}");
        for k in ["traceId", "id", "parentId"] {
            if let Some(Value::String(v)) = o.get(k).cloned() {
                o.insert(k.into(), Value::String(id(&v, &mut roles)));
            }
        }
        let server = o["kind"] == "SERVER";
        let tags = o.get_mut("tags").unwrap().as_object_mut().unwrap();
        if server {
            assert_eq!(
                tags.get("guid:x-request-id").and_then(Value::as_str),
                up.headers.get("x-request-id").map(String::as_str),
                "{path}"
            );
            tags.insert("guid:x-request-id".into(), "<rid>".into());
        }
        for k in ["peer.address", "upstream_address"] {
            if let Some(Value::String(v)) = tags.get(k)
                && v.contains(':')
            {
                tags.insert(k.into(), "<upstream>".into());
            }
        }
        out.push_str(&format!(
            "\n  {} annotations={}",
            serde_json::to_string(&s).unwrap(),
            annotations[0]["value"]
        ));
    }
    out
}

fn compare(hcm: &str, bootstrap_tracing: Option<&str>, expect: impl Fn(&Run)) {
    let courier = run(Kind::Courier, &courier_bin(), hcm, bootstrap_tracing);
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
    let envoy = run(Kind::Envoy, &envoy, hcm, bootstrap_tracing);
    println!("envoy:\n{}\n{:#?}", envoy.views.join("\n"), envoy.stats);
    for (c, e) in courier.views.iter().zip(&envoy.views) {
        assert_eq!(c, e);
    }
    assert_eq!(courier.calls, envoy.calls);
    assert_eq!(courier.stats, envoy.stats);
}

fn view_of<'a>(r: &'a Run, path: &str) -> &'a str {
    let i = REQUESTS.iter().position(|(p, _)| *p == path).unwrap();
    &r.views[i]
}

#[test]
fn shared_span_context_without_upstream_spans() {
    compare(&hcm(false, Some(&provider(""))), None, |r| {
        // A caller's span is shared: its ids go on unchanged, reported `shared`.
        let multi = view_of(r, "/multi");
        assert!(
            multi.contains(&format!(
                "x-b3-traceid={TRACE128} x-b3-spanid=a2fb4a1d1a96d312 x-b3-parentspanid=0020000000000001 x-b3-sampled=1"
            )),
            "{multi}"
        );
        assert!(multi.contains("\"shared\":true"), "{multi}");
        assert!(multi.contains("\"name\":\"example.com\""), "{multi}");
        // A new trace's id is its root span's; 64 bits without trace_id_128bit.
        let root = view_of(r, "/root");
        assert!(
            root.contains("x-b3-traceid=S16 x-b3-spanid=S16 x-b3-sampled=1"),
            "{root}"
        );
        assert!(root.contains("\"req1\":\"cv\""), "{root}");
        assert!(root.contains("\"serviceName\":\"svc-a\""), "{root}");
        // Not sampled: headers say so, nothing reported; unreadable: nothing at all.
        assert!(!view_of(r, "/unsampled").contains('\n'));
        assert!(view_of(r, "/unsampled").contains("x-b3-sampled=0"));
        assert_eq!(
            view_of(r, "/bad"),
            "/bad: x-b3-traceid=zz x-b3-spanid=a2fb4a1d1a96d312"
        );
        assert!(
            r.stats
                .contains(&"tracing.zipkin.reports_sent: 8".to_string())
        );
    });
}

#[test]
fn upstream_spans_128_bit_traces_and_no_sharing() {
    let options = "trace_id_128bit: true\nshared_span_context: false\n";
    compare(&hcm(true, Some(&provider(options))), None, |r| {
        let root = view_of(r, "/root");
        // A new 128-bit trace; the upstream gets the CLIENT span, child of the SERVER one.
        assert!(
            root.contains("x-b3-traceid=T32 x-b3-spanid=C16 x-b3-parentspanid=S16"),
            "{root}"
        );
        assert!(root.contains("\"name\":\"router up egress\""), "{root}");
        assert!(!root.contains("shared"), "{root}");
        // The caller's span is the parent of a new one; the single header comes back.
        let single = view_of(r, "/single");
        assert!(
            single.contains("b3=80f198ee56343ba864fe8b2a57d3eff7-C16-1-S16"),
            "{single}"
        );
        assert!(
            single.contains("\"parentId\":\"e457b5a2e4d86bd1\""),
            "{single}"
        );
    });
}

#[test]
fn the_bootstrap_tracer_serves_managers_without_a_provider() {
    compare(&hcm(false, None), Some(&provider("")), |r| {
        assert!(view_of(r, "/root").contains("\"kind\":\"SERVER\""));
    });
}
