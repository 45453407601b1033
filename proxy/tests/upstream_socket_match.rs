//! `transport_socket_matches` through the real binary: a cluster's hosts get
//! their transport socket from their endpoint's (then their locality's)
//! metadata under `envoy.transport_socket_match`, the cluster's own socket
//! otherwise. Real TLS upstreams (reporting the SNI they saw) and a plaintext
//! echo upstream on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use courier_tests::TestCa;
use std::net::SocketAddr;
use support::tls_upstream::{Upstream, tls_upstream};
use support::*;

const TLS: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
const RAW: &str = "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer";

fn endpoint(addr: SocketAddr, metadata: &str) -> String {
    format!(
        "      - endpoint: {{address: {{socket_address: {{address: {}, port_value: {}}}}}}}\n{metadata}",
        addr.ip(),
        addr.port()
    )
}

fn md(indent: usize, fields: &str) -> String {
    format!(
        "{}metadata: {{filter_metadata: {{envoy.transport_socket_match: {{{fields}}}}}}}\n",
        " ".repeat(indent)
    )
}

/// Cluster `name` whose socket is chosen per endpoint: match `sni` (TLS with
/// SNI `sni.test`) for `{tls: "sni"}`, match `plain` (raw buffer) for
/// `{plain: true}`, else the cluster's TLS socket without SNI. `localities`
/// are YAML `endpoints:` items.
fn cluster(name: &str, localities: &str, extra: &str) -> String {
    format!(
        r#"- name: {name}
  connect_timeout: 2s
  transport_socket:
    name: envoy.transport_sockets.tls
    typed_config: {{"@type": {TLS}}}
  transport_socket_matches:
  - name: sni
    match: {{tls: "sni"}}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config: {{"@type": {TLS}, sni: sni.test}}
  - name: plain
    match: {{plain: true}}
    transport_socket:
      name: envoy.transport_sockets.raw_buffer
      typed_config: {{"@type": {RAW}}}
{extra}  load_assignment:
    cluster_name: {name}
    endpoints:
{localities}"#
    )
}

fn routes(clusters: &[&str]) -> String {
    clusters
        .iter()
        .map(|c| format!("- match: {{prefix: \"/{c}\"}}\n  route: {{cluster: {c}}}\n"))
        .collect()
}

async fn tls_upstream_for(ca: &TestCa) -> SocketAddr {
    tls_upstream(Upstream {
        cert: &ca.leaf(&["sni.test"]),
        client_ca: None,
        close: false,
    })
    .await
}

#[tokio::test]
async fn each_host_connects_with_the_socket_its_metadata_matches() {
    let ca = TestCa::new("upstream CA");
    let tls = tls_upstream_for(&ca).await;
    let plain = echo_upstream("plain").await;
    let clusters = [
        // The endpoint's metadata picks the SNI socket.
        cluster(
            "endpoint",
            &format!("    - lb_endpoints:\n{}", endpoint(tls, &md(8, "tls: sni"))),
            "",
        ),
        // Nothing matches: the cluster's own socket (TLS, no SNI).
        cluster(
            "fallback",
            &format!(
                "    - lb_endpoints:\n{}",
                endpoint(tls, &md(8, "tls: other"))
            ),
            "",
        ),
        // No endpoint metadata: the locality's picks the SNI socket.
        cluster(
            "locality",
            &format!(
                "    - {}      lb_endpoints:\n{}",
                md(0, "tls: sni"),
                endpoint(tls, "")
            ),
            "",
        ),
        // The endpoint's match wins over the locality's, whatever their order.
        cluster(
            "precedence",
            &format!(
                "    - {}      lb_endpoints:\n{}",
                md(0, "tls: sni"),
                endpoint(plain, &md(8, "plain: true"))
            ),
            "",
        ),
        // A plaintext host in a TLS cluster.
        cluster(
            "plaintext",
            &format!(
                "    - lb_endpoints:\n{}",
                endpoint(plain, &md(8, "plain: true"))
            ),
            "",
        ),
    ]
    .concat();
    let names = [
        "endpoint",
        "fallback",
        "locality",
        "precedence",
        "plaintext",
    ];
    let c = courier("", &routes(&names), &clusters).await;
    let get = |path: &'static str| {
        let listener = c.listener;
        async move { H1::connect(listener).await.get(path, &[]).await }
    };

    let r = get("/endpoint").await;
    assert_eq!(
        (r.status, r.header("x-sni")),
        (200, Some("sni.test")),
        "{r:?}"
    );
    let r = get("/fallback").await;
    assert_eq!((r.status, r.header("x-sni")), (200, Some("none")), "{r:?}");
    let r = get("/locality").await;
    assert_eq!(
        (r.status, r.header("x-sni")),
        (200, Some("sni.test")),
        "{r:?}"
    );
    for path in ["/precedence", "/plaintext"] {
        let r = get(path).await;
        assert_eq!(
            (r.status, r.header("x-upstream")),
            (200, Some("plain")),
            "{path}: {r:?}"
        );
    }

    // Envoy's counters: hosts built with each socket.
    for (name, n) in [
        ("cluster.endpoint.sni.total_match_count", 1),
        ("cluster.endpoint.default.total_match_count", 0),
        ("cluster.fallback.default.total_match_count", 1),
        ("cluster.fallback.sni.total_match_count", 0),
        ("cluster.locality.sni.total_match_count", 1),
        ("cluster.precedence.plain.total_match_count", 1),
        ("cluster.precedence.sni.total_match_count", 0),
        ("cluster.plaintext.plain.total_match_count", 1),
    ] {
        assert_eq!(stat(&c, name).await, n, "{name}");
    }
}

