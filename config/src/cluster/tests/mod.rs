//! Tests of the cluster translation, from YAML snippets through the bootstrap loader.

use super::*;
use crate::load::Format;

mod dfp;
mod endpoints;
mod policies;
mod slow_start;
mod socket_match;
mod upstream;
mod upstream_filters;

/// Loads a bootstrap whose `static_resources.clusters` is `clusters` (a YAML list).
pub(super) fn load(clusters: &str) -> Result<crate::Bootstrap, crate::ConfigError> {
    let text = format!("static_resources:\n  clusters:\n{}", indent(clusters));
    crate::bootstrap_from_str(&text, Format::Yaml)
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

pub(super) fn cluster(yaml: &str) -> Cluster {
    match load(yaml) {
        Ok(b) => (*b.clusters[0]).clone(),
        Err(e) => panic!("unexpected errors: {e}"),
    }
}

/// Every error as `path: message`.
pub(super) fn errors(yaml: &str) -> Vec<String> {
    match load(yaml) {
        Ok(_) => Vec::new(),
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
    }
}

pub(super) const EP: &str = "  load_assignment:
    cluster_name: a
    endpoints:
    - lb_endpoints:
      - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 8080}}}
";

pub(super) fn with_ep(extra: &str) -> String {
    format!("- name: a\n{EP}{extra}")
}

#[test]
fn defaults_of_a_minimal_static_cluster() {
    let c = cluster(&with_ep(""));
    assert_eq!(c.name, "a");
    assert_eq!(c.discovery, Discovery::Static);
    assert_eq!(c.connect_timeout, Duration::from_secs(5));
    assert_eq!(c.per_connection_buffer_limit_bytes, 1024 * 1024);
    assert_eq!(c.lb.policy, LbPolicy::RoundRobin);
    assert_eq!(c.lb.healthy_panic_threshold, 50.0);
    assert_eq!(c.circuit_breakers, CircuitBreakers::default());
    assert_eq!(c.circuit_breakers.default.max_connections, 1024);
    assert_eq!(c.circuit_breakers.high.max_retries, 3);
    assert_eq!(c.circuit_breakers.default.max_connection_pools, None);
    assert!(c.outlier_detection.is_none());
    assert!(c.health_checks.is_empty());
    assert_eq!(c.http.protocol, UpstreamProtocol::Http1);
    assert_eq!(c.http.common.idle_timeout, Some(Duration::from_secs(3600)));
    assert_eq!(c.http.http2.max_concurrent_streams, 2_147_483_647);
    assert_eq!(c.stat_name(), "a");
    let la = c.load_assignment.unwrap();
    assert_eq!(la.overprovisioning_factor, 140);
    assert_eq!(la.priorities.len(), 1);
    let e = la.endpoints().next().unwrap();
    assert_eq!(e.address.socket().unwrap().port, 8080);
    assert_eq!(e.weight, 1);
    assert_eq!(e.health_status, HealthStatus::Unknown);
    assert!(e.health_status.is_healthy());
}

#[test]
fn misc_fields() {
    let c = cluster(&with_ep(
        "  alt_stat_name: alt\n  connect_timeout: 0.25s\n  per_connection_buffer_limit_bytes: 4096\n  metadata: {filter_metadata: {envoy.lb: {canary: true}}}\n",
    ));
    assert_eq!(c.stat_name(), "alt");
    assert_eq!(c.connect_timeout, Duration::from_millis(250));
    assert_eq!(c.per_connection_buffer_limit_bytes, 4096);
    assert_eq!(c.metadata["envoy.lb"]["canary"], serde_json::json!(true));
    let p = "static_resources.clusters[0]";
    assert_eq!(
        errors(&with_ep("  connect_timeout: 0s\n")),
        [format!("{p}.connect_timeout: must be greater than 0s")]
    );
    assert_eq!(
        errors(&with_ep(
            "  transport_socket_matches: [{name: m}]\n  cleanup_interval: 1s\n"
        )),
        [
            // The walker's refusals come first, then the translation's errors.
            format!("{p}.cleanup_interval: cleanup_interval is not supported"),
            format!("{p}.transport_socket_matches[0].transport_socket: is required"),
        ]
    );
}

/// The hand-written `tests/configs/invalid/cluster-*.yaml` report exactly their `# expect:` lines.
#[test]
fn invalid_cluster_configs_report_their_expected_errors() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/configs/invalid");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("cluster-") || !name.ends_with(".yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut expected: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .map(str::to_string)
            .collect();
        let opts = crate::LoadOptions {
            config_path: Some(path.clone()),
            ..Default::default()
        };
        let mut got: Vec<String> = match crate::load_bootstrap(&opts) {
            Ok(_) => Vec::new(),
            Err(e) => e.errors.iter().map(ToString::to_string).collect(),
        };
        expected.sort();
        got.sort();
        assert_eq!(got, expected, "{name}");
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} cluster configs");
}

#[test]
fn other_fields_are_checked_when_the_type_is_refused() {
    assert_eq!(
        errors(
            "- name: a\n  type: ORIGINAL_DST\n  connect_timeout: 0s\n  outlier_detection: {max_ejection_percent: 200}\n"
        ),
        [
            "static_resources.clusters[0].type: ORIGINAL_DST is not supported",
            "static_resources.clusters[0].connect_timeout: must be greater than 0s",
            "static_resources.clusters[0].outlier_detection.max_ejection_percent: must be at most 100, found 200",
        ]
    );
}
