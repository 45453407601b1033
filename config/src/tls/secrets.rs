//! `static_resources.secrets`, and TLS contexts that name them
//! (`tls_certificate_sds_secret_configs`, `validation_context_sds_secret_config`
//! without an `sds_config`; those with one are SDS references, [`super::sds`]).
//!
//! As in Envoy's secret manager, static secrets are kept per kind: a
//! certificate and a validation context may share a name, and a reference finds
//! only a secret of the kind it asks for. Each secret is translated once, at its
//! own path, and a context that names it gets a copy of the result.

use super::{CertificateValidation, TlsCertificate};
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3 as pb;
use std::collections::HashMap;

/// The bootstrap's static secrets, by kind and name.
#[derive(Debug, Default)]
pub struct StaticSecrets {
    /// `Err`: a certificate without its private key, which Envoy accepts
    /// until a context uses it (the error it then gives).
    certificates: HashMap<String, Result<TlsCertificate, &'static str>>,
    validations: HashMap<String, Option<CertificateValidation>>,
    /// `generic_secret.secret`, read (the OAuth2 filter's client and HMAC secrets).
    generics: HashMap<String, Vec<u8>>,
}

impl StaticSecrets {
    /// The certificate secret `name`.
    pub(crate) fn certificate(&self, name: &str) -> Option<&Result<TlsCertificate, &'static str>> {
        self.certificates.get(name)
    }

    /// The validation-context secret `name` (`None` inside: nothing to verify).
    pub(crate) fn validation(&self, name: &str) -> Option<&Option<CertificateValidation>> {
        self.validations.get(name)
    }

    /// The generic secret `name`'s bytes.
    pub(crate) fn generic(&self, name: &str) -> Option<&Vec<u8>> {
        self.generics.get(name)
    }
}

/// Envoy's error for a context that uses a certificate secret without a private key.
const INCOMPLETE_PRIVATE_KEY: &str = "Failed to load incomplete private key from path: ";

/// Translates `static_resources.secrets` (`path`); a secret with errors is
/// left out after they are recorded.
pub(crate) fn translate(list: &[pb::Secret], path: &Path<'_>, ctx: &mut Ctx) -> StaticSecrets {
    use pb::secret::Type;
    let mut out = StaticSecrets::default();
    for (i, s) in list.iter().enumerate() {
        let p = path.index(i);
        match &s.r#type {
            Some(Type::TlsCertificate(tc)) => {
                if out.certificates.contains_key(&s.name) {
                    // Envoy's wording.
                    ctx.error(
                        &p.field("name"),
                        format!("Duplicate static TlsCertificate secret name {}", s.name),
                    );
                    continue;
                }
                if tc.private_key.is_none() && tc.private_key_provider.is_none() {
                    // Envoy keeps it, and fails a context that uses it.
                    out.certificates
                        .insert(s.name.clone(), Err(INCOMPLETE_PRIVATE_KEY));
                    continue;
                }
                if let Some(tc) = super::tls_certificate(tc, &p.field("tls_certificate"), ctx) {
                    out.certificates.insert(s.name.clone(), Ok(tc));
                }
            }
            Some(Type::ValidationContext(v)) => {
                if out.validations.contains_key(&s.name) {
                    ctx.error(
                        &p.field("name"),
                        format!(
                            "Duplicate static CertificateValidationContext secret name {}",
                            s.name
                        ),
                    );
                    continue;
                }
                if let Ok(v) = super::validation(v, &p.field("validation_context"), ctx) {
                    out.validations.insert(s.name.clone(), v);
                }
            }
            Some(Type::GenericSecret(g)) => {
                if out.generics.contains_key(&s.name) {
                    // Envoy's wording.
                    ctx.error(
                        &p.field("name"),
                        format!("Duplicate static GenericSecret secret name {}", s.name),
                    );
                    continue;
                }
                let gs = p.field("generic_secret");
                let gp = gs.field("secret");
                // Envoy reads the data source when the secret is added; an empty
                // one is allowed (an empty HMAC key is still a key).
                let data = match &g.secret {
                    None => Some(Vec::new()),
                    Some(ds) => crate::core::data_source(Some(ds), &gp, ctx),
                };
                if let Some(data) = data {
                    out.generics.insert(s.name.clone(), data);
                }
            }
            // Session ticket keys are refused by the support table; a secret of
            // no kind is Envoy's error too.
            Some(Type::SessionTicketKeys(_)) => {}
            None => ctx.error(
                &p,
                "a secret needs one of tls_certificate or validation_context",
            ),
        }
    }
    out
}

