//! `tls_inspector`'s JA3 and JA4 fingerprints (`enable_ja3_fingerprinting`,
//! `enable_ja4_fingerprinting`, as Envoy Gateway's `listener-enable-fingerprint`
//! sets them) against real Envoy: both proxies run one bootstrap whose
//! listener terminates TLS for an HTTP chain and passes TLS through to a TLS
//! upstream for another, and log `%TLS_JA3_FINGERPRINT%` and
//! `%TLS_JA4_FINGERPRINT%`; the same TLS clients (with and without SNI and
//! ALPN) connect to both, and the lines must be the same. rustls sends its
//! ClientHello extensions in a random order, so the (order-sensitive) JA3 of
//! two of its handshakes differs: the handshakes' JA3 is checked for its
//! shape only, and one captured ClientHello, replayed byte for byte to both
//! through the passthrough chain, gives the JA3 both must agree on. courier's
//! lines are also checked for the JA4 fields the client decides (SNI, ALPN).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test tls_fingerprint_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::same_lines;
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::tls_client::AnyServer;
use courier_tests::{Pem, TestCa};
use rustls::pki_types::ServerName;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const FORMAT: &str = "%REQUESTED_SERVER_NAME% %TLS_JA3_FINGERPRINT% %TLS_JA4_FINGERPRINT%";

fn bootstrap(cert: &Pem, upstream: u16) -> String {
    let inline = |s: &str| serde_json::to_string(s).unwrap();
    let log = |file: &str| {
        format!(
            r#"[{{name: envoy.access_loggers.file, typed_config: {{"@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog, path: {file}, log_format: {{text_format_source: {{inline_string: "{FORMAT}\n"}}}}}}}}]"#
        )
    };
    format!(
        r#"admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
static_resources:
  listeners:
  - name: tls
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    listener_filters:
    - name: envoy.filters.listener.tls_inspector
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector
        enable_ja3_fingerprinting: true
        enable_ja4_fingerprinting: true
    filter_chains:
    - filter_chain_match: {{server_names: [pass.example, replay.example]}}
      filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: pass
          cluster: tls_up
          access_log: {pass_log}
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificates:
            - certificate_chain: {{inline_string: {cert}}}
              private_key: {{inline_string: {key}}}
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: http
          access_log: {http_log}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: /}}
                direct_response: {{status: 200, body: {{inline_string: "ok"}}}}
  clusters:
  - name: tls_up
    connect_timeout: 1s
    load_assignment:
      cluster_name: tls_up
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream}}}}}}}
"#,
        cert = inline(&cert.cert),
        key = inline(&cert.key),
        pass_log = log("pass.log"),
        http_log = log("http.log"),
    )
}

/// One TLS client: its SNI (`None`: an IP address, so no SNI) and ALPN.
fn connect(addr: &str, sni: Option<&str>, alpn: &[&str]) -> String {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let name = match sni {
        Some(n) => ServerName::try_from(n.to_string()).unwrap(),
        None => ServerName::try_from("127.0.0.1").unwrap(),
    };
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = tls.read_to_end(&mut got);
    String::from_utf8_lossy(&got)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

/// A ClientHello as rustls writes it for `sni` with ALPN `h2`, captured once
/// (replayed to both proxies, so both see the same extension order).
fn captured_hello(sni: &str) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}

/// Sends `hello` and reads the server's first flight, then closes.
fn replay(addr: &str, hello: &[u8]) -> usize {
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    tcp.write_all(hello).unwrap();
    let mut buf = [0u8; 4096];
    let n = tcp.read(&mut buf).unwrap_or(0);
    // A TLS handshake record back: the upstream's ServerHello, passed through.
    usize::from(n > 0 && buf[0] == 0x16)
}

/// The line with a random-order JA3 checked and masked.
fn masked(line: &str) -> String {
    let mut f: Vec<&str> = line.split(' ').collect();
    let ja3 = f.get(2).copied().unwrap_or("");
    assert!(
        ja3.len() == 32 && ja3.chars().all(|c| c.is_ascii_hexdigit()),
        "{line}"
    );
    f[2] = "<ja3>";
    f.join(" ")
}

fn observe(kind: Kind, bin: &Path, cert: &Pem, upstream: u16, hello: &[u8]) -> Vec<String> {
    let p = Proxy::start(kind, bin, &bootstrap(cert, upstream), &["tls"])
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = p.listener("tls").unwrap();
    let mut out = vec![
        connect(addr, Some("server.example"), &["http/1.1"]),
        connect(addr, None, &[]),
        connect(addr, Some("pass.example"), &["h2", "http/1.1"]),
        format!("replayed: {} handshake record(s) back", replay(addr, hello)),
    ];
    for (file, n) in [("http.log", 2), ("pass.log", 2)] {
        let path = p.dir().join(file);
        let lines = poll(1000, || {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let mut lines: Vec<String> = text.lines().map(|l| format!("{file}: {l}")).collect();
            lines.sort();
            (lines.len() >= n).then_some(lines)
        })
        .unwrap_or_else(|| panic!("{kind}: {file} has fewer than {n} lines"));
        out.extend(lines);
    }
    out
}

#[test]
fn ja3_and_ja4_as_envoy_computes_them() {
    let ca = TestCa::new("fingerprint CA");
    let cert = ca.leaf(&["server.example", "pass.example"]);
    let upstream = courier_tests::tls_upstream::start(&cert);
    let hello = captured_hello("replay.example");
    let Some(lines) = same_lines(|kind, bin| {
        let mut l = observe(kind, bin, &cert, upstream.port(), &hello);
        // The handshakes' lines: JA3 masked (the replayed hello's is compared).
        for line in &mut l[4..] {
            if !line.starts_with("pass.log: replay.example") {
                *line = masked(line);
            }
        }
        l
    }) else {
        return;
    };
    assert_eq!(lines[..2], ["HTTP/1.1 200 OK", "HTTP/1.1 200 OK"]);
    assert_eq!(lines[3], "replayed: 1 handshake record(s) back");
    // Each logged line: SNI (or `-`), a 32-hex JA3, a JA4 whose first field
    // shows the client's SNI and first ALPN protocol.
    let fields = |l: &str| l.split(' ').map(str::to_string).collect::<Vec<_>>();
    // Sorted per file: `-` sorts before `server.example`.
    let checks = [
        ("http.log: -", "t13i", "00_"),
        ("http.log: server.example", "t13d", "h1_"),
        ("pass.log: pass.example", "t13d", "h2_"),
        ("pass.log: replay.example", "t13d", "h2_"),
    ];
    assert_eq!(lines.len(), 4 + checks.len());
    for (line, (prefix, ja4_start, alpn)) in lines[4..].iter().zip(checks) {
        assert!(line.starts_with(prefix), "{line}");
        let f = fields(line);
        let (ja3, ja4) = (&f[2], &f[3]);
        assert!(ja3 == "<ja3>" || ja3.len() == 32, "{line}");
        assert!(ja4.starts_with(ja4_start), "{line}");
        assert_eq!(&ja4[8..11], alpn, "{line}");
        assert_eq!(ja4.len(), 36, "{line}");
    }
}
