//! A downstream connection's byte stream: plaintext TCP or TLS terminated here.

/// Plaintext or TLS terminated here.
pub type DownstreamStream =
    crate::maybe_tls::MaybeTls<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>;
