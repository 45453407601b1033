//! TLS contexts: downstream (termination, client-certificate validation) and upstream.
//!
//! Certificates and keys are read and decoded from PEM at load time; the model holds
//! DER, ready for rustls. rustls implements TLS 1.2 and 1.3 only, so older protocol
//! versions are refused, as are the BoringSSL-specific knobs (cipher suites, curves).

mod pem;
pub mod sds;
pub(crate) mod secrets;

pub use sds::{SdsSecret, SdsValidation, SecretKind, TlsSds};

use crate::ctx::Ctx;
use crate::extensions::{DOWNSTREAM_TLS, UPSTREAM_TLS};
use crate::matcher::{self, StringMatcher};
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::core::v3::{TransportSocket, transport_socket::ConfigType};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3 as pb;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

/// Type URL of the plaintext transport socket, accepted as "no TLS".
pub const RAW_BUFFER: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer";

/// Fields of the TLS messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
        &[
            "common_tls_context",
            "require_client_certificate",
            "full_scan_certs_on_sni_mismatch",
            "disable_stateless_session_resumption",
            "disable_stateful_session_resumption",
        ],
    ),
    (
        "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        // `allow_renegotiation: true` is refused by its absence here (false is unset).
        &[
            "common_tls_context",
            "sni",
            "max_session_keys",
            "auto_host_sni",
            "auto_sni_san_validation",
        ],
    ),
    (
        "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext",
        &[
            "tls_params",
            "tls_certificates",
            "validation_context",
            "alpn_protocols",
            "tls_certificate_sds_secret_configs",
            "validation_context_sds_secret_config",
            "combined_validation_context",
        ],
    ),
    (
        "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext.CombinedCertificateValidationContext",
        &[
            "default_validation_context",
            "validation_context_sds_secret_config",
        ],
    ),
    (
        // `sds_resource_locator` (xDS-TP) is refused by its absence.
        "envoy.extensions.transport_sockets.tls.v3.SdsSecretConfig",
        &["name", "sds_config"],
    ),
    (
        // Session ticket keys are refused by their absence; a generic secret
        // from SDS is refused in code (secrets::generic).
        "envoy.extensions.transport_sockets.tls.v3.Secret",
        &[
            "name",
            "tls_certificate",
            "validation_context",
            "generic_secret",
        ],
    ),
    // `secrets` (the named map) is refused by its absence.
    (
        "envoy.extensions.transport_sockets.tls.v3.GenericSecret",
        &["secret"],
    ),
    (
        "envoy.extensions.transport_sockets.tls.v3.TlsParameters",
        &[
            "tls_minimum_protocol_version",
            "tls_maximum_protocol_version",
        ],
    ),
    (
        "envoy.extensions.transport_sockets.tls.v3.TlsCertificate",
        &["certificate_chain", "private_key"],
    ),
    (
        "envoy.extensions.transport_sockets.tls.v3.CertificateValidationContext",
        &[
            "trusted_ca",
            "match_typed_subject_alt_names",
            "match_subject_alt_names",
            "allow_expired_certificate",
            "trust_chain_verification",
        ],
    ),
    (
        "envoy.extensions.transport_sockets.tls.v3.SubjectAltNameMatcher",
        &["san_type", "matcher"],
    ),
    (
        "envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer",
        &[],
    ),
];

/// A TLS protocol version rustls implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.2.
    Tls12,
    /// TLS 1.3.
    Tls13,
}

/// A certificate chain (leaf first) and its private key, as DER.
#[derive(Debug, Clone)]
pub struct TlsCertificate {
    /// The chain, leaf first.
    pub certificate_chain: Vec<CertificateDer<'static>>,
    /// The key (PKCS#8, PKCS#1 or SEC1). Shared: rustls wants its own copy
    /// (`clone_key`) and the key is not `Clone` on purpose.
    pub private_key: Arc<PrivateKeyDer<'static>>,
}

