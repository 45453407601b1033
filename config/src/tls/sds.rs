//! Secrets from SDS: `tls_certificate_sds_secret_configs`,
//! `validation_context_sds_secret_config` and `combined_validation_context`
//! entries with an `sds_config`, and the `Secret` resources SDS delivers.
//!
//! A TLS context that names an SDS secret keeps the reference ([`SdsSecret`]:
//! the name and its config source) in [`TlsSds`]; the data plane subscribes to
//! it and builds the context when the secret arrives, again when it changes.
//! As in Envoy, a secret is identified by its name and its source: two contexts
//! naming the same secret over the same source share one subscription.
//!
//! Sources: `path_config_source` (and the deprecated `path`), a file holding a
//! `DiscoveryResponse` with the one `Secret`; `api_config_source` of type
//! `GRPC` or `DELTA_GRPC` (its own stream); `ads` (the bootstrap's ADS
//! stream). REST and `self` are refused with their path.

use super::{CertificateValidation, SanMatcher, TlsCertificate};
use crate::config_source::{self, ApiType, ConfigSource, ConfigSourceKind};
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::core::v3 as core_pb;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3 as pb;
use rustls_pki_types::CertificateDer;
use std::sync::Arc;

/// Type URL of an SDS `Secret`.
pub const SECRET_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";

/// A secret named with an `sds_config`: fetched and kept up to date by the data plane.
#[derive(Debug, Clone, PartialEq)]
pub struct SdsSecret {
    /// The secret's name (the resource name subscribed to).
    pub name: String,
    /// Where it comes from (its `initial_fetch_timeout` bounds warming).
    pub source: ConfigSource,
}

/// Which kind of secret a reference asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecretKind {
    /// A `tls_certificate`.
    Certificate,
    /// A `validation_context`.
    Validation,
}

impl SecretKind {
    /// The name of Envoy's provider for this kind (its log and error prefix).
    pub fn provider_name(self) -> &'static str {
        match self {
            SecretKind::Certificate => "TlsCertificateSdsApi",
            SecretKind::Validation => "CertificateValidationContextSdsApi",
        }
    }
}

/// A validation context's fields before the rule that SAN matchers need roots
/// is applied (a combined context applies it to the merged result).
#[derive(Debug, Clone, Default)]
pub struct ValidationFields {
    /// `trusted_ca`, when set.
    pub trusted_ca: Option<Vec<CertificateDer<'static>>>,
    /// SAN matchers, typed ones then the deprecated `match_subject_alt_names`.
    pub san_matchers: Vec<SanMatcher>,
    /// `allow_expired_certificate`.
    pub allow_expired_certificate: bool,
    /// `trust_chain_verification: ACCEPT_UNTRUSTED`.
    pub accept_untrusted: bool,
}

/// A validation context from SDS.
#[derive(Debug, Clone)]
pub struct SdsValidation {
    /// The secret.
    pub secret: SdsSecret,
    /// A `combined_validation_context`'s `default_validation_context`: the
    /// secret's fields are merged over it as Envoy merges them (the secret's
    /// `trusted_ca` replaces the default's; SAN matchers add up, the default's
    /// first).
    pub default: Option<ValidationFields>,
}

/// What of a TLS context comes from SDS.
#[derive(Debug, Clone, Default)]
pub struct TlsSds {
    /// Certificates from SDS, each with its place among the context's
    /// certificates: the number of inline and static-secret certificates
    /// configured before it.
    pub certificates: Vec<(usize, SdsSecret)>,
    /// The validation context from SDS, in place of [`super::CommonTls::validation`].
    pub validation: Option<SdsValidation>,
}

impl TlsSds {
    /// Every secret referenced, with its kind.
    pub fn secrets(&self) -> impl Iterator<Item = (SecretKind, &SdsSecret)> {
        self.certificates
            .iter()
            .map(|(_, s)| (SecretKind::Certificate, s))
            .chain(
                self.validation
                    .iter()
                    .map(|v| (SecretKind::Validation, &v.secret)),
            )
    }

    /// Whether nothing comes from SDS.
    pub fn is_empty(&self) -> bool {
        self.certificates.is_empty() && self.validation.is_none()
    }
}

/// The content of a `Secret` resource.
#[derive(Debug, Clone)]
pub enum SecretValue {
    /// A certificate and its key.
    Certificate(TlsCertificate),
    /// A validation context.
    Validation(ValidationFields),
}

impl SecretValue {
    /// The kind of secret this is.
    pub fn kind(&self) -> SecretKind {
        match self {
            SecretValue::Certificate(_) => SecretKind::Certificate,
            SecretValue::Validation(_) => SecretKind::Validation,
        }
    }
}

