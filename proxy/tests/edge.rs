//! Edge deployments: Envoy's edge best-practices bootstrap validated and served
//! as published (TLS with SNI, tls_inspector, path normalisation, underscores
//! rejected, use_remote_address, route idle_timeout, overload manager, runtime
//! connection limits), and the connection limits and overload actions at work.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod tls_support;

use courier_tests::TestCa;
use std::path::Path;
use std::time::Duration;
use tls_support::{Client, Courier, plain_http_path, poll, start_file, tls_connect};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const EDGE: &str = include_str!("data/edge-best-practices.yaml");
/// The name courier gives the edge bootstrap's unnamed listener once on port 0.
const EDGE_LISTENER: &str = "127.0.0.1:0@static_resources.listeners[0]";

/// The published bootstrap with its fixed addresses on loopback port 0 and the
/// upstream at `upstream`, written with its certificates into `dir`.
fn edge_bootstrap(dir: &Path, ca: &TestCa, upstream: std::net::SocketAddr) -> std::path::PathBuf {
    let leaf = ca.leaf(&["example.com", "www.example.com"]);
    std::fs::create_dir_all(dir.join("certs")).unwrap();
    std::fs::write(dir.join("certs/servercert.pem"), &leaf.cert).unwrap();
    std::fs::write(dir.join("certs/serverkey.pem"), &leaf.key).unwrap();
    let yaml = EDGE
        .replace("port_value: 9090", "port_value: 0")
        .replace(
            "address: 0.0.0.0\n        port_value: 443",
            "address: 127.0.0.1\n        port_value: 0",
        )
        .replace(
            "port_value: 8080",
            &format!("port_value: {}", upstream.port()),
        );
    // Whole lines: the upstream's ephemeral port may start with 443 or 9090.
    assert!(
        !yaml
            .lines()
            .any(|l| l.trim() == "port_value: 443" || l.trim() == "port_value: 9090")
    );
    let path = dir.join("edge.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// One raw request over TLS to example.com (ALPN http/1.1); the raw response.
async fn tls_raw(c: &Courier, ca: &TestCa, request: &str) -> String {
    let client = Client {
        ca,
        sni: "example.com",
        alpn: &["http/1.1"],
        cert: None,
    };
    let mut s = tls_connect(c.addr(EDGE_LISTENER), &client).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn edge_best_practices_bootstrap_validates_and_serves() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("edge ca");
    let up = support::echo_upstream("service_foo").await;
    let config = edge_bootstrap(dir.path(), &ca, up);

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_courier"))
        .current_dir(dir.path())
        .args(["--mode", "validate", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let c = start_file(dir.path(), &config);
    let addr = c.addr(EDGE_LISTENER).to_string();

    // HTTP/2 over TLS (ALPN from the "h2,http/1.1" entry), SNI example.com; the
    // cluster speaks HTTP/2 upstream.
    let client = Client {
        ca: &ca,
        sni: "www.example.com",
        alpn: &["h2"],
        cert: None,
    };
    let s = tls_connect(&addr, &client).await.unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (version, status, body) = tls_support::get(s, true, "www.example.com").await;
    assert_eq!((version, status), (http::Version::HTTP_2, 200), "{body}");
    assert!(body.starts_with("GET / HTTP/2.0"), "{body}");

    let resp = tls_raw(
        &c,
        &ca,
        "GET /a/./b/../c//d HTTP/1.1\r\nhost: example.com\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    // normalize_path and merge_slashes: the upstream sees the clean path;
    // use_remote_address: x-forwarded-for appended, the peer is external.
    assert!(resp.contains("GET /a/c/d HTTP/2.0"), "{resp}");
    // (Envoy writes the machine's address for a loopback peer.)
    assert!(resp.contains("\nx-forwarded-for: "), "{resp}");
    assert!(
        resp.contains("x-envoy-external-address: 127.0.0.1"),
        "{resp}"
    );

    // UNESCAPE_AND_REDIRECT: escaped slashes send the client to the unescaped path.
    let resp = tls_raw(
        &c,
        &ca,
        "GET /x%2Fy?q=1 HTTP/1.1\r\nhost: example.com\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 307"), "{resp}");
    assert!(
        resp.to_ascii_lowercase().contains("location: /x/y?q=1\r\n"),
        "{resp}"
    );

    // headers_with_underscores_action: REJECT_REQUEST (400, connection closed).
    let resp = tls_raw(
        &c,
        &ca,
        "GET / HTTP/1.1\r\nhost: example.com\r\nx_bad: 1\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");
    assert!(!resp.contains("x-upstream"), "{resp}");

    // tls_inspector: a plaintext client finds no chain (the only one wants SNI).
    assert!(
        plain_http_path(&addr, "/", "example.com")
            .map(|r| r.is_empty())
            .unwrap_or(true)
    );

    // The overload manager runs (2 GiB heap: nothing fires).
    let stats = plain_http_path(&c.admin, "/stats", "admin").unwrap();
    assert!(
        stats.contains("overload.envoy.overload_actions.stop_accepting_requests.active: 0"),
        "{stats}"
    );
    assert!(stats.contains("http.ingress_http.downstream_rq_redirected_with_normalized_path: 1"));
    assert!(stats.contains("http.ingress_http.requests_rejected_with_underscores_in_headers: 1"));
}

/// A plaintext listener named `name` with `extra` bootstrap YAML (top level).
fn plain_bootstrap(dir: &Path, up: std::net::SocketAddr, extra: &str) -> std::path::PathBuf {
    plain_bootstrap_with(dir, up, extra, "", "")
}

/// [`plain_bootstrap`] with `hcm` (flow YAML entries) in the connection
/// manager and `route` in the route action.
fn plain_bootstrap_with(
    dir: &Path,
    up: std::net::SocketAddr,
    extra: &str,
    hcm: &str,
    route: &str,
) -> std::path::PathBuf {
    let yaml = format!(
        r#"
admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}}}
static_resources:
  listeners:
  - name: edge
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: edge
          {hcm}
          http_filters: [{{name: envoy.filters.http.router, typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}}}]
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{{match: {{prefix: "/"}}, route: {{cluster: up {route}}}}}]
  clusters:
  - name: up
    load_assignment:
      cluster_name: up
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}}}]}}]
{extra}
"#,
        port = up.port()
    );
    let path = dir.join("courier.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// A keep-alive HTTP/1.1 connection that has had one answered request.
async fn open_conn(addr: &str) -> support::H1 {
    let mut h = support::H1::connect(addr.parse().unwrap()).await;
    let r = h.get("/", &[("host", "edge")]).await;
    assert_eq!(r.status, 200);
    h
}

/// Whether a new connection to `addr` gets an answer (false: closed unanswered).
async fn answered(addr: &str) -> bool {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = s
        .write_all(b"GET / HTTP/1.1\r\nhost: edge\r\nconnection: close\r\n\r\n")
        .await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    out.starts_with(b"HTTP/1.1 200")
}

fn stat(c: &Courier, name: &str) -> u64 {
    let text = plain_http_path(&c.admin, "/stats", "admin").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

async fn limit_holds(extra: &str, overflow_stat: &str) {
    let dir = tempfile::tempdir().unwrap();
    let up = support::echo_upstream("up").await;
    let c = start_file(dir.path(), &plain_bootstrap(dir.path(), up, extra));
    let addr = c.addr("edge").to_string();
    let a = open_conn(&addr).await;
    let b = open_conn(&addr).await;
    // Connection N+1 is closed unanswered, and counted.
    assert!(!answered(&addr).await);
    // Envoy names listener stats by the configured address (port 0 here).
    let listener_stat = format!("listener.127.0.0.1_0.{overflow_stat}");
    assert_eq!(stat(&c, &listener_stat), 1);
    // A slot frees when a connection closes.
    drop((a, b));
    let mut ok = false;
    for _ in 0..100 {
        if answered(&addr).await {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok, "no connection admitted after the others closed");
}

#[tokio::test]
async fn global_downstream_max_connections_refuses_connection_n_plus_one() {
    limit_holds(
        "layered_runtime: {layers: [{name: l, static_layer: {overload: {global_downstream_max_connections: 2}}}]}",
        "downstream_global_cx_overflow",
    )
    .await;
}

#[tokio::test]
async fn global_connection_monitor_refuses_connection_n_plus_one() {
    limit_holds(
        r#"overload_manager:
  resource_monitors:
  - name: envoy.resource_monitors.global_downstream_max_connections
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig
      max_active_downstream_connections: 2"#,
        "downstream_global_cx_overflow",
    )
    .await;
}

#[tokio::test]
async fn listener_connection_limit_from_runtime() {
    limit_holds(
        "layered_runtime: {layers: [{name: l, static_layer: {envoy.resource_limits.listener.edge.connection_limit: 2}}]}",
        "downstream_cx_overflow",
    )
    .await;
}

fn heap_overload(max_heap: u64, actions: &[&str]) -> String {
    let mut s = format!(
        r#"overload_manager:
  refresh_interval: 0.05s
  resource_monitors:
  - name: envoy.resource_monitors.fixed_heap
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig
      max_heap_size_bytes: {max_heap}
  actions:
"#
    );
    for a in actions {
        s.push_str(&format!(
            "  - {{name: envoy.overload_actions.{a}, triggers: [{{name: envoy.resource_monitors.fixed_heap, threshold: {{value: 0.9}}}}]}}\n"
        ));
    }
    s
}

#[tokio::test]
async fn heap_over_the_limit_stops_requests_and_keepalive() {
    let dir = tempfile::tempdir().unwrap();
    let up = support::echo_upstream("up").await;
    // 1 MiB: courier's resident set is far above it.
    let extra = heap_overload(
        1 << 20,
        &["stop_accepting_requests", "disable_http_keepalive"],
    );
    let c = start_file(dir.path(), &plain_bootstrap(dir.path(), up, &extra));
    let addr = c.addr("edge").to_string();
    let resp = poll(250, || {
        plain_http_path(&addr, "/", "edge")
            .ok()
            .filter(|r| r.starts_with("HTTP/1.1 503"))
    })
    .expect("requests were not shed");
    assert!(resp.ends_with("envoy overloaded"), "{resp}");
    assert!(
        resp.to_ascii_lowercase().contains("connection: close"),
        "{resp}"
    );
    assert!(!resp.contains("x-upstream"), "{resp}");
    assert!(stat(&c, "http.edge.downstream_rq_overload_close") >= 1);
    assert_eq!(
        stat(
            &c,
            "overload.envoy.overload_actions.stop_accepting_requests.active"
        ),
        1
    );
}

#[tokio::test]
async fn heap_over_the_limit_stops_connections() {
    let dir = tempfile::tempdir().unwrap();
    let up = support::echo_upstream("up").await;
    let extra = heap_overload(1 << 20, &["stop_accepting_connections"]);
    let c = start_file(dir.path(), &plain_bootstrap(dir.path(), up, &extra));
    let addr = c.addr("edge").to_string();
    let mut refused = false;
    for _ in 0..250 {
        if !answered(&addr).await {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused);
    // Envoy names listener stats by the configured address (port 0 here).
    let name = "listener.127.0.0.1_0.downstream_cx_overload_reject";
    assert!(stat(&c, name) >= 1);
}

#[tokio::test]
async fn heap_under_the_limit_serves() {
    let dir = tempfile::tempdir().unwrap();
    let up = support::echo_upstream("up").await;
    // 1 TiB: nothing fires.
    let extra = heap_overload(
        1 << 40,
        &[
            "stop_accepting_requests",
            "stop_accepting_connections",
            "disable_http_keepalive",
        ],
    );
    let c = start_file(dir.path(), &plain_bootstrap(dir.path(), up, &extra));
    let addr = c.addr("edge").to_string();
    let mut h = open_conn(&addr).await;
    let r = h.get("/", &[("host", "edge")]).await;
    assert_eq!(r.status, 200);
    assert!(r.header("connection").is_none());
}

// Multi-threaded: the blocking client must not stall the echo upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_idle_timeout_overrides_stream_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let up = support::echo_upstream("up").await;
    // The connection manager's stream idle timer is off; the route's fires
    // while the upstream takes 2 s to answer `/slow`.
    let config = plain_bootstrap_with(
        dir.path(),
        up,
        "",
        "stream_idle_timeout: 0s",
        ", idle_timeout: 0.2s",
    );
    let c = start_file(dir.path(), &config);
    let addr = c.addr("edge").to_string();
    let fast = plain_http_path(&addr, "/", "edge").unwrap();
    assert!(fast.starts_with("HTTP/1.1 200"), "{fast}");
    let resp = plain_http_path(&addr, "/slow", "edge").unwrap();
    assert!(resp.starts_with("HTTP/1.1 504"), "{resp}");
    assert!(resp.ends_with("stream timeout"), "{resp}");
}

/// [`plain_bootstrap`] with a second listener, `stats`, like `edge` but with
/// `listener_extra` (flow YAML entries) on the listener.
fn with_second_listener(path: &Path, listener_extra: &str) -> std::path::PathBuf {
    let yaml = std::fs::read_to_string(path).unwrap();
    let start = yaml.find("  - name: edge").unwrap();
    let end = yaml.find("  clusters:").unwrap();
    let second = yaml[start..end]
        .replacen(
            "  - name: edge",
            &format!("  - name: stats\n    {listener_extra}"),
            1,
        )
        .replacen("stat_prefix: edge", "stat_prefix: stats", 1);
    let yaml = format!("{}{second}{}", &yaml[..end], &yaml[end..]);
    std::fs::write(path, &yaml).unwrap();
    path.to_path_buf()
}

/// A listener with `bypass_overload_manager` is served while the overload
/// manager sheds every other listener's connections, requests and keep-alive.
#[tokio::test]
async fn bypass_overload_manager_listener_is_served_while_overloaded() {
    let dir = tempfile::tempdir().unwrap();
    let up = support::echo_upstream("up").await;
    let extra = heap_overload(
        1 << 20,
        &[
            "stop_accepting_requests",
            "stop_accepting_connections",
            "disable_http_keepalive",
        ],
    );
    let path = with_second_listener(
        &plain_bootstrap(dir.path(), up, &extra),
        "bypass_overload_manager: true",
    );
    let c = start_file(dir.path(), &path);
    let edge = c.addr("edge").to_string();
    let mut shed = false;
    for _ in 0..250 {
        if !answered(&edge).await {
            shed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(shed, "the overload manager never shed the edge listener");
    // Two requests on one connection: accepted, answered, kept alive.
    let mut h = support::H1::connect(c.addr("stats").parse().unwrap()).await;
    for _ in 0..2 {
        let r = h.get("/", &[("host", "stats")]).await;
        assert_eq!(r.status, 200);
        assert!(r.header("connection").is_none(), "keep-alive stays on");
    }
}

/// A listener with `ignore_global_conn_limit` takes connections past the
/// global downstream connection limit that refuses the others'.
#[tokio::test]
async fn ignore_global_conn_limit_listener_is_not_limited() {
    let dir = tempfile::tempdir().unwrap();
    let up = support::echo_upstream("up").await;
    let path = with_second_listener(
        &plain_bootstrap(
            dir.path(),
            up,
            "layered_runtime: {layers: [{name: l, static_layer: {overload: {global_downstream_max_connections: 1}}}]}",
        ),
        "ignore_global_conn_limit: true",
    );
    let c = start_file(dir.path(), &path);
    let edge = c.addr("edge").to_string();
    // The one connection the limit allows, held open.
    let _held = open_conn(&edge).await;
    assert!(
        !answered(&edge).await,
        "the second edge connection is refused"
    );
    let stats = c.addr("stats").to_string();
    let mut h1 = support::H1::connect(stats.parse().unwrap()).await;
    let mut h2 = support::H1::connect(stats.parse().unwrap()).await;
    assert_eq!(h1.get("/", &[("host", "stats")]).await.status, 200);
    assert_eq!(h2.get("/", &[("host", "stats")]).await.status, 200);
}

/// `fixed_heap_use_allocated` (reloadable): the monitor's pressure follows
/// the resident set without it and the bytes allocated with it, which leave
/// out what is resident but not allocated (the binary's code, thread stacks).
#[tokio::test]
async fn fixed_heap_use_allocated_measures_allocated_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let up = support::echo_upstream("up").await;
    let max: u64 = 64 << 20;
    let extra = format!(
        "{}layered_runtime:\n  layers:\n  - {{name: static, static_layer: {{envoy.reloadable_features.fixed_heap_use_allocated: false}}}}\n  - {{name: admin, admin_layer: {{}}}}\n",
        heap_overload(max, &["shrink_heap"])
    );
    let c = start_file(dir.path(), &plain_bootstrap(dir.path(), up, &extra));
    let pressure = "overload.envoy.resource_monitors.fixed_heap.pressure";
    let resident_percent =
        poll(100, || Some(stat(&c, pressure)).filter(|p| *p > 0)).expect("no heap pressure");
    let rss_percent = c.resident_bytes() * 100 / max;
    assert!(
        resident_percent.abs_diff(rss_percent) <= rss_percent / 5 + 1,
        "pressure {resident_percent} % without the flag, resident set {rss_percent} %"
    );
    let set = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&c.admin).unwrap();
        s.write_all(
            b"POST /runtime_modify?envoy.reloadable_features.fixed_heap_use_allocated=true HTTP/1.1\r\nhost: admin\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(set.starts_with("HTTP/1.1 200"), "{set}");
    // The next refresh (50 ms) reads the allocated bytes: well below the
    // resident set.
    let allocated_percent = poll(100, || {
        Some(stat(&c, pressure)).filter(|p| *p * 2 < c.resident_bytes() * 100 / max)
    });
    eprintln!(
        "pressure without the flag {resident_percent} %, with it {allocated_percent:?} %, resident set {rss_percent} %"
    );
    assert!(
        allocated_percent.is_some(),
        "pressure {} % with the flag, resident set {} %",
        stat(&c, pressure),
        c.resident_bytes() * 100 / max
    );
}
