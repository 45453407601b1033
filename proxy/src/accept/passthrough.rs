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
}

/// Peeks at the socket until a whole ClientHello is there, and parses it.
/// Bounded by the caller's accept timeout.
pub(super) async fn peek_hello(stream: &TcpStream) -> Result<Hello, Refused> {
    let mut buf = vec![0u8; MAX_HELLO];
    let mut seen = 0;
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
        // for the rest of the hello (it rarely comes in more than one segment).
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
