//! Which of a filter chain's server certificates a handshake gets, when it has
//! several: Envoy's `findTlsContext`. The certificates whose DNS names (or, with
//! none, subject common name) match the SNI exactly are tried first, then those
//! whose wildcard matches it; among the tried, an ECDSA certificate is taken for a
//! client that can verify ECDSA signatures and an RSA one for a client that
//! cannot, an RSA certificate standing in for an ECDSA-capable client when no
//! ECDSA one fits. No SNI (or one no certificate names, with
//! `full_scan_certs_on_sni_mismatch`) tries every certificate the same way; what
//! is left is the first certificate.

use rustls::SignatureScheme;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::sync::Arc;

/// One certificate with what selection needs to know of it.
#[derive(Debug)]
struct Candidate {
    key: Arc<CertifiedKey>,
    ecdsa: bool,
}

/// Picks a certificate per handshake (see the module docs).
#[derive(Debug)]
pub(crate) struct CertSelector {
    certs: Vec<Candidate>,
    /// Lower-case DNS name, or `.suffix` for a `*.suffix` wildcard, to the
    /// certificates naming it: at most one per key type, the first configured
    /// (Envoy's `server_names_map`).
    names: HashMap<String, Vec<usize>>,
    has_rsa: bool,
    full_scan_on_mismatch: bool,
}

impl CertSelector {
    /// A selector over `certs` (config order, at least one).
    pub(crate) fn new(
        certs: &[courier_config::tls::TlsCertificate],
        full_scan_on_mismatch: bool,
        provider: &CryptoProvider,
    ) -> Result<Self, String> {
        let mut out = Vec::with_capacity(certs.len());
        let mut names: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, c) in certs.iter().enumerate() {
            let signing = provider
                .key_provider
                .load_private_key(c.private_key.clone_key())
                .map_err(|e| format!("certificate {i}: private key: {e}"))?;
            let ecdsa = signing.algorithm() == rustls::SignatureAlgorithm::ECDSA;
            let key = Arc::new(CertifiedKey::new(c.certificate_chain.clone(), signing));
            let leaf = c
                .certificate_chain
                .first()
                .ok_or_else(|| format!("certificate {i}: empty chain"))?;
            for name in server_names(leaf) {
                let slot = names.entry(name).or_default();
                // One certificate per key type and name: the first stays.
                if !slot.iter().any(|&j| out_ecdsa(&out, j) == ecdsa) {
                    slot.push(i);
                }
            }
            out.push(Candidate { key, ecdsa });
        }
        if out.is_empty() {
            return Err("a server needs a certificate".into());
        }
        let has_rsa = out.iter().any(|c| !c.ecdsa);
        Ok(Self {
            certs: out,
            names,
            has_rsa,
            full_scan_on_mismatch,
        })
    }

    /// The index of the certificate for a client offering `sni` that can (or
    /// cannot) verify ECDSA signatures.
    fn select(&self, sni: Option<&str>, client_ecdsa: bool) -> usize {
        let mut pick = Pick::default();
        if let Some(sni) = sni.filter(|s| !s.is_empty()) {
            // rustls hands the SNI over lower-cased (DNS names have no case, RFC
            // 4343); Envoy compares it as sent. The certificates' names are
            // lower-cased to match.
            let sni = sni.to_ascii_lowercase();
            self.try_name(&sni, client_ecdsa, &mut pick);
            if pick.selected.is_none() && pick.candidate.is_none() {
                // `.example.com` for `www.example.com` (RFC 6125 6.4.3).
                if let Some(dot) = sni[1.min(sni.len())..].find('.').map(|d| d + 1)
                    && dot < sni.len() - 1
                {
                    self.try_name(&sni[dot..], client_ecdsa, &mut pick);
                }
            }
            if let Some(i) = pick.selected.or(pick.candidate) {
                return i;
            }
            if !self.full_scan_on_mismatch {
                return 0;
            }
        }
        let mut pick = Pick::default();
        if client_ecdsa || self.has_rsa {
            for i in 0..self.certs.len() {
                if pick.offer(i, self.certs[i].ecdsa, client_ecdsa) {
                    break;
                }
            }
        }
        pick.selected.or(pick.candidate).unwrap_or(0)
    }

    fn try_name(&self, name: &str, client_ecdsa: bool, pick: &mut Pick) {
        for &i in self.names.get(name).into_iter().flatten() {
            if pick.offer(i, self.certs[i].ecdsa, client_ecdsa) {
                return;
            }
        }
    }
}

fn out_ecdsa(out: &[Candidate], i: usize) -> bool {
    out.get(i).is_some_and(|c| c.ecdsa)
}

