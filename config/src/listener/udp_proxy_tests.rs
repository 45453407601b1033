use super::*;
use crate::listener::test_util::{errors, load, merge};
use serde_json::{Value, json};

const L: &str = "static_resources.listeners[0]";
const T: &str = "static_resources.listeners[0].listener_filters[0].typed_config";

/// A bootstrap with one UDP listener whose proxy config gets `config` and
/// whose listener gets `patch`.
fn udp(config: Value, patch: Value) -> Value {
    let mut c = json!({
        "@type": crate::extensions::UDP_PROXY,
        "stat_prefix": "service",
        "matcher": {"on_no_match": {"action": {"name": "route", "typed_config": {
            "@type": crate::extensions::UDP_PROXY_ROUTE, "cluster": "dest"}}}},
    });
    merge(&mut c, config);
    let mut l = json!({
        "name": "u",
        "address": {"socket_address": {"address": "::", "port_value": 10080, "protocol": "UDP"}},
        "listener_filters": [{"name": "envoy.filters.udp_listener.udp_proxy", "typed_config": c}],
    });
    merge(&mut l, patch);
    json!({"static_resources": {"listeners": [l]}})
}

fn only(v: &Value) -> UdpListener {
    let b = load(v).unwrap_or_else(|e| panic!("{e}"));
    let l = &b.listeners[0];
    assert!(l.filter_chains.is_empty() && l.default_filter_chain.is_none());
    l.udp.clone().expect("a UDP listener")
}

#[test]
fn envoy_gateway_udp_route_loads_with_defaults() {
    let u = only(&udp(json!({}), json!({})));
    assert_eq!(u.max_rx_datagram_size, 1500);
    let p = &u.proxy;
    assert_eq!(p.stat_prefix, "service");
    assert_eq!(p.cluster.as_deref(), Some("dest"));
    assert_eq!(p.idle_timeout, Duration::from_secs(60));
    assert_eq!(p.upstream_max_rx_datagram_size, 1500);
    assert!(p.access_log.is_empty());
    assert!(!p.per_packet_load_balancing);
    assert_eq!(p.access_log_flush_interval, None);
}

#[test]
fn settings() {
    let u = only(&udp(
        json!({
            "idle_timeout": "1.5s",
            "use_per_packet_load_balancing": true,
            "access_log_options": {"access_log_flush_interval": "0.25s", "flush_access_log_on_tunnel_connected": true},
            "upstream_socket_config": {"max_rx_datagram_size": 9000},
            "access_log": [{"name": "envoy.access_loggers.file", "typed_config": {
                "@type": crate::extensions::FILE_ACCESS_LOG, "path": "/dev/null"}}],
            "proxy_access_log": [{"name": "envoy.access_loggers.file", "typed_config": {
                "@type": crate::extensions::FILE_ACCESS_LOG, "path": "/dev/null"}}],
        }),
        json!({"udp_listener_config": {"downstream_socket_config": {"max_rx_datagram_size": 65535}}}),
    ));
    assert_eq!(u.max_rx_datagram_size, 65535);
    assert_eq!(u.proxy.idle_timeout, Duration::from_millis(1500));
    assert_eq!(u.proxy.upstream_max_rx_datagram_size, 9000);
    assert!(u.proxy.per_packet_load_balancing);
    assert_eq!(
        u.proxy.access_log_flush_interval,
        Some(Duration::from_millis(250))
    );
    assert_eq!(u.proxy.access_log.len(), 1);
    assert_eq!(u.proxy.proxy_access_log.len(), 1);
}

#[test]
fn the_deprecated_cluster_field_and_an_empty_matcher() {
    let mut v = udp(json!({"cluster": "old"}), json!({}));
    v["static_resources"]["listeners"][0]["listener_filters"][0]["typed_config"]
        .as_object_mut()
        .map(|o| o.remove("matcher"));
    assert_eq!(only(&v).proxy.cluster.as_deref(), Some("old"));
    // No action: every datagram is `downstream_sess_no_route`, as Envoy.
    let mut v = udp(json!({}), json!({}));
    v["static_resources"]["listeners"][0]["listener_filters"][0]["typed_config"]["matcher"] =
        json!({});
    assert_eq!(only(&v).proxy.cluster, None);
}

