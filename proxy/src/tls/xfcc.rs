//! The client certificate's details that `forward_client_cert_details`
//! `APPEND_FORWARD` and `SANITIZE_SET` write into `x-forwarded-client-cert`,
//! as Envoy's `mutateXfccRequestHeader`: `By=` per URI SAN of our certificate,
//! `Hash=` (the client certificate's SHA-256, hex), then what
//! `set_current_client_cert_details` asks for, in Envoy's order (`Cert`,
//! `Chain`, `Subject`, `URI`, `DNS`), `;`-separated. Made once per connection.

use super::DownstreamStream;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use courier_config::listener::hcm::ClientCertDetails;
use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The details for a mutual-TLS `stream` whose server certificate is
/// `local` (leaf DER); `None` when the client presented no certificate.
pub fn details(
    stream: &DownstreamStream,
    local: Option<&CertificateDer<'_>>,
    want: ClientCertDetails,
) -> Option<String> {
    let DownstreamStream::Tls(tls) = stream else {
        return None;
    };
    let chain = tls.get_ref().1.peer_certificates()?;
    let leaf = chain.first()?;
    let mut parts: Vec<String> = Vec::new();
    if let Some(local) = local {
        let (by, _) = sans(local.as_ref());
        parts.extend(by.into_iter().map(|u| format!("By={u}")));
    }
    parts.push(format!("Hash={}", sha256_hex(leaf.as_ref())));
    if want.cert {
        parts.push(format!("Cert=\"{}\"", url_encode(&pem(leaf.as_ref()))));
    }
    if want.chain {
        let all: String = chain.iter().map(|c| pem(c.as_ref())).collect();
        parts.push(format!("Chain=\"{}\"", url_encode(&all)));
    }
    let parsed = X509Certificate::from_der(leaf.as_ref())
        .ok()
        .map(|(_, c)| c);
    if want.subject {
        // The key is written even for an empty subject, as Envoy does.
        let subject = parsed
            .as_ref()
            .map(|c| super::peer::rfc2253(c.subject()))
            .unwrap_or_default();
        parts.push(format!("Subject=\"{subject}\""));
    }
    let (uris, dns) = sans(leaf.as_ref());
    if want.uri {
        if uris.is_empty() {
            parts.push("URI=".to_string());
        }
        parts.extend(uris.iter().map(|u| format!("URI={u}")));
    }
    if want.dns {
        parts.extend(dns.iter().map(|d| format!("DNS={d}")));
    }
    Some(parts.join(";"))
}

/// A certificate's URI and DNS SANs.
fn sans(der: &[u8]) -> (Vec<String>, Vec<String>) {
    let (mut uris, mut dns) = (Vec::new(), Vec::new());
    if let Ok((_, cert)) = X509Certificate::from_der(der)
        && let Ok(Some(ext)) = cert.subject_alternative_name()
    {
        for n in &ext.value.general_names {
            match n {
                GeneralName::URI(s) => uris.push((*s).to_string()),
                GeneralName::DNSName(s) => dns.push((*s).to_string()),
                _ => {}
            }
        }
    }
    (uris, dns)
}

/// SHA-256 of `data` in lower-case hex (Envoy's `sha256PeerCertificateDigest`),
/// with the TLS stack's own hash.
fn sha256_hex(data: &[u8]) -> String {
    // The SHA-256 of a TLS 1.3 suite: rustls exports its hashes only there.
    let rustls::SupportedCipherSuite::Tls13(suite) =
        rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256
    else {
        return String::new();
    };
    let hash = suite.common.hash_provider.hash(data);
    hash.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A certificate as OpenSSL's `PEM_write_bio_X509` writes it.
fn pem(der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// Percent-encodes all but RFC 3986's unreserved characters (Envoy's
/// `PercentEncoding::urlEncode` of a PEM: newlines, spaces, `+`, `/`, `=`).
fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 11 / 10);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        assert_eq!(
            url_encode("-----BEGIN A+/=\n"),
            "-----BEGIN%20A%2B%2F%3D%0A"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let p = pem(&[0u8; 61]);
        assert!(p.starts_with("-----BEGIN CERTIFICATE-----\nAAAA"));
        assert!(p.ends_with("=\n-----END CERTIFICATE-----\n"));
        assert_eq!(p.lines().nth(1).map(str::len), Some(64));
    }
}
