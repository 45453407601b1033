//! Zone-aware routing through the real binary: a local cluster
//! (`cluster_manager.local_cluster_name`) of the proxy's fleet in zones a, b
//! and c, the proxy's own zone from `--service-zone`, and an upstream cluster
//! of echo upstreams in the three zones that name themselves in `x-upstream`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use std::collections::BTreeMap;
use support::*;

/// The fleet: one host per zone on 127.0.0.2 (never connected to).
const FLEET: &str = "- name: fleet
  load_assignment:
    cluster_name: fleet
    endpoints:
    - locality: {zone: a}
      lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.2, port_value: 1001}}}}]
    - locality: {zone: b}
      lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.2, port_value: 1002}}}}]
    - locality: {zone: c}
      lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.2, port_value: 1003}}}}]
";

/// `up`: two echo upstreams per zone (`a1`, `a2`, `b1`, ...), no zone settings.
async fn up() -> String {
    let mut endpoints = String::new();
    for zone in ["a", "b", "c"] {
        endpoints.push_str(&format!(
            "    - locality: {{zone: {zone}}}\n      lb_endpoints:\n"
        ));
        for i in 1..=2 {
            let addr = echo_upstream(&format!("{zone}{i}")).await;
            endpoints.push_str(&format!(
                "      - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}\n",
                addr.port()
            ));
        }
    }
    format!("- name: up\n  load_assignment:\n    cluster_name: up\n    endpoints:\n{endpoints}")
}

async fn start(zone_args: &[&str]) -> Courier {
    start_with(zone_args, "").await
}

/// [`start`], with `top` added at the bootstrap's top level.
async fn start_with(zone_args: &[&str], top: &str) -> Courier {
    let mut args = vec!["--concurrency", "1"];
    args.extend_from_slice(zone_args);
    let clusters = format!("{FLEET}{}", up().await);
    courier_top(
        &args,
        &format!("cluster_manager: {{local_cluster_name: fleet}}\n{top}"),
        "",
        "",
        "- match: {prefix: \"/\"}\n  route: {cluster: up}\n",
        &clusters,
        "",
    )
    .await
}

async fn post(c: &Courier, path: &str) -> u16 {
    let mut admin = H1::connect(c.admin.parse().unwrap()).await;
    admin
        .send(
            Request::post(path)
                .header("host", "admin")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .status
}

async fn split(c: &Courier, n: usize) -> BTreeMap<String, usize> {
    let mut h1 = H1::connect(c.listener).await;
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let r = h1.get("/", &[]).await;
        assert_eq!(r.status, 200, "{r:?}");
        *out.entry(r.header("x-upstream").unwrap().to_string())
            .or_insert(0) += 1;
    }
    out
}

#[tokio::test]
async fn service_zone_routes_everything_to_its_zone_and_counts_it() {
    let c = start(&["--service-zone", "b"]).await;
    // b has a third of the upstream for a third of the fleet: direct, round
    // robin over b's two hosts.
    let s = split(&c, 40).await;
    assert_eq!(
        s.into_iter().collect::<Vec<_>>(),
        [("b1".to_string(), 20), ("b2".to_string(), 20)]
    );
    assert_eq!(
        stat(&c, "cluster.up.lb_zone_routing_all_directly").await,
        40
    );
    assert_eq!(
        stat(&c, "cluster.up.lb_recalculate_zone_structures").await,
        1
    );
    // The local cluster routes nothing by zone; its counters exist at 0.
    let stats = get_text(&c.admin, "/stats").await;
    assert!(
        stats.contains("cluster.fleet.lb_zone_routing_all_directly: 0\n"),
        "{stats}"
    );
    // /reset_counters zeroes them.
    assert_eq!(post(&c, "/reset_counters").await, 200);
    assert_eq!(stat(&c, "cluster.up.lb_zone_routing_all_directly").await, 0);
}

#[tokio::test]
async fn without_a_zone_the_fleet_is_not_ok_and_all_hosts_share() {
    // The node has no locality: Envoy's lb_local_cluster_not_ok, then plain
    // round robin over the six hosts.
    let c = start(&[]).await;
    let s = split(&c, 60).await;
    assert!(s.len() == 6 && s.values().all(|&n| n == 10), "{s:?}");
    assert_eq!(stat(&c, "cluster.up.lb_local_cluster_not_ok").await, 1);
    assert_eq!(stat(&c, "cluster.up.lb_zone_routing_all_directly").await, 0);
}

#[tokio::test]
async fn the_runtime_turns_zone_routing_off_and_on() {
    // `upstream.zone_routing.enabled: 0` in a static layer: no pick routes by
    // zone; the admin layer's 100 brings it back at the next pick.
    let c = start_with(
        &["--service-zone", "b"],
        "layered_runtime:\n  layers:\n  - {name: s, static_layer: {upstream.zone_routing.enabled: 0}}\n  - {name: admin, admin_layer: {}}",
    )
    .await;
    let s = split(&c, 60).await;
    assert!(s.len() == 6 && s.values().all(|&n| n == 10), "{s:?}");
    assert_eq!(stat(&c, "cluster.up.lb_zone_routing_all_directly").await, 0);
    assert_eq!(
        post(&c, "/runtime_modify?upstream.zone_routing.enabled=100").await,
        200
    );
    let s = split(&c, 20).await;
    assert_eq!(
        s.into_iter().collect::<Vec<_>>(),
        [("b1".to_string(), 10), ("b2".to_string(), 10)]
    );
    // min_cluster_size from the runtime: 7 of 6 hosts is too small, from the
    // next computation (the routing is computed again when a set changes;
    // here a restart with the key set).
    let c = start_with(
        &["--service-zone", "b"],
        "layered_runtime:\n  layers:\n  - {name: s, static_layer: {upstream.zone_routing.min_cluster_size: 7}}",
    )
    .await;
    let s = split(&c, 60).await;
    assert_eq!(s.len(), 6, "{s:?}");
    assert_eq!(stat(&c, "cluster.up.lb_zone_cluster_too_small").await, 1);
}