#[test]
fn envoys_refusals() {
    assert_eq!(
        errors(&udp(json!({"stat_prefix": ""}), json!({}))),
        [format!("{T}.stat_prefix: must not be empty")]
    );
    let mut v = udp(json!({}), json!({}));
    v["static_resources"]["listeners"][0]["listener_filters"][0]["typed_config"]
        .as_object_mut()
        .map(|o| o.remove("matcher"));
    assert_eq!(
        errors(&v),
        [format!("{T}: one of cluster or matcher is required")]
    );
    assert_eq!(
        errors(&udp(
            json!({"matcher": {"on_no_match": {"action": {"typed_config": {"cluster": ""}}}}}),
            json!({})
        )),
        [format!(
            "{T}.matcher.on_no_match.action.typed_config.cluster: must not be empty"
        )]
    );
    assert_eq!(
        errors(&udp(
            json!({"access_log_options": {"access_log_flush_interval": "0.0001s"}}),
            json!({})
        )),
        [format!(
            "{T}.access_log_options.access_log_flush_interval: must be at least 1ms"
        )]
    );
    assert_eq!(
        errors(&udp(
            json!({}),
            json!({"udp_listener_config": {"downstream_socket_config": {"max_rx_datagram_size": 70000}}})
        )),
        [format!(
            "{L}.udp_listener_config.downstream_socket_config.max_rx_datagram_size: value must be inside range (0, 65536)"
        )]
    );
    let chain = json!({"filter_chains": [{"filters": []}]});
    assert_eq!(
        errors(&udp(json!({}), chain)),
        [format!(
            "{L}.filter_chains: 1 filter chain(s) specified for connection-less UDP listener."
        )]
    );
}

#[test]
fn what_is_not_built_is_refused_with_its_path() {
    for (field, value) in [
        ("use_original_src_ip", json!(true)),
        ("session_filters", json!([{"name": "x"}])),
        (
            "tunneling_config",
            json!({"proxy_host": "h", "target_host": "t"}),
        ),
    ] {
        let errs = errors(&udp(json!({field: value}), json!({})));
        assert!(
            errs.iter().any(|e| e.starts_with(&format!("{T}.{field}"))),
            "{field}: {errs:?}"
        );
    }
    let errs = errors(&udp(
        json!({"upstream_socket_config": {"prefer_gro": true}}),
        json!({}),
    ));
    assert!(
        errs.iter()
            .any(|e| e.starts_with(&format!("{T}.upstream_socket_config.prefer_gro"))),
        "{errs:?}"
    );
    let errs = errors(&udp(
        json!({"matcher": {"matcher_list": {"matchers": []}}}),
        json!({}),
    ));
    assert!(
        errs.iter()
            .any(|e| e.starts_with(&format!("{T}.matcher.matcher_list"))),
        "{errs:?}"
    );
    let errs = errors(&udp(json!({"idle_timeout": "0s"}), json!({})));
    assert!(
        errs.iter()
            .any(|e| e.starts_with(&format!("{T}.idle_timeout"))),
        "{errs:?}"
    );
    // QUIC listeners, a second filter, a UDP listener without the proxy, TCP options.
    let errs = errors(&udp(
        json!({}),
        json!({"udp_listener_config": {"quic_options": {}}}),
    ));
    assert!(
        errs.iter()
            .any(|e| e.starts_with(&format!("{L}.udp_listener_config.quic_options"))),
        "{errs:?}"
    );
    let mut v = udp(json!({}), json!({}));
    let f = v["static_resources"]["listeners"][0]["listener_filters"][0].clone();
    v["static_resources"]["listeners"][0]["listener_filters"] = json!([f.clone(), f]);
    assert!(
        errors(&v)
            .iter()
            .any(|e| e.starts_with(&format!("{L}.listener_filters[1]"))),
    );
    let v = udp(json!({}), json!({"listener_filters": []}));
    assert!(
        errors(&v)
            .iter()
            .any(|e| e.starts_with(&format!("{L}.listener_filters"))),
    );
    let v = udp(
        json!({}),
        json!({"socket_options": [{"level": 1, "name": 9, "int_value": 1}]}),
    );
    assert!(
        errors(&v)
            .iter()
            .any(|e| e.starts_with(&format!("{L}.socket_options"))),
    );
}

