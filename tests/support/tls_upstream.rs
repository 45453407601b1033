//! A minimal HTTP/1.1-over-TLS upstream for differential tests: every response
//! says, in headers, what the TLS handshake saw (`x-sni`, `x-alpn`,
//! `x-client-cert`), so Envoy's and courier's TLS origination can be compared.
//! Blocking std threads: it must not depend on the test's runtime.

use crate::Pem;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

/// Starts the upstream with `cert`; it runs until the process exits.
pub fn start(cert: &Pem) -> SocketAddr {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(cert.cert.as_bytes()).expect("cert")],
            PrivateKeyDer::from_pem_slice(cert.key.as_bytes()).expect("key"),
        )
        .expect("server config");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let config = Arc::clone(&config);
            std::thread::spawn(move || serve(tcp, config));
        }
    });
    addr
}

/// One connection: one request, one response, then close.
fn serve(mut tcp: std::net::TcpStream, config: Arc<rustls::ServerConfig>) {
    let _ = tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    let Ok(mut conn) = rustls::ServerConnection::new(config) else {
        return;
    };
    while conn.is_handshaking() {
        // A refused handshake (an untrusted client, say) just ends here.
        if conn.complete_io(&mut tcp).is_err() {
            return;
        }
    }
    let header = |v: Option<String>| v.unwrap_or_else(|| "none".into());
    let sni = header(conn.server_name().map(str::to_string));
    let alpn = header(
        conn.alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned()),
    );
    let client_cert = if conn.peer_certificates().is_some() {
        "present"
    } else {
        "absent"
    };
    let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let body = "tls upstream\n";
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nx-sni: {sni}\r\nx-alpn: {alpn}\r\nx-client-cert: {client_cert}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tls.write_all(response.as_bytes());
    let _ = tls.flush();
    tls.conn.send_close_notify();
    let _ = tls.conn.complete_io(tls.sock);
}