/// Which subject-alternative-name entries a [`SanMatcher`] looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SanType {
    /// DNS names.
    Dns,
    /// URIs.
    Uri,
    /// Email addresses.
    Email,
    /// IP addresses (compared in their text form).
    IpAddress,
    /// Any of the above: the deprecated `match_subject_alt_names` form.
    Any,
}

/// A subject-alternative-name check on the peer certificate.
#[derive(Debug, Clone)]
pub struct SanMatcher {
    /// The SAN entries the matcher applies to.
    pub san_type: SanType,
    /// Matches one entry's value.
    pub matcher: StringMatcher,
}

/// How the peer certificate is verified.
#[derive(Debug, Clone)]
pub struct CertificateValidation {
    /// Trusted roots (never empty: SAN checks without a CA are refused, as Envoy does).
    pub trusted_ca: Vec<CertificateDer<'static>>,
    /// The peer passes if any matcher matches any SAN entry; empty = any SAN.
    pub san_matchers: Vec<SanMatcher>,
    /// `allow_expired_certificate`: a certificate that has expired (but is
    /// otherwise valid) passes; every other check still applies.
    pub allow_expired_certificate: bool,
    /// `trust_chain_verification: ACCEPT_UNTRUSTED`: a certificate is asked
    /// for and any presented one passes (the checks' failures are ignored, as
    /// Envoy's validator reports success).
    pub accept_untrusted: bool,
}

/// Settings shared by both sides.
#[derive(Debug, Clone)]
pub struct CommonTls {
    /// Peer verification; `None` = the peer certificate is not verified.
    pub validation: Option<CertificateValidation>,
    /// ALPN protocols in preference order (a `"h2,http/1.1"` element is split, as Envoy does).
    pub alpn_protocols: Vec<String>,
    /// Lowest version offered.
    pub min_version: TlsVersion,
    /// Highest version offered.
    pub max_version: TlsVersion,
    /// Certificates and a validation context from SDS, resolved by the data
    /// plane when the secrets arrive; `None` when nothing comes from SDS.
    pub sds: Option<Arc<TlsSds>>,
}

impl CommonTls {
    /// Whether the context names a validation context from SDS.
    pub fn has_sds_validation(&self) -> bool {
        self.sds.as_ref().is_some_and(|s| s.validation.is_some())
    }
}

/// A validated downstream TLS context (TLS termination on a filter chain).
#[derive(Debug, Clone)]
pub struct DownstreamTls {
    /// The server certificates, in config order (at least one): the one served is
    /// picked per handshake by SNI and the client's key types, as Envoy does.
    pub certificates: Vec<TlsCertificate>,
    /// `full_scan_certs_on_sni_mismatch`: an SNI no certificate names picks among
    /// all by key type, instead of the first certificate.
    pub full_scan_certs_on_sni_mismatch: bool,
    /// Validation of client certificates, ALPN, versions.
    pub common: CommonTls,
    /// Reject clients that present no certificate, when `validation` is set
    /// (without it Envoy asks for no certificate). With `validation` set and
    /// this false, a presented certificate is verified but none is required.
    pub require_client_certificate: bool,
    /// Resumption by session tickets (TLS 1.3 and 1.2), unless
    /// `disable_stateless_session_resumption`.
    pub stateless_resumption: bool,
    /// Resumption by TLS 1.2 session IDs from a server-side cache, unless
    /// `disable_stateful_session_resumption`.
    pub stateful_resumption: bool,
}

/// A validated upstream TLS context.
#[derive(Debug, Clone)]
pub struct UpstreamTls {
    /// The client certificate, if any.
    pub client_certificate: Option<TlsCertificate>,
    /// Server verification, ALPN, versions.
    pub common: CommonTls,
    /// SNI to send; `None` = none.
    pub sni: Option<String>,
    /// Session tickets kept per host for resumption (default 1; 0 = no resumption).
    pub max_session_keys: u32,
    /// `auto_host_sni`: the host's name (a DNS cluster's, or the endpoint's
    /// `hostname`) as SNI, unless the request sets one.
    pub auto_host_sni: bool,
    /// `auto_sni_san_validation`: the server certificate must have the SNI
    /// sent as a DNS SAN, in place of the configured SAN matchers.
    pub auto_sni_san_validation: bool,
}

