//! SDS through the real binary: a listener's certificate from a
//! `path_config_source` file, rotated by rename and by a Kubernetes-style
//! symlink swap while a connection stays open and two clients keep opening
//! new connections (no request may fail); an upstream cluster's client
//! certificate and validation context over a gRPC SDS stream to a tonic
//! server (requests fail as Envoy's before the secrets arrive, succeed once
//! they do, and a NACKed secret leaves the one in force). Certificates are
//! generated per test; every port is 0.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod xds_support;

use bytes::Bytes;
use courier_tests::{Pem, TestCa};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use prost::Name;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use support::tls_upstream::{Upstream, tls_upstream};
use support::*;
use xds_support::lds::{ready_status, stat_of};
use xds_support::*;

const SECRET: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";

fn der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

/// An SDS `DiscoveryResponse` file body with the certificate secret `name`.
fn cert_file(name: &str, pem: &Pem) -> String {
    json!({"version_info": "1", "resources": [{"@type": SECRET, "name": name, "tls_certificate": {
        "certificate_chain": {"inline_string": pem.cert},
        "private_key": {"inline_string": pem.key}}}]})
    .to_string()
}

/// Writes `body` to `path` atomically (a temporary file renamed over it).
fn replace(path: &Path, body: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, body).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A TLS client trusting `ca`: the server certificate it got, and the stream.
async fn connect(
    addr: std::net::SocketAddr,
    ca: &TestCa,
) -> (
    CertificateDer<'static>,
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der(&ca.pem.cert)).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let s = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let peer = s.get_ref().1.peer_certificates().unwrap()[0].clone();
    (peer, s)
}

/// One request on a new TLS connection (a new handshake): `Err` with why it
/// failed.
async fn one_request(
    addr: std::net::SocketAddr,
    roots: Arc<rustls::ClientConfig>,
) -> Result<(), String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let s = tokio_rustls::TlsConnector::from(roots)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = http::Request::get("/")
        .header("host", "localhost")
        .body(Full::<Bytes>::default())
        .unwrap();
    match send.send_request(req).await {
        Ok(r) if r.status() == 200 => Ok(()),
        Ok(r) => Err(format!("status {}", r.status())),
        Err(e) => Err(e.to_string()),
    }
}

/// Load while certificates rotate: two clients sending one request per new
/// connection until `stop`; the requests that succeeded and every failure.
fn load(
    addr: std::net::SocketAddr,
    ca: &TestCa,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<(u64, Vec<String>)> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der(&ca.pem.cert)).unwrap();
    let config = Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    );
    tokio::spawn(async move {
        let clients: Vec<_> = (0..2)
            .map(|_| {
                let config = Arc::clone(&config);
                let stop = stop.clone();
                tokio::spawn(async move {
                    let (mut ok, mut failed) = (0u64, Vec::new());
                    // Bounded by count as well as by `stop`.
                    for _ in 0..100_000 {
                        if *stop.borrow() {
                            break;
                        }
                        match one_request(addr, Arc::clone(&config)).await {
                            Ok(()) => ok += 1,
                            Err(e) => failed.push(e),
                        }
                    }
                    (ok, failed)
                })
            })
            .collect();
        let (mut ok, mut failed) = (0, Vec::new());
        for c in clients {
            let (o, f) = c.await.unwrap();
            ok += o;
            failed.extend(f);
        }
        (ok, failed)
    })
}

/// GET `/` on a keep-alive connection: the status.
async fn get(send: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>) -> u16 {
    let req = http::Request::get("/")
        .header("host", "localhost")
        .body(Full::default())
        .unwrap();
    send.send_request(req).await.unwrap().status().as_u16()
}

