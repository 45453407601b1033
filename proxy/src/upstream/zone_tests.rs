//! Zone-aware routing: Envoy's routing states and shares, its early exits, and
//! the cluster manager following changes of either cluster.

use super::*;
use crate::upstream::ClusterManager;
use courier_config::cluster::{LbPolicy, ZoneAware};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Hosts from `(zone, count)` groups, all healthy, ports numbered from `base`.
fn hosts(groups: &[(&str, usize)], base: u16) -> Vec<Arc<Host>> {
    let mut port = base;
    groups
        .iter()
        .flat_map(|&(zone, n)| {
            let l = Arc::new(Locality {
                zone: zone.to_string(),
                ..Locality::default()
            });
            (0..n)
                .map(|_| {
                    port += 1;
                    Arc::new(
                        Host::new(
                            SocketAddr::from(([127, 0, 0, 1], port)),
                            String::new(),
                            1,
                            true,
                        )
                        .with_locality(Some(Arc::clone(&l))),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn set(groups: &[(&str, usize)], base: u16) -> Arc<HostSet> {
    Arc::new(HostSet::new(vec![hosts(groups, base)], 140))
}

fn node(zone: &str) -> Locality {
    Locality {
        zone: zone.to_string(),
        ..Locality::default()
    }
}

fn lb(zone_aware: ZoneAware) -> LoadBalancer {
    LoadBalancer {
        policy: LbPolicy::RoundRobin,
        healthy_panic_threshold: 50.0,
        locality_weighted: false,
        zone_aware,
        cluster_hash_policy: Vec::new(),
        slow_start: None,
    }
}

fn min_size(n: u64) -> ZoneAware {
    ZoneAware {
        min_cluster_size: n,
        ..ZoneAware::default()
    }
}

/// Zone of each of `n` picks, counted.
fn zones_of(r: &ZoneRouting, n: usize, stats: &ZoneStats) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let i = r.pick(stats);
        let (hosts, _) = locality_hosts(r, i);
        let zone = hosts[0].locality.as_ref().unwrap().zone.clone();
        *out.entry(zone).or_insert(0) += 1;
    }
    out
}

#[test]
fn local_zone_with_its_share_routes_everything_directly() {
    // Upstream a:2 b:2 c:2, local a:1 b:1 c:1 (node in b): b's upstream share
    // (3333) is at least its local share (3333).
    let up = set(&[("a", 2), ("b", 2), ("c", 2)], 100);
    let local = set(&[("a", 1), ("b", 1), ("c", 1)], 200);
    let r = compute(&up, &local, Some(&node("b")), &lb(ZoneAware::default()));
    assert_eq!(r.state, State::Direct);
    let stats = ZoneStats::default();
    let z = zones_of(&r, 100, &stats);
    assert_eq!(z.into_iter().collect::<Vec<_>>(), [("b".to_string(), 100)]);
    assert_eq!(stats.all_directly.get(), 100);
    assert_eq!(stats.sampled.get() + stats.cross_zone.get(), 0);
}

#[test]
fn residual_routing_keeps_what_the_local_zone_takes_and_spreads_the_rest() {
    // Upstream a:1 b:3 c:2 (shares 1666, 5000, 3333); local a:2 b:1 c:1
    // (5000, 2500, 2500); the node is in a. a keeps 1666/5000 = 33.32 %; the
    // rest goes by residual capacity b 2500 : c 833.
    let up = set(&[("a", 1), ("b", 3), ("c", 2)], 100);
    let local = set(&[("a", 2), ("b", 1), ("c", 1)], 200);
    let r = compute(&up, &local, Some(&node("a")), &lb(ZoneAware::default()));
    assert_eq!(
        r.state,
        State::Residual {
            local_percent: 3332,
            residual: vec![0, 2500, 3333].into_boxed_slice()
        }
    );
    let stats = ZoneStats::default();
    let n = 30_000;
    let z = zones_of(&r, n, &stats);
    let expect = [
        ("a", 0.3332),
        ("b", 0.6668 * 2500.0 / 3333.0),
        ("c", 0.6668 * 833.0 / 3333.0),
    ];
    for (zone, p) in expect {
        let got = *z.get(zone).unwrap_or(&0) as f64;
        // Five standard deviations of a binomial count.
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (got - n as f64 * p).abs() < 5.0 * sd,
            "{zone}: {got} vs {}",
            n as f64 * p
        );
    }
    assert_eq!(stats.sampled.get(), *z.get("a").unwrap() as u64);
    assert_eq!(stats.cross_zone.get(), (n - z["a"]) as u64);
    assert_eq!(stats.all_directly.get(), 0);
}

#[test]
fn early_exits_as_envoy() {
    let local = set(&[("a", 1), ("b", 1)], 200);
    // Too few healthy upstream hosts (default minimum 6).
    let up = set(&[("a", 2), ("b", 3)], 100);
    let r = compute(&up, &local, Some(&node("a")), &lb(ZoneAware::default()));
    assert_eq!(
        (r.state.clone(), r.exit),
        (State::NoLocalityRouting, Some(Exit::TooSmall))
    );
    // min_cluster_size 5 lets it route (a has 4000 of the upstream against
    // 5000 of the fleet: it keeps 8000 of 10 000).
    let r = compute(&up, &local, Some(&node("a")), &lb(min_size(5)));
    assert!(matches!(
        r.state,
        State::Residual {
            local_percent: 8000,
            ..
        }
    ));
    // The node's zone is not in the local cluster, or the node has none.
    let r = compute(&up, &local, Some(&node("z")), &lb(min_size(1)));
    assert_eq!(r.exit, Some(Exit::LocalNotOk));
    let r = compute(&up, &local, None, &lb(min_size(1)));
    assert_eq!(r.exit, Some(Exit::LocalNotOk));
    // One upstream locality, or one local locality: nothing counted.
    let one = set(&[("a", 6)], 100);
    let r = compute(&one, &local, Some(&node("a")), &lb(min_size(1)));
    assert_eq!(r.exit, Some(Exit::Silent));
    let single_local = set(&[("a", 2)], 200);
    let r = compute(&up, &single_local, Some(&node("a")), &lb(min_size(1)));
    assert_eq!(r.exit, Some(Exit::Silent));
    // Different numbers of zones still route (Envoy 1.40 no longer exits).
    let three = set(&[("a", 1), ("b", 1), ("c", 1)], 100);
    let r = compute(&three, &local, Some(&node("a")), &lb(min_size(1)));
    assert_eq!(r.exit, None);
}

#[test]
fn force_local_zone_and_weight_basis() {
    // a has 1 of 6 upstream hosts and half the local fleet: residual normally.
    let up = set(&[("a", 1), ("b", 5)], 100);
    let local = set(&[("a", 1), ("b", 1)], 200);
    let plain = compute(&up, &local, Some(&node("a")), &lb(min_size(1)));
    assert!(matches!(
        plain.state,
        State::Residual {
            local_percent: 3332,
            ..
        }
    ));
    let forced = ZoneAware {
        force_local_zone_min_size: Some(1),
        ..min_size(1)
    };
    assert_eq!(
        compute(&up, &local, Some(&node("a")), &lb(forced)).state,
        State::Direct
    );
    // Too few local-zone hosts for the forced minimum: residual again.
    let forced2 = ZoneAware {
        force_local_zone_min_size: Some(2),
        ..min_size(1)
    };
    assert!(matches!(
        compute(&up, &local, Some(&node("a")), &lb(forced2)).state,
        State::Residual { .. }
    ));
    // force_local_zone also routes with a single-zone local cluster.
    let single = set(&[("a", 1)], 200);
    assert_eq!(
        compute(&up, &single, Some(&node("a")), &lb(forced)).state,
        State::Direct
    );
    // By weight: a's one host weighs 5 against b's five of weight 1.
    let mut hs = hosts(&[("a", 1), ("b", 5)], 100);
    hs[0] = Arc::new(
        Host::new(hs[0].address, String::new(), 5, true).with_locality(hs[0].locality.clone()),
    );
    let weighted = Arc::new(HostSet::new(vec![hs], 140));
    let by_weight = ZoneAware {
        locality_basis: LocalityBasis::HealthyWeight,
        ..min_size(1)
    };
    assert_eq!(
        compute(&weighted, &local, Some(&node("a")), &lb(by_weight)).state,
        State::Direct
    );
}

#[test]
fn unhealthy_hosts_leave_the_shares() {
    // Two of a's three upstream hosts fail their checks: a's healthy share
    // (1 of 4) falls under its local share (1 of 2).
    let up = set(&[("a", 3), ("b", 3)], 100);
    let local = set(&[("a", 1), ("b", 1)], 200);
    let r = compute(&up, &local, Some(&node("a")), &lb(min_size(1)));
    assert_eq!(r.state, State::Direct);
    for h in &up.priorities[0].all()[1..3] {
        h.health.set_failed(true);
    }
    let rebuilt = Arc::new(up.rebuilt());
    let r = compute(&rebuilt, &local, Some(&node("a")), &lb(min_size(1)));
    assert!(
        matches!(
            r.state,
            State::Residual {
                local_percent: 5000,
                ..
            }
        ),
        "{:?}",
        r.state
    );
    // Too small now under the default minimum (4 healthy < 6).
    let r = compute(
        &rebuilt,
        &local,
        Some(&node("a")),
        &lb(ZoneAware::default()),
    );
    assert_eq!(r.exit, Some(Exit::TooSmall));
}

/// A manager with a local cluster `local` (EDS) and an upstream `up` in zones
/// a, b, c (two hosts each), the node in zone `a`.
fn manager(up_lb: &str) -> ClusterManager {
    let ep = |zone: &str, ports: [u16; 2]| {
        format!(
            "{{locality: {{zone: {zone}}}, lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}}}, {{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}}}]}}",
            ports[0], ports[1]
        )
    };
    let yaml = format!(
        "node: {{locality: {{zone: a}}}}
cluster_manager: {{local_cluster_name: local}}
dynamic_resources: {{ads_config: {{api_type: GRPC, grpc_services: [{{envoy_grpc: {{cluster_name: xds}}}}]}}}}
static_resources:
  clusters:
  - name: xds
    load_assignment: {{cluster_name: xds, endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 1}}}}}}}}]}}]}}
  - name: local
    type: EDS
    eds_cluster_config: {{eds_config: {{ads: {{}}}}}}
  - name: up
    {up_lb}
    load_assignment: {{cluster_name: up, endpoints: [{}, {}, {}]}}
