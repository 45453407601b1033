//! Upstream TLS through the real binary: a tokio-rustls upstream on loopback
//! port 0 reports, in response headers, what its TLS handshake saw (SNI, ALPN,
//! client certificate, resumption) and the HTTP version it was spoken to in.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use courier_tests::TestCa;
use std::net::SocketAddr;
use std::path::Path;
use support::tls_upstream::{Upstream, tls_upstream};
use support::*;
use tokio::net::TcpListener;

/// Envoy 1.40's body for a failed upstream TLS handshake (checked against
/// `/work/venv/bin/envoy`: the transport failure reason goes to the debug log
/// and `%UPSTREAM_TRANSPORT_FAILURE_REASON%`, not into the local reply).
const TLS_FAILURE_BODY: &str = "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure";

const H2: &str = r#"typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    explicit_http_config:
      http2_protocol_options: {}
"#;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// A cluster `u` over `addr` with an UpstreamTlsContext whose fields are
/// `context` (YAML at the context's indentation), plus `extra` cluster fields.
fn tls_cluster(addr: SocketAddr, context: &str, extra: &str) -> String {
    let context: String = context.lines().map(|l| format!("    {l}\n")).collect();
    let ts = format!(
        "transport_socket:\n  name: envoy.transport_sockets.tls\n  typed_config:\n    \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext\n{context}"
    );
    static_cluster("u", &[addr], &format!("{ts}{extra}"))
}

const ROUTE: &str = "- match: {prefix: \"/\"}\n  route: {cluster: u}\n";

async fn get(c: &Courier) -> Reply {
    H1::connect(c.listener).await.get("/", &[]).await
}

#[tokio::test]
async fn without_validation_context_any_certificate_is_accepted() {
    // Signed by a CA courier knows nothing about, for a name nobody asked for.
    let cert = TestCa::new("unknown CA").leaf(&["elsewhere.test"]);
    let addr = tls_upstream(Upstream {
        cert: &cert,
        client_ca: None,
        close: false,
    })
    .await;
    let c = courier("", ROUTE, &tls_cluster(addr, "", "")).await;
    let r = get(&c).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, "tls ok");
    // No `sni`: no SNI sent (Envoy's behaviour); an HTTP/1.1 cluster without
    // `alpn_protocols` offers "http/1.1", as Envoy's HTTP/1.1 pool does.
    assert_eq!(r.header("x-sni"), Some("none"));
    assert_eq!(r.header("x-alpn"), Some("http/1.1"));
    assert_eq!(r.header("x-client-cert"), Some("absent"));
    assert_eq!(r.header("x-version"), Some("HTTP/1.1"));
}

