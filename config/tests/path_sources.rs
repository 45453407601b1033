//! `--mode validate` checks the resources inside `path_config_source` files (LDS,
//! CDS, and the RDS/EDS files listeners and clusters name), which Envoy only reads
//! at run time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_config::load::Format;
use std::path::Path;

const LISTENER: &str = r#"
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: from_file
  address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
  filter_chains:
  - filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: f
        route_config:
          virtual_hosts:
          - name: v
            domains: ["*"]
            routes:
            - match: { safe_regex: { regex: "REGEX" } }
              direct_response: { status: 200 }
        http_filters:
        - name: envoy.filters.http.router
          typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
"#;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn bootstrap(dir: &Path, lds: &str, cds: &str) -> String {
    format!(
        "dynamic_resources:\n  lds_config: {{ path_config_source: {{ path: {lds} }} }}\n  cds_config: {{ path_config_source: {{ path: {cds} }} }}\n"
    )
    .replace("DIR", &dir.display().to_string())
}

fn load(text: &str) -> Result<courier_config::Bootstrap, courier_config::ConfigError> {
    courier_config::bootstrap_from_str(text, Format::Yaml)
}

#[test]
fn valid_files_validate() {
    let dir = tempfile::tempdir().unwrap();
    let lds = write(
        dir.path(),
        "lds.yaml",
        &format!("resources:{}", LISTENER.replace("REGEX", "/a+")),
    );
    let cds = write(dir.path(), "cds.yaml", "resources: []\n");
    load(&bootstrap(dir.path(), &lds, &cds)).unwrap();
}

#[test]
fn an_invalid_resource_in_an_lds_file_is_reported_at_the_path_field() {
    let dir = tempfile::tempdir().unwrap();
    let lds = write(
        dir.path(),
        "lds.yaml",
        &format!("resources:{}", LISTENER.replace("REGEX", "(unclosed")),
    );
    let cds = write(dir.path(), "cds.yaml", "resources: []\n");
    let err = load(&bootstrap(dir.path(), &lds, &cds)).unwrap_err();
    assert_eq!(
        err.paths(),
        vec!["dynamic_resources.lds_config.path_config_source.path"]
    );
    let msg = &err.errors[0].message;
    assert!(msg.starts_with(&format!("in {lds}: resources[0].filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0].routes[0].match.safe_regex.regex: invalid regex")), "{msg}");
}

#[test]
fn wrong_resource_type_and_unreadable_file() {
    let dir = tempfile::tempdir().unwrap();
    // A listener in the CDS file.
    let cds = write(
        dir.path(),
        "cds.yaml",
        &format!("resources:{}", LISTENER.replace("REGEX", "/a")),
    );
    let missing = dir.path().join("nope.yaml").display().to_string();
    let err = load(&bootstrap(dir.path(), &missing, &cds)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "dynamic_resources.lds_config.path_config_source.path: in {missing}: cannot read"
        )),
        "{text}"
    );
    assert!(
        text.contains("dynamic_resources.cds_config.path_config_source.path: in ")
            && text.contains("resources[0] is type.googleapis.com/envoy.config.listener.v3.Listener, expected type.googleapis.com/envoy.config.cluster.v3.Cluster"),
        "{text}"
    );
}

#[test]
fn rds_and_eds_files_named_by_static_resources_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let rds = write(
        dir.path(),
        "rds.yaml",
        "resources:\n- \"@type\": type.googleapis.com/envoy.config.route.v3.RouteConfiguration\n  name: r\n  virtual_hosts:\n  - name: v\n    domains: [\"*\"]\n    routes:\n    - match: { prefix: \"/\" }\n      redirect: { response_code: 999 }\n",
    );
    let eds = write(
        dir.path(),
        "eds.yaml",
        "resources:\n- \"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\n  cluster_name: c\n  endpoints:\n  - lb_endpoints:\n    - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 99999 } } }\n",
    );
    let text = format!(
        r#"
static_resources:
  listeners:
  - name: l
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: s
          rds: {{ route_config_name: r, config_source: {{ path_config_source: {{ path: {rds} }} }} }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:
  - name: c
    type: EDS
    eds_cluster_config: {{ eds_config: {{ path_config_source: {{ path: {eds} }} }} }}
"#
    );
    let err = load(&text).unwrap_err();
    let paths = err.paths();
    assert!(paths.contains(&"static_resources.listeners[0].filter_chains[0].filters[0].typed_config.rds.config_source.path_config_source.path"), "{err}");
    assert!(
        paths.contains(
            &"static_resources.clusters[0].eds_cluster_config.eds_config.path_config_source.path"
        ),
        "{err}"
    );
    assert_eq!(paths.len(), 2, "{err}");
}