",
        ep("a", [11, 12]),
        ep("b", [21, 22]),
        ep("c", [31, 32])
    );
    let b = courier_config::bootstrap_from_str(&yaml, courier_config::load::Format::Yaml).unwrap();
    let ctx = Arc::new(ZoneContext::new("local".into(), Some(node("a"))));
    ClusterManager::with_zone(&super::super::Snapshot::from_bootstrap(&b), Some(ctx)).unwrap()
}

/// A local fleet of `counts[i]` hosts in zone a, b, c.
fn local_assignment(counts: [usize; 3]) -> courier_config::cluster::LoadAssignment {
    let mut port = 40_000;
    let groups: Vec<(Option<&str>, Option<u32>, Vec<u16>)> = ["a", "b", "c"]
        .iter()
        .zip(counts)
        .map(|(z, n)| {
            let ports = (0..n)
                .map(|_| {
                    port += 1;
                    port
                })
                .collect();
            (Some(*z), None, ports)
        })
        .collect();
    let borrowed: Vec<(Option<&str>, Option<u32>, &[u16])> =
        groups.iter().map(|(z, w, p)| (*z, *w, &p[..])).collect();
    super::super::host::tests::assignment(&borrowed, 140)
}

fn picks(c: &UpstreamCluster, n: usize) -> BTreeMap<u16, usize> {
    let mut out = BTreeMap::new();
    for _ in 0..n {
        *out.entry(c.choose().unwrap().address.port()).or_insert(0) += 1;
    }
    out
}

