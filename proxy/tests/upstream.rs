//! Forwarding upstream through the real binary: HTTP/1.1 and h2c downstream to
//! HTTP/1.1 and HTTP/2 upstreams, load balancing, weighted clusters, rewrites,
//! header mutations, Envoy's 503/504 local replies, DNS clusters, priorities and
//! cluster stats. Upstreams are echo servers on loopback port 0 that report what
//! they received.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use std::collections::HashMap;
use std::net::SocketAddr;
use support::*;

const H2: &str = r#"typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    explicit_http_config:
      http2_protocol_options: {}
"#;

fn route(prefix: &str, action: &str) -> String {
    format!("- match: {{prefix: \"{prefix}\"}}\n  route: {action}\n")
}

#[tokio::test]
async fn h1_and_h2c_downstream_reach_h1_and_h2_upstreams_with_envoy_headers() {
    let (u1, u2) = (echo_upstream("one").await, echo_upstream("two").await);
    let clusters = static_cluster("web1", &[u1], "") + &static_cluster("web2", &[u2], H2);
    let routes = route("/h2", "{cluster: web2}") + &route("/", "{cluster: web1}");
    let c = courier("", &routes, &clusters).await;

    let mut h1 = H1::connect(c.listener).await;
    let r = h1
        .get("/a?b=1", &[("connection", "keep-alive"), ("x-in", "1")])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-upstream"), Some("one"));
    assert_eq!(r.header("server"), Some("envoy"));
    assert!(r.header("x-envoy-upstream-service-time").is_some());
    assert_eq!(r.seen_request_line(), "GET /a?b=1 HTTP/1.1");
    assert_eq!(r.seen("host"), Some("example.com"));
    assert_eq!(r.seen("x-in"), Some("1"));
    assert_eq!(r.seen("x-forwarded-proto"), Some("http"));
    assert_eq!(r.seen("x-envoy-expected-rq-timeout-ms"), Some("15000"));
    assert_eq!(r.seen("x-request-id").map(str::len), Some(36));
    // Without use_remote_address, x-forwarded-for is not appended.
    assert_eq!(r.seen("x-forwarded-for"), None);

    // A streamed request body over HTTP/1.1 to the HTTP/2 upstream.
    let req = Request::post("/h2/post")
        .header("host", "example.com")
        .body(Full::new(Bytes::from_static(b"hello body")))
        .unwrap();
    let r = h1.send(req).await;
    assert_eq!(r.header("x-upstream"), Some("two"));
    assert_eq!(r.seen_request_line(), "POST /h2/post HTTP/2.0");
    assert_eq!(r.seen("body"), Some("hello body"));

    // h2c downstream to both.
    let mut h2 = H2::connect(c.listener).await;
    for (path, upstream, version) in [("/x", "one", "HTTP/1.1"), ("/h2/y", "two", "HTTP/2.0")] {
        let req = Request::get(format!("http://example.org{path}"))
            .body(Full::default())
            .unwrap();
        let r = h2.send(req).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-upstream"), Some(upstream));
        assert_eq!(r.seen_request_line(), format!("GET {path} {version}"));
        if version == "HTTP/1.1" {
            assert_eq!(r.seen("host"), Some("example.org"));
        }
    }
    // Trailers (gRPC's grpc-status) survive HTTP/2 end to end.
    let req = Request::post("http://example.org/h2/trailers")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(b"x")))
        .unwrap();
    let r = h2.send(req).await;
    assert_eq!(r.seen("te"), Some("trailers"));
    let trailers = r.trailers.expect("trailers");
    assert_eq!(trailers.get("grpc-status").unwrap(), "0");

    assert_eq!(stat(&c, "cluster.web1.upstream_rq_total").await, 2);
    assert_eq!(stat(&c, "cluster.web2.upstream_rq_total").await, 3);
    // Keep-alive and multiplexing: one connection each way per upstream.
    assert_eq!(stat(&c, "cluster.web1.upstream_cx_total").await, 1);
    assert_eq!(stat(&c, "cluster.web2.upstream_cx_total").await, 1);
}

