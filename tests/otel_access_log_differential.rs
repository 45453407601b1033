//! The OpenTelemetry access logger (`envoy.access_loggers.open_telemetry`)
//! beside real Envoy: one bootstrap in Envoy Gateway's shape (the logger's
//! `common_config` with `log_name`, an `envoy_grpc` collector with an
//! `:authority` and `initial_metadata`, `resource_attributes`, a format-string
//! `body` and `attributes` with `%ENVIRONMENT(...)%`) plus a second logger
//! with a structured body (a key-value list with nested lists, numbers and
//! booleans), `disable_builtin_labels` and the top-level `grpc_service`. A
//! real OTLP collector (opentelemetry-proto's tonic `LogsService`) receives
//! what each proxy exports for the same requests; the test compares the
//! calls' authority and metadata, the resources, and each record's body and
//! attributes (start time checked for range; the request id, which each
//! proxy makes up, masked).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=$PWD/.venv/bin/envoy cargo test -p courier-tests --test otel_access_log_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "otlp_support.rs"]
#[allow(dead_code)]
mod otlp;

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use http::Response;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::AnyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tonic::codegen::Service;

/// One export call as the collector received it.
#[derive(Debug, Clone)]
struct Export {
    authority: String,
    metadata: BTreeMap<String, String>,
    request: ExportLogsServiceRequest,
}

#[derive(Clone)]
struct Collector(mpsc::Sender<Export>);

#[derive(Clone)]
struct Authority(String);

#[tonic::async_trait]
impl LogsService for Collector {
    async fn export(
        &self,
        req: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        let metadata = req
            .metadata()
            .clone()
            .into_headers()
            .iter()
            // Envoy's gRPC client also sends `x-envoy-internal` and its
            // machine's address in `x-forwarded-for` on every `envoy_grpc`
            // call; courier's sends neither (README, on purpose: they name
            // nothing the collector needs).
            .filter(|(k, _)| {
                (k.as_str().starts_with("x-") || k.as_str() == "authorization")
                    && !matches!(k.as_str(), "x-envoy-internal" | "x-forwarded-for")
            })
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
            .collect();
        let authority = req
            .extensions()
            .get::<Authority>()
            .map(|a| a.0.clone())
            .unwrap_or_default();
        let _ = self.0.send(Export {
            authority,
            metadata,
            request: req.into_inner(),
        });
        Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
    }
}

fn collector() -> (SocketAddr, mpsc::Receiver<Export>) {
    let (tx, rx) = mpsc::channel();
    let addr = otlp::on_runtime(move || async move {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let svc = LogsServiceServer::new(Collector(tx));
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let svc = svc.clone();
                let service = service_fn(move |mut req: http::Request<Incoming>| {
                    let mut svc = svc.clone();
                    let authority = req
                        .uri()
                        .authority()
                        .map(|a| a.as_str().to_string())
                        .unwrap_or_default();
                    req.extensions_mut().insert(Authority(authority));
                    async move {
                        let r: Result<Response<_>, _> = svc.call(req).await;
                        r
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(s), service),
                );
            }
        });
        addr
    });
    (addr, rx)
}

/// Envoy Gateway's logger (its `accesslog-otel-headers` golden output), the
/// flush interval shortened.
const GATEWAY_LOG: &str = r#"- name: envoy.access_loggers.open_telemetry
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig
    attributes:
      values:
      - key: k8s.namespace.name
        value: { string_value: "%ENVIRONMENT(COURIER_TEST_UNSET_NAMESPACE)%" }
      - key: home
        value: { string_value: "%ENVIRONMENT(HOME)%" }
      - key: response_code
        value: { string_value: "%RESPONSE_CODE%" }
    body:
      string_value: "\"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% \"%REQ(USER-AGENT)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\"\n"
    common_config:
      grpc_service:
        envoy_grpc: { authority: otel-collector.default.svc.cluster.local, cluster_name: accesslog-0 }
        initial_metadata:
        - { key: Authorization, value: Bearer my-api-key }
        - { key: X-Tenant-ID, value: tenant-123 }
      log_name: otel_envoy_accesslog
      transport_api_version: V3
      buffer_flush_interval: 0.2s
    resource_attributes:
      values:
      - key: cluster_name
        value: { string_value: cluster1 }
