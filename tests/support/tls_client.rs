//! A TLS client for tests about the server's side of a handshake: it accepts
//! any server certificate and may present a client certificate.

use crate::Pem;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::sync::Arc;

/// Accepts any server certificate.
#[derive(Debug)]
pub struct AnyServer;

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::aws_lc_rs::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A client connection to `server.example` (any server certificate),
/// presenting `client_cert` if given.
pub fn connection(client_cert: Option<&Pem>) -> rustls::ClientConnection {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer));
    let config = match client_cert {
        Some(p) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(p.cert.as_bytes()).expect("client cert")],
                PrivateKeyDer::from_pem_slice(p.key.as_bytes()).expect("client key"),
            )
            .expect("client auth"),
        None => builder.with_no_client_auth(),
    };
    let name = ServerName::try_from("server.example").expect("server name");
    rustls::ClientConnection::new(Arc::new(config), name).expect("client connection")
}
