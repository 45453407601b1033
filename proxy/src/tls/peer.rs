//! The client certificate's identity fields (URI and DNS SANs, subject) for the HTTP
//! filters (RBAC `authenticated`), read once per connection after the handshake.

use super::DownstreamStream;
use courier_filters::PeerCert;
use x509_parser::der_parser::oid::Oid;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

/// Whether the client presented a certificate (a mutual-TLS connection).
pub fn presented_cert(stream: &DownstreamStream) -> bool {
    matches!(stream, DownstreamStream::Tls(tls) if tls.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty()))
}

/// The peer certificate of a TLS connection, if the client presented one (rustls only
/// hands out certificates its verifier accepted).
pub fn peer_cert(stream: &DownstreamStream) -> Option<PeerCert> {
    let DownstreamStream::Tls(tls) = stream else {
        return None;
    };
    let der = tls.get_ref().1.peer_certificates()?.first()?;
    let (_, cert) = X509Certificate::from_der(der.as_ref()).ok()?;
    let mut out = PeerCert {
        subject: rfc2253(cert.subject()),
        ..PeerCert::default()
    };
    if let Ok(Some(ext)) = cert.subject_alternative_name() {
        for n in &ext.value.general_names {
            match n {
                GeneralName::URI(s) => out.uri_sans.push((*s).to_string()),
                GeneralName::DNSName(s) => out.dns_sans.push((*s).to_string()),
                _ => {}
            }
        }
    }
    Some(out)
}

/// The subject as OpenSSL's `XN_FLAG_RFC2253` prints it (Envoy's
/// `subjectPeerCertificate`): the RDNs last first, `,` between them, `+` within one,
/// short attribute names, RFC 2253 escapes.
pub(super) fn rfc2253(name: &X509Name<'_>) -> String {
    let mut rdns = Vec::new();
    for rdn in name.iter() {
        let attrs: Vec<String> = rdn
            .iter()
            .map(|a| {
                let value = a.as_str().map_or_else(|_| hex(a.as_slice()), escape);
                format!("{}={value}", short_name(a.attr_type()))
            })
            .collect();
        rdns.push(attrs.join("+"));
    }
    rdns.reverse();
    rdns.join(",")
}

fn short_name(oid: &Oid<'_>) -> String {
    let name = match oid.to_id_string().as_str() {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.9" => "street",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        "1.2.840.113549.1.9.1" => "emailAddress",
        "2.5.4.5" => "serialNumber",
        other => return other.to_string(),
    };
    name.to_string()
}

/// RFC 2253 section 2.4 escapes.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let edge_space = c == ' ' && (i == 0 || i == last);
        if matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || edge_space
            || (i == 0 && c == '#')
        {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A value that is not a string, as `#` and its DER in hex.
fn hex(der: &[u8]) -> String {
    let mut out = String::from("#");
    for b in der {
        out.push_str(&format!("{b:02X}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escapes_as_rfc2253() {
        assert_eq!(escape("a,b"), "a\\,b");
        assert_eq!(escape(" x "), "\\ x\\ ");
        assert_eq!(escape("#x#"), "\\#x#");
        assert_eq!(escape("plain.example.com"), "plain.example.com");
    }
}
