use super::*;
use crate::load::Format;
use envoy_types::pb::envoy::config::endpoint::v3 as epb;

/// Loads a bootstrap whose `static_resources.clusters` is `clusters` (a YAML list).
fn load(clusters: &str) -> Result<crate::Bootstrap, crate::ConfigError> {
    let text = format!("static_resources:\n  clusters:\n{}", indent(clusters));
    crate::bootstrap_from_str(&text, Format::Yaml)
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

fn cluster(yaml: &str) -> Cluster {
    match load(yaml) {
        Ok(b) => (*b.clusters[0]).clone(),
        Err(e) => panic!("unexpected errors: {e}"),
    }
}

/// Every error as `path: message`.
fn errors(yaml: &str) -> Vec<String> {
    match load(yaml) {
        Ok(_) => Vec::new(),
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
    }
}

const EP: &str = "  load_assignment:
    cluster_name: a
    endpoints:
    - lb_endpoints:
      - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 8080}}}
";

fn with_ep(extra: &str) -> String {
    format!("- name: a\n{EP}{extra}")
}

#[test]
fn defaults_of_a_minimal_static_cluster() {
    let c = cluster(&with_ep(""));
    assert_eq!(c.name, "a");
    assert_eq!(c.discovery, Discovery::Static);
    assert_eq!(c.connect_timeout, Duration::from_secs(5));
    assert_eq!(c.per_connection_buffer_limit_bytes, 1024 * 1024);
    assert_eq!(c.lb.policy, LbPolicy::RoundRobin);
    assert_eq!(c.lb.healthy_panic_threshold, 50.0);
    assert_eq!(c.circuit_breakers, CircuitBreakers::default());
    assert_eq!(c.circuit_breakers.default.max_connections, 1024);
    assert_eq!(c.circuit_breakers.high.max_retries, 3);
    assert_eq!(c.circuit_breakers.default.max_connection_pools, None);
    assert!(c.outlier_detection.is_none());
    assert!(c.health_checks.is_empty());
    assert_eq!(c.http.protocol, UpstreamProtocol::Http1);
    assert_eq!(c.http.common.idle_timeout, Some(Duration::from_secs(3600)));
    assert_eq!(c.http.http2.max_concurrent_streams, 2_147_483_647);
    assert_eq!(c.stat_name(), "a");
    let la = c.load_assignment.unwrap();
    assert_eq!(la.overprovisioning_factor, 140);
    assert_eq!(la.priorities.len(), 1);
    let e = la.endpoints().next().unwrap();
    assert_eq!(e.address.port, 8080);
    assert_eq!(e.weight, 1);
    assert_eq!(e.health_status, HealthStatus::Unknown);
    assert!(e.health_status.is_healthy());
}

#[test]
fn priorities_localities_and_weights() {
    let c = cluster(
        "- name: a
  type: STRICT_DNS
  dns_lookup_family: V4_ONLY
  dns_refresh_rate: 2s
  respect_dns_ttl: true
  load_assignment:
    cluster_name: a
    policy: {overprovisioning_factor: 200}
    endpoints:
    - locality: {region: r, zone: z}
      load_balancing_weight: 3
      lb_endpoints:
      - endpoint:
          address: {socket_address: {address: backend, port_value: 80}}
          hostname: backend.local
          health_check_config: {port_value: 8081, hostname: hc.local}
        load_balancing_weight: 5
        health_status: DRAINING
    - priority: 2
      lb_endpoints:
      - endpoint: {address: {socket_address: {address: other, port_value: 81}}}
",
    );
    assert_eq!(
        c.discovery,
        Discovery::StrictDns(Dns {
            lookup_family: DnsLookupFamily::V4Only,
            refresh_rate: Duration::from_secs(2),
            respect_dns_ttl: true,
        })
    );
    let la = c.load_assignment.unwrap();
    assert_eq!(la.overprovisioning_factor, 200);
    // A gap at priority 1 is kept empty, as Envoy does.
    assert_eq!(la.priorities.len(), 3);
    assert!(la.priorities[1].localities.is_empty());
    let l0 = &la.priorities[0].localities[0];
    assert_eq!(l0.load_balancing_weight, Some(3));
    assert_eq!(l0.locality.as_ref().unwrap().zone, "z");
    let e = &l0.endpoints[0];
    assert_eq!(e.address.host, "backend");
    assert_eq!(e.hostname.as_deref(), Some("backend.local"));
    assert_eq!(e.health_check_port, Some(8081));
    assert_eq!(e.health_check_hostname.as_deref(), Some("hc.local"));
    assert_eq!(e.weight, 5);
    assert_eq!(e.health_status, HealthStatus::Draining);
    assert!(!e.health_status.is_healthy());
    assert_eq!(la.priorities[2].localities[0].endpoints[0].address.port, 81);
}

