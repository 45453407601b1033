//! Route `stat_prefix` and virtual-host `virtual_clusters` beside real Envoy:
//! the same requests (matching and not matching the virtual clusters, a
//! retried 503, a route timeout) through both proxies, then the
//! `vhost.<host>.route.<prefix>.*` and `vhost.<host>.vcluster.<name>.*` lines
//! of `/stats` and their `/stats/prometheus` series must match, including the
//! ones Envoy lists from the config before any request uses them. Histograms
//! (`upstream_rq_time`) are left out: courier keeps none (README).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=$PWD/.venv/bin/envoy cargo test -p courier-tests --test vhost_stats_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::status_upstream;
use courier_tests::{courier_bin, envoy_bin};
use std::net::SocketAddr;

const VHOSTS: &str = r#"- name: vh1
  domains: ["a.com"]
  virtual_clusters:
  - name: "*"
    headers: [{ name: ":authority", string_match: { prefix: "*" } }]
  - name: gets
    headers: [{ name: ":method", string_match: { exact: GET } }]
  - name: unused
    headers: [{ name: x-never, present_match: true }]
  routes:
  - match: { prefix: /r1 }
    stat_prefix: "route=/first,kind=HTTPRoute"
    route: { cluster: ok }
  - match: { prefix: / }
    route: { cluster: ok }
- name: vh2
  domains: ["*"]
  routes:
  - match: { prefix: /r2 }
    stat_prefix: r2
    route: { cluster: ok }
  - match: { prefix: /retry }
    stat_prefix: retried
    route: { cluster: bad, retry_policy: { retry_on: 5xx, num_retries: 1, retry_back_off: { base_interval: 0.001s } } }
  - match: { prefix: /slow }
    stat_prefix: slow
    route: { cluster: silent, timeout: 0.3s }
  - match: { prefix: /never }
    stat_prefix: idle
    route: { cluster: ok }
  - match: { prefix: / }
    route: { cluster: ok }
"#;

fn cluster(name: &str, addr: SocketAddr) -> String {
    format!(
        "- name: {name}\n  connect_timeout: 1s\n  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
        addr.port()
    )
}

fn run(kind: Kind, bin: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let clusters = [
        cluster("ok", status_upstream::start(200).0),
        cluster("bad", status_upstream::start(503).0),
        cluster("silent", status_upstream::start(0).0),
    ]
    .concat();
    let yaml = format!(
        "{}  clusters:\n{}",
        bootstrap(&[hcm_listener("in", "", VHOSTS)]),
        indent(&clusters, 2)
    );
    let p = Proxy::start(kind, bin, &yaml, &["in"]).unwrap();
    let addr = p.listener("in").unwrap().to_string();
    for (method, host, path, status) in [
        ("GET", "a.com", "/r1", 200),
        ("GET", "a.com", "/x", 200),
        ("POST", "a.com", "/r1", 200),
        ("GET", "b.com", "/r2", 200),
        ("GET", "b.com", "/retry", 503),
        ("GET", "b.com", "/slow", 504),
        ("GET", "b.com", "/y", 200),
    ] {
        let r = client::send(
            &addr,
            Protocol::Http1,
            &Request {
                method: method.into(),
                path: path.into(),
                authority: host.into(),
                headers: Vec::new(),
                body: Vec::new(),
            },
        )
        .unwrap();
        assert_eq!(r.status, status, "{kind} {method} {host}{path}");
    }
    let get = |path: &str| {
        String::from_utf8_lossy(&client::get(&p.admin, path).unwrap().body).to_string()
    };
    let mut stats: Vec<String> = get("/stats?filter=%5Evhost%5C.")
        .lines()
        .filter(|l| !l.contains("upstream_rq_time:"))
        .map(String::from)
        .collect();
    stats.sort();
    let mut prom: Vec<String> = get("/stats/prometheus")
        .lines()
        .filter(|l| {
            l.contains("envoy_vhost_")
                && !l.contains("upstream_rq_time_")
                && !l.contains("upstream_rq_time ")
        })
        .map(String::from)
        .collect();
    prom.sort();
    (stats, prom)
}

#[test]
fn route_and_virtual_cluster_stats_as_envoy() {
    let (stats, prom) = run(Kind::Courier, &courier_bin());
    println!("courier:\n{}", stats.join("\n"));
    for line in [
        "vhost.vh1.route.route=/first,kind=HTTPRoute.upstream_rq_total: 2",
        "vhost.vh1.vcluster.gets.upstream_rq_200: 2",
        "vhost.vh1.vcluster.other.upstream_rq_200: 1",
        "vhost.vh1.vcluster.unused.upstream_rq_total: 0",
        "vhost.vh2.route.retried.upstream_rq_retry: 1",
        "vhost.vh2.route.retried.upstream_rq_retry_limit_exceeded: 1",
        // The final response only (the cluster counts both attempts).
        "vhost.vh2.route.retried.upstream_rq_503: 1",
        "vhost.vh2.route.slow.upstream_rq_timeout: 1",
        "vhost.vh2.route.idle.upstream_rq_total: 0",
    ] {
        assert!(stats.iter().any(|l| l == line), "{line} missing");
    }
    assert!(!stats.iter().any(|l| l.contains("vh2.vcluster")));
    let Some(envoy) = envoy_bin() else {
        eprintln!("COURIER_ENVOY not set: Envoy comparison skipped");
        return;
    };
    let (e_stats, e_prom) = run(Kind::Envoy, &envoy);
    assert_eq!(e_stats, stats, "/stats vhost lines");
    assert_eq!(e_prom, prom, "/stats/prometheus vhost series");
}