"#;

/// A structured body, no built-in labels, the top-level `grpc_service`.
const STRUCTURED_LOG: &str = r#"- name: envoy.access_loggers.open_telemetry
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig
    grpc_service: { envoy_grpc: { cluster_name: accesslog-0 } }
    log_name: structured
    buffer_flush_interval: 0.2s
    disable_builtin_labels: true
    resource_attributes:
      values:
      - { key: region, value: { string_value: "%NOT_FORMATTED%" } }
      - { key: replicas, value: { int_value: 3 } }
      - { key: ratio, value: { double_value: 1.5 } }
      - { key: canary, value: { bool_value: true } }
    body:
      kvlist_value:
        values:
        - { key: method, value: { string_value: "%REQ(:METHOD)%" } }
        - { key: code, value: { string_value: "%RESPONSE_CODE%" } }
        - { key: missing, value: { string_value: "%REQ(X-NOPE)%" } }
        - key: list
          value:
            array_value:
              values:
              - { string_value: "%PROTOCOL%" }
              - kvlist_value:
                  values:
                  - { key: flags, value: { string_value: "%RESPONSE_FLAGS_LONG%" } }
    attributes:
      values:
      - { key: cluster, value: { string_value: "%UPSTREAM_CLUSTER%" } }
      - { key: flags, value: { string_value: "%RESPONSE_FLAGS%" } }
"#;

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/missing" }
    route: { cluster: nowhere }
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

fn cluster(name: &str, port: u16, h2: bool) -> String {
    let h2 = if h2 {
        "  typed_extension_protocol_options:\n    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n      \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n      explicit_http_config: { http2_protocol_options: {} }\n"
    } else {
        ""
    };
    format!(
        "- name: {name}\n  connect_timeout: 1s\n{h2}  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}\n"
    )
}

fn yaml(up: SocketAddr, collector: SocketAddr, closed: u16) -> String {
    let logs = format!("access_log:\n{GATEWAY_LOG}{STRUCTURED_LOG}");
    let clusters = [
        cluster("up", up.port(), false),
        cluster("nowhere", closed, false),
        cluster("accesslog-0", collector.port(), true),
    ]
    .concat();
    format!(
        "node: {{ id: node-7, cluster: edge, locality: {{ zone: zone-a }} }}\n{}  clusters:\n{}",
        bootstrap(&[hcm_listener("in", &logs, VHOSTS)]),
        indent(&clusters, 2)
    )
}