#[tokio::test]
async fn round_robin_is_exact_and_stats_count_every_request() {
    let hosts: Vec<SocketAddr> = vec![
        echo_upstream("a").await,
        echo_upstream("b").await,
        echo_upstream("c").await,
    ];
    let c = courier(
        "",
        &route("/", "{cluster: rr}"),
        &static_cluster("rr", &hosts, "lb_policy: ROUND_ROBIN\n"),
    )
    .await;
    let mut h1 = H1::connect(c.listener).await;
    let mut counts: HashMap<String, u32> = HashMap::new();
    let mut order = Vec::new();
    for _ in 0..30 {
        let r = h1.get("/", &[]).await;
        let u = r.header("x-upstream").unwrap().to_string();
        order.push(u.clone());
        *counts.entry(u).or_default() += 1;
    }
    assert_eq!(counts.len(), 3, "{counts:?}");
    assert!(counts.values().all(|&n| n == 10), "{counts:?}");
    // Strict rotation: each host's turn comes every third request.
    assert!(
        order
            .windows(3)
            .all(|w| w[0] != w[1] && w[1] != w[2] && w[0] != w[2])
    );

    let r = h1.get("/status/404", &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(stat(&c, "cluster.rr.upstream_rq_total").await, 31);
    assert_eq!(stat(&c, "cluster.rr.upstream_rq_200").await, 30);
    assert_eq!(stat(&c, "cluster.rr.upstream_rq_2xx").await, 30);
    assert_eq!(stat(&c, "cluster.rr.upstream_rq_404").await, 1);
    assert_eq!(stat(&c, "http.ingress.downstream_rq_total").await, 31);
    let prom = get_text(&c.admin, "/stats/prometheus").await;
    for line in [
        "envoy_cluster_upstream_rq_total{envoy_cluster_name=\"rr\"} 31",
        "envoy_cluster_upstream_rq{envoy_response_code=\"200\",envoy_cluster_name=\"rr\"} 30",
        "envoy_cluster_upstream_rq{envoy_response_code=\"404\",envoy_cluster_name=\"rr\"} 1",
        "envoy_cluster_upstream_rq_xx{envoy_response_code_class=\"2\",envoy_cluster_name=\"rr\"} 30",
        "envoy_cluster_upstream_cx_total{envoy_cluster_name=\"rr\"} 3",
    ] {
        assert!(prom.lines().any(|l| l == line), "{line} missing in\n{prom}");
    }
}

#[tokio::test]
async fn weighted_clusters_split_within_five_percent() {
    let (a, b) = (echo_upstream("a").await, echo_upstream("b").await);
    let clusters = static_cluster("a", &[a], "") + &static_cluster("b", &[b], "");
    let action = "\n    weighted_clusters:\n      clusters:\n      - {name: a, weight: 25}\n      - {name: b, weight: 75}";
    let c = courier("", &route("/", action), &clusters).await;
    let mut h1 = H1::connect(c.listener).await;
    let n: u32 = 10_000;
    let mut to_a = 0;
    for _ in 0..n {
        if h1.get("/status/204", &[]).await.header("x-upstream") == Some("a") {
            to_a += 1;
        }
    }
    let share = f64::from(to_a) / f64::from(n);
    // Asked: within 5 points of 25%; asserted tighter (2 points, 4.6 sigma).
    assert!((share - 0.25).abs() <= 0.02, "a got {share}");
    assert_eq!(
        stat(&c, "cluster.a.upstream_rq_total").await
            + stat(&c, "cluster.b.upstream_rq_total").await,
        u64::from(n)
    );
}

#[tokio::test]
async fn rewrites_set_the_original_path_and_host() {
    let u = echo_upstream("u").await;
    let routes = route(
        "/svc/",
        "{cluster: u, prefix_rewrite: \"/\", host_rewrite_literal: rewritten.example}",
    ) + &route(
        "/re/",
        "{cluster: u, regex_rewrite: {pattern: {regex: \"/re/(\\\\w+)\"}, substitution: \"/new/\\\\1/end\"}}",
    );
    let c = courier("", &routes, &static_cluster("u", &[u], "")).await;
    let mut h1 = H1::connect(c.listener).await;
    let r = h1.get("/svc/x?q=1", &[]).await;
    assert_eq!(r.seen_request_line(), "GET /x?q=1 HTTP/1.1");
    assert_eq!(r.seen("x-envoy-original-path"), Some("/svc/x?q=1"));
    assert_eq!(r.seen("host"), Some("rewritten.example"));
    let r = h1.get("/re/abc?z", &[]).await;
    assert_eq!(r.seen_request_line(), "GET /new/abc/end?z HTTP/1.1");
    assert_eq!(r.seen("x-envoy-original-path"), Some("/re/abc?z"));
    assert_eq!(r.seen("host"), Some("example.com"));
}

#[tokio::test]
async fn header_mutations_apply_at_every_level_with_envoy_append_actions() {
    let u = echo_upstream("u").await;
    let routes = r#"- match: {prefix: "/"}
  route: {cluster: u}
  request_headers_to_add:
  - header: {key: x-route, value: "r-%REQ(x-in)%"}
  - header: {key: x-level, value: route}
    append_action: OVERWRITE_IF_EXISTS_OR_ADD
  - header: {key: x-client, value: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"}
  - header: {key: x-only-if-present, value: nope}
    append_action: OVERWRITE_IF_EXISTS
  request_headers_to_remove: [x-drop]
  response_headers_to_add:
  - header: {key: x-host, value: "%UPSTREAM_HOST%"}
  - header: {key: x-proto, value: "%PROTOCOL%"}
  response_headers_to_remove: [x-upstream]
"#;
    let vhost = r#"request_headers_to_add:
- header: {key: x-level, value: vhost}
  append_action: OVERWRITE_IF_EXISTS_OR_ADD
- header: {key: x-in, value: added}
  append_action: ADD_IF_ABSENT
response_headers_to_add:
- header: {key: x-vhost, value: v}
"#;
    let c = courier_with("", vhost, routes, &static_cluster("u", &[u], "")).await;
    let mut h1 = H1::connect(c.listener).await;
    let r = h1.get("/", &[("x-in", "1"), ("x-drop", "gone")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.seen("x-route"), Some("r-1"));
    // Envoy's default order: route, then virtual host — the outer level wins.
    assert_eq!(r.seen("x-level"), Some("vhost"));
    assert_eq!(r.seen("x-in"), Some("1"));
    assert_eq!(r.seen("x-client"), Some("127.0.0.1"));
    assert_eq!(r.seen("x-only-if-present"), None);
    assert_eq!(r.seen("x-drop"), None);
    assert_eq!(r.header("x-host"), Some(u.to_string().as_str()));
    assert_eq!(r.header("x-proto"), Some("HTTP/1.1"));
    assert_eq!(r.header("x-vhost"), Some("v"));
    assert_eq!(r.header("x-upstream"), None);
    let r = h1.get("/", &[]).await;
    assert_eq!(r.seen("x-in"), Some("added"));
}

#[tokio::test]
async fn no_healthy_upstream_and_unknown_clusters_get_envoy_replies() {
    let u = echo_upstream("u").await;
    let unhealthy = format!(
        "- name: sick\n  connect_timeout: 1s\n  common_lb_config: {{healthy_panic_threshold: {{value: 0}}}}\n  load_assignment:\n    cluster_name: sick\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}\n        health_status: UNHEALTHY\n",
        u.port()
    );
    let empty = "- name: empty\n  connect_timeout: 1s\n  load_assignment: {cluster_name: empty}\n";
    let clusters = unhealthy + empty + &static_cluster("u", &[u], "");
    let routes = route("/sick", "{cluster: sick}")
        + &route("/empty", "{cluster: empty}")
        + &route(
            "/h404",
            "{cluster_header: x-cluster, cluster_not_found_response_code: NOT_FOUND}",
        )
        + &route("/h", "{cluster_header: x-cluster}");
    let c = courier("", &routes, &clusters).await;
    let mut h1 = H1::connect(c.listener).await;
    for path in ["/sick", "/empty"] {
        let r = h1.get(path, &[]).await;
        assert_eq!(r.status, 503, "{path}");
        assert_eq!(r.body, "no healthy upstream");
        assert_eq!(r.header("content-type"), Some("text/plain"));
    }
    assert_eq!(stat(&c, "cluster.sick.upstream_cx_none_healthy").await, 1);
    assert_eq!(stat(&c, "cluster.empty.upstream_cx_none_healthy").await, 1);
    assert_eq!(stat(&c, "cluster.sick.upstream_rq_total").await, 0);

    let r = h1.get("/h", &[("x-cluster", "u")]).await;
    assert_eq!(r.header("x-upstream"), Some("u"));
    let r = h1.get("/h", &[]).await;
    assert_eq!((r.status, r.body.as_str()), (503, ""));
    let r = h1.get("/h", &[("x-cluster", "nope")]).await;
    assert_eq!((r.status, r.body.as_str()), (503, ""));
    let r = h1.get("/h404", &[("x-cluster", "nope")]).await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn connect_failure_and_timeout_get_envoy_bodies_and_stats() {
    let slow = echo_upstream("slow").await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let clusters = static_cluster("closed", &[closed], "") + &static_cluster("slow", &[slow], "");
    let routes =
        route("/closed", "{cluster: closed}") + &route("/slow", "{cluster: slow, timeout: 0.2s}");
    let c = courier("", &routes, &clusters).await;
    let mut h1 = H1::connect(c.listener).await;
    let r = h1.get("/closed", &[]).await;
    assert_eq!(r.status, 503);
    // Envoy 1.40's body for a refused connection, byte for byte.
    assert_eq!(
        r.body,
        "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure"
    );
    assert_eq!(stat(&c, "cluster.closed.upstream_cx_connect_fail").await, 1);
    assert_eq!(stat(&c, "cluster.closed.upstream_rq_503").await, 1);

    let started = tokio::time::Instant::now();
    let r = h1.get("/slow", &[]).await;
    let took = started.elapsed();
    assert_eq!(r.status, 504);
    assert_eq!(r.body, "upstream request timeout");
    assert!(took < std::time::Duration::from_millis(1500), "{took:?}");
    assert_eq!(stat(&c, "cluster.slow.upstream_rq_timeout").await, 1);
    assert_eq!(stat(&c, "cluster.slow.upstream_rq_504").await, 1);
    assert_eq!(stat(&c, "http.ingress.downstream_rq_5xx").await, 2);
}

/// A DNS cluster named `dns` resolving `localhost` to an echo upstream, whose
/// discovery is written as `discovery` (YAML lines of the cluster): requests
/// reach it with its name as host (`auto_host_rewrite`), across refreshes.
async fn dns_cluster_serves(discovery: &str) {
    let u = echo_upstream("dns").await;
    let cluster = format!(
        "- name: dns\n{discovery}  connect_timeout: 1s\n  load_assignment:\n    cluster_name: dns\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{address: {{socket_address: {{address: localhost, port_value: {}}}}}}}\n",
        u.port()
    );
    let c = courier(
        "",
        &route("/", "{cluster: dns, auto_host_rewrite: true}"),
        &cluster,
    )
    .await;
    let mut h1 = H1::connect(c.listener).await;
    for _ in 0..3 {
        let r = h1.get("/", &[]).await;
        assert_eq!(r.status, 200, "{discovery}: {r:?}");
        assert_eq!(r.header("x-upstream"), Some("dns"));
        assert_eq!(r.seen("host"), Some("localhost"));
        // Across DNS refreshes.
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn dns_cluster_on_localhost_with_auto_host_rewrite() {
    dns_cluster_serves(
        "  type: STRICT_DNS\n  dns_lookup_family: V4_ONLY\n  dns_refresh_rate: 0.2s\n",
    )
    .await;
}

/// The same cluster through the `envoy.cluster.dns` extension (the form
/// Envoy Gateway emits), with the cluster's own `dns_lookup_family` repeating
/// the extension's.
#[tokio::test]
async fn dns_cluster_extension_on_localhost() {
    dns_cluster_serves(
        "  cluster_type:\n    name: envoy.cluster.dns\n    typed_config: {'@type': type.googleapis.com/envoy.extensions.clusters.dns.v3.DnsCluster, dns_lookup_family: V4_ONLY, dns_refresh_rate: 0.2s}\n  dns_lookup_family: V4_ONLY\n",
    )
    .await;
}

#[tokio::test]
async fn priority_failover_skips_unhealthy_p0() {
    let (p0a, p0b, p1) = (
        echo_upstream("p0a").await,
        echo_upstream("p0b").await,
        echo_upstream("p1").await,
    );
    let ep = |a: SocketAddr, health: &str| {
        format!(
            "      - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}\n        health_status: {health}\n",
            a.port()
        )
    };
    let cluster = format!(
        "- name: prio\n  connect_timeout: 1s\n  load_assignment:\n    cluster_name: prio\n    endpoints:\n    - priority: 0\n      lb_endpoints:\n{}{}    - priority: 1\n      lb_endpoints:\n{}",
        ep(p0a, "UNHEALTHY"),
        ep(p0b, "DRAINING"),
        ep(p1, "HEALTHY")
    );
    let c = courier("", &route("/", "{cluster: prio}"), &cluster).await;
    let mut h1 = H1::connect(c.listener).await;
    for _ in 0..20 {
        assert_eq!(h1.get("/", &[]).await.header("x-upstream"), Some("p1"));
    }
}

#[tokio::test]
async fn edge_requests_get_xff_and_lose_envoy_control_headers() {
    let u = echo_upstream("u").await;
    let c = courier(
        "use_remote_address: true\nalways_set_request_id_in_response: true\n",
        &route("/", "{cluster: u}"),
        &static_cluster("u", &[u], ""),
    )
    .await;
    let mut h1 = H1::connect(c.listener).await;
    let r = h1
        .get(
            "/",
            &[
                ("x-forwarded-for", "1.2.3.4"),
                ("x-envoy-max-retries", "10"),
                ("x-envoy-internal", "true"),
                ("x-request-id", "client-chosen"),
                ("connection", "keep-alive"),
                ("keep-alive", "timeout=5"),
            ],
        )
        .await;
    let xff = r.seen("x-forwarded-for").unwrap();
    assert!(xff.starts_with("1.2.3.4,"), "{xff}");
    assert_eq!(r.seen("x-envoy-max-retries"), None);
    assert_eq!(r.seen("x-envoy-internal"), None);
    assert_eq!(r.seen("keep-alive"), None);
    assert_eq!(r.seen("connection"), None);
    assert_eq!(r.seen("x-envoy-external-address"), Some("127.0.0.1"));
    // Edge requests get a fresh request id, echoed back when asked.
    let id = r.seen("x-request-id").unwrap();
    assert_ne!(id, "client-chosen");
    assert_eq!(r.header("x-request-id"), Some(id));
}

#[test]
fn serve_checks_pass_max_connection_duration_resilience_and_tls_health_checks() {
    let config = r#"
static_resources:
  listeners:
  - name: ingress
    address: {socket_address: {address: 127.0.0.1, port_value: 0}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: u, retry_policy: {retry_on: 5xx}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: u
    max_requests_per_connection: 4
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        common_http_protocol_options: {max_connection_duration: 10s}
        explicit_http_config: {http_protocol_options: {}}
    outlier_detection: {}
    circuit_breakers: {thresholds: [{max_connection_pools: 2}, {priority: HIGH, max_connections: 4}]}
    health_checks:
    - {timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, tcp_health_check: {}}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
    load_assignment:
      cluster_name: u
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 1}}}}]}]
"#;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, config).unwrap();
    // `--mode validate` runs the serve checks too (a config it cannot serve yet
    // fails there) without serving.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(["--mode", "validate", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    // Upstream `max_connection_duration` is served.
    assert!(!err.contains("max_connection_duration"), "{err}");
    // `max_requests_per_connection` is served.
    assert!(!err.contains("max_requests_per_connection"), "{err}");
    // Connection-pool limits are served.
    assert!(!err.contains("max_connection_pools"), "{err}");
    // Retries, outlier detection, HIGH thresholds and TLS health checks are served.
    assert!(!err.contains("health_checks"), "{err}");
    assert!(!err.contains("HIGH"), "{err}");
    assert!(!err.contains("retry_policy"), "{err}");
    assert!(!err.contains("outlier_detection"), "{err}");
    // Forwarding and upstream TLS are served now.
    assert!(!err.contains("forwarding to upstream clusters"), "{err}");
    assert!(!err.contains("transport_socket"), "{err}");
}