#[test]
fn udp_stays_refused_outside_listeners_and_endpoints_and_udp_proxy_on_tcp_listeners() {
    // A TCP listener with the UDP proxy filter: an unknown listener filter there.
    let mut v = udp(json!({}), json!({}));
    v["static_resources"]["listeners"][0]["address"]["socket_address"]
        .as_object_mut()
        .map(|o| o.remove("protocol"));
    v["static_resources"]["listeners"][0]["filter_chains"] = json!([{"filters": []}]);
    assert!(
        errors(&v)
            .iter()
            .any(|e| e.starts_with(&format!("{L}.listener_filters[0]"))),
    );
    // An endpoint's protocol is ignored, as Envoy ignores it (control
    // planes mark UDP services' endpoints so).
    let c = json!({"static_resources": {"clusters": [{"name": "c", "type": "STATIC",
        "load_assignment": {"cluster_name": "c", "endpoints": [{"lb_endpoints": [{"endpoint": {"address":
        {"socket_address": {"address": "127.0.0.1", "port_value": 1, "protocol": "UDP"}}}}]}]}}]}});
    assert_eq!(errors(&c), Vec::<String>::new());
    // Elsewhere UDP stays refused (the admin listens on TCP).
    let a = json!({"admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0, "protocol": "UDP"}}}});
    assert_eq!(
        errors(&a),
        ["admin.address.socket_address.protocol: UDP is not supported"]
    );
}

#[test]
fn a_tcp_and_a_udp_listener_share_a_port_but_two_udp_ones_do_not() {
    let mut v = udp(json!({}), json!({}));
    let tcp = crate::listener::test_util::listener(
        json!({"name": "t", "address": {"socket_address": {"address": "::", "port_value": 10080}}}),
    );
    let t = tcp["static_resources"]["listeners"][0].clone();
    let u = v["static_resources"]["listeners"][0].clone();
    v["static_resources"]["listeners"] = json!([u.clone(), t]);
    assert_eq!(errors(&v), Vec::<String>::new());
    let mut u2 = u.clone();
    u2["name"] = json!("u2");
    v["static_resources"]["listeners"] = json!([u, u2]);
    assert_eq!(
        errors(&v),
        [
            "static_resources.listeners[1].address: address [::]:10080 is already used by static_resources.listeners[0]"
        ]
    );
}

#[test]
fn hash_policies_as_envoy_checks_them() {
    let u = only(&udp(
        json!({"hash_policies": [{"source_ip": true}]}),
        json!({}),
    ));
    assert_eq!(u.proxy.hash, Some(crate::listener::UdpHash::SourceIp));
    let u = only(&udp(json!({"hash_policies": [{"key": "k"}]}), json!({})));
    assert_eq!(
        u.proxy.hash,
        Some(crate::listener::UdpHash::Key("k".into()))
    );
    assert_eq!(only(&udp(json!({}), json!({}))).proxy.hash, None);
    for (policies, error) in [
        (
            json!([{"source_ip": false}]),
            "hash_policies[0].source_ip: must be true",
        ),
        (
            json!([{"key": ""}]),
            "hash_policies[0].key: must not be empty",
        ),
        (
            json!([{"key": "a"}, {"key": "b"}]),
            "hash_policies: at most one hash policy",
        ),
    ] {
        let errs = errors(&udp(json!({"hash_policies": policies}), json!({})));
        assert_eq!(errs, [format!("{T}.{error}")], "{policies}");
    }
}
