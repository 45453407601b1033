//! RBAC on TLS facts through the real binary: `authenticated` principals match the
//! client certificate's SANs and subject, `requested_server_name` the SNI.
//! Certificates are generated in the test; every port is 0.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod tls_support;

use courier_tests::{Pem, TestCa};
use serde_json::{Value, json};
use tls_support::*;

/// An RBAC filter allowing only `principal` (an `authenticated` principal).
fn rbac_allow(principal: Value) -> Value {
    json!({
        "name": "envoy.filters.http.rbac",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC",
            "rules": { "action": "ALLOW", "policies": { "p": {
                "permissions": [{ "any": true }],
                "principals": [principal],
            }}},
        },
    })
}

/// A chain with client certificates optional and `filter` before the router.
fn mtls_chain(cert: &(String, String), trusted: &str, filter: Value, body: &str) -> Value {
    let ts = tls_socket(
        cert,
        &["http/1.1"],
        json!({ "validation_context": { "trusted_ca": { "filename": trusted } } }),
        false,
    );
    let mut fc = chain(json!({}), Some(ts), body, "AUTO");
    let filters = fc["filters"][0]["typed_config"]["http_filters"]
        .as_array_mut()
        .unwrap();
    filters.insert(0, filter);
    fc
}

/// The CA of the client certificates.
struct ClientCa {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl ClientCa {
    fn new() -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "clients");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Self {
            pem,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A client certificate with these DNS SANs and common name.
    fn cert(&self, sans: &[&str], cn: &str) -> Pem {
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(sans).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

async fn status(addr: &str, ca: &TestCa, cert: Option<&Pem>) -> String {
    let client = Client {
        ca,
        sni: "localhost",
        alpn: &[],
        cert,
    };
    let s = tls_connect(addr, &client).await.unwrap();
    let resp = raw_request(s).await.unwrap();
    resp.lines().next().unwrap_or("").to_string()
}

#[tokio::test]
async fn rbac_authenticated_matches_the_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("trusted");
    let cert = write_pem(dir.path(), "server", &ca.leaf(&["localhost"]));
    let clients = ClientCa::new();
    let trusted = dir.path().join("clients-ca.pem");
    std::fs::write(&trusted, &clients.pem).unwrap();
    let trusted = trusted.display().to_string();
    let by_san = rbac_allow(
        json!({ "authenticated": { "principal_name": { "exact": "allowed.example.com" } } }),
    );
    let by_subject = rbac_allow(
        json!({ "authenticated": { "principal_name": { "exact": "CN=subject.example.com" } } }),
    );
    let any_cert = rbac_allow(json!({ "authenticated": {} }));
    let sni = rbac_allow(json!({ "any": true }));
    let mut sni = sni;
    sni["typed_config"]["rules"]["policies"]["p"]["permissions"] =
        json!([{ "requested_server_name": { "exact": "localhost" } }]);
    let c = start(
        dir.path(),
        vec![
            listener("san", vec![mtls_chain(&cert, &trusted, by_san, "san")]),
            listener(
                "subject",
                vec![mtls_chain(&cert, &trusted, by_subject, "subject")],
            ),
            listener("any", vec![mtls_chain(&cert, &trusted, any_cert, "any")]),
            listener("sni", vec![mtls_chain(&cert, &trusted, sni, "sni")]),
        ],
    );
    let allowed = clients.cert(&["allowed.example.com"], "allowed.example.com");
    let other = clients.cert(&["other.example.com"], "other.example.com");
    // A certificate without SANs: only its subject can match.
    let subject_only = clients.cert(&[], "subject.example.com");

    let ok = "HTTP/1.1 200 OK";
    let denied = "HTTP/1.1 403 Forbidden";
    let san = c.addr("san").to_string();
    assert_eq!(status(&san, &ca, Some(&allowed)).await, ok);
    assert_eq!(status(&san, &ca, Some(&other)).await, denied);
    assert_eq!(status(&san, &ca, None).await, denied);
    let subject = c.addr("subject").to_string();
    assert_eq!(status(&subject, &ca, Some(&subject_only)).await, ok);
    assert_eq!(status(&subject, &ca, Some(&allowed)).await, denied);
    let any = c.addr("any").to_string();
    assert_eq!(status(&any, &ca, Some(&other)).await, ok);
    // As Envoy: `authenticated` without a name matches any TLS connection.
    assert_eq!(status(&any, &ca, None).await, ok);
    let sni = c.addr("sni").to_string();
    assert_eq!(status(&sni, &ca, None).await, ok);
}