#[test]
fn dns_defaults() {
    let c = cluster(
        "- name: a\n  type: LOGICAL_DNS\n  load_assignment:\n    cluster_name: a\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {address: {socket_address: {address: example.com, port_value: 443}}}\n",
    );
    assert_eq!(
        c.discovery,
        Discovery::LogicalDns(Dns {
            lookup_family: DnsLookupFamily::Auto,
            refresh_rate: Duration::from_secs(5),
            respect_dns_ttl: false,
        })
    );
}

#[test]
fn discovery_type_errors() {
    assert_eq!(
        errors("- name: a\n  type: ORIGINAL_DST\n"),
        ["static_resources.clusters[0].type: ORIGINAL_DST is not supported"]
    );
    assert_eq!(
        errors("- name: a\n  cluster_type: {name: envoy.clusters.dynamic_forward_proxy}\n"),
        ["static_resources.clusters[0].cluster_type: cluster_type is not supported"]
    );
    assert_eq!(
        errors("- name: a\n  type: EDS\n"),
        [
            "static_resources.clusters[0].eds_cluster_config: is required: cannot create an EDS cluster without an EDS config"
        ]
    );
    assert_eq!(
        errors("- name: a\n  type: LOGICAL_DNS\n"),
        [
            "static_resources.clusters[0].load_assignment: LOGICAL_DNS clusters must have a single locality_lb_endpoint and a single lb_endpoint"
        ]
    );
    assert_eq!(
        errors("- name: a\n  type: STRICT_DNS\n  dns_refresh_rate: 0.001s\n"),
        ["static_resources.clusters[0].dns_refresh_rate: must be greater than 1ms"]
    );
    assert_eq!(
        errors("- name: ''\n"),
        ["static_resources.clusters[0].name: must not be empty"]
    );
}

#[test]
fn static_cluster_needs_ip_literals() {
    let e = errors(
        "- name: a
  load_assignment:
    cluster_name: a
    endpoints:
    - lb_endpoints:
      - endpoint: {address: {socket_address: {address: backend, port_value: 80}}}
",
    );
    assert_eq!(
        e,
        [
            "static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address: \"backend\" is not an IP address (a STATIC cluster needs IP literals; STRICT_DNS and LOGICAL_DNS clusters resolve names)"
        ]
    );
}

#[test]
fn eds_cluster() {
    let text = "node: {id: n1, cluster: c1}
dynamic_resources:
  ads_config: {api_type: GRPC, grpc_services: [{envoy_grpc: {cluster_name: xds}}]}
static_resources:
  clusters:
  - name: xds
    load_assignment: {cluster_name: xds, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 1}}}}]}]}
  - name: svc
    type: EDS
    eds_cluster_config: {eds_config: {ads: {}}}
  - name: svc2
    type: EDS
    eds_cluster_config: {eds_config: {ads: {}}, service_name: other}
";
    let b = crate::bootstrap_from_str(text, Format::Yaml).unwrap();
    match &b.clusters[1].discovery {
        Discovery::Eds { service_name, .. } => assert_eq!(service_name, "svc"),
        d => panic!("{d:?}"),
    }
    match &b.clusters[2].discovery {
        Discovery::Eds { service_name, .. } => assert_eq!(service_name, "other"),
        d => panic!("{d:?}"),
    }
    assert!(b.clusters[1].load_assignment.is_none());
}

#[test]
fn endpoint_range_errors() {
    let e = errors(
        "- name: a
  load_assignment:
    cluster_name: ''
    policy: {overprovisioning_factor: 0}
    endpoints:
    - priority: 129
    - load_balancing_weight: 0
      lb_endpoints:
      - endpoint:
          address: {socket_address: {address: 127.0.0.1, port_value: 80}}
          health_check_config: {port_value: 70000}
        load_balancing_weight: 0
      - health_status: DEGRADED
        endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 81}}}
",
    );
    let p = "static_resources.clusters[0].load_assignment";
    assert_eq!(
        e,
        [
            format!("{p}.cluster_name: must not be empty"),
            format!("{p}.policy.overprovisioning_factor: must be greater than 0"),
            format!("{p}.endpoints[0].priority: must be at most 128, found 129"),
            format!("{p}.endpoints[1].load_balancing_weight: must be at least 1"),
            format!("{p}.endpoints[1].lb_endpoints[0].load_balancing_weight: must be at least 1"),
            format!(
                "{p}.endpoints[1].lb_endpoints[0].endpoint.health_check_config.port_value: must be at most 65535, found 70000"
            ),
            format!("{p}.endpoints[1].lb_endpoints[1].health_status: DEGRADED is not supported"),
        ]
    );
}

