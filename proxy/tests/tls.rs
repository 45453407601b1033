//! TLS termination and filter-chain selection through the real binary: HTTP/1.1
//! and ALPN h2 over TLS, SNI choosing the certificate and the chain, client
//! certificates (required, trusted CA, SAN matchers), a plaintext client on a TLS
//! listener, `transport_protocol` chains, and `codec_type` on plaintext.
//! Certificates are generated per test; every port is 0.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod tls_support;

use courier_tests::{Pem, TestCa};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tls_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn http1_and_alpn_h2_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("ca");
    let cert = write_pem(dir.path(), "server", &ca.leaf(&["localhost"]));
    let ts = tls_socket(&cert, &["h2", "http/1.1"], json!({}), false);
    let c = start(
        dir.path(),
        vec![listener(
            "tls",
            vec![chain(json!({}), Some(ts), "over tls", "AUTO")],
        )],
    );
    let addr = c.addr("tls");

    let client = Client {
        ca: &ca,
        sni: "localhost",
        alpn: &["http/1.1"],
        cert: None,
    };
    let s = tls_connect(addr, &client).await.unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (version, status, body) = get(s, false, "localhost").await;
    assert_eq!(
        (version, status, body.as_str()),
        (http::Version::HTTP_11, 200, "over tls")
    );

    let client = Client {
        ca: &ca,
        sni: "localhost",
        alpn: &["h2", "http/1.1"],
        cert: None,
    };
    let s = tls_connect(addr, &client).await.unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (version, status, body) = get(s, true, "localhost").await;
    assert_eq!(
        (version, status, body.as_str()),
        (http::Version::HTTP_2, 200, "over tls")
    );

    // No ALPN offered: the preface decides (AUTO), here HTTP/1.1.
    let client = Client {
        ca: &ca,
        sni: "localhost",
        alpn: &[],
        cert: None,
    };
    let s = tls_connect(addr, &client).await.unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), None);
    assert_eq!(get(s, false, "localhost").await.1, 200);

    // ALPN with none of ours: Envoy carries on without ALPN instead of failing.
    let client = Client {
        ca: &ca,
        sni: "localhost",
        alpn: &["spdy/3"],
        cert: None,
    };
    let s = tls_connect(addr, &client).await.unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), None);
    assert_eq!(get(s, false, "localhost").await.1, 200);

    // A plaintext client on the TLS-only listener gets no response: closed.
    // (rustls answers the non-TLS bytes with a decode_error alert.)
    match plain_http(addr, "localhost") {
        Ok(plain) => assert!(
            !plain.contains("HTTP/"),
            "a plaintext request got an answer: {plain:?}"
        ),
        Err(e) => assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "the plaintext connection was left open: {e}"
        ),
    }
}

#[tokio::test]
async fn sni_picks_the_chain_and_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("ca");
    let (a, b) = (ca.leaf(&["a.example.com"]), ca.leaf(&["b.example.com"]));
    let wild = ca.leaf(&["*.example.com"]);
    let other = ca.leaf(&["other.org"]);
    let ts = |name: &str, pem: &Pem| {
        tls_socket(
            &write_pem(dir.path(), name, pem),
            &["http/1.1"],
            json!({}),
            false,
        )
    };
    let c = start(
        dir.path(),
        vec![
            listener(
                "sni",
                vec![
                    chain(
                        json!({ "server_names": ["a.example.com"] }),
                        Some(ts("a", &a)),
                        "chain a",
                        "AUTO",
                    ),
                    chain(
                        json!({ "server_names": ["b.example.com"] }),
                        Some(ts("b", &b)),
                        "chain b",
                        "AUTO",
                    ),
                    chain(
                        json!({ "server_names": ["*.example.com"] }),
                        Some(ts("w", &wild)),
                        "chain wildcard",
                        "AUTO",
                    ),
                ],
            ),
            with_default(
                listener(
                    "with_default",
                    vec![chain(
                        json!({ "server_names": ["a.example.com"] }),
                        Some(ts("a2", &a)),
                        "chain a",
                        "AUTO",
                    )],
                ),
                chain(
                    json!(null),
                    Some(ts("other", &other)),
                    "default chain",
                    "AUTO",
                ),
            ),
        ],
    );
    let addr = c.addr("sni");
    for (sni, pem, want) in [
        ("a.example.com", &a, "chain a"),
        ("b.example.com", &b, "chain b"),
        ("c.example.com", &wild, "chain wildcard"),
    ] {
        let client = Client {
            ca: &ca,
            sni,
            alpn: &["http/1.1"],
            cert: None,
        };
        let s = tls_connect(addr, &client).await.unwrap();
        let peer = s.get_ref().1.peer_certificates().unwrap()[0].clone();
        assert_eq!(peer, der(&pem.cert), "certificate for {sni}");
        let (_, status, body) = get(s, false, sni).await;
        assert_eq!((status, body.as_str()), (200, want), "{sni}");
    }
    // No chain for another name and no default chain: the handshake never completes.
    let client = Client {
        ca: &ca,
        sni: "other.org",
        alpn: &[],
        cert: None,
    };
    assert!(tls_connect(addr, &client).await.is_err());

    // With a default chain, the names no chain lists go to it.
    let addr = c.addr("with_default");
    for (sni, pem, want) in [
        ("a.example.com", &a, "chain a"),
        ("other.org", &other, "default chain"),
    ] {
        let client = Client {
            ca: &ca,
            sni,
            alpn: &[],
            cert: None,
        };
        let s = tls_connect(addr, &client).await.unwrap();
        let peer = s.get_ref().1.peer_certificates().unwrap()[0].clone();
        assert_eq!(peer, der(&pem.cert), "certificate for {sni}");
        let (_, status, body) = get(s, false, sni).await;
        assert_eq!((status, body.as_str()), (200, want), "{sni}");
    }
}

