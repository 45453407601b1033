//! Admin through the real binary: `/config_dump` (names, no private key),
//! `/clusters` (hosts and their stats, text and JSON), `/reset_counters`,
//! `/drain_listeners` (new connections refused, open ones served), `/logging`
//! (level changed at run time) and admin's own access log.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::{H1, echo_upstream, get_text, static_cluster};

struct Proc {
    child: Child,
    admin: String,
    _dir: tempfile::TempDir,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    async fn listener(&self, name: &str) -> SocketAddr {
        let text = get_text(&self.admin, "/listeners").await;
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}::")))
            .unwrap()
            .parse()
            .unwrap()
    }

    async fn post(&self, path: &str) -> (u16, String) {
        let mut c = H1::connect(self.admin.parse().unwrap()).await;
        let r = c
            .send(
                Request::post(path)
                    .header("host", "admin")
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            )
            .await;
        (r.status, r.body)
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let mut c = H1::connect(self.admin.parse().unwrap()).await;
        let r = c.get(path, &[]).await;
        (r.status, r.body)
    }
}

async fn start(config: &str, dir: tempfile::TempDir) -> Proc {
    let config_path = dir.path().join("courier.yaml");
    std::fs::write(&config_path, config).unwrap();
    let admin_path = dir.path().join("admin");
    let child = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(["--concurrency", "2", "--drain-time-s", "1", "-c"])
        .arg(&config_path)
        .arg("--admin-address-path")
        .arg(&admin_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut p = Proc {
        child,
        admin: String::new(),
        _dir: dir,
    };
    for _ in 0..500 {
        if let Ok(a) = std::fs::read_to_string(&admin_path)
            && !a.is_empty()
        {
            p.admin = a;
            return p;
        }
        if let Ok(Some(status)) = p.child.try_wait() {
            panic!("courier exited with {status}; config:\n{config}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("courier did not start; config:\n{config}");
}

fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

const HCM: &str = r#"- name: envoy.filters.network.http_connection_manager
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
    stat_prefix: STAT
    route_config:
      name: ROUTES
      virtual_hosts:
      - name: all
        domains: ["*"]
        routes:
        - match: {prefix: "/"}
          route: {cluster: web}
    http_filters:
    - name: envoy.filters.http.router
      typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
"#;

/// A plain listener and a TLS one (inline key) routing to `web` at `up`;
/// admin logs to `admin.log` in `dir`.
fn config(dir: &Path, up: SocketAddr) -> (String, String) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let key = ck.signing_key.serialize_pem();
    let cert = ck.cert.pem();
    let quoted = |pem: &str| pem.replace('\n', "\\n");
    let config = format!(
        r#"
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
  access_log:
  - name: envoy.access_loggers.file
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
      path: {log}
      log_format: {{text_format_source: {{inline_string: "%REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %UPSTREAM_HOST%\n"}}}}
static_resources:
  listeners:
  - name: plain
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
{plain}
  - name: secure
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificates:
            - certificate_chain: {{inline_string: "{cert}"}}
              private_key: {{inline_string: "{key}"}}
      filters:
{secure}
  clusters:
{clusters}
"#,
        log = dir.join("admin.log").display(),
        plain = indent(
            &HCM.replace("STAT", "plain")
                .replace("ROUTES", "plain_routes"),
            6
        ),
        secure = indent(
            &HCM.replace("STAT", "secure")
                .replace("ROUTES", "secure_routes"),
            6
        ),
        cert = quoted(&cert),
        key = quoted(&key),
        clusters = indent(&static_cluster("web", &[up], ""), 2),
    );
    (config, key)
}

#[tokio::test]
async fn config_dump_clusters_reset_counters_and_admin_access_log() {
    let up = echo_upstream("one").await;
    let dir = tempfile::tempdir().unwrap();
    let (config, key) = config(dir.path(), up);
    let log = dir.path().join("admin.log");
    let p = start(&config, dir).await;
    let plain = p.listener("plain").await;
    let r = H1::connect(plain).await.get("/x", &[]).await;
    assert_eq!(r.status, 200);

    let (status, dump) = p.get("/config_dump").await;
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&dump).unwrap();
    let configs = v["configs"].as_array().unwrap();
    let types: Vec<&str> = configs
        .iter()
        .map(|c| c["@type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "type.googleapis.com/envoy.admin.v3.BootstrapConfigDump",
            "type.googleapis.com/envoy.admin.v3.ClustersConfigDump",
            "type.googleapis.com/envoy.admin.v3.ListenersConfigDump",
            "type.googleapis.com/envoy.admin.v3.RoutesConfigDump",
        ]
    );
    assert_eq!(configs[1]["static_clusters"][0]["cluster"]["name"], "web");
    let listeners: Vec<&str> = configs[2]["static_listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["listener"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(listeners, ["plain", "secure"]);
    let routes: Vec<&str> = configs[3]["static_route_configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["route_config"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(routes, ["plain_routes", "secure_routes"]);
    let key_body = key.lines().nth(1).unwrap();
    assert!(!dump.contains(key_body), "the private key leaked");
    assert!(!dump.contains("PRIVATE KEY"), "the private key leaked");
    assert!(dump.contains("[redacted]"));
    assert!(
        dump.contains("BEGIN CERTIFICATE"),
        "certificates are not secret"
    );

    let (_, clusters) = p.get("/clusters").await;
    for line in [
        format!("web::{up}::rq_total::1"),
        format!("web::{up}::cx_total::1"),
        format!("web::{up}::health_flags::healthy"),
        "web::default_priority::max_connections::1024".to_string(),
    ] {
        assert!(clusters.lines().any(|l| l == line), "{line} in\n{clusters}");
    }
    let (_, j) = p.get("/clusters?format=json").await;
    let j: serde_json::Value = serde_json::from_str(&j).unwrap();
    let host = &j["cluster_statuses"][0]["host_statuses"][0];
    assert_eq!(
        host["address"]["socket_address"]["port_value"],
        u64::from(up.port())
    );
    assert_eq!(host["health_status"]["eds_health_status"], "HEALTHY");

    assert_eq!(p.get("/reset_counters").await.0, 405);
    assert_eq!(p.post("/reset_counters").await, (200, "OK\n".to_string()));
    // Host stats are not in Envoy's store: its reset leaves them as they were.
    let (_, clusters) = p.get("/clusters").await;
    assert!(clusters.contains(&format!("web::{up}::rq_total::1\n")));
    let (_, stats) = p.get("/stats").await;
    assert!(
        stats.contains("http.plain.downstream_rq_total: 0\n"),
        "{stats}"
    );
    assert!(
        stats.contains("cluster.web.upstream_rq_total: 0\n"),
        "{stats}"
    );

    // Admin's own requests were logged.
    let mut lines = Vec::new();
    for _ in 0..250 {
        lines = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        if lines.iter().any(|l| l.starts_with("POST /reset_counters")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        lines.contains(&"GET /config_dump 200 -".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"GET /reset_counters 405 -".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"POST /reset_counters 200 -".to_string()),
        "{lines:?}"
    );
}

#[tokio::test]
async fn drain_listeners_refuses_new_connections_and_serves_open_ones() {
    let up = echo_upstream("one").await;
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = config(dir.path(), up);
    let p = start(&config, dir).await;
    let plain = p.listener("plain").await;
    let mut open = H1::connect(plain).await;
    assert_eq!(open.get("/before", &[]).await.status, 200);

    assert_eq!(p.get("/drain_listeners").await.0, 405);
    assert_eq!(p.post("/drain_listeners").await, (200, "OK\n".to_string()));
    let mut refused = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(plain).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "new connections are still accepted");
    // The keep-alive connection opened before is still served.
    let r = open.get("/after", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.seen_request_line(), "GET /after HTTP/1.1");
}

#[tokio::test]
async fn logging_changes_the_level_at_run_time() {
    let up = echo_upstream("one").await;
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = config(dir.path(), up);
    let p = start(&config, dir).await;
    assert_eq!(
        p.get("/logging").await,
        (200, "active loggers:\n  courier: info\n".to_string())
    );
    assert_eq!(p.get("/logging?level=debug").await.0, 405);
    assert_eq!(
        p.post("/logging?level=debug").await,
        (200, "active loggers:\n  courier: debug\n".to_string())
    );
    assert_eq!(
        p.get("/logging").await.1,
        "active loggers:\n  courier: debug\n"
    );
    assert_eq!(p.post("/logging?level=loud").await.0, 400);
    assert_eq!(
        p.post("/logging?level=warning").await.1,
        "active loggers:\n  courier: warning\n"
    );
}