#[test]
fn eds_resource_needs_ips() {
    let cla = epb::ClusterLoadAssignment {
        cluster_name: "svc".into(),
        endpoints: vec![epb::LocalityLbEndpoints {
            lb_endpoints: vec![epb::LbEndpoint {
                host_identifier: Some(epb::lb_endpoint::HostIdentifier::Endpoint(epb::Endpoint {
                    address: Some(sock("backend", 80)),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut ctx = Ctx::new();
    let la = load_assignment(&cla, &Path::ROOT, &mut ctx).unwrap();
    assert_eq!(la.cluster_name, "svc");
    let err = ctx.finish(()).unwrap_err();
    assert_eq!(
        err.to_string().lines().next().unwrap(),
        "endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address: \"backend\" is not an IP address (EDS needs IP literals; STRICT_DNS and LOGICAL_DNS clusters resolve names)"
    );
}

fn sock(host: &str, port: u32) -> envoy_types::pb::envoy::config::core::v3::Address {
    use envoy_types::pb::envoy::config::core::v3 as c;
    c::Address {
        address: Some(c::address::Address::SocketAddress(c::SocketAddress {
            address: host.into(),
            port_specifier: Some(c::socket_address::PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    }
}

#[test]
fn lb_policies() {
    let c = cluster(&with_ep(
        "  lb_policy: LEAST_REQUEST\n  least_request_lb_config: {choice_count: 3, active_request_bias: {default_value: 0.5}}\n  common_lb_config: {healthy_panic_threshold: {value: 0}}\n",
    ));
    assert_eq!(
        c.lb.policy,
        LbPolicy::LeastRequest {
            choice_count: 3,
            active_request_bias: 0.5
        }
    );
    assert_eq!(c.lb.healthy_panic_threshold, 0.0);
    let c = cluster(&with_ep("  lb_policy: LEAST_REQUEST\n"));
    assert_eq!(
        c.lb.policy,
        LbPolicy::LeastRequest {
            choice_count: 2,
            active_request_bias: 1.0
        }
    );
    assert_eq!(
        cluster(&with_ep("  lb_policy: random\n")).lb.policy,
        LbPolicy::Random
    );
    assert_eq!(
        errors(&with_ep("  lb_policy: MAGLEV\n")),
        ["static_resources.clusters[0].lb_policy: MAGLEV is not supported"]
    );
    assert_eq!(
        errors(&with_ep(
            "  lb_policy: LEAST_REQUEST\n  least_request_lb_config: {choice_count: 1}\n"
        )),
        [
            "static_resources.clusters[0].least_request_lb_config.choice_count: must be at least 2, found 1"
        ]
    );
    assert_eq!(
        errors(&with_ep("  least_request_lb_config: {choice_count: 3}\n")),
        [
            "static_resources.clusters[0].least_request_lb_config: only applies to lb_policy LEAST_REQUEST"
        ]
    );
    assert_eq!(
        errors(&with_ep(
            "  common_lb_config: {locality_weighted_lb_config: {}}\n"
        )),
        [
            "static_resources.clusters[0].common_lb_config.locality_weighted_lb_config: locality_weighted_lb_config is not supported"
        ]
    );
    assert_eq!(
        errors(&with_ep(
            "  common_lb_config: {healthy_panic_threshold: {value: 101}}\n"
        )),
        [
            "static_resources.clusters[0].common_lb_config.healthy_panic_threshold.value: 101 is not a percentage (0 to 100)"
        ]
    );
}

const MAGLEV: &str =
    "type.googleapis.com/envoy.extensions.load_balancing_policies.maglev.v3.Maglev";

#[test]
fn typed_lb_policy_takes_the_first_supported() {
    let c = cluster(&with_ep(&format!(
        "  load_balancing_policy:
    policies:
    - typed_extension_config: {{name: m, typed_config: {{'@type': {MAGLEV}}}}}
    - typed_extension_config:
        name: lr
        typed_config: {{'@type': {}, choice_count: 4}}
    - typed_extension_config: {{name: r, typed_config: {{'@type': {}}}}}
",
        crate::extensions::LB_LEAST_REQUEST,
        crate::extensions::LB_RANDOM
    )));
    assert_eq!(
        c.lb.policy,
        LbPolicy::LeastRequest {
            choice_count: 4,
            active_request_bias: 1.0
        }
    );
    let c = cluster(&with_ep(&format!(
        "  load_balancing_policy: {{policies: [{{typed_extension_config: {{name: r, typed_config: {{'@type': {}}}}}}}]}}\n",
        crate::extensions::LB_ROUND_ROBIN
    )));
    assert_eq!(c.lb.policy, LbPolicy::RoundRobin);
    assert_eq!(
        errors(&with_ep(&format!(
            "  load_balancing_policy: {{policies: [{{typed_extension_config: {{name: m, typed_config: {{'@type': {MAGLEV}}}}}}}]}}\n"
        ))),
        [
            "static_resources.clusters[0].load_balancing_policy.policies[0]: load balancing policy envoy.extensions.load_balancing_policies.maglev.v3.Maglev is not supported"
        ]
    );
    assert_eq!(
        errors(&with_ep(&format!(
            "  lb_policy: RANDOM\n  load_balancing_policy: {{policies: [{{typed_extension_config: {{name: r, typed_config: {{'@type': {}}}}}}}]}}\n",
            crate::extensions::LB_RANDOM
        ))),
        [
            "static_resources.clusters[0].lb_policy: cannot be combined with load_balancing_policy, which supersedes it"
        ]
    );
    assert_eq!(
        errors(&with_ep("  load_balancing_policy: {}\n")),
        [
            "static_resources.clusters[0].load_balancing_policy.policies: must name at least one policy"
        ]
    );
}

#[test]
fn circuit_breakers_and_retry_budget() {
    let c = cluster(&with_ep(
        "  circuit_breakers:
    thresholds:
    - max_connections: 1
      max_pending_requests: 2
      max_requests: 3
      max_retries: 4
      max_connection_pools: 5
      track_remaining: true
      retry_budget: {}
    - priority: HIGH
      retry_budget: {budget_percent: {value: 10}, min_retry_concurrency: 7}
",
    ));
    let d = &c.circuit_breakers.default;
    assert_eq!(
        (
            d.max_connections,
            d.max_pending_requests,
            d.max_requests,
            d.max_retries
        ),
        (1, 2, 3, 4)
    );
    assert_eq!(d.max_connection_pools, Some(5));
    assert!(d.track_remaining);
    assert_eq!(
        d.retry_budget,
        Some(RetryBudget {
            budget_percent: 20.0,
            min_retry_concurrency: 3
        })
    );
    let h = &c.circuit_breakers.high;
    assert_eq!(h.max_connections, 1024);
    assert_eq!(
        h.retry_budget,
        Some(RetryBudget {
            budget_percent: 10.0,
            min_retry_concurrency: 7
        })
    );
    assert_eq!(
        errors(&with_ep(
            "  circuit_breakers: {thresholds: [{priority: HIGH}, {priority: HIGH}, {retry_budget: {budget_percent: {value: 150}}}]}\n"
        )),
        [
            "static_resources.clusters[0].circuit_breakers.thresholds[1].priority: duplicate thresholds for priority HIGH (also thresholds[0])",
            "static_resources.clusters[0].circuit_breakers.thresholds[2].retry_budget.budget_percent.value: 150 is not a percentage (0 to 100)",
        ]
    );
    assert_eq!(
        errors(&with_ep(
            "  circuit_breakers: {per_host_thresholds: [{max_connections: 1}]}\n"
        )),
        [
            "static_resources.clusters[0].circuit_breakers.per_host_thresholds: per_host_thresholds is not supported"
        ]
    );
}

#[test]
fn outlier_detection_defaults_and_ranges() {
    let c = cluster(&with_ep("  outlier_detection: {}\n"));
    let o = c.outlier_detection.unwrap();
    assert_eq!(o.consecutive_5xx, 5);
    assert_eq!(o.interval, Duration::from_secs(10));
    assert_eq!(o.base_ejection_time, Duration::from_secs(30));
    assert_eq!(o.max_ejection_time, Duration::from_secs(300));
    assert_eq!(o.max_ejection_time_jitter, Duration::ZERO);
    assert_eq!(o.max_ejection_percent, 10);
    assert_eq!(o.enforcing_consecutive_5xx, 100);
    assert_eq!(o.enforcing_success_rate, 100);
    assert_eq!(o.success_rate_minimum_hosts, 5);
    assert_eq!(o.success_rate_request_volume, 100);
    assert_eq!(o.success_rate_stdev_factor, 1.9);
    assert_eq!(o.consecutive_gateway_failure, 5);
    assert_eq!(o.enforcing_consecutive_gateway_failure, 0);
    assert!(!o.split_external_local_origin_errors);
    assert_eq!(o.consecutive_local_origin_failure, 5);
    assert_eq!(o.enforcing_consecutive_local_origin_failure, 100);
    assert_eq!(o.enforcing_local_origin_success_rate, 100);
    assert_eq!(o.failure_percentage_threshold, 85);
    assert_eq!(o.enforcing_failure_percentage, 0);
    assert_eq!(o.enforcing_failure_percentage_local_origin, 0);
    assert_eq!(o.failure_percentage_minimum_hosts, 5);
    assert_eq!(o.failure_percentage_request_volume, 50);
    assert!(o.successful_active_health_check_uneject_host);
    assert!(!o.always_eject_one_host);

    let o = cluster(&with_ep(
        "  outlier_detection: {base_ejection_time: 400s, always_eject_one_host: true, success_rate_stdev_factor: 1000}\n",
    ))
    .outlier_detection
    .unwrap();
    assert_eq!(o.max_ejection_time, Duration::from_secs(400));
    assert!(o.always_eject_one_host);
    assert_eq!(o.success_rate_stdev_factor, 1.0);

    let p = "static_resources.clusters[0].outlier_detection";
    assert_eq!(
        errors(&with_ep(
            "  outlier_detection: {max_ejection_percent: 101, enforcing_failure_percentage: 200, interval: 0s, base_ejection_time: 60s, max_ejection_time: 10s}\n"
        )),
        [
            format!("{p}.max_ejection_percent: must be at most 100, found 101"),
            format!("{p}.enforcing_failure_percentage: must be at most 100, found 200"),
            format!("{p}.interval: must be greater than 0s"),
            format!("{p}.max_ejection_time: cannot be smaller than base_ejection_time"),
        ]
    );
}

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
    assert_eq!(c.health_checks[1].kind, HealthCheckKind::TcpConnect);

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
            "  health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, tcp_health_check: {send: {text: '00'}}}]\n"
        )),
        [format!(
            "{p}[0].tcp_health_check.send: send is not supported"
        )]
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
        "      explicit_http_config: {http2_protocol_options: {max_concurrent_streams: 100, initial_stream_window_size: 65536}}\n      common_http_protocol_options: {idle_timeout: 0s, max_requests_per_connection: 10, max_connection_duration: 60s}\n",
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
    let c = cluster(&with_ep(&hpo("      use_downstream_protocol_config: {}\n")));
    assert_eq!(c.http.protocol, UpstreamProtocol::UseDownstream);
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
fn misc_fields() {
    let c = cluster(&with_ep(
        "  alt_stat_name: alt\n  connect_timeout: 0.25s\n  per_connection_buffer_limit_bytes: 4096\n  metadata: {filter_metadata: {envoy.lb: {canary: true}}}\n",
    ));
    assert_eq!(c.stat_name(), "alt");
    assert_eq!(c.connect_timeout, Duration::from_millis(250));
    assert_eq!(c.per_connection_buffer_limit_bytes, 4096);
    assert_eq!(c.metadata["envoy.lb"]["canary"], serde_json::json!(true));
    let p = "static_resources.clusters[0]";
    assert_eq!(
        errors(&with_ep("  connect_timeout: 0s\n")),
        [format!("{p}.connect_timeout: must be greater than 0s")]
    );
    assert_eq!(
        errors(&with_ep(
            "  transport_socket_matches: [{name: m}]\n  cleanup_interval: 1s\n"
        )),
        [
            // The walker reports in field-number order.
            format!("{p}.cleanup_interval: cleanup_interval is not supported"),
            format!("{p}.transport_socket_matches: transport_socket_matches is not supported"),
        ]
    );
}

/// The hand-written `tests/configs/invalid/cluster-*.yaml` report exactly their `# expect:` lines.
#[test]
fn invalid_cluster_configs_report_their_expected_errors() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/configs/invalid");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("cluster-") || !name.ends_with(".yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut expected: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .map(str::to_string)
            .collect();
        let opts = crate::LoadOptions {
            config_path: Some(path.clone()),
            ..Default::default()
        };
        let mut got: Vec<String> = match crate::load_bootstrap(&opts) {
            Ok(_) => Vec::new(),
            Err(e) => e.errors.iter().map(ToString::to_string).collect(),
        };
        expected.sort();
        got.sort();
        assert_eq!(got, expected, "{name}");
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} cluster configs");
}
