//! Bootstrap `stats_sinks` (`envoy.stat_sinks.statsd`, `envoy.stat_sinks.metrics_service`,
//! `envoy.stat_sinks.open_telemetry`), `stats_flush_interval` and `stats_eviction_interval`
//! (which, as in Envoy, evicts none of the stats either proxy keeps), beside real Envoy.
//!
//! Each proxy runs from the same bootstrap with its own statsd receiver (a UDP socket)
//! and its own metrics service (envoy-types' tonic `MetricsService` on loopback);
//! the same requests go through both. For a set of counters and gauges both proxies
//! keep, the test compares what the sinks received: statsd's line type and the sum
//! of a counter's deltas (or a gauge's last value), the metrics service's family
//! type and last value, and the stream's shape (the node's identifier on the first
//! message only). Without Envoy (`COURIER_ENVOY`) only courier is checked.
//!
//! Intended differences (README): courier keeps no histograms, so no sink gets
//! Envoy's timers (`|ms` lines, SUMMARY families, OTLP histograms); the OTLP
//! resource's `telemetry.sdk.*` name courier's SDK (`courier` / `rust`).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test stats_sinks_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "otlp_support.rs"]
#[allow(dead_code)]
mod otlp;

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use envoy_types::pb::envoy::service::metrics::v3::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use envoy_types::pb::envoy::service::metrics::v3::{StreamMetricsMessage, StreamMetricsResponse};
use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::time::Duration;
use tokio::net::TcpListener;

/// One message on a stream: the stream's number and the message.
type Message = (usize, StreamMetricsMessage);

#[derive(Clone)]
struct Service {
    tx: mpsc::Sender<Message>,
    streams: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

#[tonic::async_trait]
impl MetricsService for Service {
    async fn stream_metrics(
        &self,
        req: tonic::Request<tonic::Streaming<StreamMetricsMessage>>,
    ) -> Result<tonic::Response<StreamMetricsResponse>, tonic::Status> {
        let n = self
            .streams
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut s = req.into_inner();
        while let Ok(Some(m)) = s.message().await {
            let _ = self.tx.send((n, m));
        }
        Ok(tonic::Response::new(StreamMetricsResponse {}))
    }
}

fn metrics_service() -> (SocketAddr, mpsc::Receiver<Message>) {
    let (tx, rx) = mpsc::channel();
    let addr = otlp::on_runtime(move || async move {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let svc = MetricsServiceServer::new(Service {
            tx,
            streams: Default::default(),
        });
        tokio::spawn(async move {
            while let Ok((sock, _)) = l.accept().await {
                let svc = svc.clone();
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let mut svc = svc.clone();
                        async move { tonic::codegen::Service::call(&mut svc, req).await }
                    },
                );
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(sock), service),
                );
            }
        });
        addr
    });
    (addr, rx)
}

fn cluster(name: &str, addr: SocketAddr, h2: bool) -> String {
    let h2 = if h2 {
        "  typed_extension_protocol_options:\n    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n      \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n      explicit_http_config: { http2_protocol_options: {} }\n"
    } else {
        ""
    };
    format!(
        "- name: {name}\n  connect_timeout: 2s\n{h2}  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
        addr.port()
    )
}

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

fn yaml(up: SocketAddr, statsd: SocketAddr, metrics: SocketAddr, deltas: bool) -> String {
    let clusters = [cluster("up", up, false), cluster("metrics", metrics, true)].concat();
    format!(
        r#"node: {{ id: node-1, cluster: svc-a }}
stats_flush_interval: 0.2s
stats_eviction_interval: 0.4s
stats_sinks:
- name: envoy.stat_sinks.statsd
  typed_config:
    "@type": type.googleapis.com/envoy.config.metrics.v3.StatsdSink
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }}
- name: envoy.stat_sinks.metrics_service
  typed_config:
    "@type": type.googleapis.com/envoy.config.metrics.v3.MetricsServiceConfig
    transport_api_version: V3
    report_counters_as_deltas: {deltas}
    grpc_service: {{ envoy_grpc: {{ cluster_name: metrics }} }}
{}  clusters:
{}"#,
        statsd.port(),
        bootstrap(&[hcm_listener("ing", "", VHOSTS)]),
        indent(&clusters, 2)
    )
}

/// The stats compared: (name, gauge?).
const STATS: &[(&str, bool)] = &[
    ("http.ing.downstream_rq_total", false),
    ("http.ing.downstream_rq_2xx", false),
    ("cluster.up.upstream_rq_total", false),
    ("cluster.up.upstream_rq_200", false),
    ("cluster.up.upstream_cx_total", false),
    // The client's connections are gone by the last flushes.
    ("http.ing.downstream_cx_active", true),
];

