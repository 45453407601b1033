//! `transport_socket_matches` and a health check's `transport_socket_match_criteria`.

use super::*;
use crate::core::MetadataMap;

const TLS: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
const RAW: &str = "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer";

fn matches() -> String {
    format!(
        "  transport_socket_matches:
  - name: tls
    match: {{mtls: true, zone: 1}}
    transport_socket: {{name: t, typed_config: {{\"@type\": {TLS}, sni: a.test}}}}
  - name: plain
    match: {{}}
    transport_socket: {{name: r, typed_config: {{\"@type\": {RAW}}}}}
"
    )
}

fn md(json: serde_json::Value) -> MetadataMap {
    let mut m = MetadataMap::new();
    if let serde_json::Value::Object(o) = json {
        m.insert("envoy.transport_socket_match".into(), o);
    }
    m
}

#[test]
fn matches_are_translated_in_order() {
    let c = cluster(&with_ep(&matches()));
    let m = &c.transport_socket_matches;
    assert_eq!(m.len(), 2);
    assert_eq!((m[0].name.as_str(), m[1].name.as_str()), ("tls", "plain"));
    assert_eq!(
        m[0].tls.as_ref().and_then(|t| t.sni.as_deref()),
        Some("a.test")
    );
    assert!(m[1].tls.is_none(), "raw_buffer is plaintext");
}

#[test]
fn resolution_follows_envoy() {
    let c = cluster(&with_ep(&matches()));
    let m = &c.transport_socket_matches;
    let none = MetadataMap::new();
    // Every key equal (numbers as doubles; extra keys do not matter).
    let full = md(serde_json::json!({"mtls": true, "zone": 1.0, "x": "y"}));
    assert_eq!(resolve_socket(m, &full, &none), 1);
    // A key missing or different: the next match, here the empty one.
    let partial = md(serde_json::json!({"mtls": true}));
    assert_eq!(resolve_socket(m, &partial, &none), 2);
    // No namespace at all: only an empty match matches.
    assert_eq!(resolve_socket(m, &none, &none), 2);
    assert_eq!(resolve_socket(&m[..1], &none, &none), DEFAULT_SOCKET);
    // The endpoint's metadata is tried against every match before the
    // locality's: the empty match (2) wins over the locality's full one.
    assert_eq!(resolve_socket(m, &partial, &full), 2);
    assert_eq!(resolve_socket(&m[..1], &partial, &full), 1);
}

#[test]
fn a_health_check_s_criteria_pick_its_socket() {
    let hc = "  health_checks:
  - timeout: 1s
    interval: 1s
    unhealthy_threshold: 1
    healthy_threshold: 1
    tcp_health_check: {}
    transport_socket_match_criteria: {mtls: true, zone: 1}
  - timeout: 1s
    interval: 1s
    unhealthy_threshold: 1
    healthy_threshold: 1
    tcp_health_check: {}
";
    let c = cluster(&with_ep(&format!("{}{hc}", matches())));
    assert_eq!(c.health_checks[0].transport_socket, Some(1));
    assert_eq!(c.health_checks[1].transport_socket, None);
}

#[test]
fn invalid_matches_are_refused_at_their_paths() {
    let yaml = with_ep(&format!(
        "  transport_socket_matches:
  - match: {{a: b}}
    transport_socket: {{name: t, typed_config: {{\"@type\": {TLS}}}}}
  - name: nosocket
  - name: bad
    transport_socket: {{name: t, typed_config: {{\"@type\": {TLS}, sni: \"not a name!\"}}}}
"
    ));
    let errs = errors(&yaml);
    for want in [
        "static_resources.clusters[0].transport_socket_matches[0].name: must not be empty",
        "static_resources.clusters[0].transport_socket_matches[1].transport_socket: is required",
        "static_resources.clusters[0].transport_socket_matches[2].transport_socket.typed_config.sni:",
    ] {
        assert!(
            errs.iter().any(|e| e.starts_with(want)),
            "{want} not in {errs:#?}"
        );
    }
}
