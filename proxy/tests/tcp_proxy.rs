//! The TCP proxy behind a TLS-terminating filter chain, through the real
//! binary: the upstream gets the decrypted bytes and the client's end (its
//! close_notify and FIN), and its answer comes back encrypted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod tls_support;

use courier_tests::TestCa;
use serde_json::json;
use tls_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[tokio::test]
async fn a_tls_chain_feeds_decrypted_bytes_to_the_upstream() {
    // The upstream reads to the client's end, then answers.
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = up.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = up.accept().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        s.write_all(b"plain: ").await.unwrap();
        s.write_all(&got).await.unwrap();
    });
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("ca");
    let cert = write_pem(dir.path(), "server", &ca.leaf(&["tcp.example"]));
    let chain = json!({
        "filter_chain_match": {"server_names": ["tcp.example"]},
        "transport_socket": tls_socket(&cert, &[], json!({}), false),
        "filters": [{
            "name": "envoy.filters.network.tcp_proxy",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                "stat_prefix": "tls_tcp",
                "cluster": "plain",
            },
        }],
    });
    let config = json!({
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
        "static_resources": {
            "listeners": [listener("tls", vec![chain])],
            "clusters": [{
                "name": "plain",
                "connect_timeout": "1s",
                "load_assignment": {"cluster_name": "plain", "endpoints": [{"lb_endpoints": [
                    {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}
                ]}]},
            }],
        },
    });
    let path = dir.path().join("courier.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let c = start_file(dir.path(), &path);
    let client = Client {
        ca: &ca,
        sni: "tcp.example",
        alpn: &[],
        cert: None,
    };
    let mut s = tls_connect(c.addr("tls"), &client).await.unwrap();
    s.write_all(b"secret bytes").await.unwrap();
    // close_notify, then FIN: the upstream sees its end and still answers.
    s.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer).await;
    assert_eq!(String::from_utf8_lossy(&answer), "plain: secret bytes");
}
