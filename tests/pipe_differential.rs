//! Envoy `pipe` addresses (Unix domain sockets) against real Envoy, in a
//! Contour-style bootstrap: the admin on a pipe (mode 0644), a STATIC
//! `envoy-admin` cluster whose endpoint is that pipe (a listener routes
//! `/ready` to it), a listener on a pipe (mode 0600), and an `echo` cluster
//! whose endpoint is a test server on a Unix socket that answers each request
//! with the head it received. Both proxies get the same requests over TCP and
//! over the pipe listener; statuses, bodies, what the upstream received (the
//! `x-forwarded-for` / `x-envoy-*` rules for a pipe peer), the access log's
//! address fields, the socket files' modes and `/clusters`' pipe hosts must
//! match; a `tcp_proxy` listener on a pipe in front of a pipe upstream must
//! pass the same bytes and log the same line. A third listener on a pipe sets `internal_address_config.unix_sockets`,
//! which makes its peers internal.
//!
//! courier runs always; Envoy when installed (`COURIER_ENVOY`).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=$PWD/.venv/bin/envoy cargo test -p courier-tests --test pipe_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request, Response};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

/// An HTTP/1.1 server on the Unix socket `path` that answers every request
/// (keep-alive) `200` with the request's head as its body.
fn echo_server(path: &Path) {
    let l = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            std::thread::spawn(move || serve_echo(s));
        }
    });
}

fn serve_echo(mut s: UnixStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        let len: usize = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < end + 4 + len {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..end + 4 + len);
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{head}",
            head.len()
        );
        if s.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

const LOG_FORMAT: &str = "%DOWNSTREAM_REMOTE_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT% %DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT% [%DOWNSTREAM_LOCAL_PORT%] %DOWNSTREAM_DIRECT_REMOTE_ADDRESS% %UPSTREAM_HOST% %UPSTREAM_CLUSTER% %RESPONSE_CODE% %REQ(:PATH)%\n";

const TCP_FORMAT: &str = "%DOWNSTREAM_REMOTE_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% %UPSTREAM_HOST% %UPSTREAM_CLUSTER% %BYTES_RECEIVED% %BYTES_SENT% %RESPONSE_FLAGS%\n";

/// A raw upstream on the Unix socket `path`: reads to the client's end, then
/// answers `got:<bytes>` and closes.
fn echo_after_eof(path: &Path) {
    let l = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got);
                let _ = s.write_all(b"got:");
                let _ = s.write_all(&got);
            });
        }
    });
}

fn hcm(name: &str, log: &Path, extra: &str) -> String {
    format!(
        r#"    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          use_remote_address: true
{extra}          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: {log}
              log_format: {{text_format_source: {{inline_string: "{LOG_FORMAT}"}}}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{path: /ready}}
                route: {{cluster: envoy-admin}}
              - match: {{prefix: /}}
                route: {{cluster: echo}}
"#,
        log = log.display(),
        LOG_FORMAT = LOG_FORMAT.replace('\n', "\\n"),
    )
}

/// The bootstrap of one proxy, its sockets in `dir`, its upstream at `up`.
fn bootstrap(dir: &Path, up: &Path) -> String {
    let admin = dir.join("admin.sock");
    format!(
        r#"admin:
  address: {{pipe: {{path: {admin}, mode: 420}}}}
static_resources:
  listeners:
  - name: tcp_in
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
{tcp}
  - name: pipe_in
    address: {{pipe: {{path: {pipe_in}, mode: 384}}}}
{pipe}
  - name: pipe_internal
    address: {{pipe: {{path: {pipe_internal}}}}}
{internal}
  - name: raw_in
    address: {{pipe: {{path: {raw_in}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: raw
          cluster: raw
          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: {raw_log}
              log_format: {{text_format_source: {{inline_string: "{TCP_FORMAT}"}}}}
  clusters:
  - name: raw
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: raw
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{pipe: {{path: {raw}}}}}}}}}]}}]
  - name: envoy-admin
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: envoy-admin
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{pipe: {{path: {admin}}}}}}}}}]}}]
  - name: echo
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: echo
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{pipe: {{path: {up}}}}}}}}}]}}]
"#,
        admin = admin.display(),
        pipe_in = dir.join("in.sock").display(),
        up = up.display(),
        pipe_internal = dir.join("internal.sock").display(),
        raw_in = dir.join("raw_in.sock").display(),
        raw_log = dir.join("raw.log").display(),
        raw = up.with_file_name("raw.sock").display(),
        TCP_FORMAT = TCP_FORMAT.replace('\n', "\\n"),
        tcp = hcm("tcp_in", &dir.join("tcp.log"), ""),
        pipe = hcm("pipe_in", &dir.join("pipe.log"), ""),
        internal = hcm(
            "pipe_internal",
            &dir.join("internal.log"),
            "          internal_address_config: {unix_sockets: true}\n"
        ),
    )
}