fn text(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => format!("{s:?}"),
        Some(Value::KvlistValue(l)) => format!(
            "{{{}}}",
            l.values
                .iter()
                .map(|kv| format!("{}={}", kv.key, text(&kv.value)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(Value::ArrayValue(a)) => format!(
            "[{}]",
            a.values
                .iter()
                .map(|v| text(&Some(v.clone())))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => format!("{other:?}"),
    }
}

/// What a proxy exported: per call (sorted), its authority, metadata,
/// resource and records, one line each.
fn run(kind: Kind, bin: &std::path::Path) -> Vec<String> {
    let (up, _seen) = otlp::upstream();
    let (collector, rx) = collector();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = Proxy::start(kind, bin, &yaml(up, collector, closed), &["in"]).unwrap();
    let addr = p.listener("in").unwrap().to_string();
    let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    for (path, status) in [("/a", 200), ("/missing", 503), ("/b", 200)] {
        let r = client::send(
            &addr,
            Protocol::Http1,
            &Request {
                method: "GET".into(),
                path: path.into(),
                authority: "example.com".into(),
                headers: vec![("user-agent".into(), "differential".into())],
                body: Vec::new(),
            },
        )
        .unwrap();
        assert_eq!(r.status, status, "{kind} {path}");
    }
    let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    // Each logger's batch goes within its 0.2 s flush interval.
    let mut exports = Vec::new();
    let mut records = 0;
    while records < 6 {
        let Ok(e) = rx.recv_timeout(Duration::from_secs(5)) else {
            break;
        };
        records += e
            .request
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .map(|s| s.log_records.len())
            .sum::<usize>();
        exports.push(e);
    }
    // `logs_written` counts a batch once its export call starts.
    let stats = otlp_stats(&p);
    let mut out = Vec::new();
    for e in &exports {
        for rl in &e.request.resource_logs {
            let resource = rl
                .resource
                .as_ref()
                .map(|r| {
                    r.attributes
                        .iter()
                        .map(|kv| format!("{}={}", kv.key, text(&kv.value)))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            for sl in &rl.scope_logs {
                for r in &sl.log_records {
                    let t = Duration::from_nanos(r.time_unix_nano);
                    assert!(
                        t + Duration::from_millis(5) >= before && t <= after,
                        "{kind}: start time {t:?} outside {before:?}..{after:?}"
                    );
                    let attributes: Vec<String> = r
                        .attributes
                        .iter()
                        .map(|kv| format!("{}={}", kv.key, text(&kv.value)))
                        .collect();
                    out.push(format!(
                        "authority={} metadata={:?} resource=[{resource}] body={} attributes=[{}] trace={:?} span={:?}",
                        e.authority,
                        e.metadata,
                        text(&r.body),
                        attributes.join(" "),
                        r.trace_id,
                        r.span_id,
                    ));
                }
            }
        }
    }
    // Each run has its own upstreams.
    let port = regex::Regex::new(r"127\.0\.0\.1:\d+").unwrap();
    let mut out: Vec<String> = out
        .iter()
        .map(|l| port.replace_all(l, "127.0.0.1:PORT").into_owned())
        .collect();
    out.sort();
    out.push(stats);
    out
}

/// The logger's stats once all six records are counted (bounded wait).
fn otlp_stats(p: &Proxy) -> String {
    let read = || {
        let body = client::get(&p.admin, "/stats?filter=open_telemetry_access_log")
            .unwrap()
            .body;
        String::from_utf8_lossy(&body)
            .lines()
            // Envoy's `grpc_entries_flushed` / `grpc_entries_flush_failed`
            // count its critical-log path, which this logger never takes;
            // courier does not list them (README).
            .filter(|l| !l.contains("grpc_entries_"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    courier_tests::proxies::poll(250, || {
        let s = read();
        s.contains("logs_written: 6").then_some(s)
    })
    .unwrap_or_else(read)
}

#[test]
fn open_telemetry_access_log_as_envoy() {
    let courier = run(Kind::Courier, &courier_bin());
    println!("courier:\n{}", courier.join("\n"));
    assert_eq!(courier.len(), 7, "{courier:#?}");
    assert_eq!(
        courier[6],
        "access_logs.open_telemetry_access_log.logs_dropped: 0 access_logs.open_telemetry_access_log.logs_written: 6"
    );
    // courier's own expectations, whether or not Envoy is installed.
    let home = std::env::var("HOME").unwrap_or_default();
    assert!(
        courier.iter().any(|l| l
            .contains("log_name=\"otel_envoy_accesslog\" zone_name=\"zone-a\"")
            && l.contains("cluster_name=\"cluster1\"")
            && l.contains("\\\"GET /missing HTTP/1.1\\\" 503 UF")
            && l.contains(&format!("home={home:?}"))),
        "{courier:#?}"
    );
    assert!(
        courier.iter().any(|l| l.contains("resource=[region=\"%NOT_FORMATTED%\" replicas=Some(IntValue(3)) ratio=Some(DoubleValue(1.5)) canary=Some(BoolValue(true))]")
            && l.contains("body={method=\"GET\", code=\"200\", missing=\"-\"")),
        "{courier:#?}"
    );
    let Some(envoy) = envoy_bin() else {
        eprintln!("COURIER_ENVOY not set: Envoy comparison skipped");
        return;
    };
    let envoy = run(Kind::Envoy, &envoy);
    println!("envoy:\n{}", envoy.join("\n"));
    assert_eq!(courier, envoy);
}
