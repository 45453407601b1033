//! `LoadOptions`: `--config-yaml` merges over the file with proto MergeFrom
//! semantics (scalars replace, messages merge, lists append), and
//! `--service-node` / `--service-cluster` override the node.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_config::{LoadOptions, load_bootstrap};

const BASE: &str = r#"
node: { id: from-file, cluster: file-cluster }
admin: { address: { socket_address: { address: 127.0.0.1, port_value: 9901 } } }
static_resources:
  clusters:
  - name: one
    connect_timeout: 1s
    load_assignment:
      cluster_name: one
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 1 } } } }] }]
"#;

fn file(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let p = dir.path().join("base.yaml");
    std::fs::write(&p, BASE).unwrap();
    p
}

#[test]
fn config_yaml_merges_as_proto_merge() {
    let dir = tempfile::tempdir().unwrap();
    let b = load_bootstrap(&LoadOptions {
        config_path: Some(file(&dir)),
        config_yaml: Some(
            "node: {id: from-flag}\nadmin: {address: {socket_address: {port_value: 9902}}}\nstatic_resources: {clusters: [{name: two, connect_timeout: 2s}]}".into(),
        ),
        ..Default::default()
    })
    .unwrap();
    // Scalars replace; unset ones keep the file's value.
    assert_eq!(b.node.id, "from-flag");
    assert_eq!(b.node.cluster, "file-cluster");
    let admin = b.admin.unwrap();
    assert_eq!(admin.address.socket().unwrap().port, 9902);
    assert_eq!(admin.address.socket().unwrap().host, "127.0.0.1");
    // Lists append.
    let names: Vec<&str> = b.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["one", "two"]);
}

#[test]
fn service_node_and_cluster_override_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let b = load_bootstrap(&LoadOptions {
        config_path: Some(file(&dir)),
        service_node: Some("n1".into()),
        service_cluster: Some("c1".into()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!((b.node.id.as_str(), b.node.cluster.as_str()), ("n1", "c1"));
}

#[test]
fn service_zone_sets_the_node_locality_zone() {
    let dir = tempfile::tempdir().unwrap();
    let b = load_bootstrap(&LoadOptions {
        config_path: Some(file(&dir)),
        service_zone: Some("us-east-1a".into()),
        ..Default::default()
    })
    .unwrap();
    // The file's node has no locality: one is made with the zone only.
    assert_eq!(
        b.node.locality,
        Some((String::new(), "us-east-1a".into(), String::new()))
    );
    // An empty zone changes nothing, as in Envoy.
    let b = load_bootstrap(&LoadOptions {
        config_path: Some(file(&dir)),
        config_yaml: Some("node: {locality: {region: r, zone: z}}".into()),
        service_zone: Some(String::new()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        b.node.locality,
        Some(("r".into(), "z".into(), String::new()))
    );
}

#[test]
fn json_files_and_unknown_extensions() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("b.json");
    std::fs::write(&json, r#"{"node": {"id": "j"}, "staticResources": {}}"#).unwrap();
    let b = load_bootstrap(&LoadOptions {
        config_path: Some(json),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(b.node.id, "j");
    let txt = dir.path().join("b.txt");
    std::fs::write(&txt, "{}").unwrap();
    let err = load_bootstrap(&LoadOptions {
        config_path: Some(txt),
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("unsupported config file extension"),
        "{err}"
    );
}
