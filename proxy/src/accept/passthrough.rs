//! TLS passthrough: a TLS client on a chain without TLS (a TCP proxy behind
//! `tls_inspector`, Envoy Gateway's TLSRoutes) has its ClientHello read for
//! the chain match and the SNI without taking it off the socket, so the
//! upstream gets the handshake as the client sent it.

use super::chain::Refused;
use rustls::server::Acceptor;
use std::time::Duration;
use tokio::net::TcpStream;

/// The most of a ClientHello looked at (a hello larger than this is refused,
/// as courier's TLS acceptor would refuse it).
const MAX_HELLO: usize = 64 * 1024;

/// What the ClientHello offers.
pub(super) struct Hello {
    /// The SNI, lower-cased.
    pub server_name: Option<String>,
    /// The ALPN protocols offered.
    pub alpn: Vec<Vec<u8>>,
    /// The JA3 / JA4 fingerprints asked for (none asked: `None`).
    pub fingerprints: Option<crate::tls::fingerprint::Fingerprints>,
}

/// Peeks at the socket until a whole ClientHello is there, and parses it,
/// with the (JA3, JA4) fingerprints `fingerprint` asks for. Bounded by the
/// caller's accept timeout.
pub(super) async fn peek_hello(
    stream: &TcpStream,
    fingerprint: (bool, bool),
) -> Result<Hello, Refused> {
    let mut buf = vec![0u8; MAX_HELLO];
    let mut seen = 0;
    let mut wait = Duration::from_millis(1);
    loop {
        let n = stream.peek(&mut buf).await.map_err(Refused::Io)?;
        if n == 0 {
            return Err(Refused::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        if n > seen {
            seen = n;
            // A fresh acceptor over a copy of what is queued: nothing is read
            // off the socket.
            let mut acceptor = Acceptor::default();
            let mut bytes = &buf[..n];
            while !bytes.is_empty() {
                if acceptor.read_tls(&mut bytes).is_err() {
                    break;
                }
            }
            match acceptor.accept() {
                Ok(Some(accepted)) => {
                    let hello = accepted.client_hello();
                    return Ok(Hello {
                        server_name: hello.server_name().map(str::to_ascii_lowercase),
                        alpn: hello
                            .alpn()
                            .map(|ps| ps.map(<[u8]>::to_vec).collect())
                            .unwrap_or_default(),
                        fingerprints: (fingerprint.0 || fingerprint.1)
                            .then(|| {
                                crate::tls::fingerprint::Fingerprints::of(
                                    &buf[..n],
                                    fingerprint.0,
                                    fingerprint.1,
                                )
                            })
                            .flatten(),
                    });
                }
                Ok(None) if n < MAX_HELLO => {}
                Ok(None) => {
                    return Err(Refused::Io(std::io::Error::other("ClientHello too large")));
                }
                Err((e, _)) => return Err(Refused::Io(std::io::Error::other(e))),
            }
        }
        // Peeking again returns at once with the same bytes: wait a little
        // for the rest of the hello (it rarely comes in more than one
        // segment), longer each time, so a client that stalls mid-hello
        // costs few wake-ups before the accept timeout ends it.
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A ClientHello for `sni`, as a rustls client writes it.
    fn client_hello(sni: &str) -> Vec<u8> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let roots = rustls::RootCertStore::empty();
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(sni.to_string()).expect("name");
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
        let mut out = Vec::new();
        conn.write_tls(&mut out).expect("hello");
        out
    }

    #[tokio::test]
    async fn the_hello_is_read_and_left_on_the_socket() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hello = client_hello("Backend.Example");
        // Sent in two pieces: the peek waits for the whole hello.
        let (first, rest) = hello.split_at(10);
        let (first, rest) = (first.to_vec(), rest.to_vec());
        let client = tokio::spawn(async move {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(&first).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            c.write_all(&rest).await.unwrap();
            c
        });
        let (mut s, _) = listener.accept().await.unwrap();
        let h = peek_hello(&s, (false, false)).await.unwrap();
        assert_eq!(h.server_name.as_deref(), Some("backend.example"));
        // Every byte is still there for the upstream.
        let mut got = vec![0u8; hello.len()];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(got, hello);
        drop(client.await.unwrap());
    }

    #[tokio::test]
    async fn bytes_that_are_not_a_hello_are_refused() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(b"\x16\x03\x01\x00\x05hello").await.unwrap();
            c
        });
        let (s, _) = listener.accept().await.unwrap();
        assert!(peek_hello(&s, (false, false)).await.is_err());
        drop(client.await.unwrap());
    }
}
