//! A cluster's `upstream_http_protocol_options` (`auto_sni`, `auto_san_validation`,
//! `override_auto_sni_header`) and `auto_config` protocol selection, through the
//! real binary against tokio-rustls upstreams on loopback with generated
//! certificates, which report the SNI and ALPN their handshake saw and the HTTP
//! version they were spoken to in.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::Bytes;
use courier_tests::{Pem, TestCa};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::sync::Arc;
use support::*;
use tokio::net::TcpListener;

/// Envoy 1.40's body for a failed upstream TLS handshake.
const TLS_FAILURE_BODY: &str = "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure";

/// A TLS upstream presenting `cert` and offering `alpn`, speaking strictly the
/// protocol ALPN chose (HTTP/2 for "h2", else HTTP/1.1); each response carries
/// `x-sni`, `x-alpn` and `x-version`.
async fn tls_upstream(cert: &Pem, alpn: &[&str]) -> SocketAddr {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(cert.cert.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(cert.key.as_bytes()).unwrap(),
        )
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let (_, conn) = tls.get_ref();
                let sni = conn.server_name().unwrap_or("none").to_string();
                let alpn = conn.alpn_protocol().map_or("none".to_string(), |p| {
                    String::from_utf8_lossy(p).into_owned()
                });
                let h2 = alpn == "h2";
                let service = service_fn(move |req: Request<Incoming>| {
                    let resp = Response::builder()
                        .header("x-sni", sni.as_str())
                        .header("x-alpn", alpn.as_str())
                        .header("x-version", format!("{:?}", req.version()))
                        .body(Full::new(Bytes::from("tls ok")))
                        .unwrap();
                    async move { Ok::<_, hyper::Error>(resp) }
                });
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                }
            });
        }
    });
    addr
}

/// A cluster `u` over `addr` with TLS (`context`: UpstreamTlsContext fields, one
/// line) and `HttpProtocolOptions` of `protocol` and `upstream`.
fn cluster(addr: SocketAddr, context: &str, protocol: &str, upstream: &str) -> String {
    cluster_of(&[addr], context, protocol, upstream, "")
}

/// [`cluster`] over `hosts`, with `extra` cluster fields.
fn cluster_of(
    hosts: &[SocketAddr],
    context: &str,
    protocol: &str,
    upstream: &str,
    extra: &str,
) -> String {
    static_cluster(
        "u",
        hosts,
        &format!(
            r#"transport_socket:
  name: envoy.transport_sockets.tls
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
    {context}
typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    {protocol}
    upstream_http_protocol_options: {upstream}
{extra}"#
        ),
    )
}

const HTTP1: &str = "explicit_http_config: {http_protocol_options: {}}";
const AUTO: &str = "auto_config: {}";
const ROUTE: &str = "- match: {prefix: \"/\"}\n  route: {cluster: u}\n";