fn get(path: &str, headers: &[(&str, &str)]) -> Request {
    Request {
        method: "GET".into(),
        path: path.into(),
        authority: "example.com".into(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body: Vec::new(),
    }
}

/// The headers the upstream received (its echo), by name; values that differ
/// per request (`x-request-id`) or per process are replaced by a marker.
fn received(resp: &Response) -> BTreeMap<String, String> {
    let body = String::from_utf8_lossy(&resp.body);
    body.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| {
            let k = k.trim().to_ascii_lowercase();
            let v = match k.as_str() {
                "x-request-id" => "<id>".to_string(),
                _ => v.trim().to_string(),
            };
            (k, v)
        })
        .collect()
}

/// What one proxy showed: every observation as `name: value` lines.
fn observe(proxy: &Proxy, dir: &Path) -> BTreeMap<String, String> {
    let mut seen = BTreeMap::new();
    let tcp = proxy.listener("tcp_in").unwrap().to_string();
    let pipe = dir.join("in.sock").display().to_string();
    let internal = dir.join("internal.sock").display().to_string();
    let edge = [
        ("x-forwarded-for", "1.2.3.4"),
        ("x-envoy-retry-on", "5xx"),
        ("x-envoy-internal", "true"),
        ("x-envoy-external-address", "9.9.9.9"),
        ("x-envoy-downstream-service-node", "n"),
    ];
    for (via, addr) in [("tcp", &tcp), ("pipe", &pipe), ("internal", &internal)] {
        for protocol in [Protocol::Http1, Protocol::H2c] {
            let tag = format!("{via}/{protocol:?}");
            let r = client::send(addr, protocol, &get("/echo", &edge)).unwrap();
            seen.insert(format!("{tag} /echo status"), r.status.to_string());
            let mut got = received(&r);
            // The request line names the path and the upstream's protocol.
            got.insert(
                "<request line>".into(),
                String::from_utf8_lossy(&r.body)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            );
            seen.insert(format!("{tag} /echo upstream received"), format!("{got:?}"));
            // Without x-forwarded-for the peer itself decides internal or not.
            let r = client::send(addr, protocol, &get("/echo", &edge[1..])).unwrap();
            seen.insert(
                format!("{tag} /echo without xff upstream received"),
                format!("{:?}", received(&r)),
            );
            let r = client::send(addr, protocol, &get("/ready", &[])).unwrap();
            seen.insert(
                format!("{tag} /ready"),
                format!("{} {:?}", r.status, String::from_utf8_lossy(&r.body)),
            );
        }
    }
    // Admin over its pipe.
    let admin = dir.join("admin.sock").display().to_string();
    assert_eq!(proxy.admin, admin, "{}: --admin-address-path", proxy.kind);
    let r = client::get(&admin, "/ready").unwrap();
    seen.insert(
        "admin /ready".into(),
        format!("{} {:?}", r.status, String::from_utf8_lossy(&r.body)),
    );
    let r = client::get(&admin, "/listeners").unwrap();
    let pipe_line = String::from_utf8_lossy(&r.body)
        .lines()
        .find(|l| l.starts_with("pipe_in::"))
        .map(|l| l.replace(&dir.display().to_string(), "<dir>"));
    seen.insert("admin /listeners pipe_in".into(), format!("{pipe_line:?}"));
    // `/clusters`: the pipe hosts by their paths.
    let r = client::get(&admin, "/clusters?format=json").unwrap();
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    for c in v["cluster_statuses"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let addrs: Vec<String> = c["host_statuses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["address"].to_string())
            .map(|a| a.replace(&dir.display().to_string(), "<dir>"))
            .collect();
        seen.insert(format!("/clusters json {name}"), format!("{addrs:?}"));
    }
    let r = client::get(&admin, "/clusters").unwrap();
    let text = String::from_utf8_lossy(&r.body).replace(&dir.display().to_string(), "<dir>");
    // Sorted: courier lists clusters by name, Envoy in its own order.
    let mut hostnames: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("::hostname::") || l.contains("::health_flags::"))
        .collect();
    hostnames.sort_unstable();
    seen.insert("/clusters text".into(), format!("{hostnames:?}"));
    // tcp_proxy from a pipe to a pipe: the bytes both ways and the log line.
    let mut s = UnixStream::connect(dir.join("raw_in.sock")).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    s.write_all(b"raw bytes").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    seen.insert(
        "tcp_proxy reply".into(),
        String::from_utf8_lossy(&got).into_owned(),
    );
    let line = courier_tests::proxies::poll(750, || {
        std::fs::read_to_string(dir.join("raw.log"))
            .ok()
            .filter(|t| t.ends_with('\n'))
    })
    .unwrap_or_default();
    seen.insert(
        "tcp_proxy access log".into(),
        line.replace(&dir.display().to_string(), "<dir>"),
    );
    // The pipe listener's stats, named by its path as Envoy names them.
    let r = client::get(&admin, "/stats").unwrap();
    let stats = String::from_utf8_lossy(&r.body).replace(&dir.display().to_string(), "<dir>");
    for name in [
        "listener.<dir>/in.sock.downstream_cx_total",
        "listener.<dir>/internal.sock.downstream_cx_total",
    ] {
        let line = stats
            .lines()
            .find(|l| l.starts_with(&format!("{name}: ")))
            .map(str::to_string);
        seen.insert(format!("stat {name}"), format!("{line:?}"));
    }
    // The socket files' modes.
    for f in ["admin.sock", "in.sock"] {
        let mode = std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o7777;
        seen.insert(format!("mode {f}"), format!("{mode:o}"));
    }
    // Access log lines (the pipe listener's; the TCP one's addresses have ports).
    let lines = courier_tests::proxies::poll(750, || {
        let text = std::fs::read_to_string(dir.join("pipe.log")).ok()?;
        (text.lines().count() >= 4).then_some(text)
    })
    .unwrap_or_default();
    seen.insert(
        "pipe access log".into(),
        lines.replace(&dir.display().to_string(), "<dir>"),
    );
    seen
}

