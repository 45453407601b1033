//! Health checks and the upstream HTTP protocol.

use super::*;

#[test]
fn health_checks() {
    let c = cluster(&with_ep(
        "  health_checks:
  - timeout: 1s
    interval: 2s
    unhealthy_threshold: 3
    healthy_threshold: 1
    no_traffic_interval: 4s
    http_health_check:
      path: /healthz
      host: svc
      expected_statuses: [{start: 200, end: 300}]
      request_headers_to_add: [{header: {key: X-Hc, value: '1'}, append_action: OVERWRITE_IF_EXISTS_OR_ADD}]
      request_headers_to_remove: [User-Agent]
  - timeout: 1s
    interval: 2s
    unhealthy_threshold: 3
    healthy_threshold: 1
    tcp_health_check: {}
",
    ));
    let h = &c.health_checks[0];
    assert_eq!(h.timeout, Duration::from_secs(1));
    assert_eq!(h.interval, Duration::from_secs(2));
    assert_eq!(h.unhealthy_interval, Duration::from_secs(2));
    assert_eq!(h.unhealthy_edge_interval, Duration::from_secs(2));
    assert_eq!(h.healthy_edge_interval, Duration::from_secs(2));
    assert_eq!(h.no_traffic_interval, Duration::from_secs(4));
    assert_eq!(h.no_traffic_healthy_interval, Duration::from_secs(4));
    assert!(h.reuse_connection);
    assert_eq!((h.unhealthy_threshold, h.healthy_threshold), (3, 1));
    let HealthCheckKind::Http(http) = &h.kind else {
        panic!("{:?}", h.kind)
    };
    assert_eq!(http.path, "/healthz");
    assert_eq!(http.host.as_deref(), Some("svc"));
    assert_eq!(http.method, "GET");
    assert_eq!(
        http.expected_statuses,
        [StatusRange {
            start: 200,
            end: 300
        }]
    );
    assert_eq!(http.codec, HealthCheckCodec::Http1);
    assert_eq!(
        http.request_headers_to_add,
        [RequestHeader {
            name: "x-hc".into(),
            value: "1".into(),
            append: HeaderAppend::OverwriteIfExistsOrAdd,
            keep_empty_value: false,
        }]
    );
    assert_eq!(http.request_headers_to_remove, ["user-agent"]);
    assert_eq!(
        c.health_checks[1].kind,
        HealthCheckKind::Tcp(Default::default())
    );

    let c = cluster(&with_ep(
        "  http2_protocol_options: {}\n  health_checks: [{timeout: 1s, interval: 5s, unhealthy_threshold: 1, healthy_threshold: 1, grpc_health_check: {service_name: s}}]\n",
    ));
    let h = &c.health_checks[0];
    assert_eq!(h.no_traffic_interval, Duration::from_secs(60));
    assert_eq!(
        h.kind,
        HealthCheckKind::Grpc(GrpcHealthCheck {
            service_name: "s".into(),
            authority: None
        })
    );
    let HealthCheckKind::Http(http) = &cluster(&with_ep(
        "  health_checks: [{timeout: 1s, interval: 5s, unhealthy_threshold: 1, healthy_threshold: 1, http_health_check: {path: /}}]\n",
    ))
    .health_checks[0]
    .kind
    else {
        panic!()
    };
    assert_eq!(
        http.expected_statuses,
        [StatusRange {
            start: 200,
            end: 201
        }]
    );
}