#[tokio::test]
async fn responses_use_the_downstream_version_and_standard_reason() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // An HTTP/1.0 upstream with its own reason phrase, closing after each response.
    let raw = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = raw.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = raw.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.0 501 Unsupported thing\r\nconnection: close\r\ncontent-length: 2\r\n\r\nno")
                .await;
        }
    });
    let c = courier(
        "",
        &route("/", "{cluster: old}"),
        &static_cluster("old", &[addr], ""),
    )
    .await;
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(c.listener).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 501 Not Implemented\r\n"), "{out}");
        assert!(out.ends_with("\r\n\r\nno"), "{out}");
    }
    assert_eq!(stat(&c, "cluster.old.upstream_rq_501").await, 2);
}

/// `max_requests_per_connection`: an HTTP/1.1 connection closes after that
/// many requests, an HTTP/2 one takes no more streams; five requests in a
/// row take three connections at 2 a connection.
#[tokio::test]
async fn max_requests_per_connection_retires_upstream_connections() {
    for (kind, protocol) in [("h1", ""), ("h2", "      http2_protocol_options: {}\n")] {
        let u = echo_upstream(kind).await;
        let extra = format!(
            "typed_extension_protocol_options:\n  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n    \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n    common_http_protocol_options: {{max_requests_per_connection: 2}}\n    explicit_http_config:\n{}",
            if protocol.is_empty() {
                "      http_protocol_options: {}\n"
            } else {
                protocol
            }
        );
        let c = courier(
            "",
            &route("/", "{cluster: one}"),
            &static_cluster("one", &[u], &extra),
        )
        .await;
        let mut h1 = H1::connect(c.listener).await;
        for _ in 0..5 {
            let r = h1.get("/", &[]).await;
            assert_eq!(r.status, 200, "{kind}: {r:?}");
        }
        assert_eq!(stat(&c, "cluster.one.upstream_rq_total").await, 5, "{kind}");
        assert_eq!(stat(&c, "cluster.one.upstream_cx_total").await, 3, "{kind}");
    }
}