fn run(kind: Kind, bin: &Path, root: &Path, up: &Path) -> BTreeMap<String, String> {
    let dir = root.join(kind.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = bootstrap(&dir, up);
    let proxy = Proxy::start(
        kind,
        bin,
        &yaml,
        &["tcp_in", "pipe_in", "pipe_internal", "raw_in"],
    )
    .unwrap();
    let seen = observe(&proxy, &dir);
    drop(proxy);
    seen
}

#[test]
fn pipes_as_envoy_serves_them() {
    let root = tempfile::tempdir().unwrap();
    let up = root.path().join("up.sock");
    echo_server(&up);
    echo_after_eof(&root.path().join("raw.sock"));
    let courier = run(Kind::Courier, &courier_bin(), root.path(), &up);
    for (k, v) in &courier {
        println!("courier {k}: {v}");
    }
    // What courier must show whether or not Envoy is here.
    assert_eq!(courier["admin /ready"], "200 \"LIVE\\n\"");
    assert_eq!(courier["pipe/Http1 /ready"], "200 \"LIVE\\n\"");
    assert_eq!(courier["tcp/H2c /ready"], "200 \"LIVE\\n\"");
    assert_eq!(courier["mode admin.sock"], "644");
    assert_eq!(courier["tcp_proxy reply"], "got:raw bytes");
    assert_eq!(courier["mode in.sock"], "600");
    assert!(
        courier["/clusters json echo"].contains(&format!(
            "{{\\\"pipe\\\":{{\\\"path\\\":\\\"{}\\\"}}}}",
            up.display()
        )),
        "{}",
        courier["/clusters json echo"]
    );
    let pipe_received = &courier["pipe/Http1 /echo upstream received"];
    // A pipe peer: nothing appended to x-forwarded-for, no external address,
    // and (not internal by default) the edge's x-envoy-* headers removed.
    assert!(
        pipe_received.contains("\"x-forwarded-for\": \"1.2.3.4\""),
        "{pipe_received}"
    );
    assert!(
        !pipe_received.contains("x-envoy-retry-on"),
        "{pipe_received}"
    );
    assert!(
        !pipe_received.contains("x-envoy-internal"),
        "{pipe_received}"
    );
    // `internal_address_config.unix_sockets: true`: internal, and what only
    // internal requests keep (the router consumes `x-envoy-retry-on` either way).
    let internal = &courier["internal/Http1 /echo without xff upstream received"];
    assert!(
        internal.contains("\"x-envoy-internal\": \"true\""),
        "{internal}"
    );
    assert!(
        internal.contains("\"x-envoy-downstream-service-node\": \"n\""),
        "{internal}"
    );

    let Some(envoy_bin) = envoy_bin() else {
        eprintln!("envoy not installed: courier's side only");
        return;
    };
    let envoy = run(Kind::Envoy, &envoy_bin, root.path(), &up);
    let mut diffs = Vec::new();
    for (k, e) in &envoy {
        match courier.get(k) {
            Some(c) if c == e => {}
            c => diffs.push(format!(
                "{k}:\n  envoy:   {e}\n  courier: {}",
                c.map_or("<none>", String::as_str)
            )),
        }
    }
    for k in courier.keys().filter(|k| !envoy.contains_key(*k)) {
        diffs.push(format!("{k}: only courier shows it"));
    }
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}
