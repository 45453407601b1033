//! `forward_client_cert_details` against real Envoy: one bootstrap with a
//! plaintext listener in each kept mode (`SANITIZE`, Envoy's default, and
//! `ALWAYS_FORWARD_ONLY`) and TLS listeners in `FORWARD_ONLY`, `APPEND_FORWARD`
//! (with every `set_current_client_cert_details` field) and `SANITIZE_SET`
//! whose clients may present a certificate (Envoy Gateway's
//! mutual-tls-forward-client-certificate case); requests carrying an
//! `x-forwarded-client-cert` go through both proxies, and what the upstream
//! received must be the same.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test xfcc_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{bootstrap, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{Pem, TestCa, courier_bin, envoy_bin};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// An HTTP/1.1 upstream that answers each request with the
/// `x-forwarded-client-cert` values it received (`<none>` without one).
fn echo_xfcc() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(s.try_clone().unwrap());
                let mut out = s;
                loop {
                    let mut seen = Vec::new();
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let l = line.trim_end();
                        if l.is_empty() {
                            break;
                        }
                        if let Some((k, v)) = l.split_once(':')
                            && k.eq_ignore_ascii_case("x-forwarded-client-cert")
                        {
                            seen.push(v.trim().to_string());
                        }
                    }
                    let body = if seen.is_empty() {
                        "<none>".to_string()
                    } else {
                        seen.join(" | ")
                    };
                    let _ = write!(
                        out,
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                }
            });
        }
    });
    port
}

fn hcm(mode: &str) -> String {
    format!(
        r#"filters:
- name: envoy.filters.network.http_connection_manager
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
    stat_prefix: l
    {mode}
    http_filters:
    - name: envoy.filters.http.router
      typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
    route_config:
      virtual_hosts:
      - name: all
        domains: ["*"]
        routes:
        - match: {{prefix: "/"}}
          route: {{cluster: up}}
"#
    )
}

fn yaml(ca: &TestCa, up: u16) -> String {
    let server = ca.leaf(&["server.example"]);
    let plain = |name: &str, mode: &str| {
        format!(
            "- name: {name}\n  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}\n  filter_chains:\n  - {}",
            indent(&hcm(mode), 4).trim_start()
        )
    };
    let tls = |name: &str, mode: &str| {
        format!(
            r#"- name: {name}
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
  filter_chains:
  - transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
        common_tls_context:
          tls_certificates:
          - certificate_chain: {{inline_string: {}}}
            private_key: {{inline_string: {}}}
          validation_context:
            trusted_ca: {{inline_string: {}}}
{}"#,
            serde_json::to_string(&server.cert).unwrap(),
            serde_json::to_string(&server.key).unwrap(),
            serde_json::to_string(&ca.pem.cert).unwrap(),
            indent(&hcm(mode), 4),
        )
    };
    format!(
        "{}  clusters:\n  - name: up\n    connect_timeout: 2s\n    load_assignment:\n      cluster_name: up\n      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {up}}}}}}}}}]}}]\n",
        bootstrap(&[
            plain("sanitize", ""),
            plain("always", "forward_client_cert_details: ALWAYS_FORWARD_ONLY"),
            tls("mtls", "forward_client_cert_details: FORWARD_ONLY"),
            tls(
                "append",
                "forward_client_cert_details: APPEND_FORWARD\n    set_current_client_cert_details: {cert: true, chain: true, subject: true, uri: true, dns: true}",
            ),
            tls("set", "forward_client_cert_details: SANITIZE_SET"),
        ])
    )
}

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nhost: server.example\r\nx-forwarded-client-cert: By=spiffe://a;Hash=00\r\nx-forwarded-client-cert: URI=spiffe://b\r\nconnection: close\r\n\r\n";

/// The body of the answer (what the upstream received) over plaintext.
fn plain(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(REQUEST).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    body(&got)
}

/// The same over TLS, presenting `cert` if given.
fn tls(addr: &str, cert: Option<&Pem>) -> String {
    let mut conn = courier_tests::tls_client::connection(cert);
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut stream = rustls::Stream::new(&mut conn, &mut sock);
    stream.write_all(REQUEST).unwrap();
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got);
    body(&got)
}

fn body(response: &[u8]) -> String {
    let text = String::from_utf8_lossy(response);
    let status = text.lines().next().unwrap_or("").to_string();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    format!("{status} / upstream got: {body}")
}

fn run(kind: Kind, bin: &std::path::Path, ca: &TestCa, client: &Pem, up: u16) -> Vec<String> {
    let p = Proxy::start(
        kind,
        bin,
        &yaml(ca, up),
        &["sanitize", "always", "mtls", "append", "set"],
    )
    .unwrap();
    vec![
        format!("SANITIZE: {}", plain(p.listener("sanitize").unwrap())),
        format!(
            "ALWAYS_FORWARD_ONLY: {}",
            plain(p.listener("always").unwrap())
        ),
        format!(
            "FORWARD_ONLY, no client certificate: {}",
            tls(p.listener("mtls").unwrap(), None)
        ),
        format!(
            "FORWARD_ONLY, mutual TLS: {}",
            tls(p.listener("mtls").unwrap(), Some(client))
        ),
        format!(
            "APPEND_FORWARD, no client certificate: {}",
            tls(p.listener("append").unwrap(), None)
        ),
        format!(
            "APPEND_FORWARD, mutual TLS, every detail: {}",
            tls(p.listener("append").unwrap(), Some(client))
        ),
        format!(
            "SANITIZE_SET, mutual TLS: {}",
            tls(p.listener("set").unwrap(), Some(client))
        ),
    ]
}

#[test]
fn xfcc_as_envoy_forwards_it() {
    let ca = TestCa::new("xfcc CA");
    let client = ca.leaf(&["client.example"]);
    let up = echo_xfcc();
    let c = run(Kind::Courier, &courier_bin(), &ca, &client, up);
    println!("courier:\n{}", c.join("\n"));
    assert!(c[0].ends_with("upstream got: <none>"), "{}", c[0]);
    assert!(c[3].ends_with("spiffe://b"), "{}", c[3]);
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED the Envoy comparison: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let e = run(Kind::Envoy, &envoy, &ca, &client, up);
    println!("envoy:\n{}", e.join("\n"));
    assert_eq!(c, e);
}