/// Which side a context is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Downstream,
    Upstream,
}

/// What a `transport_socket` turned out to be.
enum Socket {
    RawBuffer,
    Tls(Option<envoy_types::pb::google::protobuf::Any>),
}

/// Translates a downstream `transport_socket`.
///
/// `None` means plaintext (`raw_buffer`) or an error that is already recorded
/// in `ctx` (so the config is refused as a whole anyway).
pub fn downstream(ts: &TransportSocket, path: &Path<'_>, ctx: &mut Ctx) -> Option<DownstreamTls> {
    let any = match socket(ts, path, ctx)? {
        Socket::RawBuffer => return None,
        Socket::Tls(any) => any,
    };
    let tp = path.field("typed_config");
    let dtc: pb::DownstreamTlsContext = match &any {
        Some(any) => unpack(any, DOWNSTREAM_TLS, "a listener", &tp, ctx)?,
        None => pb::DownstreamTlsContext::default(),
    };
    let cp = tp.field("common_tls_context");
    let empty = pb::CommonTlsContext::default();
    let ctc = dtc.common_tls_context.as_ref().unwrap_or(&empty);
    let (certificates, common) = common(ctc, Side::Downstream, &cp, ctx);
    let require_client_certificate =
        crate::core::bool_or(dtc.require_client_certificate.as_ref(), false);
    // Envoy: "No TLS certificates found for server context". (A bad
    // certificate has its own error.)
    if ctc.tls_certificates.is_empty() && ctc.tls_certificate_sds_secret_configs.is_empty() {
        ctx.error(
            &cp.field("tls_certificates"),
            "a downstream TLS context needs a certificate",
        );
    }
    let common = common?;
    let from_sds = common
        .sds
        .as_ref()
        .is_some_and(|s| !s.certificates.is_empty());
    if certificates.is_empty() && !from_sds {
        return None;
    }
    // `session_ticket_keys` and `session_timeout` are refused by the support table:
    // the keys are rustls's own, rotated by it.
    let stateless_resumption =
        !matches!(
        dtc.session_ticket_keys_type,
        Some(pb::downstream_tls_context::SessionTicketKeysType::DisableStatelessSessionResumption(
            true
        ))
    );
    Some(DownstreamTls {
        certificates,
        full_scan_certs_on_sni_mismatch: crate::core::bool_or(
            dtc.full_scan_certs_on_sni_mismatch.as_ref(),
            false,
        ),
        common,
        require_client_certificate,
        stateless_resumption,
        stateful_resumption: !dtc.disable_stateful_session_resumption,
    })
}

/// Translates an upstream `transport_socket`.
///
/// `None` means plaintext (`raw_buffer`) or an error that is already recorded
/// in `ctx` (so the config is refused as a whole anyway).
pub fn upstream(ts: &TransportSocket, path: &Path<'_>, ctx: &mut Ctx) -> Option<UpstreamTls> {
    let any = match socket(ts, path, ctx)? {
        Socket::RawBuffer => return None,
        Socket::Tls(any) => any,
    };
    let tp = path.field("typed_config");
    let utc: pb::UpstreamTlsContext = match &any {
        Some(any) => unpack(any, UPSTREAM_TLS, "a cluster", &tp, ctx)?,
        None => pb::UpstreamTlsContext::default(),
    };
    let cp = tp.field("common_tls_context");
    let empty = pb::CommonTlsContext::default();
    let ctc = utc.common_tls_context.as_ref().unwrap_or(&empty);
    let (client_certificates, common) = common(ctc, Side::Upstream, &cp, ctx);
    let client_certificate = client_certificates.into_iter().next();
    let sni = if utc.sni.is_empty() {
        None
    } else if utc.sni.len() > 255 {
        ctx.error(&tp.field("sni"), "must be at most 255 bytes");
        None
    } else if rustls_pki_types::ServerName::try_from(utc.sni.as_str()).is_err() {
        ctx.error(
            &tp.field("sni"),
            format!("\"{}\" is not a DNS name or IP address", utc.sni),
        );
        None
    } else {
        Some(utc.sni.clone())
    };
    Some(UpstreamTls {
        client_certificate,
        common: common?,
        sni,
        max_session_keys: crate::core::u32_or(utc.max_session_keys.as_ref(), 1),
        auto_host_sni: utc.auto_host_sni,
        auto_sni_san_validation: utc.auto_sni_san_validation,
    })
}

