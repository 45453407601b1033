use super::keys::{KeyError, Meaning, check};
use super::*;
use crate::listener::test_util::listener;
use serde_json::{Value, json};

fn load(layers: Value) -> Result<crate::Bootstrap, crate::ConfigError> {
    let mut v = listener(json!({}));
    v.as_object_mut()
        .unwrap()
        .insert("layered_runtime".into(), json!({ "layers": layers }));
    // The management server Contour's RTDS layer names.
    v["static_resources"]["clusters"] = json!([{
        "name": "contour", "type": "STATIC",
        "load_assignment": {"cluster_name": "contour", "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 8001}}}}]}]},
    }]);
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
    assert_eq!(rt.re2_limits.error_level, u32::MAX);
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
            "envoy.reloadable_features.async_host_selection": false,
            "re2.max_program_size.error_level": "lots",
            "envoy.deprecated_features:x.y": false,
            "overload.global_downstream_max_connections": 1.5,
        }},
        {"name": "b", "rtds_layer": {"name": "", "rtds_config": {"api_config_source": {"api_type": "REST", "cluster_names": ["x"]}}}},
        {"name": "c", "admin_layer": {}},
        {"name": "d", "admin_layer": {}},
    ]))
    .unwrap_err()
    .to_string();
    for needle in [
        "layers[0].static_layer[\"upstream.use_http2\"]: runtime key upstream.use_http2 is not supported",
        "http_reject_path_with_fragment\"]: must be true or false, found \"yes\"",
        "runtime key envoy.reloadable_features.async_host_selection is not supported",
        "error_level\"]: must be a non-negative integer, found \"lots\"",
        "envoy.deprecated_features:x.y: false is not supported",
        "must be a non-negative integer, found \"1.5\"",
        "layers[1].rtds_layer.name: must name the Runtime resource",
        "layers[1].rtds_layer.rtds_config.api_config_source.api_type: REST for RTDS is not supported",
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
    // courier's Google gRPC channels are plaintext: no TLS version to limit.
    for v in ["true", "false"] {
        assert_eq!(
            check("envoy.reloadable_features.google_grpc_disable_tls_13", v),
            Ok(Meaning::Kept)
        );
    }
    assert_eq!(
        check("envoy.reloadable_features.google_grpc_disable_tls_13", "1x"),
        Err(KeyError::NotABoolean("1x".into()))
    );
}

#[test]
fn the_flag_list_is_sorted_for_binary_search() {
    assert!(
        super::envoy_flags::ENVOY_1_40_FLAGS
            .windows(2)
            .all(|w| w[0] < w[1])
    );
}

/// Contour's layer (its own gRPC stream to the `contour` cluster) and an ADS one.
#[test]
fn rtds_layers_are_taken_from_both_source_forms() {
    let b = load(json!([
        {"name": "static", "static_layer": {"overload.global_downstream_max_connections": 9}},
        {"name": "dynamic", "rtds_layer": {"name": "dynamic", "rtds_config": {
            "api_config_source": {"api_type": "GRPC", "transport_api_version": "V3",
                "grpc_services": [{"envoy_grpc": {"cluster_name": "contour"}}]},
            "resource_api_version": "V3"}}},
        {"name": "over-ads", "rtds_layer": {"name": "rt2", "rtds_config": {"ads": {}, "initial_fetch_timeout": "2s"}}},
        {"name": "delta", "rtds_layer": {"name": "rt3", "rtds_config": {
            "api_config_source": {"api_type": "DELTA_GRPC", "transport_api_version": "V3",
                "grpc_services": [{"envoy_grpc": {"cluster_name": "contour"}}]}}}},
        {"name": "admin", "admin_layer": {}},
    ]))
    .unwrap();
    let rt = &b.runtime;
    let names: Vec<&str> = rt.rtds_layers().map(|(n, _)| n).collect();
    assert_eq!(names, ["dynamic", "rt2", "rt3"]);
    let LayerKind::Rtds { source, .. } = &rt.layers[2].kind else {
        panic!("{rt:?}")
    };
    assert_eq!(source.kind, crate::config_source::ConfigSourceKind::Ads);
    assert_eq!(
        source.initial_fetch_timeout,
        Some(std::time::Duration::from_secs(2))
    );
    // What the static layers set is in force until RTDS says otherwise.
    assert_eq!(rt.global_downstream_max_connections, Some(9));
}