const REQUESTS: u64 = 3;

#[derive(Debug, PartialEq)]
struct Seen {
    /// statsd: per stat, its lines' type and the sum of counter deltas (or a gauge's
    /// last value).
    statsd: BTreeMap<String, (String, u64)>,
    /// metrics service: per stat, its family type and (cumulative) last value, or
    /// with deltas the sum.
    metrics: BTreeMap<String, (i32, u64)>,
    /// The messages with an identifier (the first of each stream), as `node id/cluster`.
    identifiers: Vec<String>,
    /// The compared stats `/stats` still lists after several eviction rounds
    /// (`stats_eviction_interval`: none of them is in an evictable scope).
    listed: Vec<String>,
}

fn run(kind: Kind, bin: &std::path::Path, deltas: bool) -> (Seen, usize, usize) {
    let (up, _up_rx) = otlp::upstream();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let (metrics, metrics_rx) = metrics_service();
    let y = yaml(up, udp.local_addr().unwrap(), metrics, deltas);
    let p = Proxy::start(kind, bin, &y, &["ing"]).unwrap();
    for _ in 0..REQUESTS {
        let r = client::send(
            p.listener("ing").unwrap(),
            Protocol::Http1,
            &Request {
                method: "GET".into(),
                path: "/".into(),
                authority: "example.com".into(),
                headers: Vec::new(),
                body: Vec::new(),
            },
        )
        .unwrap();
        assert_eq!(r.status, 200);
    }
    // Several flushes after the last request (bounded: 1.5 s of datagrams).
    let mut lines = Vec::new();
    let mut buf = [0u8; 65536];
    let start = std::time::SystemTime::now();
    while start.elapsed().unwrap() < Duration::from_millis(1500) {
        if let Ok(n) = udp.recv(&mut buf) {
            for l in String::from_utf8_lossy(&buf[..n]).lines() {
                lines.push(l.to_string());
            }
        }
    }
    let stats = client::get(&p.admin, "/stats").unwrap();
    let listed: Vec<String> = String::from_utf8_lossy(&stats.body)
        .lines()
        .filter(|l| {
            STATS
                .iter()
                .any(|(n, g)| !g && l.starts_with(&format!("{n}: ")))
        })
        .map(String::from)
        .collect();
    drop(p);
    let mut statsd = BTreeMap::new();
    let mut zero_counter_lines = 0;
    for l in &lines {
        let (name, rest) = l.split_once(':').unwrap_or_else(|| panic!("{l}"));
        let (value, kind) = rest.split_once('|').unwrap_or_else(|| panic!("{l}"));
        assert!(name.starts_with("envoy."), "{l}");
        let name = &name["envoy.".len()..];
        let Some((_, gauge)) = STATS.iter().find(|(n, _)| *n == name) else {
            continue;
        };
        let value: u64 = value.parse().unwrap();
        if kind == "c" && value == 0 {
            zero_counter_lines += 1;
        }
        let e = statsd
            .entry(name.to_string())
            .or_insert((kind.to_string(), 0));
        assert_eq!(e.0, kind, "{l}");
        if *gauge {
            e.1 = value;
        } else {
            e.1 += value;
        }
    }
    let mut metrics = BTreeMap::new();
    let mut identifiers = Vec::new();
    let mut streams = std::collections::BTreeSet::new();
    let mut messages = 0;
    while let Ok((stream, m)) = metrics_rx.try_recv() {
        messages += 1;
        let first = streams.insert(stream);
        assert_eq!(
            m.identifier.is_some(),
            first,
            "identifier on a stream's first message only"
        );
        if let Some(n) = m.identifier.as_ref().and_then(|i| i.node.as_ref()) {
            identifiers.push(format!("{}/{}", n.id, n.cluster));
        }
        for f in &m.envoy_metrics {
            let name = f.name.clone().unwrap_or_default();
            let Some((_, gauge)) = STATS.iter().find(|(n, _)| *n == name) else {
                continue;
            };
            let metric = &f.metric[0];
            assert!(metric.timestamp_ms.is_some());
            let value = if *gauge {
                metric.gauge.as_ref().and_then(|g| g.value)
            } else {
                metric.counter.as_ref().and_then(|c| c.value)
            }
            .unwrap_or_else(|| panic!("{f:?}")) as u64;
            let e = metrics.entry(name).or_insert((f.r#type.unwrap_or(-1), 0));
            if deltas && !gauge {
                e.1 += value;
            } else {
                e.1 = value;
            }
        }
    }
    (
        Seen {
            statsd,
            metrics,
            identifiers,
            listed,
        },
        zero_counter_lines,
        messages,
    )
}

fn compare(deltas: bool) {
    let (courier, zeros, messages) = run(Kind::Courier, &courier_bin(), deltas);
    println!("courier: {courier:#?}");
    for (name, gauge) in STATS {
        let (kind, v) = &courier.statsd[*name];
        assert_eq!(kind, if *gauge { "g" } else { "c" }, "{name}");
        let (t, m) = courier.metrics[*name];
        assert_eq!(t, i32::from(*gauge), "{name}");
        assert_eq!(v, &m, "{name}");
    }
    assert_eq!(courier.statsd["cluster.up.upstream_rq_total"].1, REQUESTS);
    // A used counter goes on being sent, with a zero delta, on later flushes.
    assert!(zeros > 0);
    assert!(messages >= 3, "{messages}");
    assert_eq!(courier.identifiers, vec!["node-1/svc-a".to_string()]);
    assert!(
        courier
            .listed
            .contains(&format!("cluster.up.upstream_rq_200: {REQUESTS}")),
        "{:?}",
        courier.listed
    );
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED the Envoy comparison: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let (envoy, _, _) = run(Kind::Envoy, &envoy, deltas);
    println!("envoy: {envoy:#?}");
    assert_eq!(courier, envoy);
}

#[test]
fn statsd_and_metrics_service_as_envoy() {
    compare(false);
}

#[test]
fn metrics_service_counters_as_deltas() {
    compare(true);
}

mod otlp_metrics {
    //! The `envoy.stat_sinks.open_telemetry` sink beside Envoy: a real OTLP
    //! `MetricsService` (opentelemetry-proto's tonic server) as the collector.

    use super::*;
    use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
        MetricsService as OtlpService, MetricsServiceServer as OtlpServer,
    };
    use opentelemetry_proto::tonic::collector::metrics::v1::{
        ExportMetricsServiceRequest, ExportMetricsServiceResponse,
    };
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;

    /// One export: its `:authority`, its `authorization` metadata, the request.
    type Export = (String, Option<String>, ExportMetricsServiceRequest);

    #[derive(Clone)]
    struct Collector(mpsc::Sender<Export>);

    #[tonic::async_trait]
    impl OtlpService for Collector {
        async fn export(
            &self,
            req: tonic::Request<ExportMetricsServiceRequest>,
        ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
            let auth = req
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let authority = req
                .extensions()
                .get::<Authority>()
                .map(|a| a.0.clone())
                .unwrap_or_default();
            let _ = self.0.send((authority, auth, req.into_inner()));
            Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
        }
    }

    #[derive(Clone)]
    struct Authority(String);

    fn collector() -> (SocketAddr, mpsc::Receiver<Export>) {
        let (tx, rx) = mpsc::channel();
        let addr = otlp::on_runtime(move || async move {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let svc = OtlpServer::new(Collector(tx));
            tokio::spawn(async move {
                while let Ok((sock, _)) = l.accept().await {
                    let svc = svc.clone();
                    let service = hyper::service::service_fn(
                        move |mut req: hyper::Request<hyper::body::Incoming>| {
                            let mut svc = svc.clone();
                            let a = req
                                .uri()
                                .authority()
                                .map(|a| a.as_str().to_string())
                                .unwrap_or_default();
                            req.extensions_mut().insert(Authority(a));
                            async move { tonic::codegen::Service::call(&mut svc, req).await }
                        },
                    );
                    tokio::spawn(
                        hyper::server::conn::http2::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        )
                        .serve_connection(hyper_util::rt::TokioIo::new(sock), service),
                    );
                }
            });
            addr
        });
        (addr, rx)
    }

    fn yaml(up: SocketAddr, collector: SocketAddr, options: &str) -> String {
        let clusters = [cluster("up", up, false), cluster("otel", collector, true)].concat();
        format!(
            r#"node: {{ id: node-1, cluster: svc-a }}
stats_flush_interval: 0.2s
stats_sinks:
- name: envoy.stat_sinks.open_telemetry
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.stat_sinks.open_telemetry.v3.SinkConfig
    grpc_service:
      envoy_grpc: {{ cluster_name: otel, authority: otel-collector.example.com }}
      initial_metadata: [{{ key: Authorization, value: Bearer fake }}]
    resource_detectors:
    - name: envoy.tracers.opentelemetry.resource_detectors.static_config
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.tracers.opentelemetry.resource_detectors.v3.StaticConfigResourceDetectorConfig
        attributes: {{ deployment.environment: test, service.name: test-service }}
{options}{}  clusters:
{}"#,
            bootstrap(&[hcm_listener("ing", "", VHOSTS)]),
            indent(&clusters, 2)
        )
    }

    /// The metric names compared (tag-extracted), for `up` and `ing` only.
    const NAMES: &[&str] = &[
        "http.downstream_rq_total",
        "http.downstream_rq_xx",
        "http.downstream_cx_active",
        "cluster.upstream_rq_total",
        "cluster.upstream_rq",
        "cluster.upstream_cx_total",
        "http.ing.downstream_rq_total",
        "cluster.up.upstream_rq_total",
        "cluster.up.upstream_rq_200",
    ];

    /// Per data point `name{attributes}`: its kind and last value (summed with
    /// deltas); the resource; the calls' authority and authorization.
    fn run(
        kind: Kind,
        bin: &std::path::Path,
        options: &str,
    ) -> (BTreeMap<String, String>, Vec<String>) {
        let (up, _up_rx) = otlp::upstream();
        let (col, rx) = collector();
        let p = Proxy::start(kind, bin, &yaml(up, col, options), &["ing"]).unwrap();
        for _ in 0..REQUESTS {
            let r = client::send(
                p.listener("ing").unwrap(),
                Protocol::Http1,
                &Request {
                    method: "GET".into(),
                    path: "/".into(),
                    authority: "example.com".into(),
                    headers: Vec::new(),
                    body: Vec::new(),
                },
            )
            .unwrap();
            assert_eq!(r.status, 200);
        }
        std::thread::sleep(Duration::from_millis(1500));
        drop(p);
        let mut points = BTreeMap::new();
        let mut calls = std::collections::BTreeSet::new();
        while let Ok((authority, auth, req)) = rx.try_recv() {
            calls.insert(format!("authority={authority} authorization={auth:?}"));
            for rm in &req.resource_metrics {
                // Intended difference: each proxy names its own SDK (key only).
                let mut res: Vec<String> = rm
                    .resource
                    .iter()
                    .flat_map(|r| &r.attributes)
                    .map(|kv| {
                        if kv.key.starts_with("telemetry.sdk.") {
                            kv.key.clone()
                        } else {
                            format!("{}={:?}", kv.key, kv.value)
                        }
                    })
                    .collect();
                res.sort();
                calls.insert(format!("resource {res:?}"));
                for m in rm.scope_metrics.iter().flat_map(|s| &s.metrics) {
                    if !NAMES.contains(&m.name.as_str()) {
                        continue;
                    }
                    let (kind, dps, delta) = match &m.data {
                        Some(Data::Gauge(g)) => ("gauge".to_string(), &g.data_points, false),
                        Some(Data::Sum(s)) => (
                            format!(
                                "sum temporality={} monotonic={}",
                                s.aggregation_temporality, s.is_monotonic
                            ),
                            &s.data_points,
                            s.aggregation_temporality == 1,
                        ),
                        other => panic!("{other:?}"),
                    };
                    for dp in dps {
                        assert!(dp.time_unix_nano >= dp.start_time_unix_nano, "{m:?}");
                        let mut attrs: Vec<String> = dp
                            .attributes
                            .iter()
                            .map(|kv| format!("{}={:?}", kv.key, kv.value))
                            .collect();
                        attrs.sort();
                        let attrs = attrs.join(",");
                        if !attrs.contains("\"up\"")
                            && !attrs.contains("\"ing\"")
                            && !attrs.is_empty()
                        {
                            continue;
                        }
                        let Some(Value::AsInt(v)) = dp.value else {
                            panic!("{dp:?}")
                        };
                        let key = format!("{}{{{attrs}}}", m.name);
                        let prev: i64 = points
                            .get(&key)
                            .and_then(|s: &String| s.rsplit('=').next()?.parse().ok())
                            .unwrap_or(0);
                        let v = if delta { prev + v } else { v };
                        points.insert(key, format!("{kind} value={v}"));
                    }
                }
            }
        }
        (points, calls.into_iter().collect())
    }

    fn compare(options: &str) {
        let courier = run(Kind::Courier, &courier_bin(), options);
        println!("courier: {courier:#?}");
        assert!(!courier.0.is_empty());
        let Some(envoy) = envoy_bin() else {
            eprintln!("SKIPPED the Envoy comparison: no Envoy (set COURIER_ENVOY)");
            return;
        };
        let envoy = run(Kind::Envoy, &envoy, options);
        println!("envoy: {envoy:#?}");
        assert_eq!(courier, envoy);
    }

    #[test]
    fn open_telemetry_sink_as_envoy() {
        compare("");
    }

    #[test]
    fn open_telemetry_sink_deltas_full_names_no_tags() {
        compare(
            "    report_counters_as_deltas: true\n    use_tag_extracted_name: false\n    emit_tags_as_attributes: false\n",
        );
    }
}