#[tokio::test]
async fn trusted_ca_and_san_matchers_are_enforced() {
    let ca = TestCa::new("upstream CA");
    let cert = ca.leaf(&["api.upstream.test"]);
    let addr = tls_upstream(Upstream {
        cert: &cert,
        client_ca: None,
        close: false,
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.pem", &ca.pem.cert);
    let wrong = write(dir.path(), "wrong.pem", &TestCa::new("other CA").pem.cert);
    let validation = |ca: &str, san: &str| {
        format!(
            "common_tls_context:\n  validation_context:\n    trusted_ca: {{filename: {ca}}}\n{san}"
        )
    };
    let san = |name: &str| {
        format!(
            "    match_typed_subject_alt_names:\n    - san_type: DNS\n      matcher: {{exact: {name}}}\n"
        )
    };

    // The right CA; the host name (an IP here) is not checked against the certificate.
    let c = courier("", ROUTE, &tls_cluster(addr, &validation(&good, ""), "")).await;
    let r = get(&c).await;
    assert_eq!((r.status, r.body.as_str()), (200, "tls ok"));

    // The right CA and a matching SAN.
    let cfg = validation(&good, &san("api.upstream.test"));
    let c = courier("", ROUTE, &tls_cluster(addr, &cfg, "")).await;
    assert_eq!(get(&c).await.status, 200);

    // The wrong CA, or a SAN that does not match: Envoy's 503 for a TLS failure.
    for cfg in [
        validation(&wrong, ""),
        validation(&good, &san("other.upstream.test")),
    ] {
        let c = courier("", ROUTE, &tls_cluster(addr, &cfg, "")).await;
        let r = get(&c).await;
        assert_eq!(r.status, 503, "{cfg}: {r:?}");
        assert_eq!(r.body, TLS_FAILURE_BODY, "{cfg}");
        assert_eq!(stat(&c, "cluster.u.upstream_cx_connect_fail").await, 1);
        assert_eq!(stat(&c, "cluster.u.upstream_rq_503").await, 1);
    }
}

#[tokio::test]
async fn sni_is_sent_as_configured() {
    let cert = TestCa::new("upstream CA").leaf(&["api.upstream.test"]);
    let addr = tls_upstream(Upstream {
        cert: &cert,
        client_ca: None,
        close: false,
    })
    .await;
    let c = courier("", ROUTE, &tls_cluster(addr, "sni: api.upstream.test", "")).await;
    let r = get(&c).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-sni"), Some("api.upstream.test"));
}

#[tokio::test]
async fn an_upstream_requiring_a_client_certificate_gets_courier_s() {
    let server_ca = TestCa::new("upstream CA");
    let cert = server_ca.leaf(&["api.upstream.test"]);
    let client_ca = TestCa::new("client CA");
    let client = client_ca.leaf(&["courier.test"]);
    let addr = tls_upstream(Upstream {
        cert: &cert,
        client_ca: Some(&client_ca),
        close: false,
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let chain = write(dir.path(), "client.pem", &client.cert);
    let key = write(dir.path(), "client.key", &client.key);
    let trusted = write(dir.path(), "ca.pem", &server_ca.pem.cert);

    let with_cert = format!(
        "common_tls_context:\n  tls_certificates:\n  - certificate_chain: {{filename: {chain}}}\n    private_key: {{filename: {key}}}\n  validation_context:\n    trusted_ca: {{filename: {trusted}}}\n"
    );
    let c = courier("", ROUTE, &tls_cluster(addr, &with_cert, "")).await;
    let r = get(&c).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-client-cert"), Some("present"));

    // Without one the upstream refuses the handshake.
    let c = courier("", ROUTE, &tls_cluster(addr, "", "")).await;
    let r = get(&c).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.body, TLS_FAILURE_BODY);
}

#[tokio::test]
async fn http2_clusters_negotiate_h2_over_tls() {
    let cert = TestCa::new("upstream CA").leaf(&["api.upstream.test"]);
    let addr = tls_upstream(Upstream {
        cert: &cert,
        client_ca: None,
        close: false,
    })
    .await;
    let c = courier("", ROUTE, &tls_cluster(addr, "", H2)).await;
    // Several requests share the one multiplexed connection.
    for _ in 0..3 {
        let r = get(&c).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.header("x-alpn"), Some("h2"));
        assert_eq!(r.header("x-version"), Some("HTTP/2.0"));
    }
    assert_eq!(stat(&c, "cluster.u.upstream_cx_total").await, 1);

    // An HTTP/1.1 cluster offers the configured ALPN list (here the upstream
    // prefers h2 but courier offers only http/1.1).
    let cfg = "common_tls_context: {alpn_protocols: [\"http/1.1\"]}";
    let c = courier("", ROUTE, &tls_cluster(addr, cfg, "")).await;
    let r = get(&c).await;
    assert_eq!(r.header("x-alpn"), Some("http/1.1"));
    assert_eq!(r.header("x-version"), Some("HTTP/1.1"));
}

#[tokio::test]
async fn sessions_are_resumed_unless_max_session_keys_is_zero() {
    let cert = TestCa::new("upstream CA").leaf(&["api.upstream.test"]);
    // Each response closes its connection: the second request needs a new one.
    let addr = tls_upstream(Upstream {
        cert: &cert,
        client_ca: None,
        close: true,
    })
    .await;
    let c = courier("", ROUTE, &tls_cluster(addr, "", "")).await;
    assert_eq!(get(&c).await.header("x-resumed"), Some("no"));
    assert_eq!(get(&c).await.header("x-resumed"), Some("yes"));
    assert_eq!(stat(&c, "cluster.u.upstream_cx_total").await, 2);

    let c = courier("", ROUTE, &tls_cluster(addr, "max_session_keys: 0", "")).await;
    assert_eq!(get(&c).await.header("x-resumed"), Some("no"));
    assert_eq!(get(&c).await.header("x-resumed"), Some("no"));
}

#[tokio::test]
async fn connect_timeout_covers_the_tls_handshake() {
    // Accepts TCP and never answers the ClientHello. Envoy 1.40 (checked) then
    // times the connection out after connect_timeout (1 s here), counting it in
    // upstream_cx_connect_timeout.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let c = courier("", ROUTE, &tls_cluster(addr, "", "")).await;
    let started = tokio::time::Instant::now();
    let r = get(&c).await;
    let elapsed = started.elapsed();
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(
        r.body,
        "upstream connect error or disconnect/reset before headers. reset reason: connection timeout"
    );
    assert!(
        elapsed >= std::time::Duration::from_millis(900)
            && elapsed < std::time::Duration::from_secs(5),
        "{elapsed:?}"
    );
    assert_eq!(stat(&c, "cluster.u.upstream_cx_connect_timeout").await, 1);
    assert_eq!(stat(&c, "cluster.u.upstream_cx_connect_fail").await, 1);
    held.abort();
}

#[tokio::test]
async fn health_checks_of_a_tls_cluster_run_over_tls() {
    let ca = TestCa::new("upstream CA");
    let good_cert = ca.leaf(&["api.upstream.test"]);
    let other_cert = TestCa::new("other CA").leaf(&["api.upstream.test"]);
    let good = tls_upstream(Upstream {
        cert: &good_cert,
        client_ca: None,
        close: false,
    })
    .await;
    // A host whose certificate courier does not trust: its checks fail the handshake.
    let untrusted = tls_upstream(Upstream {
        cert: &other_cert,
        client_ca: None,
        close: false,
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = write(dir.path(), "ca.pem", &ca.pem.cert);
    let context: String = format!(
        "common_tls_context:\n  validation_context:\n    trusted_ca: {{filename: {ca_file}}}\n"
    )
    .lines()
    .map(|l| format!("    {l}\n"))
    .collect();
    let ts = format!(
        "transport_socket:\n  name: envoy.transport_sockets.tls\n  typed_config:\n    \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext\n{context}"
    );
    let hc = "health_checks:\n- timeout: 1s\n  interval: 0.05s\n  no_traffic_interval: 0.05s\n  unhealthy_threshold: 1\n  healthy_threshold: 1\n  http_health_check: {path: /healthz}\n";
    let c = courier(
        "",
        ROUTE,
        &static_cluster("u", &[good, untrusted], &format!("{ts}{hc}")),
    )
    .await;
    // Once the good host passes (over TLS) and the untrusted one fails, every
    // request goes to the good one. A plaintext check would fail both, and the
    // panic threshold would then route to the untrusted host too.
    let mut h = H1::connect(c.listener).await;
    let mut all_ok = false;
    for _ in 0..100 {
        let mut ok = true;
        for _ in 0..10 {
            ok &= h.get("/", &[]).await.status == 200;
        }
        if ok {
            all_ok = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(all_ok);
    for _ in 0..20 {
        assert_eq!(h.get("/", &[]).await.status, 200);
    }
}
