//! Zone-aware routing with the local fleet over EDS (as Envoy Gateway's
//! bootstraps have it): the real binary, the in-repo control plane and echo
//! upstreams in zones a, b and c. Each assignment of the local cluster moves
//! the traffic (direct, then residual); one with hosts beyond priority 0 is
//! NACKed with Envoy's words and the routing stays as it was.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod xds_support;

use envoy_types::pb::envoy::config::core::v3::Locality;
use envoy_types::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, LocalityLbEndpoints};
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use prost::Name;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use support::*;
use xds_support::*;

/// An assignment of `fleet`: per (zone, priority), that many hosts on
/// 127.0.0.2 (never connected to).
fn fleet(groups: &[(&str, u32, usize)]) -> ClusterLoadAssignment {
    let mut port = 1000;
    let endpoints = groups
        .iter()
        .map(|&(zone, priority, n)| {
            let mut l = LocalityLbEndpoints {
                locality: Some(Locality {
                    zone: zone.into(),
                    ..Default::default()
                }),
                priority,
                ..Default::default()
            };
            for _ in 0..n {
                port += 1;
                let addr: SocketAddr = format!("127.0.0.2:{port}").parse().unwrap();
                l.lb_endpoints
                    .extend(cla("fleet", addr).endpoints[0].lb_endpoints.clone());
            }
            l
        })
        .collect();
    ClusterLoadAssignment {
        cluster_name: "fleet".into(),
        endpoints,
        ..Default::default()
    }
}

/// The zone (first letter of `x-upstream`) of each of `n` requests, counted.
async fn zones(addr: SocketAddr, n: usize) -> BTreeMap<char, usize> {
    let mut h1 = H1::connect(addr).await;
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let r = h1.get("/", &[]).await;
        assert_eq!(r.status, 200, "{r:?}");
        let zone = r.header("x-upstream").unwrap().chars().next().unwrap();
        *out.entry(zone).or_insert(0) += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_fleet_over_eds_moves_the_traffic() {
    let run = async {
        let mut up = String::new();
        for zone in ["a", "b", "c"] {
            up.push_str(&format!(
                "      - locality: {{zone: {zone}}}\n        lb_endpoints:\n"
            ));
            for i in 1..=2 {
                let addr = echo_upstream(&format!("{zone}{i}")).await;
                up.push_str(&format!(
                    "        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}\n",
                    addr.port()
                ));
            }
        }
        let mut cp = ControlPlane::start(Resources::new()).await;
        cp.set(
            RouteConfiguration::type_url(),
            "routes",
            any(&routes(xds_support::lds::to("zoned"))),
        );
        let cla_url = ClusterLoadAssignment::type_url();
        cp.set(
            cla_url.clone(),
            "fleet",
            any(&fleet(&[("a", 0, 1), ("b", 0, 1), ("c", 0, 1)])),
        );
        let config = ads_bootstrap(cp.addr, "GRPC")
            .replace(
                "node: {id: courier-1, cluster: test}",
                "node: {id: courier-1, cluster: test, locality: {zone: a}}\ncluster_manager: {local_cluster_name: fleet}",
            )
            .replace(
                "  clusters:\n",
                &format!(
                    "  clusters:\n  - name: fleet\n    type: EDS\n    eds_cluster_config: {{eds_config: {{ads: {{}}, resource_api_version: V3}}}}\n  - name: zoned\n    load_assignment:\n      cluster_name: zoned\n      endpoints:\n{up}"
                ),
            );
        let c = launch(&config).await;
        // One fleet host per zone: a has its share, everything goes to a.
        until(c.listener, |r| {
            r.header("x-upstream").is_some_and(|u| u.starts_with('a'))
        })
        .await;
        let z = zones(c.listener, 40).await;
        assert_eq!(z.into_iter().collect::<Vec<_>>(), [('a', 40)]);
        // Four of six fleet hosts in a: a keeps half of what it sends.
        cp.set(
            cla_url.clone(),
            "fleet",
            any(&fleet(&[("a", 0, 4), ("b", 0, 1), ("c", 0, 1)])),
        );
        until(c.listener, |r| {
            r.header("x-upstream").is_some_and(|u| !u.starts_with('a'))
        })
        .await;
        let z = zones(c.listener, 400).await;
        // Half stay in a (five standard deviations: 10 either side of 50 %).
        assert!((150..=250).contains(&z[&'a']), "{z:?}");
        assert!(
            xds_support::lds::stat_of(&c.admin, "cluster.zoned.lb_zone_routing_sampled").await > 0
                && xds_support::lds::stat_of(&c.admin, "cluster.zoned.lb_zone_routing_cross_zone")
                    .await
                    > 0
        );
        // Fleet hosts beyond priority 0: NACKed, the residual routing stays.
        cp.set(
            cla_url.clone(),
            "fleet",
            any(&fleet(&[("a", 0, 1), ("b", 0, 1), ("c", 1, 1)])),
        );
        cp.saw("Unexpected non-zero priority for local cluster 'fleet'.")
            .await;
        let z = zones(c.listener, 400).await;
        assert!((150..=250).contains(&z[&'a']), "{z:?}");
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap();
}