#[test]
fn health_check_errors() {
    let p = "static_resources.clusters[0].health_checks";
    assert_eq!(
        errors(&with_ep(
            "  health_checks: [{http_health_check: {path: ''}}]\n"
        )),
        [
            format!("{p}[0].timeout: is required"),
            format!("{p}[0].interval: is required"),
            format!("{p}[0].unhealthy_threshold: is required"),
            format!("{p}[0].healthy_threshold: is required"),
            format!("{p}[0].http_health_check.path: must not be empty"),
        ]
    );
    assert_eq!(
        errors(&with_ep(
            "  health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, http_health_check: {path: /, method: CONNECT, codec_client_type: HTTP3, expected_statuses: [{start: 99, end: 200}, {start: 300, end: 200}, {start: 200, end: 601}]}}]\n"
        )),
        [
            format!("{p}[0].http_health_check.method: CONNECT cannot be used for health checks"),
            format!("{p}[0].http_health_check.codec_client_type: HTTP3 is not supported"),
            format!(
                "{p}[0].http_health_check.expected_statuses[0].start: must be at least 100, found 99"
            ),
            format!(
                "{p}[0].http_health_check.expected_statuses[1]: start must be below end, found start=300 and end=200"
            ),
            format!(
                "{p}[0].http_health_check.expected_statuses[2].end: must be at most 600, found 601"
            ),
        ]
    );
    assert_eq!(
        errors(&with_ep(
            "  health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, grpc_health_check: {}}]\n"
        )),
        [format!(
            "{p}[0].grpc_health_check: needs a cluster that supports HTTP/2 (gRPC health checking runs over HTTP/2)"
        )]
    );
    assert_eq!(
        errors(&with_ep(
            "  health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, tcp_health_check: {send: {text: 'zz'}, receive: [{}]}}]\n"
        )),
        [
            format!("{p}[0].tcp_health_check.send.text: invalid hex string \"zz\""),
            format!("{p}[0].tcp_health_check.receive[0]: one of text or binary is required"),
        ]
    );
    assert_eq!(
        errors(&with_ep(
            "  health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1}]\n"
        )),
        [format!(
            "{p}[0]: one of http_health_check, grpc_health_check or tcp_health_check is required"
        )]
    );
}

const HPO: &str = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";

fn hpo(body: &str) -> String {
    format!(
        "  typed_extension_protocol_options:\n    {HPO}:\n      '@type': type.googleapis.com/{HPO}\n{body}"
    )
}

