//! `retry_priority` `envoy.retry_priorities.previous_priorities` beside real
//! Envoy: a cluster whose priority 0 host answers 503 and whose priority 1
//! host answers 200; routes retry 5xx with and without the plugin, at
//! `update_frequency` 1, 2 and 3 (Envoy Gateway's). Per route the test
//! compares the final status and how many attempts each host got: without
//! the plugin (or before its first update) every retry goes back to the
//! healthy priority 0; once it updates, retries leave priority 0 out.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=$PWD/.venv/bin/envoy cargo test -p courier-tests --test retry_priority_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::status_upstream;
use courier_tests::{courier_bin, envoy_bin};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

fn route(prefix: &str, retries: u32, frequency: Option<u32>) -> String {
    let priority = frequency.map_or(String::new(), |f| {
        format!(
            ", retry_priority: {{ name: envoy.retry_priorities.previous_priorities, typed_config: {{ \"@type\": type.googleapis.com/envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig, update_frequency: {f} }} }}"
        )
    });
    format!(
        "  - match: {{ prefix: \"{prefix}\" }}\n    route: {{ cluster: tiers, retry_policy: {{ retry_on: 5xx, num_retries: {retries}, retry_back_off: {{ base_interval: 0.001s }}{priority} }} }}\n"
    )
}

fn yaml(bad: SocketAddr, good: SocketAddr) -> String {
    let vhosts = format!(
        "- name: all\n  domains: [\"*\"]\n  routes:\n{}{}{}{}",
        route("/plain", 1, None),
        route("/freq1", 1, Some(1)),
        route("/freq2", 2, Some(2)),
        route("/freq3", 1, Some(3)),
    );
    let cluster = format!(
        "- name: tiers\n  connect_timeout: 1s\n  load_assignment:\n    cluster_name: tiers\n    endpoints:\n    - priority: 0\n      lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n    - priority: 1\n      lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
        bad.port(),
        good.port()
    );
    format!(
        "{}  clusters:\n{}",
        bootstrap(&[hcm_listener("in", "", &vhosts)]),
        indent(&cluster, 2)
    )
}

/// Per route: the status and the attempts each priority's host got.
fn run(kind: Kind, bin: &std::path::Path) -> Vec<String> {
    let (bad, bad_count) = status_upstream::start(503);
    let (good, good_count) = status_upstream::start(200);
    let p = Proxy::start(kind, bin, &yaml(bad, good), &["in"]).unwrap();
    let addr = p.listener("in").unwrap().to_string();
    let mut out = Vec::new();
    for path in ["/plain", "/freq1", "/freq2", "/freq3"] {
        let before = (
            bad_count.load(Ordering::SeqCst),
            good_count.load(Ordering::SeqCst),
        );
        let r = client::send(
            &addr,
            Protocol::Http1,
            &Request {
                method: "GET".into(),
                path: path.into(),
                authority: "example.com".into(),
                headers: Vec::new(),
                body: Vec::new(),
            },
        )
        .unwrap();
        out.push(format!(
            "{path}: {} p0={} p1={}",
            r.status,
            bad_count.load(Ordering::SeqCst) - before.0,
            good_count.load(Ordering::SeqCst) - before.1
        ));
    }
    out
}

#[test]
fn previous_priorities_as_envoy() {
    let courier = run(Kind::Courier, &courier_bin());
    assert_eq!(
        courier,
        [
            "/plain: 503 p0=2 p1=0",
            "/freq1: 200 p0=1 p1=1",
            "/freq2: 200 p0=2 p1=1",
            "/freq3: 503 p0=2 p1=0",
        ]
    );
    let Some(envoy) = envoy_bin() else {
        eprintln!("COURIER_ENVOY not set: Envoy comparison skipped");
        return;
    };
    assert_eq!(run(Kind::Envoy, &envoy), courier);
}