/// The search state of Envoy's `selected` lambda.
#[derive(Default)]
struct Pick {
    selected: Option<usize>,
    /// An RSA certificate kept for an ECDSA-capable client while an ECDSA one is
    /// looked for.
    candidate: Option<usize>,
}

impl Pick {
    /// Offers certificate `i`; true when it is the one.
    fn offer(&mut self, i: usize, ecdsa: bool, client_ecdsa: bool) -> bool {
        if client_ecdsa == ecdsa {
            self.selected = Some(i);
            return true;
        }
        if client_ecdsa && !ecdsa && self.candidate.is_none() {
            self.candidate = Some(i);
        }
        false
    }
}

/// Whether the client offers an ECDSA signature scheme (it can verify an ECDSA
/// certificate's handshake signature).
fn client_ecdsa_capable(schemes: &[SignatureScheme]) -> bool {
    schemes.iter().any(|s| {
        matches!(
            s,
            SignatureScheme::ECDSA_NISTP256_SHA256
                | SignatureScheme::ECDSA_NISTP384_SHA384
                | SignatureScheme::ECDSA_NISTP521_SHA512
        )
    })
}

impl ResolvesServerCert for CertSelector {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let i = self.select(
            hello.server_name(),
            client_ecdsa_capable(hello.signature_schemes()),
        );
        Some(Arc::clone(&self.certs[i].key))
    }
}

/// The names a certificate is selected by: its DNS subject alternative names
/// (a `*.example.com` wildcard as `.example.com`), or, with none, its subject's
/// common name, lower-cased.
fn server_names(der: &rustls::pki_types::CertificateDer<'_>) -> Vec<String> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return Vec::new();
    };
    let key = |n: &str| {
        let n = n.to_ascii_lowercase();
        match n.strip_prefix('*') {
            Some(rest) if rest.starts_with('.') => rest.to_string(),
            _ => n,
        }
    };
    let mut names: Vec<String> = match cert.subject_alternative_name() {
        Ok(Some(ext)) => ext
            .value
            .general_names
            .iter()
            .filter_map(|g| match g {
                GeneralName::DNSName(n) => Some(key(n)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if names.is_empty() {
        names.extend(
            cert.subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok())
                .map(key),
        );
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_config::tls::TlsCertificate;
    use rcgen::{CertificateParams, KeyPair};

    fn cert(names: &[&str], alg: &'static rcgen::SignatureAlgorithm) -> TlsCertificate {
        let key = KeyPair::generate_for(alg).unwrap();
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.self_signed(&key).unwrap();
        TlsCertificate {
            certificate_chain: vec![cert.der().clone()],
            private_key: Arc::new(
                rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            ),
        }
    }

    fn selector(certs: &[TlsCertificate], full_scan: bool) -> CertSelector {
        CertSelector::new(certs, full_scan, &super::super::provider()).unwrap()
    }

    const RSA: &rcgen::SignatureAlgorithm = &rcgen::PKCS_RSA_SHA256;
    const EC: &rcgen::SignatureAlgorithm = &rcgen::PKCS_ECDSA_P256_SHA256;

    #[test]
    fn sni_then_key_type_then_first() {
        let s = selector(
            &[
                cert(&["a.example"], RSA),
                cert(&["b.example"], RSA),
                cert(&["b.example"], EC),
                cert(&["*.wild.example"], EC),
            ],
            false,
        );
        // Exact name, key type by the client's capability.
        assert_eq!(s.select(Some("b.example"), false), 1);
        assert_eq!(s.select(Some("b.example"), true), 2);
        // An RSA certificate stands in for an ECDSA-capable client.
        assert_eq!(s.select(Some("a.example"), true), 0);
        // Wildcard; a client that cannot verify ECDSA gets no ECDSA certificate
        // by name and falls to the first one.
        assert_eq!(s.select(Some("x.wild.example"), true), 3);
        assert_eq!(s.select(Some("x.wild.example"), false), 0);
        // Unknown name: the first certificate, unless full scan.
        assert_eq!(s.select(Some("nope.example"), true), 0);
        let full = selector(&[cert(&["a.example"], RSA), cert(&["c.example"], EC)], true);
        assert_eq!(full.select(Some("nope.example"), true), 1);
        // No SNI: full scan by key type.
        assert_eq!(full.select(None, true), 1);
        assert_eq!(full.select(None, false), 0);
    }

    #[test]
    fn the_same_name_and_key_type_twice_keeps_the_first() {
        let s = selector(&[cert(&["a.example"], EC), cert(&["a.example"], EC)], false);
        assert_eq!(s.names["a.example"], [0]);
        assert_eq!(s.select(Some("a.example"), true), 0);
    }
}