/// Classifies a transport socket by its `@type`, or by name when it has no config.
fn socket(ts: &TransportSocket, path: &Path<'_>, ctx: &mut Ctx) -> Option<Socket> {
    match &ts.config_type {
        Some(ConfigType::TypedConfig(any)) => match any.type_url.as_str() {
            RAW_BUFFER => Some(Socket::RawBuffer),
            DOWNSTREAM_TLS | UPSTREAM_TLS => Some(Socket::Tls(Some(any.clone()))),
            other => {
                let name = if ts.name.is_empty() { other } else { &ts.name };
                ctx.unsupported(path, format!("transport socket {name}"));
                None
            }
        },
        None => match ts.name.as_str() {
            "envoy.transport_sockets.raw_buffer" | "raw_buffer" => Some(Socket::RawBuffer),
            // Envoy builds the socket from an empty context message.
            "envoy.transport_sockets.tls" | "tls" => Some(Socket::Tls(None)),
            "" => {
                ctx.error(path, "name or typed_config is required");
                None
            }
            name => {
                ctx.unsupported(path, format!("transport socket {name}"));
                None
            }
        },
    }
}

fn unpack<M: prost::Message + Default>(
    any: &envoy_types::pb::google::protobuf::Any,
    want: &str,
    owner: &str,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<M> {
    if any.type_url != want {
        let short = want.rsplit('.').next().unwrap_or(want);
        ctx.error(
            path,
            format!("{owner} needs a {short}, found {}", any.type_url),
        );
        return None;
    }
    match M::decode(any.value.as_slice()) {
        Ok(m) => Some(m),
        Err(e) => {
            ctx.error(path, format!("cannot decode {}: {e}", any.type_url));
            None
        }
    }
}

/// Translates a `CommonTlsContext`: the certificates (at most one on the upstream
/// side) and the rest.
fn common(
    c: &pb::CommonTlsContext,
    side: Side,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> (Vec<TlsCertificate>, Option<CommonTls>) {
    use pb::common_tls_context::ValidationContextType as V;
    let cp = path.field("tls_certificates");
    let sp = path.field("tls_certificate_sds_secret_configs");
    let mut certificates = Vec::new();
    let mut from_sds = TlsSds::default();
    // Inline certificates (`Ok`), then those named by secret (`Err`), count as
    // one list.
    let inline = c.tls_certificates.iter().map(Ok);
    let named = c.tls_certificate_sds_secret_configs.iter().map(Err);
    for (i, tc) in inline.chain(named).enumerate() {
        let p = match i.checked_sub(c.tls_certificates.len()) {
            None => cp.index(i),
            Some(j) => sp.index(j),
        };
        if i > 0 && side == Side::Upstream {
            // Envoy's own rule for client contexts.
            ctx.error(
                &p,
                "Multiple TLS certificates are not supported for client contexts",
            );
            continue;
        }
        let certificate = match tc {
            Ok(tc) => tls_certificate(tc, &p, ctx),
            Err(secret) => match &secret.sds_config {
                Some(cs) => {
                    if let Some(r) = sds::reference(secret, cs, SecretKind::Certificate, &p, ctx) {
                        from_sds.certificates.push((certificates.len(), r));
                    }
                    None
                }
                None => secrets::certificate(secret, &p, ctx),
            },
        };
        certificates.extend(certificate);
    }
    let validation = match &c.validation_context_type {
        Some(V::ValidationContext(v)) => validation(v, &path.field("validation_context"), ctx),
        Some(V::ValidationContextSdsSecretConfig(secret)) => {
            let vp = path.field("validation_context_sds_secret_config");
            match &secret.sds_config {
                Some(cs) => match sds::reference(secret, cs, SecretKind::Validation, &vp, ctx) {
                    Some(r) => {
                        from_sds.validation = Some(SdsValidation {
                            secret: r,
                            default: None,
                        });
                        Ok(None)
                    }
                    None => Err(()),
                },
                None => secrets::validation(secret, &vp, ctx),
            }
        }
        Some(V::CombinedValidationContext(cvc)) => {
            match secrets::combined(cvc, &path.field("combined_validation_context"), ctx) {
                Ok(secrets::Combined::Static(v)) => Ok(v),
                Ok(secrets::Combined::Sds(v)) => {
                    from_sds.validation = Some(v);
                    Ok(None)
                }
                Err(()) => Err(()),
            }
        }
        // The certificate-provider forms are refused by the support table.
        _ => Ok(None),
    };
    let (min_version, max_version) =
        versions(c.tls_params.as_ref(), side, &path.field("tls_params"), ctx);
    let alpn_protocols = c
        .alpn_protocols
        .iter()
        .flat_map(|p| p.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    let common = match (validation, min_version, max_version) {
        (Ok(validation), Some(min_version), Some(max_version)) => Some(CommonTls {
            validation,
            alpn_protocols,
            min_version,
            max_version,
            sds: sds::shared(from_sds),
        }),
        _ => None,
    };
    (certificates, common)
}

fn tls_certificate(
    tc: &pb::TlsCertificate,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<TlsCertificate> {
    let chain = pem::certificates(
        tc.certificate_chain.as_ref(),
        "certificate chain",
        &path.field("certificate_chain"),
        ctx,
    );
    let key = pem::private_key(tc.private_key.as_ref(), &path.field("private_key"), ctx);
    let (chain, key) = (chain?, key?);
    // Envoy refuses a key that is not the certificate's
    // (`KEY_VALUES_MISMATCH`): it could never complete a handshake.
    if let Err(e) = pem::key_matches(&chain, &key) {
        ctx.error(&path.field("private_key"), e);
        return None;
    }
    Some(TlsCertificate {
        certificate_chain: chain,
        private_key: key,
    })
}

/// `Ok(None)` when nothing is to be verified; `Err` when an error was recorded.
fn validation(
    v: &pb::CertificateValidationContext,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Result<Option<CertificateValidation>, ()> {
    let fields = validation_fields(v, path, ctx)?;
    checked_validation(fields, path, ctx)
}

/// A validation context's roots and SAN matchers, before the check that SAN
/// matchers come with roots (a combined context checks the merged result).
fn validation_fields(
    v: &pb::CertificateValidationContext,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Result<sds::ValidationFields, ()> {
    use pb::subject_alt_name_matcher::SanType as T;
    let before = ctx.error_count();
    let mut san_matchers = Vec::new();
    let tp = path.field("match_typed_subject_alt_names");
    for (i, m) in v.match_typed_subject_alt_names.iter().enumerate() {
        let p = tp.index(i);
        let san_type = match T::try_from(m.san_type) {
            Ok(T::Dns) => Some(SanType::Dns),
            Ok(T::Uri) => Some(SanType::Uri),
            Ok(T::Email) => Some(SanType::Email),
            Ok(T::IpAddress) => Some(SanType::IpAddress),
            Ok(T::OtherName) => {
                ctx.unsupported(&p.field("san_type"), "OTHER_NAME");
                None
            }
            Ok(T::Unspecified) | Err(_) => {
                ctx.error(
                    &p.field("san_type"),
                    "is required (DNS, URI, EMAIL or IP_ADDRESS)",
                );
                None
            }
        };
        let matcher = match &m.matcher {
            Some(sm) => matcher::string_matcher(sm, &p.field("matcher"), ctx),
            None => {
                ctx.error(&p.field("matcher"), "is required");
                None
            }
        };
        if let (Some(san_type), Some(matcher)) = (san_type, matcher) {
            san_matchers.push(SanMatcher { san_type, matcher });
        }
    }
    let lp = path.field("match_subject_alt_names");
    for (i, sm) in v.match_subject_alt_names.iter().enumerate() {
        if let Some(matcher) = matcher::string_matcher(sm, &lp.index(i), ctx) {
            san_matchers.push(SanMatcher {
                san_type: SanType::Any,
                matcher,
            });
        }
    }
    let trusted_ca = v.trusted_ca.as_ref().and_then(|ds| {
        pem::certificates(
            Some(ds),
            "trusted CA certificates",
            &path.field("trusted_ca"),
            ctx,
        )
    });
    if ctx.error_count() > before {
        return Err(());
    }
    Ok(sds::ValidationFields {
        trusted_ca,
        san_matchers,
        allow_expired_certificate: v.allow_expired_certificate,
        accept_untrusted: v.trust_chain_verification
            == pb::certificate_validation_context::TrustChainVerification::AcceptUntrusted as i32,
    })
}

/// Envoy's rule on a (merged) validation context: SAN matchers need roots.
fn checked_validation(
    fields: sds::ValidationFields,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Result<Option<CertificateValidation>, ()> {
    let sds::ValidationFields {
        trusted_ca,
        san_matchers,
        allow_expired_certificate,
        accept_untrusted,
    } = fields;
    match trusted_ca {
        Some(trusted_ca) => Ok(Some(CertificateValidation {
            trusted_ca,
            san_matchers,
            allow_expired_certificate,
            accept_untrusted,
        })),
        None if san_matchers.is_empty() => Ok(None),
        None => {
            // Envoy's wording.
            ctx.error(
                path,
                "SAN-based verification of peer certificates without trusted CA is insecure and not allowed",
            );
            Err(())
        }
    }
}

fn versions(
    p: Option<&pb::TlsParameters>,
    side: Side,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> (Option<TlsVersion>, Option<TlsVersion>) {
    use pb::tls_parameters::TlsProtocol as P;
    // Envoy's defaults: TLS 1.2 minimum; maximum 1.3 for servers, 1.2 for clients.
    let default_max = match side {
        Side::Downstream => TlsVersion::Tls13,
        Side::Upstream => TlsVersion::Tls12,
    };
    let Some(p) = p else {
        return (Some(TlsVersion::Tls12), Some(default_max));
    };
    let mut one = |v: i32, default: TlsVersion, field: &str| match P::try_from(v) {
        Ok(P::TlsAuto) => Some(default),
        Ok(P::TlSv12) => Some(TlsVersion::Tls12),
        Ok(P::TlSv13) => Some(TlsVersion::Tls13),
        Ok(old @ (P::TlSv10 | P::TlSv11)) => {
            ctx.unsupported(
                &path.field(field),
                format!("{} (rustls implements TLS 1.2 and 1.3)", old.as_str_name()),
            );
            None
        }
        Err(_) => {
            ctx.error(&path.field(field), format!("unknown TLS version {v}"));
            None
        }
    };
    let min = one(
        p.tls_minimum_protocol_version,
        TlsVersion::Tls12,
        "tls_minimum_protocol_version",
    );
    let max = one(
        p.tls_maximum_protocol_version,
        default_max,
        "tls_maximum_protocol_version",
    );
    if let (Some(lo), Some(hi)) = (min, max)
        && lo > hi
    {
        // Envoy accepts this and then fails every handshake.
        ctx.error(
            &path.field("tls_minimum_protocol_version"),
            "is above tls_maximum_protocol_version",
        );
        return (None, None);
    }
    (min, max)
}

#[cfg(test)]
mod sds_tests;
#[cfg(test)]
mod test_pem;
#[cfg(test)]
mod tests;
