use super::*;
use crate::listener::test_util::{errors, listener, load};
use serde_json::{Value, json};

const T: &str = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config";

fn tcp(config: Value) -> Value {
    let mut c = json!({"@type": crate::extensions::TCP_PROXY});
    crate::listener::test_util::merge(&mut c, config);
    listener(json!({"filter_chains": [{"filters": [
        {"name": "envoy.filters.network.tcp_proxy", "typed_config": c}
    ]}]}))
}

fn only(config: Value) -> TcpProxy {
    let b = load(&tcp(config)).unwrap_or_else(|e| panic!("{e}"));
    b.listeners[0].filter_chains[0]
        .tcp_proxy()
        .expect("a tcp proxy")
        .as_ref()
        .clone()
}

#[test]
fn defaults() {
    let t = only(json!({"stat_prefix": "s", "cluster": "c"}));
    assert_eq!(t.stat_prefix, "s");
    assert_eq!(t.cluster, TcpCluster::Single("c".into()));
    assert_eq!(t.idle_timeout, Some(DEFAULT_IDLE_TIMEOUT));
    assert_eq!(t.max_connect_attempts, 1);
    assert_eq!(t.backoff, None);
    assert_eq!(t.max_downstream_connection_duration, None);
    assert!(t.access_log.is_empty());
    assert!(!t.flush_access_log_on_connected && !t.flush_access_log_on_start);
}

#[test]
fn settings() {
    let t = only(json!({
        "stat_prefix": "s",
        "weighted_clusters": {"clusters": [{"name": "a", "weight": 1}, {"name": "b", "weight": 3}]},
        "idle_timeout": "0s",
        "max_connect_attempts": 3,
        "backoff_options": {"base_interval": "0.1s"},
        "max_downstream_connection_duration": "10s",
        "hash_policy": [{"source_ip": {}}],
        "access_log": [{"name": "envoy.access_loggers.stdout", "typed_config": {
            "@type": crate::extensions::STDOUT_ACCESS_LOG}}],
        "access_log_options": {"flush_access_log_on_connected": true},
    }));
    assert_eq!(t.idle_timeout, None);
    assert_eq!(t.max_connect_attempts, 3);
    assert_eq!(
        t.backoff,
        Some(Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1)
        })
    );
    assert_eq!(
        t.max_downstream_connection_duration,
        Some(Duration::from_secs(10))
    );
    assert_eq!(t.access_log.len(), 1);
    assert!(t.flush_access_log_on_connected);
    // Weights 1 and 3: a quarter of the numbers pick a.
    let picks: Vec<&str> = (0..4).map(|r| t.cluster.pick(r)).collect();
    assert_eq!(picks, ["a", "b", "b", "b"]);
}

#[test]
fn refusals_name_their_field() {
    assert_eq!(
        errors(&tcp(json!({"cluster": "c"}))),
        [format!("{T}.stat_prefix: must not be empty")]
    );
    assert_eq!(
        errors(&tcp(json!({"stat_prefix": "s"}))),
        [format!(
            "{T}: one of cluster or weighted_clusters is required"
        )]
    );
    assert_eq!(
        errors(&tcp(json!({"stat_prefix": "s", "cluster": "c",
            "max_connect_attempts": 0, "max_downstream_connection_duration": "0s"}))),
        [
            format!("{T}.max_connect_attempts: must be greater than or equal to 1"),
            format!("{T}.max_downstream_connection_duration: must be at least 1ms"),
        ]
    );
    assert_eq!(
        errors(&tcp(json!({"stat_prefix": "s",
            "weighted_clusters": {"clusters": [{"name": "a", "weight": 0}]}}))),
        [format!(
            "{T}.weighted_clusters.clusters[0].weight: must be greater than or equal to 1"
        )]
    );
    assert_eq!(
        errors(&tcp(json!({"stat_prefix": "s", "cluster": "c",
            "backoff_options": {"base_interval": "2s", "max_interval": "1s"}}))),
        [format!(
            "{T}.backoff_options.max_interval: max_backoff_interval must be greater or equal to base_backoff_interval"
        )]
    );
    assert_eq!(
        errors(&tcp(json!({"stat_prefix": "s", "cluster": "c",
            "tunneling_config": {"hostname": "h"},
            "metadata_match": {"filter_metadata": {"envoy.lb": {"k": "v"}}},
            "hash_policy": [{"filter_state": {"key": "k"}}]}))),
        [
            format!("{T}.metadata_match: metadata_match is not supported"),
            format!("{T}.hash_policy[0].filter_state: filter_state is not supported"),
            format!("{T}.tunneling_config: tunneling_config is not supported"),
        ]
    );
}