#[test]
fn upstream_http_protocol() {
    let c = cluster(&with_ep(&hpo(
        "      explicit_http_config: {http2_protocol_options: {max_concurrent_streams: 100, initial_stream_window_size: 65536}}\n      common_http_protocol_options: {idle_timeout: 0s, max_requests_per_connection: 10, max_connection_duration: 60s, max_stream_duration: 1.5s}\n",
    )));
    assert_eq!(c.http.protocol, UpstreamProtocol::Http2);
    assert_eq!(c.http.http2.max_concurrent_streams, 100);
    assert_eq!(c.http.http2.initial_stream_window_size, 65536);
    assert_eq!(
        c.http.http2.initial_connection_window_size,
        256 * 1024 * 1024
    );
    assert_eq!(c.http.common.idle_timeout, None);
    assert_eq!(c.http.common.max_requests_per_connection, Some(10));
    assert_eq!(
        c.http.common.max_connection_duration,
        Some(Duration::from_secs(60))
    );
    assert_eq!(
        c.http.common.max_stream_duration,
        Some(Duration::from_millis(1500))
    );
    // `0s` sets no limit, as Envoy's zero duration.
    let c = cluster(&with_ep(&hpo(
        "      explicit_http_config: {http_protocol_options: {}}\n      common_http_protocol_options: {max_stream_duration: 0s}\n",
    )));
    assert_eq!(c.http.common.max_stream_duration, None);
    let c = cluster(&with_ep(&hpo("      use_downstream_protocol_config: {}\n")));
    let p = c.http.protocol;
    assert_eq!(p, UpstreamProtocol::UseDownstream);
    assert_eq!(p.for_request(true), UpstreamProtocol::Http2);
    assert_eq!(p.for_request(false), UpstreamProtocol::Http1);
    // The deprecated cluster-level fields keep their meaning.
    let c = cluster(&with_ep(
        "  http2_protocol_options: {max_concurrent_streams: 5}\n  max_requests_per_connection: 7\n",
    ));
    assert_eq!(c.http.protocol, UpstreamProtocol::Http2);
    assert_eq!(c.http.http2.max_concurrent_streams, 5);
    assert_eq!(c.http.common.max_requests_per_connection, Some(7));

    let p = "static_resources.clusters[0]";
    assert_eq!(
        errors(&with_ep(&hpo("      auto_config: {}\n"))),
        [format!(
            "{p}.typed_extension_protocol_options[\"{HPO}\"].auto_config: needs a TLS transport_socket: ALPN chooses the protocol"
        )]
    );
    assert_eq!(
        errors(&with_ep(&hpo(
            "      explicit_http_config: {http3_protocol_options: {}}\n"
        ))),
        [format!(
            "{p}.typed_extension_protocol_options[\"{HPO}\"].explicit_http_config.http3_protocol_options: http3_protocol_options is not supported"
        )]
    );
    assert_eq!(
        errors(&with_ep(&hpo(
            "      explicit_http_config: {http2_protocol_options: {max_concurrent_streams: 0, initial_connection_window_size: 100}}\n"
        ))),
        [
            format!(
                "{p}.typed_extension_protocol_options[\"{HPO}\"].explicit_http_config.http2_protocol_options.max_concurrent_streams: must be at least 1, found 0"
            ),
            format!(
                "{p}.typed_extension_protocol_options[\"{HPO}\"].explicit_http_config.http2_protocol_options.initial_connection_window_size: must be at least 65535, found 100"
            ),
        ]
    );
    assert_eq!(
        errors(&with_ep(&format!(
            "  http2_protocol_options: {{}}\n{}",
            hpo("      explicit_http_config: {http_protocol_options: {}}\n")
        ))),
        [format!(
            "{p}.http2_protocol_options: cannot be combined with typed_extension_protocol_options[\"{HPO}\"], which supersedes it"
        )]
    );
    assert_eq!(
        errors(&with_ep(
            "  typed_extension_protocol_options:\n    envoy.filters.network.thrift_proxy:\n      '@type': type.googleapis.com/envoy.extensions.filters.network.thrift_proxy.v3.ThriftProtocolOptions\n"
        )),
        [format!(
            "{p}.typed_extension_protocol_options[\"envoy.filters.network.thrift_proxy\"]: protocol options envoy.filters.network.thrift_proxy is not supported"
        )]
    );
}

#[test]
fn upstream_http_protocol_options() {
    let c = cluster(&with_ep(&hpo(
        "      explicit_http_config: {http_protocol_options: {}}\n      upstream_http_protocol_options: {auto_sni: true, auto_san_validation: true, override_auto_sni_header: X-Sni}\n",
    )));
    assert_eq!(
        c.http.auto_sni,
        AutoSni {
            sni: true,
            san_validation: true,
            header: Some("x-sni".to_string()),
        }
    );
    assert!(!cluster(&with_ep("")).http.auto_sni.any());
    // The deprecated cluster-level field keeps its meaning.
    let c = cluster(&with_ep(
        "  upstream_http_protocol_options: {auto_sni: true, override_auto_sni_header: ':authority'}\n",
    ));
    assert!(c.http.auto_sni.sni && !c.http.auto_sni.san_validation);
    assert_eq!(c.http.auto_sni.header.as_deref(), Some(":authority"));

    let p = "static_resources.clusters[0]";
    assert_eq!(
        errors(&with_ep(&hpo(
            "      explicit_http_config: {http_protocol_options: {}}\n      upstream_http_protocol_options: {auto_sni: true, override_auto_sni_header: 'bad header'}\n"
        ))),
        [format!(
            "{p}.typed_extension_protocol_options[\"{HPO}\"].upstream_http_protocol_options.override_auto_sni_header: \"bad header\" is not a valid header name"
        )]
    );
    assert_eq!(
        errors(&with_ep(&format!(
            "  upstream_http_protocol_options: {{auto_sni: true}}\n{}",
            hpo("      explicit_http_config: {http_protocol_options: {}}\n")
        ))),
        [format!(
            "{p}.upstream_http_protocol_options: cannot be combined with typed_extension_protocol_options[\"{HPO}\"], which supersedes it"
        )]
    );
}

