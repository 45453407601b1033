//! Helpers for the TLS tests: courier started on a JSON config with port 0
//! everywhere, config builders, and a rustls client.

// Test support: a failed setup step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

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
pub fn poll<T>(tries: u32, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..tries {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// A running courier and the addresses of its listeners, by name.
pub struct Courier {
    child: Child,
    /// The admin address.
    pub admin: String,
    listeners: Vec<(String, String)>,
}

impl Drop for Courier {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Courier {
    /// The process's resident set in bytes (`VmRSS`).
    #[allow(dead_code)]
    pub fn resident_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        kb * 1024
    }

    /// The bound address of listener `name`.
    pub fn addr(&self, name: &str) -> &str {
        &self
            .listeners
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no listener {name}: {:?}", self.listeners))
            .1
    }
}

/// Blocking plaintext `GET /` (connection: close); the raw response, or the read error.
pub fn plain_http(addr: &str, host: &str) -> std::io::Result<String> {
    plain_http_path(addr, "/", host)
}

pub fn plain_http_path(addr: &str, path: &str, host: &str) -> std::io::Result<String> {
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
pub fn start(dir: &Path, listeners: Vec<Value>) -> Courier {
    let config = json!({
        "admin": { "address": { "socket_address": { "address": "127.0.0.1", "port_value": 0 } } },
        "static_resources": { "listeners": listeners },
    });
    let config_path = dir.join("courier.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    start_file(dir, &config_path)
}

/// Starts courier on the bootstrap file `config_path`, in `dir` (relative
/// paths in the config are relative to it).
pub fn start_file(dir: &Path, config_path: &Path) -> Courier {
    let admin_path = dir.join("admin");
    let mut child = Command::new(env!("CARGO_BIN_EXE_courier"))
        .current_dir(dir)
        .args(["--concurrency", "2", "-c"])
        .arg(config_path)
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
pub fn write_pem(dir: &Path, name: &str, pem: &Pem) -> (String, String) {
    let cert = dir.join(format!("{name}.pem"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, &pem.cert).unwrap();
    std::fs::write(&key, &pem.key).unwrap();
    (cert.display().to_string(), key.display().to_string())
}

pub fn write_ca(dir: &Path, name: &str, ca: &TestCa) -> String {
    let path: PathBuf = dir.join(format!("{name}-ca.pem"));
    std::fs::write(&path, &ca.pem.cert).unwrap();
    path.display().to_string()
}

/// A DownstreamTlsContext transport socket; `extra` is merged into the
/// `common_tls_context`, `require` sets `require_client_certificate`.
pub fn tls_socket(cert: &(String, String), alpn: &[&str], extra: Value, require: bool) -> Value {
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
pub fn chain(
    chain_match: Value,
    transport_socket: Option<Value>,
    body: &str,
    codec: &str,
) -> Value {
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
pub fn with_default(mut listener: Value, mut default: Value) -> Value {
    if let Some(fc) = default.as_object_mut() {
        fc.remove("filter_chain_match");
    }
    listener["default_filter_chain"] = default;
    listener
}

pub fn listener(name: &str, chains: Vec<Value>) -> Value {
    json!({
        "name": name,
        "address": { "socket_address": { "address": "127.0.0.1", "port_value": 0 } },
        "filter_chains": chains,
    })
}

/// What a TLS client brings.
pub struct Client<'a> {
    /// The CA the client trusts.
    pub ca: &'a TestCa,
    /// SNI (and the name the server certificate must carry).
    pub sni: &'a str,
    /// ALPN protocols offered.
    pub alpn: &'a [&'a str],
    /// The client certificate, if any.
    pub cert: Option<&'a Pem>,
}

pub fn der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

pub async fn tls_connect(addr: &str, c: &Client<'_>) -> std::io::Result<TlsStream<TcpStream>> {
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
pub async fn get<S>(stream: S, h2: bool, host: &str) -> (http::Version, u16, String)
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
pub async fn raw_request<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) -> std::io::Result<String> {
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .map_err(|_| std::io::Error::other("timed out"))??;
    Ok(String::from_utf8_lossy(&out).into_owned())
}