/// The certificate a `tls_certificate_sds_secret_configs` entry (at `path`)
/// names (one without an `sds_config`).
pub(super) fn certificate(
    sds: &pb::SdsSecretConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<TlsCertificate> {
    if sds.sds_config.is_some() {
        return None;
    }
    let Some(secrets) = ctx.static_secrets() else {
        ctx.unsupported(path, "a static secret named in an xDS resource");
        return None;
    };
    match secrets.certificate(&sds.name).cloned() {
        Some(Ok(tc)) => Some(tc),
        Some(Err(e)) => {
            ctx.error(path, e);
            None
        }
        None => {
            // Envoy's wording.
            ctx.error(
                &path.field("name"),
                format!("Unknown static secret: {}", sds.name),
            );
            None
        }
    }
}

/// The validation context a `validation_context_sds_secret_config` (at
/// `path`) names: `Err` when an error was recorded.
pub(super) fn validation(
    sds: &pb::SdsSecretConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Result<Option<CertificateValidation>, ()> {
    if sds.sds_config.is_some() {
        return Err(());
    }
    let Some(secrets) = ctx.static_secrets() else {
        ctx.unsupported(path, "a static secret named in an xDS resource");
        return Err(());
    };
    match secrets.validation(&sds.name).cloned() {
        Some(v) => Ok(v),
        None => {
            // Envoy's wording.
            ctx.error(
                &path.field("name"),
                format!(
                    "Unknown static certificate validation context: {}",
                    sds.name
                ),
            );
            Err(())
        }
    }
}

/// The bytes of the generic secret an `SdsSecretConfig` (at `path`) names: a
/// static secret (no `sds_config`). A generic secret from SDS is refused: only
/// TLS secrets are delivered by courier's SDS client.
pub(crate) fn generic(
    sds: &pb::SdsSecretConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Vec<u8>> {
    if sds.sds_config.is_some() {
        ctx.unsupported(
            &path.field("sds_config"),
            "a generic secret from SDS (sds_config)",
        );
        return None;
    }
    if sds.name.is_empty() {
        ctx.error(&path.field("name"), "must not be empty");
        return None;
    }
    let Some(secrets) = ctx.static_secrets() else {
        ctx.unsupported(path, "a static secret named in an xDS resource");
        return None;
    };
    match secrets.generic(&sds.name).cloned() {
        Some(v) => Some(v),
        None => {
            // Envoy's wording (`secret_provider == nullptr`).
            ctx.error(
                &path.field("name"),
                format!("Unknown static secret: {}", sds.name),
            );
            None
        }
    }
}

/// What a `combined_validation_context` resolves to.
pub(super) enum Combined {
    /// Its secret is static: the merged context (`None`: nothing to verify).
    Static(Option<CertificateValidation>),
    /// Its secret comes from SDS: merged when it arrives.
    Sds(super::SdsValidation),
}

/// A `combined_validation_context`: its `default_validation_context` merged
/// with the secret its `validation_context_sds_secret_config` names, as
/// Envoy merges them (the default, then the secret's fields over it: the
/// secret's `trusted_ca` replaces the default's, SAN matchers add up, the
/// default's first); the merged context is then checked as one. A secret from
/// SDS is merged by the data plane when it arrives.
pub(super) fn combined(
    cvc: &pb::common_tls_context::CombinedCertificateValidationContext,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Result<Combined, ()> {
    let dp = path.field("default_validation_context");
    let sp = path.field("validation_context_sds_secret_config");
    // PGV: both are required.
    let Some(default) = &cvc.default_validation_context else {
        ctx.error(&dp, "is required");
        return Err(());
    };
    let Some(sds) = &cvc.validation_context_sds_secret_config else {
        ctx.error(&sp, "is required");
        return Err(());
    };
    let mut fields = super::validation_fields(default, &dp, ctx)?;
    if let Some(cs) = &sds.sds_config {
        let secret =
            super::sds::reference(sds, cs, super::SecretKind::Validation, &sp, ctx).ok_or(())?;
        return Ok(Combined::Sds(super::SdsValidation {
            secret,
            default: Some(fields),
        }));
    }
    let secret = validation(sds, &sp, ctx)?;
    if let Some(v) = secret {
        fields.san_matchers.extend(v.san_matchers);
        fields.trusted_ca = Some(v.trusted_ca);
        // A flag set in either holds (protobuf merge of a bool).
        fields.allow_expired_certificate |= v.allow_expired_certificate;
    }
    super::checked_validation(fields, path, ctx).map(Combined::Static)
}