#[test]
fn upstream_http2_flood_limits_are_refused() {
    // Accepted on a connection manager (the same message), not enforced upstream.
    let p = "static_resources.clusters[0]";
    assert_eq!(
        errors(&with_ep(
            "  http2_protocol_options: {max_outbound_frames: 5, max_inbound_priority_frames_per_stream: 1}\n",
        )),
        [
            format!(
                "{p}.http2_protocol_options.max_outbound_frames: max_outbound_frames is not supported"
            ),
            format!(
                "{p}.http2_protocol_options.max_inbound_priority_frames_per_stream: max_inbound_priority_frames_per_stream is not supported"
            ),
        ]
    );
}

#[test]
fn http2_connection_keepalive() {
    let h2 = |k: &str| {
        hpo(&format!(
            "      explicit_http_config: {{http2_protocol_options: {{connection_keepalive: {k}}}}}\n"
        ))
    };
    let c = cluster(&with_ep(&h2("{interval: 30s, timeout: 5s}")));
    let k = c.http.http2.keepalive.unwrap();
    assert_eq!(k.interval, Some(Duration::from_secs(30)));
    assert_eq!(k.timeout, Duration::from_secs(5));
    assert_eq!(k.interval_jitter_percent, 15.0, "Envoy's default jitter");
    let c = cluster(&with_ep(&h2("{timeout: 1s, interval_jitter: {value: 5}}")));
    let k = c.http.http2.keepalive.unwrap();
    assert_eq!((k.interval, k.interval_jitter_percent), (None, 5.0));

    for (k, want) in [
        (
            "{interval: 1s}",
            "connection_keepalive.timeout: is required",
        ),
        (
            "{timeout: 0s}",
            "connection_keepalive.timeout: must be at least 1ms",
        ),
        (
            "{timeout: 1s, interval: 0.0001s}",
            "connection_keepalive.interval: must be at least 1ms",
        ),
        (
            "{timeout: 1s, connection_idle_interval: 1s}",
            "connection_keepalive.connection_idle_interval: connection_idle_interval is not supported",
        ),
    ] {
        let errs = errors(&with_ep(&h2(k)));
        assert!(errs.iter().any(|e| e.ends_with(want)), "{k}: {errs:?}");
    }
}

#[test]
fn health_check_payloads_match_in_order() {
    use crate::cluster::payloads_match;
    let pp = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
    assert!(payloads_match(&pp(&["pi", "po"]), b"<pi-ng> then po-ng!"));
    assert!(!payloads_match(&pp(&["pi", "po"]), b"po-ng then pi-ng"));
    // Not overlapping: "abab" holds "ab" twice, "aba" once.
    assert!(payloads_match(&pp(&["ab", "ab"]), b"abab"));
    assert!(!payloads_match(&pp(&["aba", "ba"]), b"abab"));
    assert!(payloads_match(&pp(&[]), b""));
    assert!(!payloads_match(&pp(&["x"]), b""));
}

