//! Local answers of the connection manager (direct responses, redirects, no
//! route) as Envoy 1.40 gives them; `tests/differential.rs` compares the same
//! against real Envoy.

use super::{ConnInfo, handle};
use crate::router::Upstream;
use crate::stats::{HcmStats, WorkerStats};
use crate::upstream::ClusterManager;
use courier_config::load::Format;
use courier_config::snapshot::Snapshot;
use http::{Request, Response, header};
use http_body_util::BodyExt;

const CONFIG: &str = r#"
static_resources:
  listeners:
  - name: l
    address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: l
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
          route_config:
            virtual_hosts:
            - name: a
              domains: ["*"]
              routes:
              - match: { path: "/found" }
                direct_response: { status: 302, body: { inline_string: "elsewhere" } }
              - match: { path: "/created" }
                direct_response: { status: 201 }
              - match: { path: "/ok" }
                direct_response: { status: 200, body: { inline_string: "hello" } }
              - match: { path: "/down" }
                direct_response: { status: 503, body: { inline_string: "down\n" } }
              - match: { path: "/multi", headers: [{ name: x-m, string_match: { exact: "b" } }] }
                direct_response: { status: 200, body: { inline_string: "any value" } }
              - match: { prefix: "/host" }
                redirect: { host_redirect: "new.example.com" }
"#;

/// Sends one request through `handle` over a real (in-memory) HTTP/1.1
/// connection, so `handle` sees hyper's own request body type.
fn get(path: &str, host: &str, headers: &[(&str, &str)], method: &str) -> Response<Vec<u8>> {
    let bootstrap = courier_config::bootstrap_from_str(CONFIG, Format::Yaml).unwrap();
    let snapshot = std::sync::Arc::new(Snapshot::from_bootstrap(&bootstrap));
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let clusters = std::sync::Arc::new(ClusterManager::new(&snapshot).unwrap());
        let stats = std::sync::Arc::new(WorkerStats::default());
        let service = hyper::service::service_fn(move |req| {
            let (snapshot, clusters, stats) = (snapshot.clone(), clusters.clone(), stats.clone());
            async move {
                let info = ConnInfo {
                    listener: std::sync::Arc::clone(&snapshot.listeners[0]),
                    filter_chain_index: 0,
                    peer: crate::request::conn::Peer::Ip("127.0.0.1:1000".parse().unwrap()),
                    local: crate::request::conn::Peer::Ip("127.0.0.1:2000".parse().unwrap()),
                    tls: false,
                    mtls: false,
                    client_cert: None,
                    server_name: None,
                    fingerprints: None,
                    id: 0,
                    facts: crate::filter_chain::conn_facts(
                        "127.0.0.1:1000".parse().unwrap(),
                        "127.0.0.1:2000".parse().unwrap(),
                        None,
                        None,
                    ),
                    http_filters: None,
                    buffer_limit: 1 << 20,
                    wire: None,
                };
                let up = Upstream {
                    clusters: &clusters,
                    stats: &stats,
                };
                Ok::<_, std::convert::Infallible>(
                    handle(
                        req,
                        &snapshot,
                        &info,
                        &HcmStats::default(),
                        &up,
                        Some(&crate::request::headers::ServerHeader::Overwrite(
                            http::HeaderValue::from_static("envoy"),
                        )),
                    )
                    .await
                    .0,
                )
            }
        });
        tokio::spawn(
            hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(server_io), service),
        );
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(client_io))
                .await
                .unwrap();
        tokio::spawn(conn);
        let resp = send.send_request(req).await.unwrap();
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes().to_vec();
        Response::from_parts(parts, bytes)
    })
}

fn h<'a>(r: &'a Response<Vec<u8>>, name: &str) -> Option<&'a str> {
    r.headers().get(name).map(|v| v.to_str().unwrap())
}

#[test]
fn direct_responses_with_201_or_3xx_point_at_the_request_url() {
    let r = get("/found?q=1", "example.com:8080", &[], "GET");
    assert_eq!(r.status(), 302);
    assert_eq!(h(&r, "location"), Some("http://example.com:8080/found?q=1"));
    assert_eq!(r.body(), b"elsewhere");
    let r = get("/created", "example.com", &[], "GET");
    assert_eq!(h(&r, "location"), Some("http://example.com/created"));
    // On HTTP/1.1 the codec frames the empty body with `content-length: 0`, as
    // Envoy's does (the reply itself sets no length; on HTTP/2 none is sent).
    assert_eq!(h(&r, "content-length"), Some("0"));
    assert!(r.body().is_empty());
    let r = get("/ok", "example.com", &[], "GET");
    assert_eq!(h(&r, "location"), None);
}

#[test]
fn host_redirect_replaces_the_port_too() {
    let r = get("/host/x", "example.com:8080", &[], "GET");
    assert_eq!(r.status(), 301);
    assert_eq!(h(&r, "location"), Some("http://new.example.com/host/x"));
}

#[test]
fn head_drops_the_body_and_keeps_its_length() {
    let r = get("/ok", "example.com", &[], "HEAD");
    assert_eq!(h(&r, "content-length"), Some("5"));
    assert!(r.body().is_empty());
}

#[test]
fn grpc_requests_get_trailers_only_local_replies() {
    let grpc = [("content-type", "application/grpc")];
    let r = get("/down", "example.com", &grpc, "POST");
    assert_eq!(r.status(), 200);
    assert_eq!(h(&r, "content-type"), Some("application/grpc"));
    assert_eq!(h(&r, "grpc-status"), Some("14"));
    assert_eq!(h(&r, "grpc-message"), Some("down%0A"));
    assert!(r.body().is_empty());
    let r = get("/nothing", "example.com", &grpc, "POST");
    assert_eq!(
        (r.status().as_u16(), h(&r, "grpc-status")),
        (200, Some("12"))
    );
}

#[test]
fn repeated_headers_match_value_by_value() {
    let r = get(
        "/multi",
        "example.com",
        &[("x-m", "a"), ("x-m", "b")],
        "GET",
    );
    assert_eq!(
        (r.status().as_u16(), r.body().as_slice()),
        (200, &b"any value"[..])
    );
    let r = get(
        "/multi",
        "example.com",
        &[("x-m", "a"), ("x-m", "c")],
        "GET",
    );
    assert_eq!(r.status(), 404);
}