#[tokio::test]
async fn an_h2_request_at_max_connections_waits_for_a_free_stream() {
    // One connection of one stream: the second request waits for the first's
    // stream to end instead of opening a connection or failing.
    let u = echo_upstream("h2").await;
    let extra = "typed_extension_protocol_options:\n  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n    \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n    explicit_http_config:\n      http2_protocol_options: {max_concurrent_streams: 1}\ncircuit_breakers: {thresholds: [{max_connections: 1}]}\n";
    let c = courier(
        "",
        &route("/", "{cluster: one}"),
        &static_cluster("one", &[u], extra),
    )
    .await;
    let send = |path: &'static str| async move {
        let mut h1 = H1::connect(c.listener).await;
        h1.get(path, &[]).await
    };
    let (slow, other) = tokio::join!(send("/slow"), async {
        // After the first request holds the only stream.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        send("/second").await
    });
    assert_eq!(slow.status, 200, "{slow:?}");
    assert_eq!(other.status, 200, "{other:?}");
    assert_eq!(other.seen_request_line(), "GET /second HTTP/2.0");
    assert_eq!(stat(&c, "cluster.one.upstream_cx_total").await, 1);
    assert_eq!(stat(&c, "cluster.one.upstream_cx_overflow").await, 1);
    assert_eq!(stat(&c, "cluster.one.upstream_rq_total").await, 2);
}

