//! `--mode serve` through the real binary: the quickstart's direct responses and
//! redirect over HTTP/1.1, admin, stats, and a clean exit on SIGTERM. Ports are
//! all 0; the test finds them through `--admin-address-path` and `/listeners`.

// A test (or benchmark setup) that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Polls `f` every 20 ms, up to `tries` times (bounded by count, not a clock).
fn poll<T>(tries: u32, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..tries {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

struct Courier {
    child: Child,
    admin: String,
    _dir: tempfile::TempDir,
}

impl Drop for Courier {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The quickstart with every port set to 0.
fn start() -> Courier {
    let dir = tempfile::tempdir().unwrap();
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart.yaml");
    let config = std::fs::read_to_string(example)
        .unwrap()
        .replace("port_value: 9901", "port_value: 0")
        .replace("port_value: 10000", "port_value: 0");
    let config_path = dir.path().join("quickstart.yaml");
    std::fs::write(&config_path, config).unwrap();
    let admin_path = dir.path().join("admin");
    let child = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(["--concurrency", "2", "--drain-time-s", "5", "-c"])
        .arg(&config_path)
        .arg("--admin-address-path")
        .arg(&admin_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let admin = poll(1000, || {
        std::fs::read_to_string(&admin_path)
            .ok()
            .filter(|a| !a.is_empty())
    })
    .expect("courier did not write its admin address");
    Courier {
        child,
        admin,
        _dir: dir,
    }
}

/// Sends one HTTP/1.1 request (connection: close) and returns the raw response.
fn http(addr: &str, method: &str, path: &str, host: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn status(resp: &str) -> u16 {
    resp.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn body(resp: &str) -> &str {
    resp.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

fn header<'a>(resp: &'a str, name: &str) -> Option<&'a str> {
    resp.split("\r\n\r\n").next()?.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn listener_addr(c: &Courier) -> String {
    let listeners = http(&c.admin, "GET", "/listeners", "admin");
    let line = body(&listeners)
        .lines()
        .find(|l| l.starts_with("quickstart::"))
        .unwrap();
    line.trim_start_matches("quickstart::").to_string()
}

#[test]
fn quickstart_serves_direct_responses_redirects_and_stats() {
    let c = start();
    assert_eq!(body(&http(&c.admin, "GET", "/ready", "admin")), "LIVE\n");
    let addr = listener_addr(&c);

    let hello = http(&addr, "GET", "/", "example.com");
    assert_eq!(status(&hello), 200, "{hello}");
    assert_eq!(body(&hello), "Hello from courier\n");
    assert_eq!(header(&hello, "content-type"), Some("text/plain"));
    assert_eq!(header(&hello, "server"), Some("envoy"));

    let moved = http(&addr, "GET", "/old/x?q=1", "example.com:8080");
    assert_eq!(status(&moved), 301, "{moved}");
    assert_eq!(
        header(&moved, "location"),
        Some("http://example.com:8080/?q=1")
    );
    assert_eq!(body(&moved), "");

    let missing = http(&addr, "GET", "/nothing", "example.com");
    assert_eq!(status(&missing), 404);
    assert_eq!(body(&missing), "no route here\n");

    // HEAD: the body is dropped, content-length kept.
    let head = http(&addr, "HEAD", "/", "example.com");
    assert_eq!(header(&head, "content-length"), Some("19"));
    assert_eq!(body(&head), "");

    let stats = http(&c.admin, "GET", "/stats", "admin");
    let value = |name: &str| -> u64 {
        body(&stats)
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing in\n{stats}"))
    };
    assert_eq!(value("http.quickstart.downstream_rq_total"), 4);
    assert_eq!(value("http.quickstart.downstream_rq_2xx"), 2);
    assert_eq!(value("http.quickstart.downstream_rq_3xx"), 1);
    assert_eq!(value("http.quickstart.downstream_rq_4xx"), 1);
    assert_eq!(value("http.quickstart.rq_redirect"), 1);
}

#[test]
fn sigterm_drains_and_exits_zero() {
    let mut c = start();
    let addr = listener_addr(&c);
    assert_eq!(status(&http(&addr, "GET", "/healthz", "x")), 200);
    let pid = c.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let code = poll(750, || c.child.try_wait().unwrap())
        .expect("courier did not exit after SIGTERM")
        .code();
    assert_eq!(code, Some(0));
    assert!(
        TcpStream::connect(&addr).is_err(),
        "the listener still accepts after exit"
    );
}

#[test]
fn serve_refuses_what_it_does_not_serve_yet() {
    // The sidecar example is served whole now (JWT, RBAC, retries, circuit
    // breakers and connection-pool limits, outlier detection, upstream
    // connection lifetimes); with 100-continue proxying added, serve mode
    // refuses it, by path.
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/sidecar.yaml");
    let text = std::fs::read_to_string(example).unwrap();
    assert!(text.contains("          stat_prefix: inbound\n"));
    let text = text.replacen(
        "          stat_prefix: inbound\n",
        "          stat_prefix: inbound\n          proxy_100_continue: true\n",
        1,
    );
    let text = text.replacen(
        "  - name: local_service\n",
        "  - name: local_service\n    typed_extension_protocol_options:\n      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n        \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n        common_http_protocol_options: {max_connection_duration: 10s}\n        explicit_http_config: {http_protocol_options: {}}\n",
        1,
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sidecar.yaml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_courier"))
        .arg("-c")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(".proxy_100_continue: 100-continue proxying is not served yet"),
        "{err}"
    );
    assert!(!err.contains("max_connection_duration"), "{err}");
    assert!(!err.contains("retry_policy"), "{err}");
    assert!(!err.contains("outlier_detection"), "{err}");
    assert!(!err.contains("max_connections"), "{err}");
    assert!(!err.contains("http_filters"), "{err}");
}
