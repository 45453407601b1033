//! Subject-alternative-name checks on client certificates
//! (`match_typed_subject_alt_names`, `match_subject_alt_names`), run inside the
//! handshake after WebPKI has verified the chain, so a mismatch fails the
//! handshake as it does in Envoy.

use courier_config::matcher::StringPattern;
use courier_config::tls::{SanMatcher, SanType};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};
use std::net::IpAddr;
use std::sync::Arc;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// WebPKI verification, then: the certificate passes if any matcher matches
/// any SAN entry of the matcher's type.
#[derive(Debug)]
pub struct SanVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    matchers: Vec<SanMatcher>,
}

impl SanVerifier {
    /// Wraps `inner` with `matchers` (not empty).
    pub fn new(inner: Arc<dyn ClientCertVerifier>, matchers: Vec<SanMatcher>) -> Self {
        Self { inner, matchers }
    }
}

impl ClientCertVerifier for SanVerifier {
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
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if sans_match(end_entity, &self.matchers) {
            Ok(verified)
        } else {
            Err(Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A SAN entry, by type.
#[derive(Debug, PartialEq, Eq)]
enum San {
    Dns(String),
    Uri(String),
    Email(String),
    Ip(String),
}

/// Whether any matcher matches any SAN of `der`; an unparsable certificate matches nothing.
pub fn sans_match(der: &CertificateDer<'_>, matchers: &[SanMatcher]) -> bool {
    let sans = sans(der);
    matchers.iter().any(|m| sans.iter().any(|s| one(m, s)))
}

fn sans(der: &CertificateDer<'_>) -> Vec<San> {
    let Ok((_, cert)) = X509Certificate::from_der(der.as_ref()) else {
        return Vec::new();
    };
    let Ok(Some(ext)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    ext.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DNSName(s) => Some(San::Dns((*s).to_string())),
            GeneralName::URI(s) => Some(San::Uri((*s).to_string())),
            GeneralName::RFC822Name(s) => Some(San::Email((*s).to_string())),
            GeneralName::IPAddress(b) => ip_text(b).map(San::Ip),
            _ => None,
        })
        .collect()
}

/// An IP SAN in text form (the form Envoy matches against).
fn ip_text(bytes: &[u8]) -> Option<String> {
    let ip = match bytes.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?),
        16 => IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?),
        _ => return None,
    };
    Some(ip.to_string())
}

fn one(m: &SanMatcher, san: &San) -> bool {
    let value = match (m.san_type, san) {
        (SanType::Dns | SanType::Any, San::Dns(v)) => {
            // Envoy: an exact matcher on a DNS SAN honours a wildcard certificate.
            if let StringPattern::Exact(name) = &m.matcher.pattern {
                return dns_name_match(name, v);
            }
            v
        }
        (SanType::Uri | SanType::Any, San::Uri(v))
        | (SanType::Email | SanType::Any, San::Email(v))
        | (SanType::IpAddress | SanType::Any, San::Ip(v)) => v,
        _ => return false,
    };
    m.matcher.matches(value)
}

/// Envoy's `dnsNameMatch`: `name` equals `pattern` (case-insensitively), or
/// `pattern` is `*.suffix` and `name` is one label followed by `.suffix`.
fn dns_name_match(name: &str, pattern: &str) -> bool {
    let (name, pattern) = (name.to_ascii_lowercase(), pattern.to_ascii_lowercase());
    if name == pattern {
        return true;
    }
    match pattern.strip_prefix('*') {
        Some(suffix) if suffix.starts_with('.') && name.len() > suffix.len() => name
            .strip_suffix(suffix)
            .is_some_and(|label| !label.is_empty() && !label.contains('.')),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{dns_name_match, sans_match};
    use courier_config::matcher::{StringMatcher, StringPattern};
    use courier_config::tls::{SanMatcher, SanType};
    use rcgen::SanType as Gen;
    use rustls::pki_types::CertificateDer;

    fn cert(sans: Vec<Gen>) -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::default();
        params.subject_alt_names = sans;
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    fn m(san_type: SanType, pattern: StringPattern) -> SanMatcher {
        SanMatcher {
            san_type,
            matcher: StringMatcher {
                pattern,
                ignore_case: false,
            },
        }
    }

    fn exact(s: &str) -> StringPattern {
        StringPattern::Exact(s.to_string())
    }

    #[test]
    fn each_san_type_matches_only_its_entries() {
        let der = cert(vec![
            Gen::DnsName("api.example.com".try_into().unwrap()),
            Gen::URI("spiffe://cluster/ns/default/sa/client".try_into().unwrap()),
            Gen::Rfc822Name("ops@example.com".try_into().unwrap()),
            Gen::IpAddress("10.1.2.3".parse().unwrap()),
        ]);
        let yes = |matcher| assert!(sans_match(&der, &[matcher]));
        let no = |matcher| assert!(!sans_match(&der, &[matcher]));
        yes(m(SanType::Dns, exact("api.example.com")));
        yes(m(
            SanType::Uri,
            StringPattern::Prefix("spiffe://cluster/".into()),
        ));
        yes(m(SanType::Email, exact("ops@example.com")));
        yes(m(SanType::IpAddress, exact("10.1.2.3")));
        yes(m(SanType::Any, exact("10.1.2.3")));
        // The right value under another type does not count.
        no(m(SanType::Uri, exact("api.example.com")));
        no(m(SanType::Dns, exact("ops@example.com")));
        no(m(SanType::Email, exact("10.1.2.3")));
        no(m(SanType::Dns, exact("web.example.com")));
        // Any matcher of several is enough.
        assert!(sans_match(
            &der,
            &[
                m(SanType::Dns, exact("web.example.com")),
                m(SanType::Uri, StringPattern::Suffix("/sa/client".into())),
            ]
        ));
    }

    #[test]
    fn an_exact_dns_matcher_accepts_a_wildcard_certificate() {
        let der = cert(vec![Gen::DnsName("*.example.com".try_into().unwrap())]);
        assert!(sans_match(&der, &[m(SanType::Dns, exact("a.example.com"))]));
        assert!(!sans_match(
            &der,
            &[m(SanType::Dns, exact("a.b.example.com"))]
        ));
        // Non-exact matchers see the SAN as written.
        assert!(sans_match(
            &der,
            &[m(SanType::Dns, StringPattern::Prefix("*.".into()))]
        ));
    }

    #[test]
    fn wildcard_certificates_cover_one_label() {
        assert!(dns_name_match("a.example.com", "a.example.com"));
        assert!(dns_name_match("A.example.com", "a.EXAMPLE.com"));
        assert!(dns_name_match("a.example.com", "*.example.com"));
        assert!(!dns_name_match("a.b.example.com", "*.example.com"));
        assert!(!dns_name_match("example.com", "*.example.com"));
        assert!(!dns_name_match("b.example.com", "a.example.com"));
    }
}