#[test]
fn the_manager_follows_the_local_cluster_and_counts_as_envoy() {
    let m = manager("common_lb_config: {zone_aware_lb_config: {min_cluster_size: 6}}");
    let up = m.get("up").unwrap();
    // The local cluster has no hosts yet (fewer than two localities): plain
    // round robin, nothing counted but the computation.
    let c = picks(&up, 60);
    assert!(c.len() == 6 && c.values().all(|&n| n == 10), "{c:?}");
    assert_eq!(up.zone_stats.local_cluster_not_ok.get(), 0);
    assert_eq!(up.zone_stats.recalculate.get(), 1);
    // One local host per zone: a's share equals its local share: direct.
    assert!(m.set_eds_hosts("local", Some(&local_assignment([1, 1, 1]))));
    let c = picks(&up, 60);
    assert_eq!(c.into_iter().collect::<Vec<_>>(), [(11, 30), (12, 30)]);
    assert_eq!(up.zone_stats.all_directly.get(), 60);
    assert_eq!(up.zone_stats.recalculate.get(), 2);
    // Two thirds of the fleet in a (6666 of 10 000) for a third of the
    // upstream (3333): a keeps half of what it sends, the rest goes to b and
    // c evenly (1667 residual capacity each).
    assert!(m.set_eds_hosts("local", Some(&local_assignment([4, 1, 1]))));
    let c = picks(&up, 3000);
    let a = c[&11] + c[&12];
    let b = c[&21] + c[&22];
    // Five standard deviations of a binomial count (sd ≈ 27 and 24).
    assert!((1365..1635).contains(&a), "{c:?}");
    assert!((630..870).contains(&b), "{c:?}");
    assert_eq!(
        up.zone_stats.sampled.get() + up.zone_stats.cross_zone.get(),
        3000
    );
    assert_eq!(up.zone_stats.recalculate.get(), 3);
    // The local cluster itself routes without zones.
    assert!(m.get("local").unwrap().zone.is_none());
}

