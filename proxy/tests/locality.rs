//! Locality-weighted load balancing through the real binary: clusters whose
//! localities carry `load_balancing_weight`s, in Envoy Gateway's typed form
//! (`locality_lb_config.locality_weighted_lb_config`) and the legacy one
//! (`common_lb_config.locality_weighted_lb_config`), against echo upstreams
//! on loopback that name themselves in `x-upstream`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use support::*;

/// One `LocalityLbEndpoints`: zone, weight (`None`: none given) and its hosts
/// with their `health_status`.
type Locality<'a> = (&'a str, Option<u32>, &'a [(SocketAddr, &'a str)]);

fn cluster(name: &str, lb: &str, localities: &[Locality<'_>]) -> String {
    let mut endpoints = String::new();
    for (zone, weight, hosts) in localities {
        endpoints.push_str(&format!("    - locality: {{zone: {zone}}}\n"));
        if let Some(w) = weight {
            endpoints.push_str(&format!("      load_balancing_weight: {w}\n"));
        }
        endpoints.push_str("      lb_endpoints:\n");
        for (a, health) in *hosts {
            endpoints.push_str(&format!(
                "      - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}\n        health_status: {health}\n",
                a.port()
            ));
        }
    }
    format!(
        "- name: {name}\n  connect_timeout: 1s\n{lb}  load_assignment:\n    cluster_name: {name}\n    endpoints:\n{endpoints}"
    )
}

/// Envoy Gateway's form, with `policy` one of the typed policies.
fn typed(policy: &str) -> String {
    format!(
        "  load_balancing_policy:\n    policies:\n    - typed_extension_config:\n        name: envoy.load_balancing_policies.{policy}\n        typed_config:\n          \"@type\": type.googleapis.com/envoy.extensions.load_balancing_policies.{policy}.v3.{}\n          locality_lb_config: {{locality_weighted_lb_config: {{}}}}\n",
        match policy {
            "round_robin" => "RoundRobin",
            "least_request" => "LeastRequest",
            _ => "Random",
        }
    )
}

/// Requests per upstream name over `n` requests to `path`.
async fn split(listener: SocketAddr, path: &str, n: usize) -> BTreeMap<String, usize> {
    let mut h1 = H1::connect(listener).await;
    let mut counts = BTreeMap::new();
    for _ in 0..n {
        let r = h1.get(path, &[]).await;
        assert_eq!(r.status, 200, "{r:?}");
        *counts
            .entry(r.header("x-upstream").unwrap().to_string())
            .or_insert(0) += 1;
    }
    counts
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[tokio::test]
async fn localities_weighted_1_and_3_take_a_quarter_and_three_quarters() {
    let mut up = BTreeMap::new();
    for name in ["a1", "a2", "b1", "b2", "c1"] {
        up.insert(name, echo_upstream(name).await);
    }
    let h = |n: &str| (up[n], "HEALTHY");
    let localities = |lb: &str, name: &str| {
        cluster(
            name,
            lb,
            &[
                ("a", Some(1), &[h("a1"), h("a2")]),
                ("b", Some(3), &[h("b1"), h("b2")]),
                // No weight: no traffic while locality weighting is on.
                ("c", None, &[h("c1")]),
            ],
        )
    };
    let clusters = localities(&typed("round_robin"), "rr")
        + &localities(&typed("least_request"), "lr")
        + &localities(&typed("random"), "random")
        + &localities(
            "  lb_policy: LEAST_REQUEST\n  common_lb_config: {locality_weighted_lb_config: {}}\n",
            "legacy",
        )
        + &localities("", "plain");
    let routes: String = ["rr", "lr", "random", "legacy", "plain"]
        .iter()
        .map(|c| format!("- match: {{prefix: \"/{c}\"}}\n  route: {{cluster: {c}}}\n"))
        .collect();
    let c = courier("", &routes, &clusters).await;

    // One worker: the locality cursor is exact over whole rounds of 1 + 3.
    let rr = split(c.listener, "/rr", 400).await;
    assert_eq!(
        rr,
        counts(&[("a1", 50), ("a2", 50), ("b1", 150), ("b2", 150)])
    );
    for path in ["/lr", "/random", "/legacy"] {
        let s = split(c.listener, path, 400).await;
        let of = |p: &str| {
            s.iter()
                .filter(|(k, _)| k.starts_with(p))
                .map(|(_, v)| v)
                .sum::<usize>()
        };
        assert_eq!((of("a"), of("b"), of("c")), (100, 300, 0), "{path}: {s:?}");
    }
    // Without locality weighting the weights mean nothing: 5 hosts evenly.
    let plain = split(c.listener, "/plain", 400).await;
    assert!(plain.values().all(|&n| n == 80), "{plain:?}");
}

#[tokio::test]
async fn an_unhealthy_host_scales_its_localitys_weight() {
    let mut up = BTreeMap::new();
    for name in ["a1", "a2", "b1"] {
        up.insert(name, echo_upstream(name).await);
    }
    // A has half its hosts healthy: min(1, 1.4 x 0.5) = 0.7 against B's 3,
    // so 7 of every 37 requests go to A, all to its healthy host.
    let clusters = cluster(
        "u",
        &typed("round_robin"),
        &[
            (
                "a",
                Some(1),
                &[(up["a1"], "HEALTHY"), (up["a2"], "UNHEALTHY")],
            ),
            ("b", Some(3), &[(up["b1"], "HEALTHY")]),
        ],
    );
    let c = courier(
        "",
        "- match: {prefix: \"/\"}\n  route: {cluster: u}\n",
        &clusters,
    )
    .await;
    let s = split(c.listener, "/", 370).await;
    assert_eq!(s, counts(&[("a1", 70), ("b1", 300)]));
}
