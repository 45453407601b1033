//! The HTTP gRPC access logger (`envoy.access_loggers.http_grpc`) against
//! real Envoy: both proxies run one bootstrap whose connection manager logs to
//! an access log service on loopback (a tonic `AccessLogService`), get the
//! same requests, and must send the same `HTTPAccessLogEntry` fields; the
//! stream's first message names the node and `log_name`, later ones only
//! carry entries. courier's entries are also checked against what each
//! request should log.
//!
//! (Envoy's HTTP/1.1 codec writes `Unknown` as the reason phrase of a status
//! its table lacks, 418 here; courier's does too.)
//!
//! Compared: the identifier's `log_name` and node id, the protocol, the
//! request's method, scheme, authority, path, user agent, referer,
//! `x-forwarded-for`, body bytes and additional headers, the response's
//! code, body bytes, additional headers and trailers and code details, and
//! the upstream cluster and address, route name and response flags. Not
//! compared, on purpose: times, the downstream port, the request id (random),
//! and the header byte counts (Envoy counts the headers it adds itself to the
//! same map, `x-request-id`, `x-forwarded-proto`, ..., which courier keeps
//! apart).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test http_grpc_access_log_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "otlp_support.rs"]
#[allow(dead_code)]
mod otlp;

use courier_tests::differential::{
    HTTP2_CLUSTER, bootstrap, hcm_listener, loopback_cluster, same_lines, with_clusters,
};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::raw_http1::{self, RawUpstream, Received};
use envoy_types::pb::envoy::data::accesslog::v3::HttpAccessLogEntry;
use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_server::{
    AccessLogService, AccessLogServiceServer,
};
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::LogEntries;
use envoy_types::pb::envoy::service::accesslog::v3::{
    StreamAccessLogsMessage, StreamAccessLogsResponse,
};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;
use tokio::net::TcpListener;

#[derive(Clone)]
struct Service {
    tx: mpsc::Sender<StreamAccessLogsMessage>,
}

#[tonic::async_trait]
impl AccessLogService for Service {
    async fn stream_access_logs(
        &self,
        req: tonic::Request<tonic::Streaming<StreamAccessLogsMessage>>,
    ) -> Result<tonic::Response<StreamAccessLogsResponse>, tonic::Status> {
        let mut s = req.into_inner();
        while let Ok(Some(m)) = s.message().await {
            let _ = self.tx.send(m);
        }
        Ok(tonic::Response::new(StreamAccessLogsResponse {}))
    }
}