/// A validated `Secret` resource (SDS).
#[derive(Debug, Clone)]
pub struct SecretResource {
    /// Its name.
    pub name: String,
    /// Its content.
    pub value: SecretValue,
    /// The files its data sources read (`filename`): watched, so a rotated
    /// certificate, key or CA applies without a new resource (as Envoy does).
    pub files: Vec<String>,
}

/// Translates an SDS `Secret` resource (at `path`).
pub fn secret_resource(s: &pb::Secret, path: &Path<'_>, ctx: &mut Ctx) -> Option<SecretResource> {
    use pb::secret::Type;
    if s.name.is_empty() {
        ctx.error(&path.field("name"), "must not be empty");
    }
    let mut files = Vec::new();
    let value = match &s.r#type {
        Some(Type::TlsCertificate(tc)) => {
            for ds in [&tc.certificate_chain, &tc.private_key]
                .into_iter()
                .flatten()
            {
                files.extend(filename(ds));
            }
            SecretValue::Certificate(super::tls_certificate(
                tc,
                &path.field("tls_certificate"),
                ctx,
            )?)
        }
        Some(Type::ValidationContext(v)) => {
            files.extend(v.trusted_ca.as_ref().and_then(filename));
            SecretValue::Validation(
                super::validation_fields(v, &path.field("validation_context"), ctx).ok()?,
            )
        }
        // Session ticket keys are refused by the support table.
        Some(Type::SessionTicketKeys(_)) => return None,
        // The support table lets it through for `static_resources.secrets`; no
        // SDS consumer of generic secrets exists yet.
        Some(Type::GenericSecret(_)) => {
            ctx.unsupported(
                &path.field("generic_secret"),
                "a generic secret delivered by SDS",
            );
            return None;
        }
        None => {
            ctx.error(
                path,
                "a secret needs one of tls_certificate or validation_context",
            );
            return None;
        }
    };
    Some(SecretResource {
        name: s.name.clone(),
        value,
        files,
    })
}

fn filename(ds: &core_pb::DataSource) -> Option<String> {
    match &ds.specifier {
        Some(core_pb::data_source::Specifier::Filename(f)) => Some(f.clone()),
        _ => None,
    }
}

