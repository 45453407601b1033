//! TLS termination and filter-chain selection through the real binary: HTTP/1.1
//! and ALPN h2 over TLS, SNI choosing the certificate and the chain, client
//! certificates (required, trusted CA, SAN matchers), a plaintext client on a TLS
//! listener, `transport_protocol` chains, and `codec_type` on plaintext.
//! Certificates are generated per test; every port is 0.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use courier_tests::{Pem, TestCa};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

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

/// A running courier and the addresses of its listeners, by name.
struct Courier {
    child: Child,
    admin: String,
    listeners: Vec<(String, String)>,
}

impl Drop for Courier {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Courier {
    fn addr(&self, name: &str) -> &str {
        &self
            .listeners
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no listener {name}: {:?}", self.listeners))
            .1
    }
}

/// Blocking plaintext `GET /` (connection: close); the raw response, or the read error.
fn plain_http(addr: &str, host: &str) -> std::io::Result<String> {
    plain_http_path(addr, "/", host)
}

fn plain_http_path(addr: &str, path: &str, host: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n"
    )?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Starts courier on `listeners` (JSON), admin on port 0.
fn start(dir: &Path, listeners: Vec<Value>) -> Courier {
    let config = json!({
        "admin": { "address": { "socket_address": { "address": "127.0.0.1", "port_value": 0 } } },
        "static_resources": { "listeners": listeners },
    });
    let config_path = dir.join("courier.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let admin_path = dir.join("admin");
    let mut child = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(["--concurrency", "2", "-c"])
        .arg(&config_path)
        .arg("--admin-address-path")
        .arg(&admin_path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let admin = poll(1000, || {
        if let Ok(Some(_)) = child.try_wait() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("courier exited:\n{err}");
        }
        std::fs::read_to_string(&admin_path)
            .ok()
            .filter(|a| !a.is_empty())
    })
    .expect("courier did not write its admin address");
    let resp = plain_http_path(&admin, "/listeners", "admin").unwrap();
    let body = resp.split_once("\r\n\r\n").unwrap().1;
    let listeners = body
        .lines()
        .filter_map(|l| l.split_once("::"))
        .map(|(n, a)| (n.to_string(), a.to_string()))
        .collect();
    Courier {
        child,
        admin,
        listeners,
    }
}

/// Writes `pem` as `<name>.pem` / `<name>.key` under `dir`; returns the two paths.
fn write_pem(dir: &Path, name: &str, pem: &Pem) -> (String, String) {
    let cert = dir.join(format!("{name}.pem"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, &pem.cert).unwrap();
    std::fs::write(&key, &pem.key).unwrap();
    (cert.display().to_string(), key.display().to_string())
}

fn write_ca(dir: &Path, name: &str, ca: &TestCa) -> String {
    let path: PathBuf = dir.join(format!("{name}-ca.pem"));
    std::fs::write(&path, &ca.pem.cert).unwrap();
    path.display().to_string()
}

/// A DownstreamTlsContext transport socket; `extra` is merged into the
/// `common_tls_context`, `require` sets `require_client_certificate`.
fn tls_socket(cert: &(String, String), alpn: &[&str], extra: Value, require: bool) -> Value {
    let mut common = json!({
        "alpn_protocols": alpn,
        "tls_certificates": [{
            "certificate_chain": { "filename": cert.0 },
            "private_key": { "filename": cert.1 },
        }],
    });
    if let (Some(c), Value::Object(e)) = (common.as_object_mut(), extra) {
        c.extend(e);
    }
    json!({
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
            "common_tls_context": common,
            "require_client_certificate": require,
        },
    })
}

/// A filter chain answering every request with 200 and `body`; its stat
/// prefix is `body` with `_` for spaces.
fn chain(chain_match: Value, transport_socket: Option<Value>, body: &str, codec: &str) -> Value {
    let mut fc = json!({
        "filter_chain_match": chain_match,
        "filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": body.replace(' ', "_"),
                "codec_type": codec,
                "route_config": { "virtual_hosts": [{
                    "name": "all",
                    "domains": ["*"],
                    "routes": [{
                        "match": { "prefix": "/" },
                        "direct_response": { "status": 200, "body": { "inline_string": body } },
                    }],
                }]},
                "http_filters": [{
                    "name": "envoy.filters.http.router",
                    "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" },
                }],
            },
        }],
    });
    if let Some(ts) = transport_socket {
        fc["transport_socket"] = ts;
    }
    fc
}

/// `listener` with `default` (a [`chain`]) as its default filter chain.
fn with_default(mut listener: Value, mut default: Value) -> Value {
    if let Some(fc) = default.as_object_mut() {
        fc.remove("filter_chain_match");
    }
    listener["default_filter_chain"] = default;
    listener
}

fn listener(name: &str, chains: Vec<Value>) -> Value {
    json!({
        "name": name,
        "address": { "socket_address": { "address": "127.0.0.1", "port_value": 0 } },
        "filter_chains": chains,
    })
}

/// What a TLS client brings.
struct Client<'a> {
    ca: &'a TestCa,
    sni: &'a str,
    alpn: &'a [&'a str],
    cert: Option<&'a Pem>,
}

fn der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

async fn tls_connect(addr: &str, c: &Client<'_>) -> std::io::Result<TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der(&c.ca.pem.cert)).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match c.cert {
        Some(p) => builder
            .with_client_auth_cert(
                vec![der(&p.cert)],
                PrivateKeyDer::from_pem_slice(p.key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = c.alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(c.sni.to_string()).unwrap();
    TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
}

/// One GET over `stream` with hyper (HTTP/2 when `h2`); version, status, body.
async fn get<S>(stream: S, h2: bool, host: &str) -> (http::Version, u16, String)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(stream);
    let resp = if h2 {
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = http::Request::get(format!("https://{host}/"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        send.send_request(req).await.unwrap()
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        let req = http::Request::get("/")
            .header("host", host)
            .body(Empty::<Bytes>::new())
            .unwrap();
        send.send_request(req).await.unwrap()
    };
    let version = resp.version();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (version, status, String::from_utf8_lossy(&body).into_owned())
}

/// A raw HTTP/1.1 request over an established TLS stream: the response, or
/// the error reading it (a TLS alert when the server refused the client).
async fn raw_request<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) -> std::io::Result<String> {
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .map_err(|_| std::io::Error::other("timed out"))??;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

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