#[tokio::test]
async fn file_sds_listener_certificate_rotates_for_new_handshakes() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("sds ca");
    let (a, b, third) = (
        ca.leaf(&["localhost"]),
        ca.leaf(&["localhost"]),
        ca.leaf(&["localhost"]),
    );
    // Kubernetes' layout: `sds.json` -> `..data/sds.json`, `..data` -> a
    // timestamped directory swapped atomically.
    let v1 = dir.path().join("..v1");
    std::fs::create_dir(&v1).unwrap();
    std::fs::write(v1.join("sds.json"), cert_file("server", &a)).unwrap();
    std::os::unix::fs::symlink("..v1", dir.path().join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/sds.json", dir.path().join("sds.json")).unwrap();
    let sds = dir.path().join("sds.json");
    let config = format!(
        r#"
node: {{id: sds-test, cluster: test}}
admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}}}
static_resources:
  listeners:
  - name: ingress
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificate_sds_secret_configs:
            - name: server
              sds_config: {{path_config_source: {{path: "{sds}"}}, resource_api_version: V3}}
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{{match: {{prefix: "/"}}, direct_response: {{status: 200, body: {{inline_string: ok}}}}}}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
"#,
        sds = sds.display()
    );
    let c = launch(&config).await;
    for _ in 0..250 {
        if ready_status(&c.admin).await == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ready_status(&c.admin).await, 200);

    let (peer, s) = connect(c.listener, &ca).await;
    assert_eq!(peer, der(&a.cert), "the first handshake gets certificate A");
    let (mut held, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
        .await
        .unwrap();
    tokio::spawn(conn);
    assert_eq!(get(&mut held).await, 200);
    // Requests on new connections all through both rotations: none may fail.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let loaded = load(c.listener, &ca, stopped);

    // Rotation by rename (the file the symlinks lead to is replaced).
    replace(&v1.join("sds.json"), &cert_file("server", &b));
    let mut rotated = false;
    for _ in 0..250 {
        if connect(c.listener, &ca).await.0 == der(&b.cert) {
            rotated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(rotated, "new handshakes get certificate B");
    // The connection opened before the rotation keeps working.
    assert_eq!(get(&mut held).await, 200);

    // Rotation by Kubernetes' atomic symlink swap of `..data`.
    let v2 = dir.path().join("..v2");
    std::fs::create_dir(&v2).unwrap();
    std::fs::write(v2.join("sds.json"), cert_file("server", &third)).unwrap();
    std::os::unix::fs::symlink("..v2", dir.path().join("..data_tmp")).unwrap();
    std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).unwrap();
    let mut swapped = false;
    for _ in 0..250 {
        if connect(c.listener, &ca).await.0 == der(&third.cert) {
            swapped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(swapped, "new handshakes get certificate C after the swap");
    assert_eq!(get(&mut held).await, 200);
    stop.send(true).unwrap();
    let (ok, failed) = loaded.await.unwrap();
    assert!(
        failed.is_empty(),
        "requests failed during rotation: {failed:?}"
    );
    assert!(ok > 0, "the load sent requests");

    // A bad file leaves the certificate in force.
    replace(&v2.join("sds.json"), "{not json");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(connect(c.listener, &ca).await.0, der(&third.cert));
    assert_eq!(stat_of(&c.admin, "sds.server.update_success").await, 3);
    assert!(stat_of(&c.admin, "sds.server.update_attempt").await >= 3);
}

/// A `Secret` resource from JSON.
fn secret(json: serde_json::Value) -> envoy_types::pb::google::protobuf::Any {
    let ctx_json = json;
    // Built field by field: envoy-types has no JSON mapping.
    use envoy_types::pb::envoy::config::core::v3::{DataSource, data_source::Specifier};
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        CertificateValidationContext, TlsCertificate, secret,
    };
    let inline = |s: &str| {
        Some(DataSource {
            specifier: Some(Specifier::InlineString(s.to_string())),
            ..Default::default()
        })
    };
    let name = ctx_json["name"].as_str().unwrap().to_string();
    let r#type = if let Some(tc) = ctx_json.get("tls_certificate") {
        secret::Type::TlsCertificate(TlsCertificate {
            certificate_chain: inline(tc["chain"].as_str().unwrap()),
            private_key: inline(tc["key"].as_str().unwrap()),
            ..Default::default()
        })
    } else {
        secret::Type::ValidationContext(CertificateValidationContext {
            trusted_ca: inline(ctx_json["validation_context"]["ca"].as_str().unwrap()),
            ..Default::default()
        })
    };
    any(&Secret {
        name,
        r#type: Some(r#type),
    })
}

fn cert_secret(name: &str, chain: &str, key: &str) -> envoy_types::pb::google::protobuf::Any {
    secret(json!({"name": name, "tls_certificate": {"chain": chain, "key": key}}))
}

fn ca_secret(name: &str, ca: &str) -> envoy_types::pb::google::protobuf::Any {
    secret(json!({"name": name, "validation_context": {"ca": ca}}))
}

/// A plaintext listener `ingress` routing to cluster `backend` (TLS to
/// `upstream` with its client certificate and validation context from the
/// SDS stream of cluster `sds`).
fn upstream_bootstrap(cp: std::net::SocketAddr, upstream: std::net::SocketAddr) -> String {
    let sds = "{api_config_source: {api_type: GRPC, transport_api_version: V3, set_node_on_first_message_only: true, grpc_services: [{envoy_grpc: {cluster_name: sds}}]}, resource_api_version: V3, initial_fetch_timeout: 1s}";
    format!(
        r#"
node: {{id: sds-test, cluster: test}}
admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}}}
static_resources:
  listeners:
  - name: ingress
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{{match: {{prefix: "/"}}, route: {{cluster: backend}}}}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: sds
    connect_timeout: 1s
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: sds
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {cp_port}}}}}}}}}]}}]
  - name: backend
    connect_timeout: 1s
    type: STATIC
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: localhost
        common_tls_context:
          tls_certificate_sds_secret_configs: [{{name: client, sds_config: {sds}}}]
          combined_validation_context:
            default_validation_context:
              match_typed_subject_alt_names: [{{san_type: DNS, matcher: {{exact: localhost}}}}]
            validation_context_sds_secret_config: {{name: upstream-ca, sds_config: {sds}}}
    load_assignment:
      cluster_name: backend
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {up_port}}}}}}}}}]}}]
"#,
        cp_port = cp.port(),
        up_port = upstream.port(),
    )
}

