//! TLS listeners over LDS: a listener terminating TLS arrives and serves
//! HTTPS; a version whose certificate and key do not belong together cannot be
//! built and is NACKed by name while the version in force keeps serving; a
//! valid new certificate is served to new connections.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod tls_support;
mod xds_support;

use courier_tests::TestCa;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use prost::Name;
use serde_json::json;
use std::time::Duration;
use xds_support::ControlPlane;
use xds_support::lds::*;

/// A TLS listener answering `body`, with the certificate and key at `cert`.
fn tls_listener(cert: &(String, String), body: &str) -> envoy_types::pb::google::protobuf::Any {
    let ts = tls_support::tls_socket(cert, &["http/1.1"], json!({}), false);
    listener_from_json(tls_support::listener(
        "secure",
        vec![tls_support::chain(json!({}), Some(ts), body, "AUTO")],
    ))
}

async fn https_get(addr: std::net::SocketAddr, ca: &TestCa) -> String {
    let client = tls_support::Client {
        ca,
        sni: "localhost",
        alpn: &["http/1.1"],
        cert: None,
    };
    let s = tls_support::tls_connect(&addr.to_string(), &client)
        .await
        .unwrap();
    tls_support::get(s, false, "localhost").await.2
}

#[tokio::test]
async fn tls_listeners_over_lds_and_a_certificate_that_cannot_be_built() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("ca");
        let good = tls_support::write_pem(dir.path(), "good", &ca.leaf(&["localhost"]));
        let other = tls_support::write_pem(dir.path(), "other", &ca.leaf(&["localhost"]));
        // A certificate with another certificate's key.
        let mismatched = (good.0.clone(), other.1.clone());
        let lds_url = Listener::type_url();
        let mut cp = ControlPlane::start(xds_support::Resources::new()).await;
        cp.set(lds_url.clone(), "secure", tls_listener(&good, "tls-v1"));
        let c = start(&lds_only_bootstrap(cp.addr, "GRPC")).await;
        let addr = port_of(&c.admin, "secure").await;
        assert_eq!(https_get(addr, &ca).await, "tls-v1");

        cp.set(
            lds_url.clone(),
            "secure",
            tls_listener(&mismatched, "tls-bad"),
        );
        let mut nack = String::new();
        for _ in 0..50 {
            nack = lds_verdict(&mut cp).await;
            if nack != "ack" {
                break;
            }
        }
        assert!(nack.contains("'secure'"), "{nack}");
        assert_eq!(https_get(addr, &ca).await, "tls-v1");

        cp.set(lds_url.clone(), "secure", tls_listener(&other, "tls-v2"));
        for _ in 0..250 {
            if https_get(addr, &ca).await == "tls-v2" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(https_get(addr, &ca).await, "tls-v2");
        assert_eq!(listed(&c.admin, "secure").await, Some(addr));
    })
    .await
    .expect("in time");
}
