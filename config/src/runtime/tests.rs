use super::keys::{KeyError, Meaning, check};
use super::*;
use crate::listener::test_util::listener;
use serde_json::{Value, json};

fn load(layers: Value) -> Result<crate::Bootstrap, crate::ConfigError> {
    let mut v = listener(json!({}));
    v.as_object_mut()
        .unwrap()
        .insert("layered_runtime".into(), json!({ "layers": layers }));
    crate::bootstrap_from_str(&v.to_string(), crate::load::Format::Json)
}

#[test]
fn static_layers_set_connection_limits_later_layers_win() {
    let b = load(json!([
        {"name": "a", "static_layer": {
            "envoy": {"resource_limits": {"listener": {"l": {"connection_limit": 10}}}},
            "overload": {"global_downstream_max_connections": 50},
        }},
        // Envoy reads an integer from a string that holds one.
        {"name": "b", "static_layer": {"envoy.resource_limits.listener.l.connection_limit": "7"}},
    ]))
    .unwrap();
    assert_eq!(b.runtime.listener_connection_limits.get("l"), Some(&7));
    assert_eq!(b.runtime.global_downstream_max_connections, Some(50));
}

/// The values of the corpus's Istio and Envoy Gateway bootstraps: booleans,
/// strings and numbers are kept as Envoy shows them in `/runtime`.
#[test]
fn corpus_layers_keep_their_values_as_text() {
    let b = load(json!([
        {"name": "global config", "static_layer": {
            "envoy.deprecated_features:envoy.config.listener.v3.Listener.hidden_envoy_deprecated_use_original_dst": true,
            "envoy.reloadable_features.coalesce_lb_rebuilds_on_batch_update": false,
            "envoy.reloadable_features.http_reject_path_with_fragment": false,
            "envoy.reloadable_features.explicit_internal_address_config": true,
            "re2.max_program_size.error_level": 4294967295u64,
            "overload.global_downstream_max_connections": "5000",
        }},
        {"name": "admin", "admin_layer": {}},
    ]))
    .unwrap();
    let rt = &b.runtime;
    assert!(rt.has_admin_layer());
    assert_eq!(rt.layers[1].kind, LayerKind::Admin);
    let LayerKind::Static(values) = &rt.layers[0].kind else {
        panic!("{rt:?}")
    };
    assert_eq!(
        values["envoy.reloadable_features.coalesce_lb_rebuilds_on_batch_update"],
        "false"
    );
    assert_eq!(values["re2.max_program_size.error_level"], "4294967295");
    assert_eq!(values["overload.global_downstream_max_connections"], "5000");
    assert_eq!(rt.global_downstream_max_connections, Some(5000));
    // Stripped, as Envoy with the flag off.
    assert!(!rt.reject_path_with_fragment);
}

#[test]
fn keys_without_a_meaning_in_courier_are_refused_with_their_path() {
    let err = load(json!([
        {"name": "a", "static_layer": {
            "upstream": {"use_http2": 1},
            "envoy.reloadable_features.http_reject_path_with_fragment": "yes",
            "envoy.reloadable_features.fixed_heap_use_allocated": true,
            "envoy.reloadable_features.async_host_selection": false,
            "re2.max_program_size.error_level": "32768",
            "re2.max_program_size.warn_level": 1000,
            "envoy.deprecated_features:x.y": false,
            "overload.global_downstream_max_connections": 1.5,
        }},
        {"name": "b", "rtds_layer": {"name": "r", "rtds_config": {"ads": {}}}},
        {"name": "c", "admin_layer": {}},
        {"name": "d", "admin_layer": {}},
    ]))
    .unwrap_err()
    .to_string();
    for needle in [
        "layers[0].static_layer[\"upstream.use_http2\"]: runtime key upstream.use_http2 is not supported",
        "http_reject_path_with_fragment\"]: must be true or false, found \"yes\"",
        "fixed_heap_use_allocated: true is not supported",
        "runtime key envoy.reloadable_features.async_host_selection is not supported",
        "re2.max_program_size.error_level: 32768 is not supported",
        "re2.max_program_size.warn_level: 1000 is not supported",
        "envoy.deprecated_features:x.y: false is not supported",
        "must be a non-negative integer, found \"1.5\"",
        "layers[1].rtds_layer: rtds_layer is not supported",
        "layers[3].admin_layer: at most one admin layer may be specified",
    ] {
        assert!(err.contains(needle), "{needle} missing in {err}");
    }
}

#[test]
fn lists_and_nulls_are_invalid_entries() {
    let err = load(json!([{"name": "a", "static_layer": {"x": [1, 2]}}]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("static_layer[\"x\"]: invalid runtime entry value"),
        "{err}"
    );
}

#[test]
fn check_is_what_runtime_modify_asks() {
    assert_eq!(
        check("envoy.resource_limits.listener.x.connection_limit", "3"),
        Ok(Meaning::ListenerConnectionLimit("x".into(), 3))
    );
    assert_eq!(
        check("envoy.reloadable_features.no_such_flag_in_1_40", "true"),
        Ok(Meaning::Kept)
    );
    assert_eq!(
        check(
            "envoy.reloadable_features.coalesce_lb_rebuilds_on_batch_update",
            "yes"
        ),
        Err(KeyError::NotABoolean("yes".into()))
    );
    assert_eq!(check("a.b", "1"), Err(KeyError::Unsupported("a.b".into())));
}

#[test]
fn the_flag_list_is_sorted_for_binary_search() {
    assert!(
        super::envoy_flags::ENVOY_1_40_FLAGS
            .windows(2)
            .all(|w| w[0] < w[1])
    );
}
