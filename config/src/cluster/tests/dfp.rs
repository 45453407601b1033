//! The dynamic forward proxy cluster, its cluster-provided balancer, its DNS
//! cache, and the filters that share the cache.

use super::*;

const TYPE: &str =
    "type.googleapis.com/envoy.extensions.clusters.dynamic_forward_proxy.v3.ClusterConfig";

/// A dynamic forward proxy cluster `name` with `extra` cluster fields and
/// `cluster_config` fields beside its DNS cache (`cache` fields).
fn dfp(name: &str, extra: &str, cache: &str, cluster_config: &str) -> String {
    format!(
        "- name: {name}
  lb_policy: CLUSTER_PROVIDED
{extra}  cluster_type:
    name: envoy.clusters.dynamic_forward_proxy
    typed_config:
      '@type': {TYPE}
      dns_cache_config: {{name: c, {cache}}}
{cluster_config}"
    )
}

#[test]
fn a_dynamic_forward_proxy_cluster_and_its_cache() {
    let c = cluster(&dfp(
        "a",
        "",
        "dns_lookup_family: V4_PREFERRED, dns_refresh_rate: 30s, host_ttl: 60s, max_hosts: 7, dns_cache_circuit_breaker: {max_pending_requests: 3}",
        "",
    ));
    let Discovery::DynamicForwardProxy(d) = &c.discovery else {
        panic!("{:?}", c.discovery);
    };
    assert_eq!(
        d.cache,
        crate::dns_cache::DnsCacheConfig {
            name: "c".into(),
            lookup_family: DnsLookupFamily::V4Preferred,
            refresh_rate: Duration::from_secs(30),
            host_ttl: Duration::from_secs(60),
            max_hosts: 7,
            max_pending_requests: 3,
        }
    );
    assert_eq!(c.lb.policy, LbPolicy::ClusterProvided);
    // Envoy's defaults without upstream_http_protocol_options.
    assert!(c.http.auto_sni.sni && c.http.auto_sni.san_validation);
    // The cache's own defaults.
    let c = cluster(&dfp("a", "", "dns_lookup_family: V4_ONLY", ""));
    let Discovery::DynamicForwardProxy(d) = &c.discovery else {
        panic!("{:?}", c.discovery);
    };
    assert_eq!(d.cache.refresh_rate, Duration::from_secs(60));
    assert_eq!(d.cache.host_ttl, Duration::from_secs(300));
    assert_eq!(
        (d.cache.max_hosts, d.cache.max_pending_requests),
        (1024, 1024)
    );
}

#[test]
fn the_typed_cluster_provided_policy_is_accepted_for_it() {
    let yaml = dfp("a", "", "dns_lookup_family: V4_ONLY", "").replace(
        "  lb_policy: CLUSTER_PROVIDED\n",
        "  load_balancing_policy: {policies: [{typed_extension_config: {name: p, typed_config: {'@type': type.googleapis.com/envoy.extensions.load_balancing_policies.cluster_provided.v3.ClusterProvided}}}]}\n",
    );
    assert_eq!(cluster(&yaml).lb.policy, LbPolicy::ClusterProvided);
}

#[test]
fn cluster_provided_only_where_the_cluster_provides_one() {
    // Envoy: "cluster provided LB specified but cluster 's' did not provide one".
    assert_eq!(
        errors(&with_ep("  lb_policy: CLUSTER_PROVIDED\n")),
        [
            "static_resources.clusters[0].lb_policy: cluster provided LB specified but cluster 'a' did not provide one. Check cluster documentation."
        ]
    );
    assert_eq!(
        errors(&with_ep(
            "  load_balancing_policy: {policies: [{typed_extension_config: {name: p, typed_config: {'@type': type.googleapis.com/envoy.extensions.load_balancing_policies.cluster_provided.v3.ClusterProvided}}}]}\n"
        )),
        [
            "static_resources.clusters[0].load_balancing_policy: cluster provided LB specified but cluster 'a' did not provide one. Check cluster documentation."
        ]
    );
    // And the other way round.
    let yaml = dfp("a", "", "dns_lookup_family: V4_ONLY", "")
        .replace("  lb_policy: CLUSTER_PROVIDED\n", "");
    assert_eq!(
        errors(&yaml),
        [
            "static_resources.clusters[0].lb_policy: cluster provided LB not specified but cluster 'a' provided one. Check cluster documentation."
        ]
    );
}

#[test]
fn what_is_not_implemented_is_refused_where_it_is() {
    let at = "static_resources.clusters[0].cluster_type.typed_config";
    assert_eq!(
        errors(&dfp(
            "a",
            "",
            "dns_lookup_family: V4_ONLY",
            "      allow_coalesced_connections: true\n"
        )),
        [format!(
            "{at}.allow_coalesced_connections: allow_coalesced_connections is not supported"
        )]
    );
    let e = errors(&dfp(
        "a",
        "",
        "dns_min_refresh_rate: 5s, typed_dns_resolver_config: {name: r}",
        "",
    ));
    assert_eq!(
        e,
        [
            format!(
                "{at}.dns_cache_config.typed_dns_resolver_config: typed_dns_resolver_config is not supported"
            ),
            format!(
                "{at}.dns_cache_config.dns_min_refresh_rate: dns_min_refresh_rate is not supported"
            ),
        ]
    );
    let yaml = format!(
        "- name: a\n  lb_policy: CLUSTER_PROVIDED\n  cluster_type:\n    name: envoy.clusters.dynamic_forward_proxy\n    typed_config:\n      '@type': {TYPE}\n      sub_clusters_config: {{max_sub_clusters: 3}}\n"
    );
    let e = errors(&yaml);
    assert!(
        e.iter()
            .any(|e| e.starts_with(&format!("{at}.sub_clusters_config: "))),
        "{e:?}"
    );
}

#[test]
fn envoy_checks_of_the_cluster_and_the_cache() {
    // Typed protocol options without auto_sni and auto_san_validation.
    let typed = "  typed_extension_protocol_options:
    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
      '@type': type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
      explicit_http_config: {http_protocol_options: {}}
";
    assert_eq!(
        errors(&dfp("a", typed, "dns_lookup_family: V4_ONLY", "")),
        [
            "static_resources.clusters[0]: dynamic_forward_proxy cluster must have auto_sni and auto_san_validation true unless allow_insecure_cluster_options is set."
        ]
    );
    let c = cluster(&dfp(
        "a",
        typed,
        "dns_lookup_family: V4_ONLY",
        "      allow_insecure_cluster_options: true\n",
    ));
    assert!(!c.http.auto_sni.sni);
    // One cache name, two settings.
    let two = format!(
        "{}{}",
        dfp("a", "", "dns_lookup_family: V4_ONLY", ""),
        dfp("b", "", "dns_lookup_family: V6_ONLY", "")
    );
    assert_eq!(
        errors(&two),
        [
            "static_resources.clusters[1].cluster_type.typed_config.dns_cache_config: config specified DNS cache 'c' with different settings"
        ]
    );
    // The same settings are one cache.
    let same = format!(
        "{}{}",
        dfp("a", "", "dns_lookup_family: V4_ONLY", ""),
        dfp("b", "", "dns_lookup_family: V4_ONLY", "")
    );
    assert!(errors(&same).is_empty());
    assert_eq!(
        errors(&dfp(
            "a",
            "",
            "dns_lookup_family: V4_ONLY, host_ttl: 0s",
            ""
        )),
        [
            "static_resources.clusters[0].cluster_type.typed_config.dns_cache_config.host_ttl: must be greater than 0s"
        ]
    );
}
