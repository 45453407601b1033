//! A host that leaves an EDS assignment: kept while active health checks pass
//! it, until one fails it (Envoy's default), or removed at once with
//! `ignore_health_on_host_removal`.

use super::*;
use courier_config::cluster::LoadAssignment;
use courier_config::load::Format;
use std::net::SocketAddr;

/// An EDS cluster `eds` with an HTTP health check; `extra` goes into the cluster.
fn manager(extra: &str) -> ClusterManager {
    let yaml = format!(
        "dynamic_resources: {{ads_config: {{api_type: GRPC, grpc_services: [{{envoy_grpc: {{cluster_name: xds}}}}]}}}}
static_resources:
  clusters:
  - name: xds
    type: STATIC
    load_assignment: {{cluster_name: xds, endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 1}}}}}}}}]}}]}}
  - name: eds
    type: EDS
    eds_cluster_config: {{eds_config: {{ads: {{}}}}}}
    health_checks: [{{timeout: 1s, interval: 60s, unhealthy_threshold: 1, healthy_threshold: 1, http_health_check: {{path: /}}}}]
{extra}"
    );
    let b = courier_config::bootstrap_from_str(&yaml, Format::Yaml).unwrap();
    ClusterManager::new(&Snapshot::from_bootstrap(&b)).unwrap()
}

/// An assignment of hosts on 127.0.0.1 at `ports`.
fn assignment(ports: &[u16]) -> LoadAssignment {
    let endpoints: Vec<String> = ports
        .iter()
        .map(|p| {
            format!(
                "{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {p}}}}}}}}}"
            )
        })
        .collect();
    let yaml = format!(
        "static_resources:
  clusters:
  - name: s
    load_assignment: {{cluster_name: s, endpoints: [{{lb_endpoints: [{}]}}]}}
",
        endpoints.join(", ")
    );
    let b = courier_config::bootstrap_from_str(&yaml, Format::Yaml).unwrap();
    b.clusters[0].load_assignment.clone().unwrap()
}

fn ports(c: &UpstreamCluster) -> Vec<u16> {
    let mut p: Vec<u16> = c.hosts().hosts().map(|h| h.address.port()).collect();
    p.sort_unstable();
    p
}

fn host(c: &UpstreamCluster, port: u16) -> Arc<host::Host> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    Arc::clone(c.hosts().hosts().find(|h| h.address == addr).unwrap())
}

#[test]
fn a_removed_host_stays_while_health_checks_pass_it() {
    let m = manager("");
    assert!(m.set_eds_hosts("eds", Some(&assignment(&[81, 82, 83]))));
    let c = m.get("eds").unwrap();
    // 83 passes its checks; 82 fails them.
    host(&c, 82).health.set_failed(true);
    m.set_eds_hosts("eds", Some(&assignment(&[81])));
    assert_eq!(ports(&c), [81, 83], "83 stays; 82, failing, goes");
    let kept = host(&c, 83);
    assert!(kept.pending_removal());
    // It still takes traffic: healthy, in the level's healthy list.
    assert_eq!(c.hosts().priorities[0].healthy().len(), 2);
    // Another update without it keeps it; one with it again clears the mark.
    m.set_eds_hosts("eds", Some(&assignment(&[81])));
    assert_eq!(ports(&c), [81, 83]);
    m.set_eds_hosts("eds", Some(&assignment(&[81, 83])));
    assert!(!host(&c, 83).pending_removal());
    // Gone again, then failed by a check: the rebuild that follows removes it.
    m.set_eds_hosts("eds", Some(&assignment(&[81])));
    host(&c, 83).health.set_failed(true);
    outlier::republish_now(&c);
    assert_eq!(ports(&c), [81]);
    // A failing host that is still assigned stays (only unhealthy).
    host(&c, 81).health.set_failed(true);
    outlier::republish_now(&c);
    assert_eq!(ports(&c), [81]);
}

#[test]
fn ignore_health_on_host_removal_removes_at_once() {
    let m = manager("    ignore_health_on_host_removal: true\n");
    m.set_eds_hosts("eds", Some(&assignment(&[81, 82])));
    m.set_eds_hosts("eds", Some(&assignment(&[81])));
    assert_eq!(ports(&m.get("eds").unwrap()), [81]);
}

#[test]
fn without_health_checks_a_removed_host_goes_at_once() {
    let b = courier_config::bootstrap_from_str(
        "dynamic_resources: {ads_config: {api_type: GRPC, grpc_services: [{envoy_grpc: {cluster_name: xds}}]}}
static_resources:
  clusters:
  - name: xds
    type: STATIC
    load_assignment: {cluster_name: xds, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 1}}}}]}]}
  - name: eds
    type: EDS
    eds_cluster_config: {eds_config: {ads: {}}}
",
        Format::Yaml,
    )
    .unwrap();
    let m = ClusterManager::new(&Snapshot::from_bootstrap(&b)).unwrap();
    m.set_eds_hosts("eds", Some(&assignment(&[81, 82])));
    m.set_eds_hosts("eds", Some(&assignment(&[81])));
    assert_eq!(ports(&m.get("eds").unwrap()), [81]);
}
