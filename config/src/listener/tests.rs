use super::access_log::{JsonValue, LogFormat, Sink};
use super::hcm::*;
use super::http_options::HeadersWithUnderscores;
use super::test_util::{chain, errors, hcm, hcm_filter, listener, load};
use super::*;
use crate::format::{Command, Part};
use serde_json::json;
use std::time::Duration;

const L: &str = "static_resources.listeners[0]";
const HCM: &str = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config";

fn only_listener(v: &serde_json::Value) -> Listener {
    let b = load(v).unwrap_or_else(|e| panic!("{e}"));
    b.listeners[0].as_ref().clone()
}

fn only_hcm(v: &serde_json::Value) -> HttpConnectionManager {
    only_listener(v).filter_chains[0]
        .hcm()
        .expect("a connection manager")
        .as_ref()
        .clone()
}

#[test]
fn minimal_listener_and_defaults() {
    let l = only_listener(&listener(json!({})));
    assert_eq!(l.name, "l");
    assert_eq!(l.address.socket().unwrap().port, 10000);
    assert_eq!(l.per_connection_buffer_limit_bytes, 1024 * 1024);
    assert_eq!(l.traffic_direction, TrafficDirection::Unspecified);
    assert!(!l.freebind);
    let fc = &l.filter_chains[0];
    assert_eq!(fc.filter_chain_match, FilterChainMatch::default());
    assert!(fc.tls.is_none());
    assert_eq!(
        fc.hcm_config_path,
        "filter_chains[0].filters[0].typed_config"
    );
    let h = fc.hcm().unwrap();
    assert_eq!(h.codec_type, CodecType::Auto);
    assert_eq!(h.stat_prefix, "ingress");
    assert!(matches!(&h.route_specifier, RouteSpecifier::Inline(rc) if rc.name == "r"));
    assert!(h.http_filters.is_empty() && h.implicit_router);
    assert_eq!(h.stream_idle_timeout, Some(Duration::from_secs(300)));
    assert_eq!(h.request_timeout, None);
    assert_eq!(h.request_headers_timeout, None);
    assert_eq!(h.drain_timeout, Duration::from_secs(5));
    assert_eq!(h.delayed_close_timeout, Some(Duration::from_secs(1)));
    assert_eq!(h.max_request_headers_kb, 60);
    let c = &h.common_http_protocol_options;
    assert_eq!(c.idle_timeout, Some(Duration::from_secs(3600)));
    assert_eq!(c.max_headers_count, 100);
    assert_eq!(c.max_requests_per_connection, None);
    assert_eq!(
        c.headers_with_underscores_action,
        HeadersWithUnderscores::Allow
    );
    assert_eq!(h.http2_protocol_options.max_concurrent_streams, 1024);
    assert_eq!(
        h.http2_protocol_options.initial_stream_window_size,
        16 << 20
    );
    assert!(h.generate_request_id && !h.use_remote_address);
    assert_eq!(h.server_name, "envoy");
    assert_eq!(
        h.server_header_transformation,
        ServerHeaderTransformation::Overwrite
    );
    assert_eq!(
        h.path_with_escaped_slashes_action,
        EscapedSlashesAction::KeepUnchanged
    );
    assert_eq!(h.internal_addresses, InternalAddresses::Default);
    assert_eq!(h.strip_port, StripPort::None);
    assert!(l.rds_path_sources().is_empty());
}

#[test]
fn unnamed_listener_gets_its_address_as_name() {
    let mut v = listener(json!({}));
    v["static_resources"]["listeners"][0]
        .as_object_mut()
        .unwrap()
        .remove("name");
    assert_eq!(only_listener(&v).name, "127.0.0.1:10000");
}