#[test]
fn health_check_payloads_translate() {
    let c = cluster(&with_ep(
        "  health_checks:
  - timeout: 1s
    interval: 1s
    unhealthy_threshold: 1
    healthy_threshold: 1
    tcp_health_check: {send: {text: '70696E67'}, receive: [{binary: cG9uZw==}]}
  - timeout: 1s
    interval: 1s
    unhealthy_threshold: 1
    healthy_threshold: 1
    http_health_check: {path: /h, method: PUT, send: {binary: cGluZw==}, receive: [{text: '6f6b'}], response_buffer_size: 0}
",
    ));
    assert_eq!(
        c.health_checks[0].kind,
        HealthCheckKind::Tcp(crate::cluster::TcpHealthCheck {
            send: b"ping".to_vec(),
            receive: vec![b"pong".to_vec()],
        })
    );
    let HealthCheckKind::Http(h) = &c.health_checks[1].kind else {
        panic!("http check");
    };
    assert_eq!(h.send.as_deref(), Some(&b"ping"[..]));
    assert_eq!(h.receive, [b"ok".to_vec()]);
    assert_eq!(h.response_buffer_size, 0);
}

#[test]
fn track_cluster_stats_per_endpoint_only() {
    assert!(!cluster(&with_ep("")).per_endpoint_stats);
    assert!(
        cluster(&with_ep(
            "  track_cluster_stats: {per_endpoint_stats: true}\n"
        ))
        .per_endpoint_stats
    );
    let sizes = cluster(&with_ep(
        "  track_cluster_stats: {request_response_sizes: true}\n",
    ));
    assert!(sizes.request_response_sizes && !sizes.per_endpoint_stats);
    assert!(!cluster(&with_ep("")).request_response_sizes);
    // The timeout budget histograms are not kept.
    assert_eq!(
        errors(&with_ep(
            "  track_cluster_stats: {per_endpoint_stats: true, timeout_budgets: true}\n"
        )),
        [
            "static_resources.clusters[0].track_cluster_stats.timeout_budgets: timeout_budgets is not supported"
        ]
    );
}

#[test]
fn upstream_http1_trailers_and_refused_http10_fields() {
    // Off unless a cluster's HTTP/1 options turn it on, wherever they sit.
    assert!(!cluster(&with_ep("")).http.enable_trailers);
    for options in [
        "      explicit_http_config: {http_protocol_options: {enable_trailers: true}}\n",
        "      use_downstream_protocol_config: {http_protocol_options: {enable_trailers: true}}\n",
    ] {
        assert!(
            cluster(&with_ep(&hpo(options))).http.enable_trailers,
            "{options}"
        );
    }
    assert!(
        cluster(&with_ep(
            "  http_protocol_options: {enable_trailers: true}\n"
        ))
        .http
        .enable_trailers
    );
    // The HTTP/1.0 fields are the connection manager's; every place a cluster
    // can set them refuses them.
    let p = "static_resources.clusters[0]";
    assert_eq!(
        errors(&with_ep(&hpo(
            "      use_downstream_protocol_config: {http_protocol_options: {accept_http_10: true}}\n"
        ))),
        [format!(
            "{p}.typed_extension_protocol_options[\"{HPO}\"].use_downstream_protocol_config.http_protocol_options.accept_http_10: accept_http_10 on upstream connections is not supported"
        )]
    );
}

#[test]
fn upstream_preserve_case_formatter() {
    use crate::listener::http_options::HeaderCase;
    let preserve = |extra: &str| {
        format!(
            "      explicit_http_config:\n        http_protocol_options:\n          header_key_format:\n            stateful_formatter:\n              name: preserve_case\n              typed_config:\n                '@type': type.googleapis.com/envoy.extensions.http.header_formatters.preserve_case.v3.PreserveCaseFormatterConfig\n{extra}"
        )
    };
    assert_eq!(cluster(&with_ep("")).http.header_case, HeaderCase::Lower);
    assert_eq!(
        cluster(&with_ep(&hpo(&preserve("")))).http.header_case,
        HeaderCase::Preserve {
            forward_reason_phrase: false
        }
    );
    assert_eq!(
        cluster(&with_ep(&hpo(&preserve(
            "                forward_reason_phrase: true\n"
        ))))
        .http
        .header_case,
        HeaderCase::Preserve {
            forward_reason_phrase: true
        }
    );
    let p = "static_resources.clusters[0]";
    assert_eq!(
        errors(&with_ep(&hpo(&preserve(
            "                formatter_type_on_envoy_headers: PROPER_CASE\n"
        )))),
        [format!(
            "{p}.typed_extension_protocol_options[\"{HPO}\"].explicit_http_config.http_protocol_options.header_key_format.stateful_formatter.typed_config.formatter_type_on_envoy_headers: formatter_type_on_envoy_headers PROPER_CASE is not supported"
        )]
    );
    assert_eq!(
        errors(&with_ep(&hpo(
            "      explicit_http_config: {http_protocol_options: {header_key_format: {proper_case_words: {}}}}\n"
        ))),
        [format!(
            "{p}.typed_extension_protocol_options[\"{HPO}\"].explicit_http_config.http_protocol_options.header_key_format.proper_case_words: proper_case_words is not supported"
        )]
    );
}

