//! Discovery types and endpoints.

use super::*;
use envoy_types::pb::envoy::config::endpoint::v3 as epb;

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
    assert_eq!(e.address.socket().unwrap().host, "backend");
    assert_eq!(e.hostname.as_deref(), Some("backend.local"));
    assert_eq!(e.health_check_port, Some(8081));
    assert_eq!(e.health_check_hostname.as_deref(), Some("hc.local"));
    assert_eq!(e.weight, 5);
    assert_eq!(e.health_status, HealthStatus::Draining);
    assert!(!e.health_status.is_healthy());
    assert_eq!(
        la.priorities[2].localities[0].endpoints[0]
            .address
            .socket()
            .unwrap()
            .port,
        81
    );
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
        errors("- name: a\n  cluster_type: {name: envoy.clusters.aggregate}\n"),
        [
            "static_resources.clusters[0].cluster_type: cluster type envoy.clusters.aggregate is not supported"
        ]
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

/// A cluster of type `envoy.cluster.dns` with `dns` as its `DnsCluster` fields
/// and `extra` as the cluster's own.
fn dns_cluster(dns: &str, extra: &str) -> String {
    format!(
        "- name: a
  cluster_type:
    name: envoy.cluster.dns
    typed_config: {{'@type': type.googleapis.com/envoy.extensions.clusters.dns.v3.DnsCluster, {dns}}}
{extra}  load_assignment:
    cluster_name: a
    endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: backend, port_value: 80}}}}}}}}]}}]
"
    )
}

#[test]
fn the_dns_cluster_extension_is_strict_or_logical_dns() {
    let c = cluster(&dns_cluster(
        "dns_lookup_family: V4_PREFERRED, dns_refresh_rate: 30s, respect_dns_ttl: true",
        "",
    ));
    assert_eq!(
        c.discovery,
        Discovery::StrictDns(Dns {
            lookup_family: DnsLookupFamily::V4Preferred,
            refresh_rate: Duration::from_secs(30),
            respect_dns_ttl: true,
        })
    );
    // Envoy reads UNSPECIFIED (unset) as AUTO; the refresh rate defaults to 5 s.
    let c = cluster(&dns_cluster("all_addresses_in_single_endpoint: true", ""));
    assert_eq!(
        c.discovery,
        Discovery::LogicalDns(Dns {
            lookup_family: DnsLookupFamily::Auto,
            refresh_rate: Duration::from_secs(5),
            respect_dns_ttl: false,
        })
    );
    // The cluster's own dns_* fields may repeat the extension's (Envoy Gateway
    // sets both), not contradict them.
    let c = cluster(&dns_cluster(
        "dns_lookup_family: V4_PREFERRED",
        "  dns_lookup_family: V4_PREFERRED\n",
    ));
    assert!(matches!(c.discovery, Discovery::StrictDns(_)));
    let mut got = errors(&dns_cluster(
        "dns_lookup_family: V4_ONLY, dns_refresh_rate: 2s, dns_jitter: 1s",
        "  dns_lookup_family: V6_ONLY\n  dns_refresh_rate: 3s\n  respect_dns_ttl: true\n",
    ));
    got.sort();
    let p = "static_resources.clusters[0]";
    assert_eq!(
        got,
        [
            format!("{p}.cluster_type.typed_config.dns_jitter: dns_jitter is not supported"),
            format!(
                "{p}.dns_lookup_family: differs from cluster_type's dns_lookup_family, which Envoy uses instead; remove it"
            ),
            format!(
                "{p}.dns_refresh_rate: differs from cluster_type's dns_refresh_rate, which Envoy uses instead; remove it"
            ),
            format!(
                "{p}.respect_dns_ttl: differs from cluster_type's respect_dns_ttl, which Envoy uses instead; remove it"
            ),
        ]
    );
    assert_eq!(
        errors(&dns_cluster("dns_refresh_rate: 0.001s", "")),
        [format!(
            "{p}.cluster_type.typed_config.dns_refresh_rate: must be greater than 1ms"
        )]
    );
}

#[test]
fn endpoint_and_locality_metadata_are_kept() {
    let c = cluster(
        "- name: a
  load_assignment:
    cluster_name: a
    endpoints:
    - metadata: {filter_metadata: {envoy-gateway: {backend: b1}}}
      lb_endpoints:
      - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 80}}}
        metadata: {filter_metadata: {envoy.lb: {canary: true}}}
",
    );
    let la = c.load_assignment.unwrap();
    let l = &la.priorities[0].localities[0];
    assert_eq!(
        serde_json::Value::Object(l.metadata["envoy-gateway"].clone()),
        serde_json::json!({"backend": "b1"})
    );
    assert_eq!(
        serde_json::Value::Object(l.endpoints[0].metadata["envoy.lb"].clone()),
        serde_json::json!({"canary": true})
    );
}
