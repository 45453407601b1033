//! courier's CDS over ADS, end to end (SotW and Delta): the real binary, the
//! in-repo tonic control plane and echo upstreams. A cluster arrives and is
//! routed to, is updated (traffic follows), turns into an EDS cluster that warms
//! until its endpoints arrive (the old one serves meanwhile), a bad cluster is
//! NACKed by name while its sibling applies, and a removed cluster answers 503
//! as Envoy's unknown cluster does.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod xds_support;

use envoy_types::pb::envoy::config::cluster::v3::{
    CircuitBreakers, Cluster, circuit_breakers, cluster,
};
use envoy_types::pb::envoy::config::core::v3::{
    AggregatedConfigSource, ConfigSource, config_source,
};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::route::v3::{
    RouteAction, RouteConfiguration, route, route_action,
};
use prost::Name;
use std::net::SocketAddr;
use std::time::Duration;
use support::*;
use xds_support::*;

fn to(cluster: &str) -> route::Action {
    route::Action::Route(RouteAction {
        cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster.into())),
        ..Default::default()
    })
}

fn static_cluster(name: &str, addr: SocketAddr) -> Cluster {
    Cluster {
        name: name.into(),
        connect_timeout: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: 1,
            nanos: 0,
        }),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::Static as i32,
        )),
        load_assignment: Some(cla(name, addr)),
        ..Default::default()
    }
}

fn eds_cluster(name: &str, service: &str) -> Cluster {
    Cluster {
        name: name.into(),
        connect_timeout: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: 1,
            nanos: 0,
        }),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::Eds as i32,
        )),
        eds_cluster_config: Some(cluster::EdsClusterConfig {
            eds_config: Some(ConfigSource {
                config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(
                    AggregatedConfigSource {},
                )),
                resource_api_version: 2,
                ..Default::default()
            }),
            service_name: service.into(),
        }),
        ..Default::default()
    }
}

/// The ADS bootstrap with CDS over ADS too.
fn cds_bootstrap(cp: SocketAddr, api_type: &str) -> String {
    ads_bootstrap(cp, api_type).replace(
        "dynamic_resources:\n",
        "dynamic_resources:\n  cds_config: {ads: {}, resource_api_version: V3}\n",
    )
}

async fn admin_clusters(admin: &str) -> String {
    get_text(admin, "/clusters").await
}

async fn cds_lifecycle(api_type: &str) {
    let a = echo_upstream("a").await;
    let b = echo_upstream("b").await;
    let (cds_url, cla_url, rds_url) = (
        Cluster::type_url(),
        ClusterLoadAssignment::type_url(),
        RouteConfiguration::type_url(),
    );
    let mut cp = ControlPlane::start(Resources::new()).await;
    cp.set(rds_url.clone(), "routes", any(&routes(to("dyn"))));
    let c = launch(&cds_bootstrap(cp.addr, api_type)).await;
    cp.saw("Cluster ").await;

    // No cluster "dyn" yet: 503, as Envoy's cluster_not_found (NC).
    until(c.listener, |r| r.status == 503).await;

    // The cluster arrives over CDS and is routed to.
    cp.set(cds_url.clone(), "dyn", any(&static_cluster("dyn", a)));
    until(c.listener, |r| r.header("x-upstream") == Some("a")).await;
    let mut open = H1::connect(c.listener).await;
    assert_eq!(open.get("/", &[]).await.header("x-upstream"), Some("a"));

    // Updated: its new endpoint takes the traffic, also on an open connection.
    cp.set(cds_url.clone(), "dyn", any(&static_cluster("dyn", b)));
    until(c.listener, |r| r.header("x-upstream") == Some("b")).await;
    assert_eq!(open.get("/", &[]).await.header("x-upstream"), Some("b"));

    // Turned into an EDS cluster: it warms (the one in force keeps serving b)
    // until its assignment arrives, then serves a.
    cp.set(cds_url.clone(), "dyn", any(&eds_cluster("dyn", "svc")));
    cp.saw("ClusterLoadAssignment").await;
    for _ in 0..5 {
        let r = H1::connect(c.listener).await.get("/", &[]).await;
        assert_eq!(r.header("x-upstream"), Some("b"), "{r:?}");
    }
    cp.set(cla_url.clone(), "svc", any(&cla("svc", a)));
    until(c.listener, |r| r.header("x-upstream") == Some("a")).await;

    // A cluster courier does not serve is NACKed by name; its sibling in the
    // same response applies.
    let mut bad = static_cluster("bad", a);
    bad.circuit_breakers = Some(CircuitBreakers {
        thresholds: vec![circuit_breakers::Thresholds {
            max_connection_pools: Some(envoy_types::pb::google::protobuf::UInt32Value { value: 3 }),
            ..Default::default()
        }],
        ..Default::default()
    });
    cp.state.send_modify(|(v, r)| {
        *v += 1;
        let mut next = Resources::clone(r);
        let m = next.entry(cds_url.clone()).or_default();
        m.insert("bad".into(), any(&bad));
        m.insert("sib".into(), any(&static_cluster("sib", b)));
        *r = std::sync::Arc::new(next);
    });
    let nack = cp.saw("error=Cluster 'bad'").await;
    assert!(nack.contains("max_connection_pools"), "{nack}");
    assert!(!nack.contains("'sib'"), "{nack}");
    let mut listed = String::new();
    for _ in 0..250 {
        listed = admin_clusters(&c.admin).await;
        if listed.contains("sib::") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(listed.contains("sib::"), "{listed}");
    assert!(!listed.contains("bad::"), "{listed}");
    let stats = get_text(&c.admin, "/stats").await;
    assert!(
        stats.contains("cluster_manager.cds.update_rejected: 1\n"),
        "{stats}"
    );
    // A cluster added over CDS has its own counters.
    assert!(stats.contains("cluster.dyn.upstream_rq_total: "), "{stats}");
    assert!(
        !stats.contains("cluster.dyn.upstream_rq_total: 0\n"),
        "{stats}"
    );

    // Removed: routes to it answer 503 again; the open connection stays up.
    cp.remove(&cds_url, "bad");
    cp.remove(&cds_url, "dyn");
    until(c.listener, |r| r.status == 503).await;
    let r = open.get("/", &[]).await;
    assert_eq!(r.status, 503, "{r:?}");
    let listed = admin_clusters(&c.admin).await;
    assert!(!listed.contains("dyn::"), "{listed}");
    assert!(listed.contains("sib::"), "{listed}");
    // Bootstrap clusters stay.
    assert!(listed.contains("backend::"), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cds_sotw_add_update_warm_nack_remove() {
    tokio::time::timeout(Duration::from_secs(60), cds_lifecycle("GRPC"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cds_delta_add_update_warm_nack_remove() {
    tokio::time::timeout(Duration::from_secs(60), cds_lifecycle("DELTA_GRPC"))
        .await
        .unwrap();
}
