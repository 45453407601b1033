//! An upstream connection's byte stream: plaintext TCP or TLS originated here.

/// Plaintext or TLS originated here.
pub type UpstreamStream =
    crate::maybe_tls::MaybeTls<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;