#[test]
fn a_small_cluster_or_a_disabled_routing_balances_over_all_hosts() {
    let m = manager("common_lb_config: {zone_aware_lb_config: {min_cluster_size: 7}}");
    assert!(m.set_eds_hosts("local", Some(&local_assignment([1, 1, 1]))));
    let up = m.get("up").unwrap();
    let c = picks(&up, 60);
    assert!(c.len() == 6 && c.values().all(|&n| n == 10), "{c:?}");
    assert_eq!(up.zone_stats.cluster_too_small.get(), 1);
    let m = manager("common_lb_config: {zone_aware_lb_config: {routing_enabled: {value: 0}}}");
    assert!(m.set_eds_hosts("local", Some(&local_assignment([1, 1, 1]))));
    let up = m.get("up").unwrap();
    let c = picks(&up, 60);
    assert_eq!(c.len(), 6, "{c:?}");
    assert_eq!(up.zone_stats.all_directly.get(), 0);
}

#[test]
fn a_local_cluster_in_panic_is_not_ok_and_may_fail_traffic() {
    for (fail, expect_none) in [(false, false), (true, true)] {
        let m = manager(&format!(
            "common_lb_config: {{zone_aware_lb_config: {{fail_traffic_on_panic: {fail}}}}}"
        ));
        assert!(m.set_eds_hosts("local", Some(&local_assignment([1, 1, 1]))));
        // Two of the three local hosts fail: 33 % healthy < 50 %.
        let local = m.get("local").unwrap();
        for h in &local.hosts().priorities[0].all()[1..] {
            h.health.set_failed(true);
        }
        super::super::outlier::republish_now(&local);
        let up = m.get("up").unwrap();
        assert_eq!(up.choose().is_none(), expect_none);
        assert_eq!(up.zone_stats.local_cluster_not_ok.get(), 1);
    }
}

#[test]
fn a_local_assignment_beyond_priority_0_is_refused() {
    let mut la = local_assignment([1, 1, 1]);
    assert_eq!(local_assignment_error(&la, "fleet"), None);
    let p1 = la.priorities[0].clone();
    la.priorities.push(p1);
    assert_eq!(
        local_assignment_error(&la, "fleet").as_deref(),
        Some("Unexpected non-zero priority for local cluster 'fleet'.")
    );
    // An empty level above 0 holds no host: nothing to refuse.
    la.priorities[1].localities.clear();
    assert_eq!(local_assignment_error(&la, "fleet"), None);
}

#[test]
fn locality_weighting_comes_first_and_zones_take_over_without_weights() {
    // Locality weighting on but no locality has a weight: Envoy falls through
    // to zone-aware routing (a has its share: all to a).
    let m = manager("common_lb_config: {locality_weighted_lb_config: {}}");
    assert!(m.set_eds_hosts("local", Some(&local_assignment([1, 1, 1]))));
    let up = m.get("up").unwrap();
    let c = picks(&up, 40);
    assert_eq!(c.into_iter().collect::<Vec<_>>(), [(11, 20), (12, 20)]);
    assert_eq!(up.zone_stats.all_directly.get(), 40);
}
