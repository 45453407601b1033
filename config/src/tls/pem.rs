//! Certificates and private keys: read through a `DataSource` and decoded from PEM
//! at load time, so `--mode validate` catches a missing or malformed file and the
//! data plane gets DER it can hand to rustls as is.

use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::core::v3::{DataSource, data_source::Specifier};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

/// The field of a `DataSource` that holds its value: errors about the content
/// point there (`...certificate_chain.filename`), where the user must look.
fn source_field(ds: &DataSource) -> Option<(&'static str, String)> {
    Some(match ds.specifier.as_ref()? {
        Specifier::Filename(f) => ("filename", format!("\"{f}\"")),
        Specifier::InlineBytes(_) => ("inline_bytes", "the inline value".into()),
        Specifier::InlineString(_) => ("inline_string", "the inline value".into()),
        Specifier::EnvironmentVariable(v) => {
            ("environment_variable", format!("environment variable {v}"))
        }
    })
}

/// Reads a PEM certificate list (a chain, or a CA bundle). `what` names it in messages.
pub(crate) fn certificates(
    ds: Option<&DataSource>,
    what: &str,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Vec<CertificateDer<'static>>> {
    let bytes = core::data_source(ds, path, ctx)?;
    let (field, source) = ds.and_then(source_field)?;
    let at = path.field(field);
    let mut certs = Vec::new();
    for item in CertificateDer::pem_slice_iter(&bytes) {
        match item {
            // Every X.509 certificate is a DER SEQUENCE; anything else is not one.
            Ok(der) if der.first() == Some(&0x30) => certs.push(der),
            Ok(_) => {
                ctx.error(
                    &at,
                    format!("{what} in {source} is not a DER-encoded X.509 certificate"),
                );
                return None;
            }
            Err(e) => {
                ctx.error(&at, format!("cannot read {what} from {source}: {e}"));
                return None;
            }
        }
    }
    if certs.is_empty() {
        ctx.error(
            &at,
            format!("no PEM certificate (BEGIN CERTIFICATE) found in {source}"),
        );
        return None;
    }
    Some(certs)
}

/// Reads a PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC; not encrypted).
pub(crate) fn private_key(
    ds: Option<&DataSource>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Arc<PrivateKeyDer<'static>>> {
    let bytes = core::data_source(ds, path, ctx)?;
    let (field, source) = ds.and_then(source_field)?;
    match PrivateKeyDer::from_pem_slice(&bytes) {
        Ok(key) if key.secret_der().first() == Some(&0x30) => Some(Arc::new(key)),
        Ok(_) => {
            ctx.error(
                &path.field(field),
                format!("the private key in {source} is not DER-encoded"),
            );
            None
        }
        Err(rustls_pki_types::pem::Error::NoItemsFound) => {
            ctx.error(
                &path.field(field),
                format!(
                    "no unencrypted PEM private key (BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY) found in {source}"
                ),
            );
            None
        }
        Err(e) => {
            ctx.error(
                &path.field(field),
                format!("cannot read the private key from {source}: {e}"),
            );
            None
        }
    }
}

/// Whether `key` is the private key of the chain's leaf certificate; the
/// reason when it is not. A key the crypto provider cannot load is refused as
/// unusable.
pub(crate) fn key_matches(
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
) -> Result<(), String> {
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| format!("the private key cannot be used: {e}"))?;
    let certified = rustls::sign::CertifiedKey::new(chain.to_vec(), signing);
    match certified.keys_match() {
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err("does not match the certificate's public key (KEY_VALUES_MISMATCH)".into())
        }
        // Matching, or not known: a certificate webpki does not parse (an
        // X.509 v1 one, which Envoy serves) is not compared here.
        _ => Ok(()),
    }
}