/// The kernel's view of the TCP connection from `local` to `remote` (both
/// IPv4 loopback): its `/proc/net/tcp` timer kind and when it fires, in
/// hundredths of a second.
fn tcp_timer(local: SocketAddr, remote: SocketAddr) -> Option<(u8, u64)> {
    let hex = |a: SocketAddr| match a {
        SocketAddr::V4(v4) => format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(v4.ip().octets()),
            v4.port()
        ),
        SocketAddr::V6(_) => String::new(),
    };
    let (l, r) = (hex(local), hex(remote));
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.get(1) != Some(&l.as_str()) || f.get(2) != Some(&r.as_str()) {
            return None;
        }
        let (kind, when) = f.get(5)?.split_once(':')?;
        Some((
            u8::from_str_radix(kind, 16).ok()?,
            u64::from_str_radix(when, 16).ok()?,
        ))
    })
}

/// `upstream_connection_options.tcp_keepalive` on the connection courier
/// opens: the kernel arms the keepalive timer for the configured idle time.
#[tokio::test]
async fn upstream_tcp_keepalive_is_set_on_the_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    let (peer_tx, peer_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut s, peer) = listener.accept().await.unwrap();
        let _ = peer_tx.send(peer);
        let mut buf = vec![0u8; 4096];
        let _ = s.read(&mut buf).await;
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await
            .unwrap();
        // Kept open (idle) for the check.
        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
        drop(s);
    });
    let cluster = static_cluster(
        "ka",
        &[up],
        "upstream_connection_options: {tcp_keepalive: {keepalive_time: 7, keepalive_interval: 3, keepalive_probes: 4}}\n",
    );
    let c = courier("", &route("/", "{cluster: ka}"), &cluster).await;
    let mut h1 = H1::connect(c.listener).await;
    assert_eq!(h1.get("/", &[]).await.status, 200);
    let courier_side = peer_rx.await.unwrap();
    // 2: the keepalive timer, due within the 7 s idle time.
    let (kind, when) = tcp_timer(courier_side, up).expect("the upstream connection");
    assert_eq!(kind, 2, "keepalive timer armed");
    assert!(
        (400..=700).contains(&when),
        "first probe due in {when}/100 s"
    );
}