#[tokio::test]
async fn hosts_of_one_address_with_different_sockets_are_pooled_apart() {
    // The same upstream address twice in one cluster, once per socket: each
    // request must go over a connection of its host's socket, never one the
    // other host's socket opened (keep-alive would otherwise reuse it).
    let ca = TestCa::new("upstream CA");
    let tls = tls_upstream_for(&ca).await;
    let localities = format!(
        "    - lb_endpoints:\n{}    - lb_endpoints:\n{}",
        endpoint(tls, &md(8, "tls: sni")),
        endpoint(tls, ""),
    );
    let c = courier("", &routes(&["both"]), &cluster("both", &localities, "")).await;
    let mut client = H1::connect(c.listener).await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let r = client.get("/both", &[]).await;
        assert_eq!(r.status, 200, "{r:?}");
        seen.push(r.header("x-sni").unwrap().to_string());
    }
    // Round robin alternates the hosts, and each keeps its own SNI.
    seen.sort();
    assert_eq!(seen, ["none", "none", "sni.test", "sni.test"]);
    assert_eq!(stat(&c, "cluster.both.upstream_cx_total").await, 2);
}

#[tokio::test]
async fn a_health_check_uses_the_socket_its_criteria_match() {
    // The host is plaintext by its metadata; the check's
    // `transport_socket_match_criteria` sends it over the SNI socket (TLS), to
    // a TLS port given by `health_check_config.port_value`. A plaintext check
    // of the TLS port would fail, and the host with it.
    let ca = TestCa::new("upstream CA");
    let tls = tls_upstream_for(&ca).await;
    let plain = echo_upstream("plain").await;
    let hc = r#"  common_lb_config: {healthy_panic_threshold: {value: 0}}
  health_checks:
  - timeout: 1s
    interval: 0.2s
    unhealthy_threshold: 1
    healthy_threshold: 1
    http_health_check: {path: /healthz}
    transport_socket_match_criteria: {tls: "sni"}
"#;
    let localities = format!(
        "    - lb_endpoints:\n      - endpoint:\n          address: {{socket_address: {{address: {}, port_value: {}}}}}\n          health_check_config: {{port_value: {}}}\n{}",
        plain.ip(),
        plain.port(),
        tls.port(),
        md(8, "plain: true")
    );
    let c = courier(
        "",
        &routes(&["checked"]),
        &cluster("checked", &localities, hc),
    )
    .await;
    // Unhealthy until its first check passes (no panic routing): that check
    // goes over TLS, then the host takes traffic (plaintext).
    let mut last = None;
    for _ in 0..100 {
        let r = H1::connect(c.listener).await.get("/checked", &[]).await;
        if r.status == 200 {
            assert_eq!(r.header("x-upstream"), Some("plain"), "{r:?}");
            return;
        }
        last = Some(r);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the host never passed its check: {last:?}");
}

#[tokio::test]
async fn a_combined_validation_context_merges_its_default_and_its_secret() {
    // As Envoy Gateway writes its backend TLS: the SAN in the default
    // context, the CA in a secret. Both apply: the right SAN passes, a wrong
    // SAN (or the wrong CA) fails the handshake.
    let ca = TestCa::new("upstream CA");
    let tls = tls_upstream_for(&ca).await;
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, pem: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, pem).unwrap();
        p.display().to_string()
    };
    let good = write("good.pem", &ca.pem.cert);
    let wrong = write("wrong.pem", &TestCa::new("other CA").pem.cert);
    let cluster = |name: &str, san: &str, secret: &str| {
        format!(
            r#"- name: {name}
  connect_timeout: 2s
  transport_socket:
    name: envoy.transport_sockets.tls
    typed_config:
      "@type": {TLS}
      sni: sni.test
      common_tls_context:
        combined_validation_context:
          default_validation_context:
            match_typed_subject_alt_names: [{{san_type: DNS, matcher: {{exact: {san}}}}}]
          validation_context_sds_secret_config: {{name: {secret}}}
  load_assignment:
    cluster_name: {name}
    endpoints:
    - lb_endpoints:
{}"#,
            endpoint(tls, "")
        )
    };
    let clusters = [
        cluster("right", "sni.test", "good-ca"),
        cluster("wrongsan", "other.test", "good-ca"),
        cluster("wrongca", "sni.test", "wrong-ca"),
        format!(
            "secrets:\n- name: good-ca\n  validation_context: {{trusted_ca: {{filename: {good}}}}}\n- name: wrong-ca\n  validation_context: {{trusted_ca: {{filename: {wrong}}}}}\n"
        ),
    ]
    .concat();
    let c = courier("", &routes(&["right", "wrongsan", "wrongca"]), &clusters).await;
    for (path, status) in [("/right", 200), ("/wrongsan", 503), ("/wrongca", 503)] {
        let r = H1::connect(c.listener).await.get(path, &[]).await;
        assert_eq!(r.status, status, "{path}: {r:?}");
    }
}
