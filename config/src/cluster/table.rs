//! The fields of the cluster, endpoint, health-check and upstream-protocol messages
//! courier implements. Anything else that is set is reported at its path.

use crate::support::Support;

/// Fields of the cluster messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.config.cluster.v3.Cluster",
        &[
            "name",
            "alt_stat_name",
            "type",
            "eds_cluster_config",
            "connect_timeout",
            "per_connection_buffer_limit_bytes",
            "lb_policy",
            "load_assignment",
            "health_checks",
            "max_requests_per_connection",
            "circuit_breakers",
            "common_http_protocol_options",
            "upstream_http_protocol_options",
            "http_protocol_options",
            "http2_protocol_options",
            "typed_extension_protocol_options",
            "dns_refresh_rate",
            "respect_dns_ttl",
            "dns_lookup_family",
            "outlier_detection",
            "least_request_lb_config",
            "round_robin_lb_config",
            "ring_hash_lb_config",
            "maglev_lb_config",
            "common_lb_config",
            "transport_socket",
            "metadata",
            "protocol_selection",
            "load_balancing_policy",
            "cluster_type",
            "ignore_health_on_host_removal",
            "upstream_connection_options",
            "transport_socket_matches",
            "track_cluster_stats",
        ],
    ),
    (
        // `timeout_budgets` (the `upstream_rq_timeout_budget_*` histograms)
        // is refused by its absence.
        "envoy.config.cluster.v3.TrackClusterStats",
        &["per_endpoint_stats", "request_response_sizes"],
    ),
    (
        "envoy.config.cluster.v3.Cluster.TransportSocketMatch",
        &["name", "match", "transport_socket"],
    ),
    (
        // `set_local_interface_name_on_upstream_connections` and
        // `happy_eyeballs_config` are refused by their absence.
        "envoy.config.cluster.v3.UpstreamConnectionOptions",
        &["tcp_keepalive"],
    ),
    ("envoy.config.core.v3.TcpKeepalive", crate::support::ALL),
    (
        "envoy.config.cluster.v3.Cluster.CustomClusterType",
        &["name", "typed_config"],
    ),
    (
        // `dns_failure_refresh_rate`, `dns_jitter` and `typed_dns_resolver_config`
        // are refused by their absence, as on the cluster itself.
        "envoy.extensions.clusters.dns.v3.DnsCluster",
        &[
            "dns_refresh_rate",
            "respect_dns_ttl",
            "dns_lookup_family",
            "all_addresses_in_single_endpoint",
        ],
    ),
    (
        // `allow_coalesced_connections` and `sub_clusters_config` are refused
        // by their absence.
        "envoy.extensions.clusters.dynamic_forward_proxy.v3.ClusterConfig",
        &["dns_cache_config", "allow_insecure_cluster_options"],
    ),
    (
        "envoy.extensions.load_balancing_policies.cluster_provided.v3.ClusterProvided",
        crate::support::ALL,
    ),
    (
        "envoy.config.cluster.v3.Cluster.EdsClusterConfig",
        &["eds_config", "service_name"],
    ),
    (
        "envoy.config.cluster.v3.Cluster.LeastRequestLbConfig",
        &["choice_count", "active_request_bias", "slow_start_config"],
    ),
    (
        "envoy.config.cluster.v3.Cluster.RoundRobinLbConfig",
        &["slow_start_config"],
    ),
    (
        "envoy.config.cluster.v3.Cluster.SlowStartConfig",
        &["slow_start_window", "aggression", "min_weight_percent"],
    ),
    (
        "envoy.extensions.load_balancing_policies.common.v3.SlowStartConfig",
        &["slow_start_window", "aggression", "min_weight_percent"],
    ),
    (
        "envoy.config.cluster.v3.Cluster.CommonLbConfig",
        &[
            "healthy_panic_threshold",
            "locality_weighted_lb_config",
            "zone_aware_lb_config",
            "consistent_hashing_lb_config",
        ],
    ),
    (
        "envoy.config.cluster.v3.Cluster.CommonLbConfig.ConsistentHashingLbConfig",
        &["use_hostname_for_hashing", "hash_balance_factor"],
    ),
    (
        "envoy.config.cluster.v3.Cluster.RingHashLbConfig",
        &["minimum_ring_size", "maximum_ring_size", "hash_function"],
    ),
    (
        "envoy.config.cluster.v3.Cluster.MaglevLbConfig",
        &["table_size"],
    ),
    (
        "envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash",
        &[
            "hash_function",
            "minimum_ring_size",
            "maximum_ring_size",
            "use_hostname_for_hashing",
            "hash_balance_factor",
            "consistent_hashing_lb_config",
            "locality_weighted_lb_config",
        ],
    ),
    (
        "envoy.extensions.load_balancing_policies.maglev.v3.Maglev",
        &[
            "table_size",
            "consistent_hashing_lb_config",
            "locality_weighted_lb_config",
        ],
    ),
    (
        "envoy.extensions.load_balancing_policies.common.v3.ConsistentHashingLbConfig",
        &[
            "use_hostname_for_hashing",
            "hash_balance_factor",
            "hash_policy",
        ],
    ),
    (
        "envoy.config.cluster.v3.Cluster.CommonLbConfig.ZoneAwareLbConfig",
        &[
            "routing_enabled",
            "min_cluster_size",
            "fail_traffic_on_panic",
        ],
    ),
    (
        "envoy.config.cluster.v3.Cluster.CommonLbConfig.LocalityWeightedLbConfig",
        &[],
    ),
    ("envoy.config.core.v3.RuntimeDouble", &["default_value"]),
    ("envoy.config.cluster.v3.LoadBalancingPolicy", &["policies"]),
    (
        "envoy.config.cluster.v3.LoadBalancingPolicy.Policy",
        &["typed_extension_config"],
    ),
    (
        "envoy.config.core.v3.TypedExtensionConfig",
        &["name", "typed_config"],
    ),
    (
        "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin",
        &["locality_lb_config", "slow_start_config"],
    ),
    (
        "envoy.extensions.load_balancing_policies.random.v3.Random",
        &["locality_lb_config"],
    ),
    (
        "envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest",
        &[
            "choice_count",
            "active_request_bias",
            "locality_lb_config",
            "slow_start_config",
        ],
    ),
    (
        "envoy.extensions.load_balancing_policies.common.v3.LocalityLbConfig",
        &["locality_weighted_lb_config", "zone_aware_lb_config"],
    ),
    (
        "envoy.extensions.load_balancing_policies.common.v3.LocalityLbConfig.ZoneAwareLbConfig",
        &[
            "routing_enabled",
            "min_cluster_size",
            "fail_traffic_on_panic",
            "force_locality_direct_routing",
            "force_local_zone",
            "locality_basis",
        ],
    ),
    (
        "envoy.extensions.load_balancing_policies.common.v3.LocalityLbConfig.ZoneAwareLbConfig.ForceLocalZone",
        &["min_size"],
    ),
    (
        "envoy.extensions.load_balancing_policies.common.v3.LocalityLbConfig.LocalityWeightedLbConfig",
        &[],
    ),
    // Circuit breakers.
    ("envoy.config.cluster.v3.CircuitBreakers", &["thresholds"]),
    (
        "envoy.config.cluster.v3.CircuitBreakers.Thresholds",
        &[
            "priority",
            "max_connections",
            "max_pending_requests",
            "max_requests",
            "max_retries",
            "retry_budget",
            "track_remaining",
            "max_connection_pools",
        ],
    ),
    (
        "envoy.config.cluster.v3.CircuitBreakers.Thresholds.RetryBudget",
        &["budget_percent", "min_retry_concurrency"],
    ),
    // Outlier detection: all but `monitors` and `detect_degraded_hosts`.
    (
        "envoy.config.cluster.v3.OutlierDetection",
        &[
            "consecutive_5xx",
            "interval",
            "base_ejection_time",
            "max_ejection_percent",
            "enforcing_consecutive_5xx",
            "enforcing_success_rate",
            "success_rate_minimum_hosts",
            "success_rate_request_volume",
            "success_rate_stdev_factor",
            "consecutive_gateway_failure",
            "enforcing_consecutive_gateway_failure",
            "split_external_local_origin_errors",
            "consecutive_local_origin_failure",
            "enforcing_consecutive_local_origin_failure",
            "enforcing_local_origin_success_rate",
            "failure_percentage_threshold",
            "enforcing_failure_percentage",
            "enforcing_failure_percentage_local_origin",
            "failure_percentage_minimum_hosts",
            "failure_percentage_request_volume",
            "max_ejection_time",
            "max_ejection_time_jitter",
            "successful_active_health_check_uneject_host",
            "always_eject_one_host",
        ],
    ),
    // Endpoints.
    (
        "envoy.config.endpoint.v3.ClusterLoadAssignment",
        &["cluster_name", "endpoints", "policy"],
    ),
    (
        "envoy.config.endpoint.v3.ClusterLoadAssignment.Policy",
        &["overprovisioning_factor"],
    ),
    (
        "envoy.config.endpoint.v3.LocalityLbEndpoints",
        &[
            "locality",
            "lb_endpoints",
            "load_balancing_weight",
            "priority",
            "metadata",
        ],
    ),
    (
        "envoy.config.endpoint.v3.LbEndpoint",
        &[
            "endpoint",
            "health_status",
            "load_balancing_weight",
            "metadata",
        ],
    ),
    (
        "envoy.config.endpoint.v3.Endpoint",
        &["address", "health_check_config", "hostname"],
    ),
    (
        "envoy.config.endpoint.v3.Endpoint.HealthCheckConfig",
        &["port_value", "hostname"],
    ),
    // Health checks.
    (
        "envoy.config.core.v3.HealthCheck",
        &[
            "timeout",
            "interval",
            "initial_jitter",
            "interval_jitter",
            "interval_jitter_percent",
            "unhealthy_threshold",
            "healthy_threshold",
            "reuse_connection",
            "http_health_check",
            "tcp_health_check",
            "grpc_health_check",
            "no_traffic_interval",
            "no_traffic_healthy_interval",
            "unhealthy_interval",
            "unhealthy_edge_interval",
            "healthy_edge_interval",
            "transport_socket_match_criteria",
            "event_logger",
            "event_log_path",
            "always_log_health_check_failures",
            "always_log_health_check_success",
        ],
    ),
    (
        "envoy.extensions.health_check.event_sinks.file.v3.HealthCheckEventFileSink",
        crate::support::ALL,
    ),
    (
        "envoy.config.core.v3.HealthCheck.HttpHealthCheck",
        &[
            "host",
            "path",
            "request_headers_to_add",
            "request_headers_to_remove",
            "expected_statuses",
            "retriable_statuses",
            "codec_client_type",
            "method",
            "send",
            "receive",
            "response_buffer_size",
        ],
    ),
    (
        "envoy.config.core.v3.HealthCheck.TcpHealthCheck",
        &["send", "receive"],
    ),
    (
        "envoy.config.core.v3.HealthCheck.Payload",
        &["text", "binary"],
    ),
    (
        "envoy.config.core.v3.HealthCheck.GrpcHealthCheck",
        &["service_name", "authority"],
    ),
    // Shared with the route module's header mutations; keep the two in step.
    (
        "envoy.config.core.v3.HeaderValueOption",
        &["header", "append", "append_action", "keep_empty_value"],
    ),
    // Upstream HTTP protocol. The three core messages are shared with the HTTP
    // connection manager's downstream options: the entry must be the union of both
    // sides, each side refusing in code what it does not implement.
    (
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        &[
            "common_http_protocol_options",
            "upstream_http_protocol_options",
            "explicit_http_config",
            "use_downstream_protocol_config",
            "auto_config",
            "hash_policy",
            "http_filters",
        ],
    ),
    (
        "envoy.config.core.v3.UpstreamHttpProtocolOptions",
        &[
            "auto_sni",
            "auto_san_validation",
            "override_auto_sni_header",
        ],
    ),
    (
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.ExplicitHttpConfig",
        &["http_protocol_options", "http2_protocol_options"],
    ),
    (
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.UseDownstreamHttpConfig",
        &["http_protocol_options", "http2_protocol_options"],
    ),
    (
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.AutoHttpConfig",
        &["http_protocol_options", "http2_protocol_options"],
    ),
    (
        "envoy.config.core.v3.HttpProtocolOptions",
        &[
            "idle_timeout",
            "max_connection_duration",
            "max_requests_per_connection",
        ],
    ),
    ("envoy.config.core.v3.Http1ProtocolOptions", &[]),
    (
        "envoy.config.core.v3.Http2ProtocolOptions",
        &[
            "max_concurrent_streams",
            "initial_stream_window_size",
            "initial_connection_window_size",
            // Upstream only: the connection manager refuses them in code.
            "connection_keepalive",
            "override_stream_error_on_invalid_http_message",
        ],
    ),
    (
        // `connection_idle_interval` (a PING before a request on an idle
        // connection) is refused by its absence: hyper's client cannot do it.
        "envoy.config.core.v3.KeepaliveSettings",
        &["interval", "timeout", "interval_jitter"],
    ),
];
