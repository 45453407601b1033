//! A TLS upstream on loopback port 0 (HTTP/1.1 or HTTP/2, as ALPN or the
//! preface says) that reports, in response headers, what its handshake saw.

use bytes::Bytes;
use courier_tests::{Pem, TestCa};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

pub fn der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

/// How the TLS upstream behaves.
pub struct Upstream<'a> {
    pub cert: &'a Pem,
    /// Require a client certificate signed by this CA.
    pub client_ca: Option<&'a TestCa>,
    /// Answer with `connection: close`, so every request needs a new connection.
    pub close: bool,
}

/// Starts a TLS upstream (HTTP/1.1 or HTTP/2, as ALPN or the preface says).
/// Each response carries `x-sni`, `x-alpn`, `x-client-cert` (`present` or
/// `absent`), `x-resumed` and `x-version`.
pub async fn tls_upstream(u: Upstream<'_>) -> SocketAddr {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match u.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(der(&ca.pem.cert)).unwrap();
            builder.with_client_cert_verifier(
                rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .unwrap(),
            )
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(
            vec![der(&u.cert.cert)],
            PrivateKeyDer::from_pem_slice(u.cert.key.as_bytes()).unwrap(),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let close = u.close;
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A refused handshake just ends this connection.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let (_, conn) = tls.get_ref();
                let sni = conn.server_name().unwrap_or("none").to_string();
                let alpn = conn.alpn_protocol().map_or("none".to_string(), |p| {
                    String::from_utf8_lossy(p).into_owned()
                });
                let client_cert = if conn.peer_certificates().is_some() {
                    "present"
                } else {
                    "absent"
                };
                let resumed = conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                let service = service_fn(move |req: Request<Incoming>| {
                    let mut resp = Response::builder()
                        .header("x-sni", sni.as_str())
                        .header("x-alpn", alpn.as_str())
                        .header("x-client-cert", client_cert)
                        .header("x-resumed", if resumed { "yes" } else { "no" })
                        .header("x-version", format!("{:?}", req.version()));
                    if close && req.version() == http::Version::HTTP_11 {
                        resp = resp.header("connection", "close");
                    }
                    async move {
                        Ok::<_, hyper::Error>(resp.body(Full::new(Bytes::from("tls ok"))).unwrap())
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    addr
}