#[test]
fn rtds_layer_needs_a_config_source() {
    let err = load(json!([{"name": "d", "rtds_layer": {"name": "d"}}]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("layers[0].rtds_layer.rtds_config: is required"),
        "{err}"
    );
    let err = load(json!([{"name": "d", "rtds_layer": {"name": "d", "rtds_config": {}}}]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("layers[0].rtds_layer.rtds_config"), "{err}");
}

fn rtds(layer: Value) -> Result<crate::resource::Resource, String> {
    use envoy_types::pb::envoy::service::runtime::v3::Runtime as Proto;
    use prost::{Message, Name};
    let s = to_struct(layer.as_object().unwrap());
    let any = envoy_types::pb::google::protobuf::Any {
        type_url: Proto::type_url(),
        value: Proto {
            name: "dynamic".into(),
            layer: Some(s),
        }
        .encode_to_vec(),
    };
    let mut ctx = crate::Ctx::new();
    let r = crate::resource::translate(&any, &mut ctx);
    ctx.finish(()).map_err(|e| e.to_string())?;
    Ok(r.unwrap())
}

/// An RTDS resource's keys pass the static layers' check; a key courier gives
/// no meaning to is refused with its path inside the resource.
#[test]
fn rtds_resource_keys_are_checked_with_their_path() {
    let crate::resource::Resource::Runtime(v) = rtds(json!({
        "envoy": {"resource_limits": {"listener": {"l": {"connection_limit": 3}}}},
        "envoy.reloadable_features.http_reject_path_with_fragment": false,
    }))
    .unwrap() else {
        panic!()
    };
    assert_eq!(v.name, "dynamic");
    assert_eq!(
        v.values["envoy.resource_limits.listener.l.connection_limit"],
        "3"
    );
    let mut rt = Runtime::default();
    rt.read(&v.values);
    assert_eq!(rt.listener_connection_limits.get("l"), Some(&3));
    assert!(!rt.reject_path_with_fragment);
    let err = rtds(json!({"upstream": {"use_http2": false}, "x": [1]})).unwrap_err();
    assert!(
        err.contains(
            "layer[\"upstream.use_http2\"]: runtime key upstream.use_http2 is not supported"
        ),
        "{err}"
    );
    assert!(
        err.contains("layer[\"x\"]: invalid runtime entry value"),
        "{err}"
    );
}

fn to_struct(m: &serde_json::Map<String, Value>) -> envoy_types::pb::google::protobuf::Struct {
    use envoy_types::pb::google::protobuf::{ListValue, Struct, Value as V, value::Kind};
    fn value(v: &Value) -> V {
        let kind = match v {
            Value::Null => Kind::NullValue(0),
            Value::Bool(b) => Kind::BoolValue(*b),
            Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap()),
            Value::String(s) => Kind::StringValue(s.clone()),
            Value::Array(a) => Kind::ListValue(ListValue {
                values: a.iter().map(value).collect(),
            }),
            Value::Object(o) => Kind::StructValue(to_struct(o)),
        };
        V { kind: Some(kind) }
    }
    Struct {
        fields: m.iter().map(|(k, v)| (k.clone(), value(v))).collect(),
    }
}

#[test]
fn zone_routing_keys_override_the_clusters_settings() {
    let rt = load(json!([{"name": "a", "static_layer": {
        "upstream.zone_routing.enabled": 25,
        "upstream.zone_routing": {"min_cluster_size": "3"}}}]))
    .unwrap();
    assert_eq!(rt.runtime.zone_routing_enabled, Some(25));
    assert_eq!(rt.runtime.zone_min_cluster_size, Some(3));
    assert_eq!(Runtime::default().zone_routing_enabled, None);
    let err = load(json!([{"name": "a", "static_layer": {
        "upstream.zone_routing.enabled": "half"}}]))
    .unwrap_err()
    .to_string();
    assert!(err.contains("must be a non-negative integer"), "{err}");
}

#[test]
fn fixed_heap_use_allocated_selects_the_heap_measure() {
    let rt = load(json!([{"name": "a", "static_layer": {
        "envoy.reloadable_features.fixed_heap_use_allocated": true}}]))
    .unwrap();
    assert!(rt.runtime.fixed_heap_use_allocated);
    assert!(!Runtime::default().fixed_heap_use_allocated);
    let err = load(json!([{"name": "a", "static_layer": {
        "envoy.reloadable_features.fixed_heap_use_allocated": "often"}}]))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("fixed_heap_use_allocated\"]: must be true or false"),
        "{err}"
    );
}

/// Istio sets the RE2 thresholds as a string, others as a number: both are
/// read, as Envoy's `getInteger` reads them; unset, Envoy's defaults apply.
#[test]
fn re2_program_size_thresholds_are_read_from_strings_and_numbers() {
    let b = load(json!([
        {"name": "a", "static_layer": {
            "re2.max_program_size.error_level": "32768",
            "re2.max_program_size.warn_level": 1000,
        }},
    ]))
    .unwrap();
    assert_eq!(b.runtime.re2_limits.error_level, 32768);
    assert_eq!(b.runtime.re2_limits.warn_level, 1000);
    let b = load(json!([{"name": "a", "admin_layer": {}}])).unwrap();
    assert_eq!(b.runtime.re2_limits.error_level, 100);
    assert_eq!(b.runtime.re2_limits.warn_level, u32::MAX);
    // Envoy keeps the low 32 bits (its threshold is a uint32_t).
    let b = load(json!([
        {"name": "a", "static_layer": {"re2.max_program_size.error_level": 4294967396u64}},
    ]))
    .unwrap();
    assert_eq!(b.runtime.re2_limits.error_level, 100);
}