#[test]
fn upstream_proxy_protocol_socket() {
    use crate::cluster::ProxyProtocolVersion;
    const PP: &str =
        "envoy.extensions.transport_sockets.proxy_protocol.v3.ProxyProtocolUpstreamTransport";
    let socket = |fields: &str| {
        format!(
            "  transport_socket:\n    name: envoy.transport_sockets.upstream_proxy_protocol\n    typed_config:\n      '@type': type.googleapis.com/{PP}\n{fields}"
        )
    };
    let raw = "      transport_socket: {name: envoy.transport_sockets.raw_buffer}\n";
    let tls = "      transport_socket:\n        name: envoy.transport_sockets.tls\n        typed_config:\n          '@type': type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext\n          sni: example.com\n";
    assert_eq!(cluster(&with_ep("")).proxy_protocol, None);
    let c = cluster(&with_ep(&socket(&format!(
        "      config: {{version: V1}}\n{raw}"
    ))));
    assert_eq!(c.proxy_protocol, Some(ProxyProtocolVersion::V1));
    assert!(c.tls.is_none());
    // The wrapped socket is the cluster's TLS.
    let c = cluster(&with_ep(&socket(&format!(
        "      config: {{version: V2}}\n{tls}"
    ))));
    assert_eq!(c.proxy_protocol, Some(ProxyProtocolVersion::V2));
    assert_eq!(c.tls.unwrap().sni.as_deref(), Some("example.com"));
    let p = "static_resources.clusters[0].transport_socket.typed_config";
    assert_eq!(
        errors(&with_ep(&socket(&format!(
            "      config: {{version: V2, pass_through_tlvs: {{match_type: INCLUDE_ALL}}}}\n      tlv_as_pool_key: true\n{raw}"
        )))),
        [
            format!("{p}.config.pass_through_tlvs: pass_through_tlvs is not supported"),
            format!("{p}.tlv_as_pool_key: tlv_as_pool_key is not supported"),
        ]
    );
    assert_eq!(
        errors(&with_ep(&socket("      config: {version: V2}\n"))),
        [format!("{p}.transport_socket: is required")]
    );
}

#[test]
fn upstream_h2_stream_error_override() {
    let h2 = |v: &str| {
        hpo(&format!(
            "      explicit_http_config: {{http2_protocol_options: {{override_stream_error_on_invalid_http_message: {v}}}}}\n"
        ))
    };
    // On: what courier's HTTP/2 client does (a stream reset, the connection kept).
    assert!(errors(&with_ep(&h2("true"))).is_empty());
    let p = "static_resources.clusters[0]";
    assert_eq!(
        errors(&with_ep(&h2("false"))),
        [format!(
            "{p}.typed_extension_protocol_options[\"{HPO}\"].explicit_http_config.http2_protocol_options.override_stream_error_on_invalid_http_message: override_stream_error_on_invalid_http_message false (a malformed response closing its connection) is not supported"
        )]
    );
}
