use super::*;
use crate::listener::test_util::listener;
use serde_json::{Value, json};

fn load(mut v: Value, extra: Value) -> Result<crate::Bootstrap, crate::ConfigError> {
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    crate::bootstrap_from_str(&v.to_string(), crate::load::Format::Json)
}

fn heap_om(actions: Value) -> Value {
    json!({"overload_manager": {
        "refresh_interval": "0.25s",
        "resource_monitors": [{
            "name": FIXED_HEAP,
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig",
                "max_heap_size_bytes": 1000,
            },
        }],
        "actions": actions,
    }})
}

fn action(name: &str, value: f64) -> Value {
    json!({"name": name, "triggers": [{"name": FIXED_HEAP, "threshold": {"value": value}}]})
}

#[test]
fn heap_monitor_and_actions() {
    let b = load(
        listener(json!({})),
        heap_om(json!([
            action("envoy.overload_actions.shrink_heap", 0.95),
            action("envoy.overload_actions.stop_accepting_requests", 0.98),
            action("envoy.overload_actions.stop_accepting_connections", 0.99),
            action("envoy.overload_actions.disable_http_keepalive", 0.9),
        ])),
    )
    .unwrap();
    let om = b.overload_manager.unwrap();
    assert_eq!(om.refresh_interval, Duration::from_millis(250));
    assert_eq!(om.max_heap_bytes, Some(1000));
    assert_eq!(om.actions.len(), 4);
    assert_eq!(om.actions[1].kind, ActionKind::StopAcceptingRequests);
    assert_eq!(om.actions[1].trigger, Trigger::Threshold(0.98));
}

#[test]
fn unknown_actions_and_timers_refused_with_paths() {
    let err = load(
        listener(json!({})),
        heap_om(json!([
            action("envoy.overload_actions.reset_high_memory_stream", 0.9),
            {"name": "envoy.overload_actions.reduce_timeouts",
             "triggers": [{"name": FIXED_HEAP, "scaled": {"scaling_threshold": 0.9, "saturation_threshold": 0.5}}],
             "typed_config": {
                "@type": "type.googleapis.com/envoy.config.overload.v3.ScaleTimersOverloadActionConfig",
                "timer_scale_factors": [{"timer": "TRANSPORT_SOCKET_CONNECT", "min_timeout": "1s"}]}},
            action("envoy.overload_actions.reduce_timeouts", 0.9),
        ])),
    )
    .unwrap_err()
    .to_string();
    for want in [
        "overload_manager.actions[0].name: overload action envoy.overload_actions.reset_high_memory_stream is not supported",
        "overload_manager.actions[1].triggers[0].scaled.scaling_threshold: must be less than saturation_threshold",
        "overload_manager.actions[1].typed_config.timer_scale_factors[0].timer: scaling TRANSPORT_SOCKET_CONNECT is not supported",
        "overload_manager.actions[2].typed_config: is required for reduce_timeouts",
    ] {
        assert!(err.contains(want), "{want}\n{err}");
    }
}

#[test]
fn reduce_timeouts_with_scaled_triggers() {
    let b = load(
        listener(json!({})),
        heap_om(json!([
            {"name": "envoy.overload_actions.reduce_timeouts",
             "triggers": [{"name": FIXED_HEAP, "scaled": {"scaling_threshold": 0.8, "saturation_threshold": 0.9}}],
             "typed_config": {
                "@type": "type.googleapis.com/envoy.config.overload.v3.ScaleTimersOverloadActionConfig",
                "timer_scale_factors": [
                    {"timer": "HTTP_DOWNSTREAM_CONNECTION_IDLE", "min_timeout": "2s"},
                    {"timer": "HTTP_DOWNSTREAM_STREAM_IDLE", "min_scale": {"value": 10}},
                ]}},
        ])),
    )
    .unwrap();
    let om = b.overload_manager.unwrap();
    let t = om.actions[0].trigger;
    assert_eq!(t.state(0.5), 0.0);
    assert!((t.state(0.85) - 0.5).abs() < 1e-9);
    assert_eq!(t.state(0.95), 1.0);
    let [idle, stream] = om.timer_scales[..] else {
        panic!("{:?}", om.timer_scales)
    };
    assert_eq!(idle.timer, ScaledTimer::ConnectionIdle);
    let s = Duration::from_secs;
    assert_eq!(idle.scale(s(60), 0.0), s(60));
    assert_eq!(idle.scale(s(60), 1.0), s(2));
    assert_eq!(idle.scale(s(60), 0.5), s(31));
    assert_eq!(stream.scale(s(300), 1.0), s(30));
}

#[test]
fn global_connection_monitor() {
    let b = load(
        listener(json!({})),
        json!({"overload_manager": {"resource_monitors": [{
            "name": GLOBAL_CONNECTIONS,
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
                "max_active_downstream_connections": 3,
            },
        }]}}),
    )
    .unwrap();
    assert_eq!(
        b.overload_manager.unwrap().max_downstream_connections,
        Some(3)
    );
}

#[test]
fn tls_inspector_accepted_other_listener_filters_refused() {
    let inspector = json!({"name": crate::listener::TLS_INSPECTOR, "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"}});
    load(
        listener(json!({"listener_filters": [inspector]})),
        json!({}),
    )
    .unwrap();
    let err = load(
        listener(json!({"listener_filters": [{"name": "envoy.filters.listener.http_inspector",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.http_inspector.v3.HttpInspector"}}]})),
        json!({}),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("listener_filters[0]"), "{err}");
}