/// Starts the service; its address and what it receives.
fn access_log_service() -> (SocketAddr, mpsc::Receiver<StreamAccessLogsMessage>) {
    let (tx, rx) = mpsc::channel();
    let addr = otlp::on_runtime(move || async move {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let svc = AccessLogServiceServer::new(Service { tx });
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

fn config(als: u16, upstream: u16) -> String {
    let access_log = r#"access_log:
- name: envoy.access_loggers.http_grpc
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig
    common_config:
      log_name: als
      transport_api_version: V3
      buffer_flush_interval: 0.2s
      grpc_service: {envoy_grpc: {cluster_name: als}}
    additional_request_headers_to_log: [x-client-ip-address]
    additional_response_headers_to_log: [cache-control]
    additional_response_trailers_to_log: [expires]"#;
    let vhosts = r#"- name: all
  domains: ["*"]
  routes:
  - name: direct
    match: {prefix: /direct}
    direct_response: {status: 418, body: {inline_string: "teapot"}}
  - name: up
    match: {prefix: /up}
    route: {cluster: up}"#;
    let yaml = with_clusters(
        &bootstrap(&[hcm_listener("http", access_log, vhosts)]),
        &[
            loopback_cluster("up", upstream, ""),
            loopback_cluster("als", als, HTTP2_CLUSTER),
        ],
    );
    format!("node: {{id: node-1, cluster: fleet}}\n{yaml}")
}

fn reply(r: &Received) -> String {
    let body = if r.path == "/up/missing" {
        "HTTP/1.1 404 Not Found\r\ncache-control: no-store\r\ncontent-length: 4\r\n\r\nnope"
    } else {
        "HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\ncontent-length: 5\r\n\r\nhello"
    };
    body.to_string()
}

/// The requests: (method, target, extra header lines, body).
const REQUESTS: &[(&str, &str, &str, &str)] = &[
    (
        "GET",
        "/up/a?x=1",
        "user-agent: ua/1\r\nreferer: http://r/\r\nx-client-ip-address: 10.1.2.3\r\n",
        "",
    ),
    (
        "POST",
        "/up/missing",
        "x-forwarded-for: 192.0.2.9\r\n",
        "body!",
    ),
    ("GET", "/direct", "", ""),
    ("GET", "/nowhere", "", ""),
];

/// What an entry shows of its request, as one comparable line.
fn line(e: &HttpAccessLogEntry, upstream: u16) -> String {
    let c = e.common_properties.clone().unwrap_or_default();
    let q = e.request.clone().unwrap_or_default();
    let r = e.response.clone().unwrap_or_default();
    let mut req_headers: Vec<_> = q.request_headers.iter().collect();
    req_headers.sort();
    let mut resp_headers: Vec<_> = r.response_headers.iter().collect();
    resp_headers.sort();
    let upstream_address =
        format!("{:?}", c.upstream_remote_address).replace(&upstream.to_string(), "<up>");
    let flags = format!("{:?}", c.response_flags.unwrap_or_default())
        .replace("ResponseFlags ", "")
        .split(", ")
        .filter(|f| f.contains("true"))
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "v{} {} {}://{}{} ua={:?} ref={:?} xff={:?} in={} hdrs={req_headers:?} | {:?} out={} hdrs={resp_headers:?} trailers={:?} details={:?} | cluster={:?} route={:?} flags=[{flags}] upstream={upstream_address} tls={}",
        e.protocol_version,
        q.request_method,
        q.scheme,
        q.authority,
        q.path,
        q.user_agent,
        q.referer,
        q.forwarded_for,
        q.request_body_bytes,
        r.response_code.map(|c| c.value),
        r.response_body_bytes,
        r.response_trailers,
        r.response_code_details,
        c.upstream_cluster,
        c.route_name,
        c.tls_properties.is_some(),
    )
}

fn observe(
    kind: Kind,
    bin: &Path,
    als: (u16, &mpsc::Receiver<StreamAccessLogsMessage>),
    upstream: u16,
) -> Vec<String> {
    let p = Proxy::start(kind, bin, &config(als.0, upstream), &["http"])
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = p.listener("http").unwrap();
    let mut out = Vec::new();
    for (method, target, extra, body) in REQUESTS {
        let req = format!(
            "{method} {target} HTTP/1.1\r\nhost: example.com\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        out.push(format!(
            "{target}: {}",
            raw_http1::exchange(addr, &req).status_line
        ));
    }
    // The entries of all four requests, from however many messages they came in.
    let mut entries = Vec::new();
    let mut identifiers = Vec::new();
    while entries.len() < REQUESTS.len() {
        let m = als
            .1
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{kind}: {} entries arrived", entries.len()));
        if let Some(id) = m.identifier {
            identifiers.push(format!(
                "identifier log_name={} node={}",
                id.log_name,
                id.node.map(|n| n.id).unwrap_or_default()
            ));
        }
        if let Some(LogEntries::HttpLogs(l)) = m.log_entries {
            entries.extend(l.log_entry);
        }
    }
    out.extend(identifiers);
    out.extend(entries.iter().map(|e| line(e, upstream)));
    out
}

#[test]
fn http_grpc_access_log_entries_as_envoy_sends_them() {
    let upstream = RawUpstream::start(reply);
    let (als, received) = access_log_service();
    let Some(lines) =
        same_lines(|kind, bin| observe(kind, bin, (als.port(), &received), upstream.addr.port()))
    else {
        return;
    };
    let up = "Some(Address { address: Some(SocketAddress(SocketAddress { protocol: Tcp, address: \"127.0.0.1\", resolver_name: \"\", ipv4_compat: false, network_namespace_filepath: \"\", port_specifier: Some(PortValue(<up>)) })) })";
    let want = [
        "/up/a?x=1: HTTP/1.1 200 OK".to_string(),
        "/up/missing: HTTP/1.1 404 Not Found".to_string(),
        "/direct: HTTP/1.1 418 Unknown".to_string(),
        "/nowhere: HTTP/1.1 404 Not Found".to_string(),
        "identifier log_name=als node=node-1".to_string(),
        format!(
            "v2 1 http://example.com/up/a?x=1 ua=\"ua/1\" ref=\"http://r/\" xff=\"\" in=0 hdrs=[(\"x-client-ip-address\", \"10.1.2.3\")] | Some(200) out=5 hdrs=[(\"cache-control\", \"max-age=60\")] trailers={{}} details=\"via_upstream\" | cluster=\"up\" route=\"up\" flags=[] upstream={up} tls=false"
        ),
        format!(
            "v2 3 http://example.com/up/missing ua=\"\" ref=\"\" xff=\"192.0.2.9\" in=5 hdrs=[] | Some(404) out=4 hdrs=[(\"cache-control\", \"no-store\")] trailers={{}} details=\"via_upstream\" | cluster=\"up\" route=\"up\" flags=[] upstream={up} tls=false"
        ),
        "v2 1 http://example.com/direct ua=\"\" ref=\"\" xff=\"\" in=0 hdrs=[] | Some(418) out=6 hdrs=[] trailers={} details=\"direct_response\" | cluster=\"\" route=\"direct\" flags=[] upstream=None tls=false".to_string(),
        "v2 1 http://example.com/nowhere ua=\"\" ref=\"\" xff=\"\" in=0 hdrs=[] | Some(404) out=0 hdrs=[] trailers={} details=\"route_not_found\" | cluster=\"\" route=\"\" flags=[no_route_found: true] upstream=None tls=false".to_string(),
    ];
    assert_eq!(lines, want);
}