/// A raw request from a client presenting `cert`; the error if the handshake
/// or the request failed.
async fn mtls_request(addr: String, ca: &TestCa, cert: Option<&Pem>) -> std::io::Result<String> {
    let client = Client {
        ca,
        sni: "localhost",
        alpn: &[],
        cert,
    };
    let s = tls_connect(&addr, &client).await?;
    raw_request(s).await
}

#[tokio::test]
async fn client_certificates_are_required_and_verified() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("trusted");
    let other = TestCa::new("untrusted");
    let cert = write_pem(dir.path(), "server", &ca.leaf(&["localhost"]));
    let trusted = write_ca(dir.path(), "trusted", &ca);
    let mtls = |require: bool, sans: Value| {
        tls_socket(
            &cert,
            &["http/1.1"],
            json!({ "validation_context": {
                "trusted_ca": { "filename": trusted },
                "match_typed_subject_alt_names": sans,
            }}),
            require,
        )
    };
    let san = json!([{ "san_type": "DNS", "matcher": { "exact": "allowed.example.com" } }]);
    let c = start(
        dir.path(),
        vec![
            listener(
                "mtls",
                vec![chain(
                    json!({}),
                    Some(mtls(true, json!([]))),
                    "mtls",
                    "AUTO",
                )],
            ),
            listener(
                "san",
                vec![chain(json!({}), Some(mtls(true, san)), "san", "AUTO")],
            ),
            listener(
                "optional",
                vec![chain(
                    json!({}),
                    Some(mtls(false, json!([]))),
                    "optional",
                    "AUTO",
                )],
            ),
        ],
    );
    let good = ca.leaf(&["client.example.com"]);
    let allowed = ca.leaf(&["allowed.example.com"]);
    let foreign = other.leaf(&["allowed.example.com"]);
    let ok = |r: std::io::Result<String>, what: &str| {
        let r = r.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(r.starts_with("HTTP/1.1 200"), "{what}: {r}");
    };
    let refused = |r: std::io::Result<String>, alert: &str, what: &str| match r {
        Ok(resp) => panic!("{what} was served: {resp}"),
        Err(e) => assert!(e.to_string().contains(alert), "{what}: {e}"),
    };

    let mtls_addr = c.addr("mtls").to_string();
    ok(
        mtls_request(mtls_addr.clone(), &ca, Some(&good)).await,
        "trusted client",
    );
    refused(
        mtls_request(mtls_addr.clone(), &ca, None).await,
        "CertificateRequired",
        "no certificate",
    );
    refused(
        mtls_request(mtls_addr, &ca, Some(&foreign)).await,
        "UnknownCA",
        "untrusted CA",
    );

    let san_addr = c.addr("san").to_string();
    ok(
        mtls_request(san_addr.clone(), &ca, Some(&allowed)).await,
        "matching SAN",
    );
    refused(
        mtls_request(san_addr.clone(), &ca, Some(&good)).await,
        "AccessDenied",
        "SAN mismatch",
    );
    refused(
        mtls_request(san_addr, &ca, Some(&foreign)).await,
        "UnknownCA",
        "matching SAN, untrusted CA",
    );

    // Not required: no certificate is fine, a bad one is still refused.
    let opt_addr = c.addr("optional").to_string();
    ok(
        mtls_request(opt_addr.clone(), &ca, None).await,
        "optional, none",
    );
    ok(
        mtls_request(opt_addr.clone(), &ca, Some(&good)).await,
        "optional, trusted",
    );
    refused(
        mtls_request(opt_addr, &ca, Some(&foreign)).await,
        "UnknownCA",
        "optional, untrusted CA",
    );
}