/// A GET with `host` and `headers`, on a new downstream connection.
async fn get(c: &Courier, host: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = Request::get("/").header("host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    H1::connect(c.listener)
        .await
        .send(req.body(Full::default()).unwrap())
        .await
}

#[tokio::test]
async fn auto_sni_sends_the_request_host_and_pools_per_name() {
    let cert = TestCa::new("upstream CA").leaf(&["a.upstream.test"]);
    let addr = tls_upstream(&cert, &["http/1.1"]).await;
    let c = courier(
        "",
        ROUTE,
        &cluster(addr, "sni: configured.test", HTTP1, "{auto_sni: true}"),
    )
    .await;
    for host in ["a.upstream.test", "b.upstream.test:8443", "a.upstream.test"] {
        let r = get(&c, host, &[]).await;
        assert_eq!(r.status, 200, "{r:?}");
        // The host without its port, in place of the configured `sni`.
        assert_eq!(r.header("x-sni"), host.split(':').next(), "{host}");
    }
    // One connection per name: the third request reused the first's.
    assert_eq!(stat(&c, "cluster.u.upstream_cx_total").await, 2);

    // An IP host is not sent as SNI: the configured one is.
    let r = get(&c, "127.0.0.1:10000", &[]).await;
    assert_eq!(r.header("x-sni"), Some("configured.test"));
}

#[tokio::test]
async fn override_auto_sni_header_names_the_connection_when_present() {
    let cert = TestCa::new("upstream CA").leaf(&["a.upstream.test"]);
    let addr = tls_upstream(&cert, &["http/1.1"]).await;
    let opts = "{auto_sni: true, override_auto_sni_header: X-Upstream-Sni}";
    let c = courier("", ROUTE, &cluster(addr, "", HTTP1, opts)).await;
    let r = get(
        &c,
        "a.upstream.test",
        &[("x-upstream-sni", "from.header.test")],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-sni"), Some("from.header.test"));
    // Absent or empty: the host.
    let r = get(&c, "a.upstream.test", &[]).await;
    assert_eq!(r.header("x-sni"), Some("a.upstream.test"));
    let r = get(&c, "a.upstream.test", &[("x-upstream-sni", "")]).await;
    assert_eq!(r.header("x-sni"), Some("a.upstream.test"));
}

#[tokio::test]
async fn auto_san_validation_requires_the_host_as_a_san() {
    let ca = TestCa::new("upstream CA");
    let cert = ca.leaf(&["*.upstream.test"]);
    let addr = tls_upstream(&cert, &["http/1.1"]).await;
    let dir = tempfile::tempdir().unwrap();
    let trusted = dir.path().join("ca.pem");
    std::fs::write(&trusted, &ca.pem.cert).unwrap();
    // With trusted_ca, and a configured SAN matcher the host's SAN replaces.
    let with_ca = format!(
        "common_tls_context: {{validation_context: {{trusted_ca: {{filename: {}}}, match_typed_subject_alt_names: [{{san_type: DNS, matcher: {{exact: nothing.test}}}}]}}}}",
        trusted.display()
    );
    for context in [with_ca.as_str(), ""] {
        let opts = "{auto_sni: true, auto_san_validation: true}";
        let c = courier("", ROUTE, &cluster(addr, context, HTTP1, opts)).await;
        // The wildcard certificate covers one label.
        let r = get(&c, "api.upstream.test", &[]).await;
        assert_eq!(r.status, 200, "{context}: {r:?}");
        assert_eq!(r.header("x-sni"), Some("api.upstream.test"));
        for host in ["elsewhere.test", "a.b.upstream.test"] {
            let r = get(&c, host, &[]).await;
            assert_eq!(r.status, 503, "{context} {host}: {r:?}");
            assert_eq!(r.body, TLS_FAILURE_BODY);
        }
    }
    // Without auto_san_validation, and no validation context, any name passes.
    let c = courier("", ROUTE, &cluster(addr, "", HTTP1, "{auto_sni: true}")).await;
    assert_eq!(get(&c, "elsewhere.test", &[]).await.status, 200);
}

#[tokio::test]
async fn auto_config_speaks_what_alpn_picks() {
    let cert = TestCa::new("upstream CA").leaf(&["a.upstream.test"]);
    // An upstream that prefers h2: one multiplexed connection.
    let h2 = tls_upstream(&cert, &["h2", "http/1.1"]).await;
    let c = courier("", ROUTE, &cluster(h2, "", AUTO, "{auto_sni: true}")).await;
    for _ in 0..3 {
        let r = get(&c, "a.upstream.test", &[]).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, "tls ok");
        assert_eq!(r.header("x-alpn"), Some("h2"));
        assert_eq!(r.header("x-version"), Some("HTTP/2.0"));
        assert_eq!(r.header("x-sni"), Some("a.upstream.test"));
    }
    assert_eq!(stat(&c, "cluster.u.upstream_cx_total").await, 1);

    // An upstream that speaks only HTTP/1.1 (also without ALPN at all).
    for alpn in [&["http/1.1"][..], &[]] {
        let h1 = tls_upstream(&cert, alpn).await;
        let c = courier("", ROUTE, &cluster(h1, "", AUTO, "{}")).await;
        for _ in 0..2 {
            let r = get(&c, "a.upstream.test", &[]).await;
            assert_eq!(r.status, 200, "{r:?}");
            assert_eq!(r.header("x-version"), Some("HTTP/1.1"), "{alpn:?}");
        }
        assert_eq!(stat(&c, "cluster.u.upstream_cx_total").await, 1);
    }
}

#[tokio::test]
async fn health_checks_of_an_auto_config_cluster_offer_their_own_protocol() {
    let cert = TestCa::new("upstream CA").leaf(&["a.upstream.test"]);
    // It prefers h2; the check speaks HTTP/1.1, so must offer only that.
    let good = tls_upstream(&cert, &["h2", "http/1.1"]).await;
    let dead = support::programmable::closed_port();
    let hc = "health_checks:\n- timeout: 1s\n  interval: 0.05s\n  no_traffic_interval: 0.05s\n  unhealthy_threshold: 1\n  healthy_threshold: 1\n  http_health_check: {path: /healthz}\n";
    let c = courier("", ROUTE, &cluster_of(&[good, dead], "", AUTO, "{}", hc)).await;
    // Once the good host passes its checks and the dead one fails, every request
    // goes to the good one (with both failing, the panic threshold would send
    // some to the dead port).
    let mut all_ok = false;
    for _ in 0..100 {
        let mut ok = true;
        for _ in 0..10 {
            ok &= get(&c, "a.upstream.test", &[]).await.status == 200;
        }
        if ok {
            all_ok = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(all_ok);
}
