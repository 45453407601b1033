//! `UpstreamTlsContext.auto_host_sni` and `auto_sni_san_validation` (Envoy
//! Gateway's backends with `autoHostSni`): real Envoy and courier from one
//! bootstrap, DNS clusters named `localhost`, TLS upstreams that report the SNI
//! they saw; comparing what each client got.
//!
//! Envoy's rule: the host's name (the DNS name it was resolved from) is the
//! SNI, and with the validation the certificate must have it as a DNS SAN, in
//! place of the configured matchers.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{Protocol, Request, send};
use courier_tests::differential::{bootstrap, hcm_listener, same_lines};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{TestCa, tls_upstream};
use std::net::SocketAddr;

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes:
  - { match: { prefix: "/good" }, route: { cluster: good } }
  - { match: { prefix: "/wrong-san" }, route: { cluster: wrong-san } }
  - { match: { prefix: "/no-validation" }, route: { cluster: no-validation } }
  - { match: { prefix: "/plain" }, route: { cluster: plain } }
"#;

fn cluster(name: &str, up: SocketAddr, tls_extra: &str, ca: &str) -> String {
    format!(
        "  - name: {name}
    type: STRICT_DNS
    dns_lookup_family: V4_ONLY
    connect_timeout: 2s
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        {tls_extra}
        common_tls_context:
          validation_context:
            trusted_ca: {{ inline_string: {ca} }}
            match_typed_subject_alt_names: [{{ san_type: DNS, matcher: {{ exact: configured.example }} }}]
    load_assignment:
      cluster_name: {name}
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: localhost, port_value: {port}}}}}}}}}]}}]
",
        port = up.port()
    )
}

fn config(localhost: SocketAddr, other: SocketAddr, ca: &str) -> String {
    let both = "auto_host_sni: true\n        auto_sni_san_validation: true";
    let mut yaml = bootstrap(&[hcm_listener("h", "", VHOSTS)]);
    yaml.push_str("  clusters:\n");
    yaml.push_str(&cluster("good", localhost, both, ca));
    yaml.push_str(&cluster("wrong-san", other, both, ca));
    yaml.push_str(&cluster(
        "no-validation",
        localhost,
        "auto_host_sni: true",
        ca,
    ));
    yaml.push_str(&cluster("plain", localhost, "", ca));
    yaml
}

fn observe(kind: Kind, bin: &std::path::Path, yaml: &str) -> Vec<String> {
    let proxy = Proxy::start(kind, bin, yaml, &["h"]).unwrap_or_else(|e| panic!("{kind}: {e}"));
    ["/good", "/wrong-san", "/no-validation", "/plain"]
        .iter()
        .map(|path| {
            let r = send(
                proxy.listener("h").unwrap(),
                Protocol::Http1,
                &Request {
                    method: "GET".into(),
                    path: (*path).into(),
                    authority: "t".into(),
                    headers: Vec::new(),
                    body: Vec::new(),
                },
            )
            .unwrap();
            format!(
                "{path}: {} sni {:?}",
                r.status,
                r.header("x-sni").unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn auto_host_sni_and_its_san_validation_match_envoy() {
    let ca = TestCa::new("auto host sni CA");
    // Both also carry the configured SAN, so only the override can refuse one.
    let localhost = tls_upstream::start(&ca.leaf(&["localhost", "configured.example"]));
    let other = tls_upstream::start(&ca.leaf(&["other.example", "configured.example"]));
    let yaml = config(
        localhost,
        other,
        &serde_json::to_string(&ca.pem.cert).unwrap(),
    );
    let Some(courier_lines) = same_lines(|kind, bin| observe(kind, bin, &yaml)) else {
        return;
    };
    // What Envoy does, spelled out, so the comparison cannot pass on two wrong answers.
    assert_eq!(courier_lines[0], "/good: 200 sni \"localhost\"");
    assert!(courier_lines[1].starts_with("/wrong-san: 503"));
    assert_eq!(courier_lines[2], "/no-validation: 200 sni \"localhost\"");
}