/// A filter chain whose certificate and client-certificate validation come
/// from `static_resources.secrets` by name, as Envoy Gateway configures them.
#[tokio::test]
async fn static_secrets_named_by_the_tls_context() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("trusted");
    let other = TestCa::new("untrusted");
    let cert = write_pem(dir.path(), "server", &ca.leaf(&["localhost"]));
    let trusted = write_ca(dir.path(), "trusted", &ca);
    let socket = json!({
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
            "common_tls_context": {
                "tls_certificate_sds_secret_configs": [{ "name": "envoy-gateway/server" }],
                "validation_context_sds_secret_config": { "name": "client-ca" },
            },
            "require_client_certificate": true,
        },
    });
    let config = json!({
        "admin": { "address": { "socket_address": { "address": "127.0.0.1", "port_value": 0 } } },
        "static_resources": {
            "secrets": [
                { "name": "envoy-gateway/server", "tls_certificate": {
                    "certificate_chain": { "filename": cert.0 },
                    "private_key": { "filename": cert.1 },
                }},
                // The same name for a validation context: secrets are kept per kind.
                { "name": "client-ca", "validation_context": { "trusted_ca": { "filename": trusted } } },
                { "name": "client-ca", "tls_certificate": {
                    "certificate_chain": { "filename": cert.0 },
                    "private_key": { "filename": cert.1 },
                }},
            ],
            "listeners": [listener("secrets", vec![chain(json!({}), Some(socket), "from secrets", "AUTO")])],
        },
    });
    let path = dir.path().join("courier.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let c = start_file(dir.path(), &path);
    let addr = c.addr("secrets").to_string();
    let good = ca.leaf(&["client.example.com"]);
    let resp = mtls_request(addr.clone(), &ca, Some(&good)).await.unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.ends_with("from secrets"), "{resp}");
    for (cert, alert) in [
        (None, "CertificateRequired"),
        (Some(&other.leaf(&["client.example.com"])), "UnknownCA"),
    ] {
        match mtls_request(addr.clone(), &ca, cert).await {
            Ok(resp) => panic!("served without a trusted client certificate: {resp}"),
            Err(e) => assert!(e.to_string().contains(alert), "{e}"),
        }
    }
}

#[tokio::test]
async fn transport_protocol_chains_split_tls_and_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("ca");
    let cert = write_pem(dir.path(), "server", &ca.leaf(&["localhost"]));
    let ts = tls_socket(&cert, &["h2", "http/1.1"], json!({}), false);
    let c = start(
        dir.path(),
        vec![listener(
            "both",
            vec![
                chain(
                    json!({ "transport_protocol": "raw_buffer" }),
                    None,
                    "plain chain",
                    "AUTO",
                ),
                chain(
                    json!({ "transport_protocol": "tls" }),
                    Some(ts),
                    "tls chain",
                    "AUTO",
                ),
            ],
        )],
    );
    let addr = c.addr("both");
    let plain = plain_http(addr, "x").unwrap();
    assert!(plain.starts_with("HTTP/1.1 200"), "{plain}");
    assert!(plain.ends_with("plain chain"), "{plain}");
    let client = Client {
        ca: &ca,
        sni: "localhost",
        alpn: &["h2"],
        cert: None,
    };
    let s = tls_connect(addr, &client).await.unwrap();
    let (version, status, body) = get(s, true, "localhost").await;
    assert_eq!(
        (version, status, body.as_str()),
        (http::Version::HTTP_2, 200, "tls chain")
    );
    // h2c prior knowledge on the plaintext chain (AUTO).
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (version, _, body) = get(tcp, true, "x").await;
    assert_eq!(
        (version, body.as_str()),
        (http::Version::HTTP_2, "plain chain")
    );
    // Each chain counts its own requests under its own stat prefix.
    let stats = plain_http_path(&c.admin, "/stats", "admin").unwrap();
    for line in [
        "http.plain_chain.downstream_rq_total: 2\n",
        "http.plain_chain.downstream_cx_total: 2\n",
        "http.tls_chain.downstream_rq_total: 1\n",
        "http.tls_chain.downstream_cx_total: 1\n",
    ] {
        assert!(stats.contains(line), "{line} not in\n{stats}");
    }
}

