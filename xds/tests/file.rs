//! `path_config_source`: a watched file holding a DiscoveryResponse, replaced by
//! atomic rename (and by a symlink swap in a `watched_directory`); a bad file
//! leaves the last good config in force.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use courier_xds::{Backoff, Client, ClientConfig, FileSource, ResourceType, Source};
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

fn cluster_yaml(version: &str, names: &[&str]) -> String {
    let mut s = format!("version_info: \"{version}\"\nresources:\n");
    for n in names {
        s.push_str(&format!(
            "- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: {n}\n  connect_timeout: 1s\n  type: STATIC\n  load_assignment:\n    cluster_name: {n}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 1 }} }} }}\n"
        ));
    }
    s
}

/// Writes next to `target` and renames over it, as config pushers do.
fn replace(target: &Path, text: &str) {
    let tmp = target.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, target).unwrap();
}

fn file_client(path: PathBuf, watched: Option<PathBuf>) -> (Client, Recorder) {
    let (consumer, rec) = recorder(&[]);
    let config = ClientConfig {
        sources: vec![(
            ResourceType::Cluster,
            Source::File(FileSource {
                type_: ResourceType::Cluster,
                path,
                watched_directory: watched,
                poll_interval: Duration::from_millis(10),
            }),
        )],
        backoff: Backoff::default(),
        ..Default::default()
    };
    (Client::start(config, consumer), rec)
}

#[tokio::test]
async fn file_source_reloads_on_rename_and_keeps_the_last_good_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cds.yaml");
    std::fs::write(&path, cluster_yaml("1", &["a"])).unwrap();
    let (client, mut rec) = file_client(path.clone(), None);
    let u = rec.next().await;
    assert_eq!(
        (u.version_info.as_str(), upserted(&u)),
        ("1", vec!["a".to_string()])
    );

    replace(&path, &cluster_yaml("2", &["b"]));
    let u = rec.next().await;
    assert_eq!(upserted(&u), ["b"]);
    assert_eq!(u.removed, ["a"]);

    // An unreadable file changes nothing: the error is recorded, "b" stays.
    replace(&path, "resources: [ {\"@type\": nope} ]\n");
    let store = client.handle().store().clone();
    for _ in 0..500 {
        if store.get(ResourceType::Cluster).last_error.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let st = store.get(ResourceType::Cluster);
    assert!(st.last_error.is_some());
    assert_eq!(st.resources.keys().collect::<Vec<_>>(), ["b"]);
    assert_eq!(st.version_info, "2");

    // An invalid cluster next to a valid one: the valid one applies.
    let text = cluster_yaml("3", &["c"]).replace(
        "type: STATIC",
        "type: STATIC\n  lb_policy: CLUSTER_PROVIDED",
    );
    replace(
        &path,
        &(text + &cluster_yaml("", &["d"]).replace("version_info: \"\"\nresources:\n", "")),
    );
    let u = rec.next().await;
    assert_eq!(upserted(&u), ["d"]);
    assert_eq!(u.removed, ["b"]);
    let st = store.get(ResourceType::Cluster);
    assert!(
        st.last_error
            .as_deref()
            .unwrap()
            .contains("Cluster 'c': lb_policy")
    );
}

#[tokio::test]
async fn watched_directory_symlink_swap_reloads() {
    // Kubernetes ConfigMap layout: dir/cds.yaml -> ..data/cds.yaml, ..data -> v1.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (v, n) in [("v1", "a"), ("v2", "b")] {
        std::fs::create_dir(d.join(v)).unwrap();
        std::fs::write(d.join(v).join("cds.yaml"), cluster_yaml(v, &[n])).unwrap();
    }
    std::os::unix::fs::symlink("v1", d.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/cds.yaml", d.join("cds.yaml")).unwrap();
    let (_client, mut rec) = file_client(d.join("cds.yaml"), Some(d.to_path_buf()));
    assert_eq!(upserted(&rec.next().await), ["a"]);
    std::os::unix::fs::symlink("v2", d.join("..data_tmp")).unwrap();
    std::fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
    let u = rec.next().await;
    assert_eq!(
        (u.version_info.as_str(), upserted(&u)),
        ("v2", vec!["b".to_string()])
    );
}

#[tokio::test]
async fn a_name_wanted_later_is_read_from_the_unchanged_file() {
    use courier_xds::Interest;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eds.yaml");
    std::fs::write(
        &path,
        "version_info: \"1\"\nresources:\n- \"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\n  cluster_name: later\n",
    )
    .unwrap();
    let (consumer, mut rec) = recorder(&[]);
    let config = ClientConfig {
        sources: vec![(
            ResourceType::Endpoints,
            Source::File(FileSource {
                type_: ResourceType::Endpoints,
                path,
                watched_directory: None,
                poll_interval: Duration::from_millis(10),
            }),
        )],
        ..Default::default()
    };
    let client = Client::start(config, consumer);
    // Not wanted yet: nothing applied, however often the file is polled.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(rec.updates.try_recv().is_err());
    client.handle().set_interest(
        ResourceType::Endpoints,
        Interest::Names(["later".to_string()].into()),
    );
    assert_eq!(upserted(&rec.next().await), ["later"]);
}
