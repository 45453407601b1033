//! The bootstrap-level switches of the control planes' bootstraps.

use crate::listener::test_util::listener;
use serde_json::{Value, json};

fn load(extra: Value) -> Result<crate::Bootstrap, crate::ConfigError> {
    let mut v = listener(json!({}));
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    crate::bootstrap_from_str(&v.to_string(), crate::load::Format::Json)
}

#[test]
fn deferred_stat_options_defers_cluster_traffic_stats() {
    let on = load(json!({"deferred_stat_options": {"enable_deferred_creation_stats": true}}));
    assert!(on.unwrap().deferred_cluster_stats);
    assert!(!load(json!({})).unwrap().deferred_cluster_stats);
}

#[test]
fn google_re2_is_the_one_regex_engine() {
    let re2 = json!({"name": "envoy.regex_engines.google_re2", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.regex_engines.v3.GoogleRE2"}});
    load(json!({ "default_regex_engine": re2 })).unwrap();
    let other = json!({"name": "x", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}});
    let err = load(json!({ "default_regex_engine": other }))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("default_regex_engine.typed_config: regex engine type.googleapis.com/envoy.extensions.filters.http.router.v3.Router is not supported"),
        "{err}"
    );
}

#[test]
fn deferred_cluster_creation_and_profile_path_load() {
    let b = load(json!({
        "cluster_manager": {"enable_deferred_cluster_creation": true},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}},
                  "profile_path": "/var/lib/istio/data/envoy.prof"},
    }))
    .unwrap();
    assert_eq!(
        b.admin.unwrap().profile_path,
        "/var/lib/istio/data/envoy.prof"
    );
}

#[test]
fn application_log_config_is_one_pattern() {
    let text = json!({"application_log_config": {"log_format": {"text_format": "%l %v"}}});
    assert_eq!(
        load(text).unwrap().application_log_format.as_deref(),
        Some("%l %v")
    );
    // JSON: compact text, keys sorted, non-string values kept as they are.
    let json = json!({"application_log_config": {"log_format": {"json_format":
        {"Message": "%j", "Level": "%l", "Num": 5, "Nested": {"a": "%n"}}}}});
    assert_eq!(
        load(json).unwrap().application_log_format.as_deref(),
        Some(r#"{"Level":"%l","Message":"%j","Nested":{"a":"%n"},"Num":5}"#)
    );
    // Without log_format nothing changes (Envoy accepts it too).
    assert!(
        load(json!({"application_log_config": {}}))
            .unwrap()
            .application_log_format
            .is_none()
    );
    assert!(load(json!({})).unwrap().application_log_format.is_none());
    for (flag, config) in [
        ("%v", json!({"json_format": {"Message": "%v"}})),
        ("%_", json!({"json_format": {"m": {"deep": "x %_"}}})),
    ] {
        let err = load(json!({"application_log_config": {"log_format": config}}))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "application_log_config.log_format.json_format: Usage of {flag} is unavailable for JSON log formats"
            )),
            "{err}"
        );
    }
    let err = load(json!({"application_log_config": {"log_format": {}}}))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("application_log_config.log_format: one of"),
        "{err}"
    );
}

#[test]
fn local_cluster_name_names_a_static_cluster() {
    let with = |cm: &str| {
        let yaml = format!(
            "cluster_manager: {cm}\nstatic_resources: {{clusters: [{{name: fleet, load_assignment: {{cluster_name: fleet, endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 1}}}}}}}}]}}]}}}}]}}"
        );
        crate::bootstrap_from_str(&yaml, crate::load::Format::Yaml)
    };
    let b = with("{local_cluster_name: fleet}").unwrap();
    assert_eq!(b.local_cluster_name.as_deref(), Some("fleet"));
    assert_eq!(with("{}").unwrap().local_cluster_name, None);
    // Empty: none, as Envoy reads it.
    assert_eq!(
        with("{local_cluster_name: ''}").unwrap().local_cluster_name,
        None
    );
    let err = with("{local_cluster_name: other}").unwrap_err().to_string();
    assert!(
        err.contains("cluster_manager.local_cluster_name: local cluster 'other' must be defined"),
        "{err}"
    );
}

#[test]
fn load_stats_config_with_nowhere_to_report_loads_and_a_reporter_is_refused() {
    let lrs = json!({"api_type": "GRPC", "transport_api_version": "V3"});
    let b = load(json!({"cluster_manager": {"load_stats_config": lrs}})).unwrap();
    assert!(b.load_stats_skipped);
    assert!(!load(json!({})).unwrap().load_stats_skipped);
    let err = load(json!({"cluster_manager": {"load_stats_config": {
        "api_type": "GRPC", "transport_api_version": "V3",
        "grpc_services": [{"envoy_grpc": {"cluster_name": "lrs"}}]}}}))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(
            "cluster_manager.load_stats_config: load reporting (LRS) to a server is not supported"
        ),
        "{err}"
    );
}
