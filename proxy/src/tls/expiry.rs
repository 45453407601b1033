//! `allow_expired_certificate`: a peer certificate that has expired but passes
//! every other check is accepted, on both sides (Envoy ignores OpenSSL's
//! `X509_V_ERR_CERT_HAS_EXPIRED`). WebPKI reports expiry before it looks at
//! the chain, so a verification that failed only for the leaf's age is run
//! again at the leaf's last valid second: what else is wrong (an untrusted
//! issuer, a bad signature, a SAN mismatch) is then found as before. An
//! expired intermediate or root is still refused (the leaf's own time does not
//! cover them), which is stricter than Envoy.

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};
use std::sync::Arc;
use std::time::Duration;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Runs `verify` at `now`; with `allow` set and an expired `end_entity`, once
/// more at the moment it expired.
pub fn verify_allowing_expiry<T>(
    allow: bool,
    end_entity: &CertificateDer<'_>,
    now: UnixTime,
    verify: impl Fn(UnixTime) -> Result<T, Error>,
) -> Result<T, Error> {
    match verify(now) {
        Err(Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        )) if allow
            && let Some(at) = not_after(end_entity).filter(|at| at.as_secs() < now.as_secs()) =>
        {
            verify(at)
        }
        other => other,
    }
}

/// The last second `der` is valid (its `notAfter`), if it parses.
fn not_after(der: &CertificateDer<'_>) -> Option<UnixTime> {
    let (_, cert) = X509Certificate::from_der(der.as_ref()).ok()?;
    let secs = u64::try_from(cert.validity().not_after.timestamp()).ok()?;
    Some(UnixTime::since_unix_epoch(Duration::from_secs(secs)))
}

/// A client-certificate verifier that lets expired certificates through
/// (`allow_expired_certificate` on a downstream context).
#[derive(Debug)]
pub struct ExpiredClientOk {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ExpiredClientOk {
    /// Wraps `inner` (WebPKI).
    pub fn new(inner: Arc<dyn ClientCertVerifier>) -> Self {
        Self { inner }
    }
}

impl ClientCertVerifier for ExpiredClientOk {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        verify_allowing_expiry(true, end_entity, now, |at| {
            self.inner.verify_client_cert(end_entity, intermediates, at)
        })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