#[test]
fn listener_fields_and_refusals() {
    let l = only_listener(&listener(json!({
        "stat_prefix": "edge",
        "per_connection_buffer_limit_bytes": 32768,
        "traffic_direction": "OUTBOUND",
        "freebind": true,
    })));
    assert!(l.freebind);
    assert_eq!(l.stat_prefix, "edge");
    assert_eq!(l.per_connection_buffer_limit_bytes, 32768);
    assert_eq!(l.traffic_direction, TrafficDirection::Outbound);
    assert_eq!(
        l.max_accepts_per_event, None,
        "Envoy's default: all pending"
    );
    let l = only_listener(&listener(json!({
        "max_connections_to_accept_per_socket_event": 1,
    })));
    assert_eq!(l.max_accepts_per_event, Some(1));
    assert_eq!(
        errors(&listener(
            json!({"max_connections_to_accept_per_socket_event": 0})
        )),
        [format!(
            "{L}.max_connections_to_accept_per_socket_event: must be greater than 0"
        )]
    );

    let e = errors(&listener(json!({
        "listener_filters": [{"name": "envoy.filters.listener.http_inspector", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.listener.http_inspector.v3.HttpInspector"}}],
        "access_log": [],
        "enable_reuse_port": false,
    })));
    assert_eq!(
        e,
        [
            format!("{L}.enable_reuse_port: enable_reuse_port is not supported"),
            format!(
                "{L}.listener_filters[0]: listener filter envoy.filters.listener.http_inspector is not supported"
            ),
        ]
    );
    assert_eq!(
        errors(&listener(json!({"filter_chains": []}))),
        [format!("{L}.filter_chains: no filter chains specified")]
    );
}

#[test]
fn filter_chain_matches_and_duplicates() {
    let two = |a: serde_json::Value, b: serde_json::Value| {
        listener(json!({"filter_chains": [
            {"filter_chain_match": a, "filters": [hcm_filter(json!({}))]},
            {"filter_chain_match": b, "filters": [hcm_filter(json!({}))]},
        ]}))
    };
    let l = only_listener(&two(
        json!({"server_names": ["A.example.com", "*.b.example.com"], "transport_protocol": "tls",
               "application_protocols": ["h2"]}),
        json!({"transport_protocol": "raw_buffer"}),
    ));
    let m = &l.filter_chains[0].filter_chain_match;
    assert_eq!(m.server_names, ["a.example.com", "*.b.example.com"]);
    assert_eq!(m.transport_protocol, Some(TransportProtocol::Tls));
    assert_eq!(m.application_protocols, ["h2"]);
    assert_eq!(
        errors(&two(
            json!({"server_names": ["a.com"]}),
            json!({"server_names": ["a.com"]})
        )),
        [format!(
            "{L}.filter_chains[1].filter_chain_match: multiple filter chains with the same matching rules are defined (also filter_chains[0])"
        )]
    );
    assert_eq!(
        errors(&two(
            json!({"server_names": ["a.com", "b.com"]}),
            json!({"server_names": ["B.com"]})
        )),
        [format!(
            "{L}.filter_chains[1].filter_chain_match: multiple filter chains with overlapping matching rules are defined (overlaps filter_chains[0])"
        )]
    );
    assert_eq!(
        errors(&two(
            json!({"server_names": ["*a.com"], "transport_protocol": "quic"}),
            json!({"destination_port": 80})
        )),
        [
            format!(
                "{L}.filter_chains[1].filter_chain_match.destination_port: destination_port is not supported"
            ),
            format!(
                "{L}.filter_chains[0].filter_chain_match.server_names[0]: partial wildcards are not supported in \"server_names\""
            ),
            format!(
                "{L}.filter_chains[0].filter_chain_match.transport_protocol: transport protocol \"quic\" (only raw_buffer and tls) is not supported"
            ),
        ]
    );
}

#[test]
fn network_filters() {
    let tcp = json!({"name": "envoy.filters.network.tcp_proxy", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
        "stat_prefix": "t", "cluster": "c"}});
    assert_eq!(
        errors(&chain(json!({"filters": [hcm_filter(json!({})), tcp]}))),
        [format!(
            "{L}.filter_chains[0].filters[0]: terminal filter named envoy.filters.network.http_connection_manager of type envoy.filters.network.http_connection_manager must be the last filter in a network filter chain"
        ),]
    );
    assert_eq!(
        errors(&chain(
            json!({"filters": [tcp.clone(), hcm_filter(json!({}))]})
        )),
        [format!(
            "{L}.filter_chains[0].filters[0]: terminal filter named envoy.filters.network.tcp_proxy of type envoy.filters.network.tcp_proxy must be the last filter in a network filter chain"
        )]
    );
    let l = only_listener(&chain(json!({"filters": [tcp]})));
    assert!(l.filter_chains[0].hcm().is_none());
    assert_eq!(l.filter_chains[0].tcp_proxy().unwrap().stat_prefix, "t");
    let echo = json!({"name": "envoy.filters.network.echo", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.echo.v3.Echo"}});
    assert_eq!(
        errors(&chain(json!({"filters": [echo]}))),
        [format!(
            "{L}.filter_chains[0].filters[0]: network filter envoy.filters.network.echo is not supported"
        )]
    );
    assert_eq!(
        errors(&chain(json!({"filters": []}))),
        [format!(
            "{L}.filter_chains[0].filters: a filter chain needs an envoy.filters.network.http_connection_manager or envoy.filters.network.tcp_proxy filter"
        )]
    );
}

#[test]
fn default_filter_chain() {
    let l = only_listener(&listener(json!({
        "filter_chains": [],
        "default_filter_chain": {"filters": [hcm_filter(json!({"stat_prefix": "d"}))]},
    })));
    let d = l.default_filter_chain.as_ref().unwrap();
    assert_eq!(d.hcm().unwrap().stat_prefix, "d");
    assert_eq!(
        d.hcm_config_path,
        "default_filter_chain.filters[0].typed_config"
    );
}

#[test]
fn hcm_settings() {
    let h = only_hcm(&hcm(json!({
        "codec_type": "HTTP2",
        "stream_idle_timeout": "0s",
        "request_timeout": "10s",
        "drain_timeout": "2s",
        "delayed_close_timeout": "0s",
        "max_request_headers_kb": 96,
        "common_http_protocol_options": {"idle_timeout": "60s", "max_headers_count": 50,
            "max_connection_duration": "600s", "max_requests_per_connection": 100,
            "headers_with_underscores_action": "REJECT_REQUEST"},
        "http_protocol_options": {"accept_http_10": true, "default_host_for_http_10": "h"},
        "http2_protocol_options": {"max_concurrent_streams": 100, "initial_stream_window_size": 65536},
        "use_remote_address": true, "xff_num_trusted_hops": 2, "skip_xff_append": true,
        "generate_request_id": false, "preserve_external_request_id": true,
        "server_name": "courier", "server_header_transformation": "PASS_THROUGH",
        "normalize_path": true, "merge_slashes": true,
        "path_with_escaped_slashes_action": "REJECT_REQUEST",
        "upgrade_configs": [{"upgrade_type": "WebSocket"}, {"upgrade_type": "CONNECT", "enabled": false}],
        "internal_address_config": {"cidr_ranges": [{"address_prefix": "10.0.0.0", "prefix_len": 8}]},
        "strip_any_host_port": true,
        "proxy_100_continue": true,
    })));
    assert_eq!(h.codec_type, CodecType::Http2);
    assert_eq!(h.stream_idle_timeout, None);
    assert_eq!(h.request_timeout, Some(Duration::from_secs(10)));
    assert_eq!(h.drain_timeout, Duration::from_secs(2));
    assert_eq!(h.delayed_close_timeout, None);
    assert_eq!(h.max_request_headers_kb, 96);
    let c = &h.common_http_protocol_options;
    assert_eq!(c.idle_timeout, Some(Duration::from_secs(60)));
    assert_eq!(c.max_headers_count, 50);
    assert_eq!(c.max_connection_duration, Some(Duration::from_secs(600)));
    assert_eq!(c.max_requests_per_connection, Some(100));
    assert_eq!(
        c.headers_with_underscores_action,
        HeadersWithUnderscores::RejectRequest
    );
    assert!(h.http_protocol_options.accept_http_10);
    assert_eq!(
        h.http_protocol_options.default_host_for_http_10.as_deref(),
        Some("h")
    );
    assert_eq!(h.http2_protocol_options.max_concurrent_streams, 100);
    assert_eq!(h.http2_protocol_options.initial_stream_window_size, 65536);
    assert_eq!(
        h.http2_protocol_options.initial_connection_window_size,
        24 << 20
    );
    assert!(h.use_remote_address && h.skip_xff_append && !h.generate_request_id);
    assert_eq!(h.xff_num_trusted_hops, 2);
    assert_eq!(h.server_name, "courier");
    assert_eq!(
        h.server_header_transformation,
        ServerHeaderTransformation::PassThrough
    );
    assert!(h.normalize_path && h.merge_slashes && h.proxy_100_continue);
    assert_eq!(
        h.upgrade_configs,
        [
            UpgradeConfig {
                upgrade_type: "websocket".into(),
                enabled: true
            },
            UpgradeConfig {
                upgrade_type: "connect".into(),
                enabled: false
            },
        ]
    );
    assert!(matches!(&h.internal_addresses, InternalAddresses::Ranges(r) if r.len() == 1));
    assert_eq!(h.strip_port, StripPort::Any);
}

#[test]
fn hcm_errors() {
    let e = errors(&hcm(json!({
        "codec_type": "HTTP3",
        "stat_prefix": "",
        "max_request_headers_kb": 9000,
        "http2_protocol_options": {"initial_connection_window_size": 100, "hpack_table_size": 1, "connection_keepalive": {"timeout": "1s"}},
        "http_protocol_options": {"allow_chunked_length": true},
        "strip_matching_host_port": true,
        "strip_any_host_port": true,
        "upgrade_configs": [{"upgrade_type": "websocket"}, {"upgrade_type": "WebSocket"}],
        "drain_timeout": "-1s",
        "via": "courier",
        "tracing": {"verbose": true},
    })));
    let want = [
        format!("{HCM}.tracing.verbose: verbose is not supported"),
        format!(
            "{HCM}.http_protocol_options.allow_chunked_length: allow_chunked_length is not supported"
        ),
        format!("{HCM}.http2_protocol_options.hpack_table_size: hpack_table_size is not supported"),
        format!(
            "{HCM}.http2_protocol_options.connection_keepalive: connection_keepalive on downstream connections is not supported"
        ),
        format!("{HCM}.via: via is not supported"),
        format!("{HCM}.codec_type: HTTP3 is not supported"),
        format!("{HCM}.stat_prefix: must not be empty"),
        format!("{HCM}.max_request_headers_kb: 9000 is out of range 1..=8192"),
        format!(
            "{HCM}.http2_protocol_options.initial_connection_window_size: 100 is out of range 65535..=2147483647"
        ),
        format!(
            "{HCM}.strip_any_host_port: Only one of `strip_matching_host_port` or `strip_any_host_port` can be set."
        ),
        format!(
            "{HCM}.upgrade_configs[1].upgrade_type: multiple upgrade configs with the same name: 'WebSocket'"
        ),
        format!("{HCM}.drain_timeout: must not be negative"),
    ];
    let mut e = e;
    e.sort();
    let mut want = want.to_vec();
    want.sort();
    assert_eq!(e, want);
}

#[test]
fn rds_and_path_sources() {
    let v = hcm(json!({"rds": {"route_config_name": "routes",
        "config_source": {"path_config_source": {"path": "/etc/courier/rds.yaml"}}}}));
    let mut v2 = v.clone();
    // route_config and rds are a oneof: drop the inline one the helper adds.
    v2["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        .as_object_mut()
        .unwrap()
        .remove("route_config");
    // The bootstrap reads path sources up front; the file does not exist here.
    let b = crate::load::parse_text(&v2.to_string(), crate::load::Format::Json).unwrap();
    let proto = crate::load::dynamic_from_json(b, "envoy.config.bootstrap.v3.Bootstrap").unwrap();
    let mut ctx = crate::Ctx::new();
    let bs = crate::bootstrap_from_proto(&proto, &mut ctx);
    assert!(!ctx.has_errors());
    let l = &bs.listeners[0];
    let h = l.filter_chains[0].hcm().unwrap();
    assert!(
        matches!(&h.route_specifier, RouteSpecifier::Rds { route_config_name, .. } if route_config_name == "routes")
    );
    assert_eq!(
        l.rds_path_sources(),
        [RdsPathSource {
            field:
                "filter_chains[0].filters[0].typed_config.rds.config_source.path_config_source.path"
                    .into(),
            file: "/etc/courier/rds.yaml",
        }]
    );
    let mut v3 = v2.clone();
    v3["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]["rds"] =
        json!({"config_source": {"ads": {}}});
    assert_eq!(
        errors(&v3),
        [format!("{HCM}.rds.route_config_name: must not be empty")]
    );
}

#[test]
fn router_must_be_last() {
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3 as pb;
    use envoy_types::pb::google::protobuf::Any;
    let filter = |name: &str, url: &str| pb::HttpFilter {
        name: name.into(),
        config_type: Some(pb::http_filter::ConfigType::TypedConfig(Any {
            type_url: url.into(),
            value: vec![],
        })),
        ..Default::default()
    };
    let h = pb::HttpConnectionManager {
        stat_prefix: "s".into(),
        route_specifier: Some(pb::http_connection_manager::RouteSpecifier::RouteConfig(
            Default::default(),
        )),
        http_filters: vec![
            filter("envoy.filters.http.router", crate::extensions::ROUTER),
            filter("authz", crate::extensions::RBAC),
        ],
        ..Default::default()
    };
    let mut ctx = crate::Ctx::new();
    let root = crate::Path::ROOT;
    let p = root.field("hcm");
    hcm::translate(&h, &p, &mut ctx);
    let e = ctx.finish(()).unwrap_err();
    let ours: Vec<String> = e
        .errors
        .iter()
        .map(ToString::to_string)
        // The filters module's own messages are not this test's business.
        .filter(|m| m.contains("filter chain"))
        .collect();
    assert_eq!(
        ours,
        [
            "hcm.http_filters[0]: terminal filter named envoy.filters.http.router of type envoy.filters.http.router must be the last filter in a http filter chain",
            "hcm.http_filters[1]: non-terminal filter named authz of type envoy.filters.http.rbac is the last filter in a http filter chain (the router must end it)",
        ]
    );
}

#[test]
fn access_logs() {
    let stdout = "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog";
    let file = "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog";
    let h = only_hcm(&hcm(json!({"access_log": [
        {"name": "envoy.access_loggers.stdout", "typed_config": {"@type": stdout}},
        {"name": "f", "typed_config": {"@type": file, "path": "/tmp/a.log",
            "log_format": {"text_format_source": {"inline_string": "%RESPONSE_CODE% %%\n"},
                           "omit_empty_values": true}}},
        {"name": "j", "typed_config": {"@type": file, "path": "/tmp/b.log",
            "json_format": {"code": "%RESPONSE_CODE%", "n": 1, "nested": {"p": "%PROTOCOL%"}}}},
        {"name": "old", "typed_config": {"@type": file, "path": "/tmp/c.log", "format": "%PROTOCOL%"}},
    ]})));
    let a = &h.access_log;
    assert_eq!(a[0].sink, Sink::Stdout);
    assert_eq!(a[0].format, super::access_log::AccessLog::file("x").format);
    assert_eq!(a[1].sink, Sink::File("/tmp/a.log".into()));
    assert!(a[1].omit_empty_values);
    assert_eq!(
        a[1].format,
        LogFormat::Text(crate::format::FormatString {
            parts: vec![
                Part::Command(Command::ResponseCode),
                Part::Literal(" %\n".into())
            ]
        })
    );
    let LogFormat::Json(fields) = &a[2].format else {
        panic!("json expected")
    };
    let keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["code", "n", "nested"]);
    assert_eq!(fields[1].1, JsonValue::Number(1.0));
    assert!(matches!(&fields[2].1, JsonValue::Object(o) if o.len() == 1));
    assert!(
        matches!(&a[3].format, LogFormat::Text(f) if f.parts == [Part::Command(Command::Protocol)])
    );
}

#[test]
fn access_log_errors() {
    let file = "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog";
    let e = errors(&hcm(json!({"access_log": [
        {"name": "envoy.access_loggers.tcp_grpc", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.TcpGrpcAccessLogConfig"}},
        {"name": "f", "typed_config": {"@type": file, "path": ""}},
        {"name": "f", "typed_config": {"@type": file, "path": "/x", "log_format": {"text_format": "%NOPE%"}}},
        {"name": "f", "filter": {"status_code_filter": {"comparison": {"op": "GE", "value": {"default_value": 400, "runtime_key": "k"}}}},
         "typed_config": {"@type": file, "path": "/x", "log_format": {"json_format": {"a": "%REQ(%"}}}},
        {"name": "f", "typed_config": {"@type": file, "path": "/x",
            "log_format": {"text_format_source": {"filename": "/f"}, "content_type": "text/plain"}}},
        {"name": "f", "typed_config": {"@type": file, "path": "/x", "log_format": {"text_format": "%LOCAL_REPLY_BODY%"}}},
    ]})));
    let p = format!("{HCM}.access_log");
    assert_eq!(
        e,
        [
            format!("{p}[3].filter.status_code_filter: status_code_filter is not supported"),
            format!("{p}[0]: access logger envoy.access_loggers.tcp_grpc is not supported"),
            format!("{p}[1].typed_config.path: must not be empty"),
            format!(
                "{p}[2].typed_config.log_format.text_format: unsupported format command %NOPE%"
            ),
            format!(
                "{p}[3].typed_config.log_format.json_format[\"a\"]: invalid format string: unterminated %REQ("
            ),
            format!(
                "{p}[4].typed_config.log_format.content_type: content_type in an access log format is not supported"
            ),
            format!(
                "{p}[4].typed_config.log_format.text_format_source.filename: a format read from a file is not supported"
            ),
            format!(
                "{p}[5].typed_config.log_format.text_format: %LOCAL_REPLY_BODY% in an access log is not supported"
            ),
        ]
    );
}

#[test]
fn http2_flood_limits_with_defaults_and_ranges() {
    let h = only_hcm(&hcm(json!({})));
    assert_eq!(
        h.http2_protocol_options.flood,
        super::http_options::H2FloodLimits {
            outbound_frames: 10_000,
            outbound_control_frames: 1000,
            consecutive_empty_frames: 1,
            priority_frames_per_stream: 100,
            window_updates_per_data_frame: 10,
        }
    );
    let h = only_hcm(&hcm(json!({"http2_protocol_options": {
        "max_outbound_frames": 50, "max_outbound_control_frames": 5,
        "max_consecutive_inbound_frames_with_empty_payload": 0,
        "max_inbound_priority_frames_per_stream": 7,
        "max_inbound_window_update_frames_per_data_frame_sent": 3,
    }})));
    let f = h.http2_protocol_options.flood;
    assert_eq!(
        (
            f.outbound_frames,
            f.outbound_control_frames,
            f.consecutive_empty_frames,
            f.priority_frames_per_stream,
            f.window_updates_per_data_frame
        ),
        (50, 5, 0, 7, 3)
    );
    let e = errors(&hcm(
        json!({"http2_protocol_options": {"max_outbound_frames": 0}}),
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("http2_protocol_options.max_outbound_frames: 0 is out of range"),
        "{e:?}"
    );
}

#[test]
fn transport_socket_connect_timeout_zero_means_none() {
    let chain_with = |t: &str| {
        listener(json!({"filter_chains": [{
            "transport_socket_connect_timeout": t,
            "filters": [hcm_filter(json!({"stat_prefix": "s"}))],
        }]}))
    };
    let l = only_listener(&chain_with("0.25s"));
    assert_eq!(
        l.filter_chains[0].transport_socket_connect_timeout,
        Some(Duration::from_millis(250))
    );
    let l = only_listener(&chain_with("0s"));
    assert_eq!(l.filter_chains[0].transport_socket_connect_timeout, None);
    assert_eq!(
        errors(&chain_with("-1s")),
        [format!(
            "{L}.filter_chains[0].transport_socket_connect_timeout: must not be negative"
        )]
    );
}

#[test]
fn forward_client_cert_modes() {
    assert_eq!(
        only_hcm(&hcm(json!({}))).forward_client_cert,
        ForwardClientCert::Sanitize
    );
    assert_eq!(
        only_hcm(&hcm(json!({"forward_client_cert_details": "FORWARD_ONLY"}))).forward_client_cert,
        ForwardClientCert::ForwardOnly
    );
    assert_eq!(
        only_hcm(&hcm(
            json!({"forward_client_cert_details": "ALWAYS_FORWARD_ONLY"})
        ))
        .forward_client_cert,
        ForwardClientCert::AlwaysForwardOnly
    );
    let h = only_hcm(&hcm(json!({
        "forward_client_cert_details": "SANITIZE_SET",
        "set_current_client_cert_details": {"subject": true, "dns": true},
    })));
    assert_eq!(h.forward_client_cert, ForwardClientCert::SanitizeSet);
    assert_eq!(
        h.client_cert_details,
        ClientCertDetails {
            subject: true,
            dns: true,
            ..ClientCertDetails::default()
        }
    );
}

#[test]
fn proxy_protocol_listener_filter() {
    let pp = |config: serde_json::Value| {
        let mut c = json!({"@type": PROXY_PROTOCOL_TYPE});
        crate::listener::test_util::merge(&mut c, config);
        listener(json!({"listener_filters": [
            {"name": "envoy.filters.listener.proxy_protocol", "typed_config": c}
        ]}))
    };
    let b = load(&pp(json!({"allow_requests_without_proxy_protocol": true, "disallowed_versions": ["V2"], "stat_prefix": "edge"}))).unwrap();
    assert_eq!(
        b.listeners[0].proxy_protocol,
        Some(proxy_protocol::ProxyProtocol {
            allow_without: true,
            v1: true,
            v2: false,
            stat_prefix: "edge".into(),
        })
    );
    let e = errors(&pp(
        json!({"rules": [{"tlv_type": 1, "on_tlv_present": {"key": "k"}}]}),
    ));
    assert_eq!(
        e,
        [
            "static_resources.listeners[0].listener_filters[0].typed_config.rules: rules is not supported"
        ]
    );
}

#[test]
fn connection_limit_filter_before_the_terminal_one() {
    let cl = |config: serde_json::Value| {
        let mut c = json!({"@type": "type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit"});
        crate::listener::test_util::merge(&mut c, config);
        json!({"name": "envoy.filters.network.connection_limit", "typed_config": c})
    };
    let b = load(&listener(json!({"filter_chains": [{"filters": [
        cl(json!({"stat_prefix": "edge", "max_connections": 3, "delay": "2s"})),
        hcm_filter(json!({})),
    ]}]})))
    .unwrap();
    let fc = &b.listeners[0].filter_chains[0];
    assert_eq!(fc.connection_limits.len(), 1);
    assert_eq!(fc.connection_limits[0].max_connections, 3);
    assert_eq!(fc.connection_limits[0].delay, Some(Duration::from_secs(2)));
    assert!(fc.hcm().is_some());
    let mut e = errors(&listener(json!({"filter_chains": [{"filters": [
        cl(json!({"stat_prefix": "", "max_connections": 0, "runtime_enabled": {"default_value": true, "runtime_key": "k"}})),
        hcm_filter(json!({})),
    ]}]})));
    e.sort();
    let p = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config";
    assert_eq!(
        e,
        [
            format!("{p}.max_connections: value must be greater than or equal to 1"),
            format!("{p}.runtime_enabled: runtime_enabled is not supported"),
            format!("{p}.stat_prefix: value length must be at least 1 characters"),
        ]
    );
}