#[tokio::test]
async fn grpc_sds_upstream_client_certificate_and_validation() {
    let upstream_ca = TestCa::new("upstream ca");
    let client_ca = TestCa::new("client ca");
    let server = upstream_ca.leaf(&["localhost"]);
    let client = client_ca.leaf(&["client"]);
    // An mTLS upstream that takes only client certificates of `client_ca`,
    // a new connection per request (each request is a new handshake).
    let up = tls_upstream(Upstream {
        cert: &server,
        client_ca: Some(&client_ca),
        close: true,
    })
    .await;
    let mut cp = ControlPlane::start(Resources::new()).await;
    let c = launch(&upstream_bootstrap(cp.addr, up)).await;
    // Both secrets asked for on their own streams, with the node.
    let first = cp.saw("Secret[client]").await;
    assert!(first.contains("node=sds-test"), "{first}");
    cp.saw("Secret[upstream-ca]").await;

    // Before the secrets: 503, as Envoy's NotReadySslSocket makes it (a
    // connect failure; its local reply names no TLS detail).
    let r = H1::connect(c.listener).await.get("/", &[]).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(
        r.body,
        "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure"
    );
    // Warming ends at initial_fetch_timeout (1 s): /ready says LIVE.
    for _ in 0..250 {
        if ready_status(&c.admin).await == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ready_status(&c.admin).await, 200);
    assert_eq!(stat_of(&c.admin, "sds.client.init_fetch_timeout").await, 1);
    assert!(
        stat_of(
            &c.admin,
            "cluster.backend.client_ssl_socket_factory.upstream_context_secrets_not_ready"
        )
        .await
            >= 1
    );

    // The secrets arrive: requests go through with the client certificate.
    cp.set(
        SECRET.into(),
        "client",
        cert_secret("client", &client.cert, &client.key),
    );
    cp.set(
        SECRET.into(),
        "upstream-ca",
        ca_secret("upstream-ca", &upstream_ca.pem.cert),
    );
    let r = until(c.listener, |r| r.status == 200).await;
    assert_eq!(r.header("x-client-cert"), Some("present"));
    assert_eq!(stat_of(&c.admin, "sds.client.update_success").await, 1);

    // A bad secret (a key that is not the certificate's) is NACKed; the
    // secret in force stays, and new handshakes still use it.
    let other = client_ca.leaf(&["client"]);
    cp.set(
        SECRET.into(),
        "client",
        cert_secret("client", &client.cert, &other.key),
    );
    let nack = cp.saw("KEY_VALUES_MISMATCH").await;
    assert!(nack.contains("Secret[client]"), "{nack}");
    for _ in 0..5 {
        let r = H1::connect(c.listener).await.get("/", &[]).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(stat_of(&c.admin, "sds.client.update_rejected").await, 1);

    // A certificate the upstream does not trust: the rotation applies, and
    // the upstream refuses the handshake.
    let stranger = TestCa::new("stranger").leaf(&["client"]);
    cp.set(
        SECRET.into(),
        "client",
        cert_secret("client", &stranger.cert, &stranger.key),
    );
    let r = until(c.listener, |r| r.status == 503).await;
    assert_eq!(r.status, 503);
    assert_eq!(SECRET, Secret::type_url());
}
