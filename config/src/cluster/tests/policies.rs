//! Load balancing, circuit breakers and outlier detection.

use super::*;

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
        cluster(&with_ep("  lb_policy: MAGLEV\n")).lb.policy,
        LbPolicy::Maglev(Maglev {
            table_size: 65537,
            use_hostname_for_hashing: false
        })
    );
    assert_eq!(
        cluster(&with_ep(
            "  lb_policy: RING_HASH\n  ring_hash_lb_config: {minimum_ring_size: 8, hash_function: MURMUR_HASH_2}\n"
        ))
        .lb
        .policy,
        LbPolicy::RingHash(RingHash {
            min_ring_size: 8,
            max_ring_size: 8 << 20,
            hash_function: RingHashFunction::MurmurHash2,
            use_hostname_for_hashing: false
        })
    );
    assert_eq!(
        errors(&with_ep(
            "  lb_policy: RING_HASH\n  maglev_lb_config: {table_size: 7}\n  common_lb_config: {locality_weighted_lb_config: {}, consistent_hashing_lb_config: {use_hostname_for_hashing: true}}\n"
        )),
        [
            "static_resources.clusters[0].maglev_lb_config: only applies to lb_policy MAGLEV",
            "static_resources.clusters[0]: use_hostname_for_hashing needs a STRICT_DNS cluster (Cannot use hostname for consistent hashing loadbalancing)",
        ]
    );
    assert_eq!(
        errors(&with_ep(
            "  common_lb_config: {consistent_hashing_lb_config: {}}\n"
        )),
        [
            "static_resources.clusters[0].common_lb_config.consistent_hashing_lb_config: only applies to lb_policy RING_HASH or MAGLEV"
        ]
    );
    assert_eq!(
        errors(&with_ep("  lb_policy: CLUSTER_PROVIDED\n")),
        [
            "static_resources.clusters[0].lb_policy: cluster provided LB specified but cluster 'a' did not provide one. Check cluster documentation."
        ]
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
    assert!(
        !cluster(&with_ep("  lb_policy: RANDOM\n"))
            .lb
            .locality_weighted
    );
    let c = cluster(&with_ep(
        "  lb_policy: RANDOM\n  common_lb_config: {locality_weighted_lb_config: {}}\n",
    ));
    assert_eq!(c.lb.policy, LbPolicy::Random);
    assert!(c.lb.locality_weighted);
    // Zone-aware settings: Envoy's defaults, or the three fields the older
    // message has.
    let c = cluster(&with_ep("  common_lb_config: {zone_aware_lb_config: {}}\n"));
    assert_eq!(c.lb.zone_aware, ZoneAware::default());
    assert_eq!(
        (
            c.lb.zone_aware.routing_enabled,
            c.lb.zone_aware.min_cluster_size
        ),
        (100, 6)
    );
    assert!(!c.lb.locality_weighted);
    let c = cluster(&with_ep(
        "  common_lb_config: {zone_aware_lb_config: {routing_enabled: {value: 33.5}, min_cluster_size: 0, fail_traffic_on_panic: true}}\n",
    ));
    assert_eq!(
        c.lb.zone_aware,
        ZoneAware {
            routing_enabled: 34,
            min_cluster_size: 0,
            fail_traffic_on_panic: true,
            ..ZoneAware::default()
        }
    );
    assert_eq!(cluster(&with_ep("")).lb.zone_aware, ZoneAware::default());
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

const PICK_FIRST: &str =
    "type.googleapis.com/envoy.extensions.load_balancing_policies.pick_first.v3.PickFirst";

#[test]
fn typed_lb_policy_takes_the_first_supported() {
    let c = cluster(&with_ep(&format!(
        "  load_balancing_policy:
    policies:
    - typed_extension_config: {{name: m, typed_config: {{'@type': {PICK_FIRST}}}}}
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
            "  load_balancing_policy: {{policies: [{{typed_extension_config: {{name: m, typed_config: {{'@type': {MAGLEV}, table_size: 5, consistent_hashing_lb_config: {{hash_balance_factor: 150}}}}}}}}]}}\n"
        ))),
        [
            "static_resources.clusters[0].load_balancing_policy.policies[0].typed_extension_config.typed_config.consistent_hashing_lb_config.hash_balance_factor: hash_balance_factor (bounded load) is not supported"
        ]
    );
    let c = cluster(&with_ep(&format!(
        "  load_balancing_policy: {{policies: [{{typed_extension_config: {{name: r, typed_config: {{'@type': {}, minimum_ring_size: 16, maximum_ring_size: 64}}}}}}]}}\n",
        crate::extensions::LB_RING_HASH
    )));
    assert_eq!(
        c.lb.policy,
        LbPolicy::RingHash(RingHash {
            min_ring_size: 16,
            max_ring_size: 64,
            hash_function: RingHashFunction::XxHash,
            use_hostname_for_hashing: false
        })
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

/// `locality_lb_config` on each typed policy Envoy Gateway emits: the
/// locality-weighted variant is served, the zone-aware one refused at its path.
#[test]
fn typed_policies_take_locality_weighted_lb_config() {
    let typed = |url: &str, extra: &str| {
        format!(
            "  load_balancing_policy: {{policies: [{{typed_extension_config: {{name: p, typed_config: {{'@type': {url}{extra}}}}}}}]}}\n"
        )
    };
    let weighted = ", locality_lb_config: {locality_weighted_lb_config: {}}";
    for (url, policy) in [
        (crate::extensions::LB_ROUND_ROBIN, LbPolicy::RoundRobin),
        (crate::extensions::LB_RANDOM, LbPolicy::Random),
        (
            crate::extensions::LB_LEAST_REQUEST,
            LbPolicy::LeastRequest {
                choice_count: 2,
                active_request_bias: 1.0,
            },
        ),
    ] {
        let c = cluster(&with_ep(&typed(url, weighted)));
        assert_eq!(c.lb.policy, policy, "{url}");
        assert!(c.lb.locality_weighted, "{url}");
        assert!(!cluster(&with_ep(&typed(url, ""))).lb.locality_weighted);
        // An empty locality_lb_config names no variant: no locality weighting.
        let c = cluster(&with_ep(&typed(url, ", locality_lb_config: {}")));
        assert!(!c.lb.locality_weighted, "{url}");
        let c = cluster(&with_ep(&typed(
            url,
            ", locality_lb_config: {zone_aware_lb_config: {min_cluster_size: 3, routing_enabled: {value: 150}, force_local_zone: {}, locality_basis: HEALTHY_HOSTS_WEIGHT}}",
        )));
        assert!(!c.lb.locality_weighted, "{url}");
        assert_eq!(
            c.lb.zone_aware,
            ZoneAware {
                routing_enabled: 100,
                min_cluster_size: 3,
                fail_traffic_on_panic: false,
                force_local_zone_min_size: Some(1),
                locality_basis: LocalityBasis::HealthyWeight,
            },
            "{url}"
        );
        // The deprecated flag is force_local_zone with its default; an
        // explicit minimum wins over it.
        let c = cluster(&with_ep(&typed(
            url,
            ", locality_lb_config: {zone_aware_lb_config: {force_locality_direct_routing: true}}",
        )));
        assert_eq!(c.lb.zone_aware.force_local_zone_min_size, Some(1));
        let c = cluster(&with_ep(&typed(
            url,
            ", locality_lb_config: {zone_aware_lb_config: {force_locality_direct_routing: true, force_local_zone: {min_size: 4}}}",
        )));
        assert_eq!(c.lb.zone_aware.force_local_zone_min_size, Some(4));
        assert_eq!(
            errors(&with_ep(&typed(
                url,
                ", locality_lb_config: {zone_aware_lb_config: {routing_enabled: {value: -1}}}"
            ))),
            [
                "static_resources.clusters[0].load_balancing_policy.policies[0].typed_extension_config.typed_config.locality_lb_config.zone_aware_lb_config.routing_enabled.value: must be a non-negative percentage, found -1"
            ],
            "{url}"
        );
    }
    // Envoy refuses common_lb_config's locality settings beside a typed policy
    // (which would not read them).
    assert_eq!(
        errors(&with_ep(&format!(
            "  common_lb_config: {{locality_weighted_lb_config: {{}}}}\n{}",
            typed(crate::extensions::LB_ROUND_ROBIN, weighted)
        ))),
        [
            "static_resources.clusters[0].common_lb_config.locality_weighted_lb_config: cannot be combined with load_balancing_policy (set locality_lb_config in the policy)"
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