/// The SDS reference of an `SdsSecretConfig` with an `sds_config` (at `path`);
/// `None` when an error was recorded.
pub(super) fn reference(
    sds: &pb::SdsSecretConfig,
    cs: &core_pb::ConfigSource,
    kind: SecretKind,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<SdsSecret> {
    use core_pb::config_source::ConfigSourceSpecifier as S;
    let before = ctx.error_count();
    // PGV: a name is required with an sds_config.
    if sds.name.is_empty() {
        ctx.error(
            &path.field("name"),
            "value length must be at least 1 characters",
        );
    }
    let sp = path.field("sds_config");
    if ctx.node_complete() == Some(false) {
        // Envoy's wording.
        ctx.error(
            &sp,
            format!(
                "{}: node 'id' and 'cluster' are required. Set it either in 'node' config or via --service-node and --service-cluster options.",
                kind.provider_name()
            ),
        );
    }
    let source = match &cs.config_source_specifier {
        // The deprecated `path`: a file source as `path_config_source`.
        #[allow(deprecated)]
        Some(S::Path(file)) => {
            if file.is_empty() {
                ctx.error(&sp.field("path"), "must not be empty");
            }
            let mut without = cs.clone();
            without.config_source_specifier =
                Some(S::PathConfigSource(core_pb::PathConfigSource {
                    path: file.clone(),
                    ..Default::default()
                }));
            config_source::translate(&without, &sp, ctx)?
        }
        // Envoy: "Missing config source specifier in envoy::config::core::v3::ConfigSource".
        Some(S::Self_(_)) => {
            ctx.unsupported(&sp.field("self"), "a self config source for SDS");
            return None;
        }
        _ => config_source::translate(cs, &sp, ctx)?,
    };
    match &source.kind {
        ConfigSourceKind::Api(api) if api.api_type == ApiType::Rest => {
            ctx.unsupported(&sp.field("api_config_source.api_type"), "REST for SDS");
        }
        ConfigSourceKind::Path { path: file, .. } if !file.is_empty() => {
            let field = match &cs.config_source_specifier {
                #[allow(deprecated)]
                Some(S::Path(_)) => sp.field("path"),
                _ => sp.field("path_config_source.path"),
            };
            check_file(file, &sds.name, kind, &field, ctx);
        }
        _ => {}
    }
    if ctx.error_count() > before {
        return None;
    }
    Some(SdsSecret {
        name: sds.name.clone(),
        source,
    })
}

/// Checks an SDS file: it must exist (Envoy's wording when it does not), and
/// courier also checks what it holds up front (Envoy reads it at run time):
/// one `Secret` of the kind asked for, named `name`.
fn check_file(file: &str, name: &str, kind: SecretKind, field: &Path<'_>, ctx: &mut Ctx) {
    if !std::path::Path::new(file).exists() {
        ctx.error(
            field,
            format!("paths must refer to an existing path in the system: '{file}' does not exist"),
        );
        return;
    }
    match read_file(file, name, kind) {
        Ok(_) => {}
        Err(errors) => {
            for e in errors {
                ctx.error(field, format!("in {file}: {e}"));
            }
        }
    }
}

/// Reads the secret `name` of `kind` from an SDS file (a `DiscoveryResponse`
/// in YAML or JSON); `Err` with every problem found (each `path: message`).
pub fn read_file(file: &str, name: &str, kind: SecretKind) -> Result<SecretResource, Vec<String>> {
    let response = crate::resource::read_path_source(std::path::Path::new(file)).map_err(|e| {
        e.errors
            .iter()
            .map(|err| {
                if err.path.is_empty() {
                    err.message.clone()
                } else {
                    format!("{}: {}", err.path, err.message)
                }
            })
            .collect::<Vec<_>>()
    })?;
    let mut found = Vec::new();
    for any in &response.resources {
        let mut ctx = Ctx::new();
        let r = crate::resource::translate(any, &mut ctx);
        found.push((r, ctx));
    }
    resources_of(found, name, kind)
}

/// Envoy's checks of one SDS update for the secret `name` of `kind`: one
/// resource, named as asked, of that kind (its wording).
pub fn resources_of(
    found: Vec<(Option<crate::resource::Resource>, Ctx)>,
    name: &str,
    kind: SecretKind,
) -> Result<SecretResource, Vec<String>> {
    match found.len() {
        0 => {
            return Err(vec![format!(
                "Missing SDS resources for {name} in onConfigUpdate()"
            )]);
        }
        1 => {}
        n => return Err(vec![format!("Unexpected SDS secrets length: {n}")]),
    }
    let Some((resource, ctx)) = found.into_iter().next() else {
        return Err(vec![format!(
            "Missing SDS resources for {name} in onConfigUpdate()"
        )]);
    };
    if let Err(e) = ctx.finish(()) {
        return Err(e
            .errors
            .iter()
            .map(|err| format!("resources[0].{}: {}", err.path, err.message))
            .collect());
    }
    let Some(crate::resource::Resource::Secret(secret)) = resource else {
        return Err(vec!["resources[0] is not a Secret".into()]);
    };
    check_secret(&secret, name, kind)?;
    Ok(SecretResource::clone(&secret))
}

/// Whether `secret` is the one a provider of `name` and `kind` takes (Envoy's
/// wording when it is not).
pub fn check_secret(
    secret: &SecretResource,
    name: &str,
    kind: SecretKind,
) -> Result<(), Vec<String>> {
    if secret.name != name {
        return Err(vec![format!(
            "Unexpected SDS secret (expecting {name}): {}",
            secret.name
        )]);
    }
    if secret.value.kind() != kind {
        let (want, got) = match kind {
            SecretKind::Certificate => ("TLS_CERTIFICATE", "VALIDATION_CONTEXT"),
            SecretKind::Validation => ("VALIDATION_CONTEXT", "TLS_CERTIFICATE"),
        };
        return Err(vec![format!(
            "Unexpected secret type for {name}: want {want}, got {got}"
        )]);
    }
    Ok(())
}

/// The validation context a context gets from its SDS secret's fields
/// (`secret`), merged over a combined context's default: `Ok(None)` when
/// nothing is to be verified, `Err` with Envoy's reason when the merged
/// context is refused.
pub fn resolve_validation(
    default: Option<&ValidationFields>,
    secret: &ValidationFields,
) -> Result<Option<CertificateValidation>, String> {
    let mut san_matchers = default.map(|d| d.san_matchers.clone()).unwrap_or_default();
    san_matchers.extend(secret.san_matchers.iter().cloned());
    let trusted_ca = match &secret.trusted_ca {
        Some(ca) => Some(ca.clone()),
        None => default.and_then(|d| d.trusted_ca.clone()),
    };
    // Envoy merges the secret over the default: a flag set in either holds.
    let allow_expired_certificate =
        secret.allow_expired_certificate || default.is_some_and(|d| d.allow_expired_certificate);
    let accept_untrusted = secret.accept_untrusted || default.is_some_and(|d| d.accept_untrusted);
    match trusted_ca {
        Some(trusted_ca) => Ok(Some(CertificateValidation {
            trusted_ca,
            san_matchers,
            allow_expired_certificate,
            accept_untrusted,
        })),
        None if san_matchers.is_empty() => Ok(None),
        None => Err(
            "SAN-based verification of peer certificates without trusted CA is insecure and not allowed"
                .into(),
        ),
    }
}

/// Shared so every context naming the same secrets shares one description.
pub(super) fn shared(sds: TlsSds) -> Option<Arc<TlsSds>> {
    (!sds.is_empty()).then(|| Arc::new(sds))
}