#[tokio::test]
async fn codec_type_is_respected_on_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(
        dir.path(),
        vec![
            listener("h1", vec![chain(json!({}), None, "h1 only", "HTTP1")]),
            listener("h2", vec![chain(json!({}), None, "h2 only", "HTTP2")]),
        ],
    );
    let h1 = plain_http(c.addr("h1"), "x").unwrap();
    assert!(h1.starts_with("HTTP/1.1 200"), "{h1}");
    // The HTTP/2 preface on an HTTP/1-only connection is a malformed request.
    let mut s = TcpStream::connect(c.addr("h1")).await.unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    assert!(
        out.is_empty() || out.starts_with(b"HTTP/1.1 "),
        "not an HTTP/1.1 answer: {out:?}"
    );

    let tcp = TcpStream::connect(c.addr("h2")).await.unwrap();
    let (version, status, body) = get(tcp, true, "x").await;
    assert_eq!(
        (version, status, body.as_str()),
        (http::Version::HTTP_2, 200, "h2 only")
    );
    // HTTP/1.1 on an HTTP/2-only connection gets no HTTP/1.1 response.
    let h1_on_h2 = plain_http(c.addr("h2"), "x").unwrap_or_default();
    assert!(!h1_on_h2.starts_with("HTTP/1.1"), "{h1_on_h2}");
}

#[tokio::test]
async fn an_http1_tls_connection_serves_again_after_parking() {
    // Quiet past the park delay (1 s): the codec is ended over the TLS stream
    // and rebuilt when the next request arrives.
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("ca");
    let cert = write_pem(dir.path(), "server", &ca.leaf(&["localhost"]));
    let ts = tls_socket(&cert, &["http/1.1"], json!({}), false);
    let c = start(
        dir.path(),
        vec![listener(
            "tls",
            vec![chain(json!({}), Some(ts), "over tls", "AUTO")],
        )],
    );
    let client = Client {
        ca: &ca,
        sni: "localhost",
        alpn: &["http/1.1"],
        cert: None,
    };
    let s = tls_connect(c.addr("tls"), &client).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s))
        .await
        .unwrap();
    tokio::spawn(conn);
    for round in 0..3 {
        if round > 0 {
            tokio::time::sleep(Duration::from_millis(2500)).await;
        }
        let req = http::Request::get("/")
            .header("host", "localhost")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(5), send.send_request(req))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(resp.status(), 200, "round {round}");
        use http_body_util::BodyExt;
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"over tls", "round {round}");
    }
}

/// Two connections of one client (one session cache) to `addr`, each with a
/// request read to the end (TLS 1.3 tickets arrive after the handshake); how
/// the second handshake went.
async fn second_handshake(
    addr: &str,
    ca: &TestCa,
    version: &'static rustls::SupportedProtocolVersion,
) -> rustls::HandshakeKind {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der(&ca.pem.cert)).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut kind = None;
    for _ in 0..2 {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let s = connector.connect(name, tcp).await.unwrap();
        kind = s.get_ref().1.handshake_kind();
        let resp = raw_request(s).await.unwrap();
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    }
    kind.unwrap()
}

/// `disable_stateless_session_resumption` / `disable_stateful_session_resumption`
/// as with Envoy's BoringSSL: tickets (TLS 1.3's only resumption) unless
/// stateless resumption is off; TLS 1.2 session IDs unless stateful is off.
#[tokio::test]
async fn session_resumption_switches() {
    use rustls::HandshakeKind::{Full, Resumed};
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("ca");
    let cert = write_pem(dir.path(), "server", &ca.leaf(&["localhost"]));
    let socket = |stateless_off: bool, stateful_off: bool| {
        let mut ts = tls_socket(&cert, &["http/1.1"], json!({}), false);
        ts["typed_config"]["disable_stateless_session_resumption"] = json!(stateless_off);
        ts["typed_config"]["disable_stateful_session_resumption"] = json!(stateful_off);
        ts
    };
    let c = start(
        dir.path(),
        vec![
            listener(
                "default",
                vec![chain(json!({}), Some(socket(false, false)), "d", "AUTO")],
            ),
            listener(
                "no-tickets",
                vec![chain(json!({}), Some(socket(true, false)), "t", "AUTO")],
            ),
            listener(
                "no-cache",
                vec![chain(json!({}), Some(socket(false, true)), "c", "AUTO")],
            ),
            listener(
                "none",
                vec![chain(json!({}), Some(socket(true, true)), "n", "AUTO")],
            ),
        ],
    );
    let (v12, v13) = (&rustls::version::TLS12, &rustls::version::TLS13);
    for (listener, tls13, tls12) in [
        ("default", Resumed, Resumed),
        ("no-tickets", Full, Resumed),
        ("no-cache", Resumed, Resumed),
        ("none", Full, Full),
    ] {
        let addr = c.addr(listener).to_string();
        assert_eq!(
            second_handshake(&addr, &ca, v13).await,
            tls13,
            "{listener} TLS 1.3"
        );
        assert_eq!(
            second_handshake(&addr, &ca, v12).await,
            tls12,
            "{listener} TLS 1.2"
        );
    }
}
