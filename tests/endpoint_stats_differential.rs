//! `track_cluster_stats.per_endpoint_stats` beside real Envoy: one bootstrap
//! whose clusters reach a host answering 200 (with a hostname), one answering
//! 503, a closed port and a host that never answers (route timeout), all with
//! per-endpoint stats, and one cluster without them. After the same requests
//! through both proxies, the `cluster.<c>.endpoint.<address>.*` lines of
//! `/stats`, the `envoy_cluster_endpoint_*` families of `/stats/prometheus`
//! and the per-host lines of `/clusters` must match, before and after
//! `/reset_counters` (which leaves host stats alone in Envoy).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=$PWD/.venv/bin/envoy cargo test -p courier-tests --test endpoint_stats_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::status_upstream;
use courier_tests::{courier_bin, envoy_bin};
use std::net::{SocketAddr, TcpListener};

/// A port nothing listens on.
fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

fn cluster(name: &str, addr: SocketAddr, hostname: &str, tracked: bool) -> String {
    let track = if tracked {
        "  track_cluster_stats: { per_endpoint_stats: true }\n"
    } else {
        ""
    };
    let hostname = if hostname.is_empty() {
        String::new()
    } else {
        format!(", hostname: {hostname}")
    };
    format!(
        "- name: {name}\n  connect_timeout: 1s\n{track}  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }}{hostname} }}\n",
        addr.port()
    )
}

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/ok" }
    route: { cluster: ok }
  - match: { prefix: "/bad" }
    route: { cluster: bad }
  - match: { prefix: "/down" }
    route: { cluster: down }
  - match: { prefix: "/slow" }
    route: { cluster: slow, timeout: 0.3s }
  - match: { prefix: "/plain" }
    route: { cluster: plain }
"#;

struct Upstreams {
    ok: SocketAddr,
    bad: SocketAddr,
    down: SocketAddr,
    slow: SocketAddr,
    plain: SocketAddr,
}

fn yaml(u: &Upstreams) -> String {
    let clusters = [
        cluster("ok", u.ok, "a.example", true),
        cluster("bad", u.bad, "", true),
        cluster("down", u.down, "", true),
        cluster("slow", u.slow, "", true),
        cluster("plain", u.plain, "", false),
    ]
    .concat();
    format!(
        "{}  clusters:\n{}",
        bootstrap(&[hcm_listener("in", "", VHOSTS)]),
        indent(&clusters, 2)
    )
}

/// What admin shows of the hosts, with the upstreams' ports named.
struct Seen {
    stats: Vec<String>,
    prometheus: Vec<String>,
    clusters: Vec<String>,
    after_reset: Vec<String>,
}

fn run(kind: Kind, bin: &std::path::Path, u: &Upstreams) -> Seen {
    let p = Proxy::start(kind, bin, &yaml(u), &["in"]).unwrap();
    let addr = p.listener("in").unwrap().to_string();
    let mut statuses = Vec::new();
    for path in [
        "/ok", "/ok", "/ok", "/bad", "/bad", "/down", "/down", "/slow", "/plain",
    ] {
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
        statuses.push(format!("{path} {}", r.status));
    }
    assert_eq!(
        statuses,
        [
            "/ok 200",
            "/ok 200",
            "/ok 200",
            "/bad 503",
            "/bad 503",
            "/down 503",
            "/down 503",
            "/slow 504",
            "/plain 200"
        ],
        "{kind}"
    );
    let name = |text: &str| {
        let mut t = text.to_string();
        for (n, a) in [
            ("OK", u.ok),
            ("BAD", u.bad),
            ("DOWN", u.down),
            ("SLOW", u.slow),
            ("PLAIN", u.plain),
        ] {
            t = t
                .replace(&a.to_string(), n)
                .replace(&a.to_string().replace(':', "_"), n);
        }
        t
    };
    // The timed-out request's connection is closed by both proxies once it
    // ends; wait until no host counts an active request.
    let idle = format!(
        "cluster.slow.endpoint.{}.rq_active: 0",
        u.slow.to_string().replace(':', "_")
    );
    let settled = poll(250, || {
        let t = client::get(&p.admin, "/stats?filter=endpoint").ok()?.body;
        String::from_utf8_lossy(&t).contains(&idle).then_some(())
    });
    assert!(settled.is_some(), "{kind}: requests never ended");
    let get = |path: &str| {
        String::from_utf8_lossy(&client::get(&p.admin, path).unwrap().body).to_string()
    };
    let full = get("/stats");
    // Endpoint stats follow every other stat.
    let lines: Vec<&str> = full.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.contains(".endpoint."))
        .unwrap_or(0);
    let last_other = lines
        .iter()
        .rposition(|l| {
            !l.contains(".endpoint.") && !l.contains("No recorded values") && !l.contains(": P0(")
        })
        .unwrap_or(usize::MAX);
    assert!(
        first > last_other,
        "{kind}: endpoint stats not last in\n{full}"
    );
    let mut stats: Vec<String> = name(&get("/stats?filter=%5Ecluster%5C..*%5C.endpoint%5C."))
        .lines()
        .map(String::from)
        .collect();
    stats.sort();
    let prom = name(&get("/stats/prometheus"));
    let from = prom
        .find("# TYPE envoy_cluster_endpoint_")
        .unwrap_or(prom.len());
    // Families in Envoy's order; series sorted (clusters come in each
    // proxy's own order).
    let mut prometheus: Vec<String> = Vec::new();
    let mut family: Vec<String> = Vec::new();
    for l in prom[from..].lines() {
        if l.starts_with("# TYPE") {
            family.sort();
            prometheus.append(&mut family);
            prometheus.push(l.to_string());
        } else {
            family.push(l.to_string());
        }
    }
    family.sort();
    prometheus.append(&mut family);
    let stat_names = [
        "cx_active",
        "cx_connect_fail",
        "cx_total",
        "rq_active",
        "rq_error",
        "rq_pending_active",
        "rq_success",
        "rq_timeout",
        "rq_total",
        "hostname",
        "weight",
        "region",
        "zone",
        "canary",
        "priority",
    ];
    let mut clusters: Vec<String> = name(&get("/clusters"))
        .lines()
        .filter(|l| stat_names.iter().any(|s| l.contains(&format!("::{s}::"))))
        .filter(|l| !l.contains("_priority::"))
        .map(String::from)
        .collect();
    clusters.sort();
    let reset = client::send(
        &p.admin,
        Protocol::Http1,
        &Request {
            method: "POST".into(),
            path: "/reset_counters".into(),
            authority: "admin".into(),
            headers: Vec::new(),
            body: Vec::new(),
        },
    )
    .unwrap();
    assert_eq!(reset.status, 200);
    let mut after_reset: Vec<String> = name(&get("/stats?filter=%5Ecluster%5C..*%5C.endpoint%5C."))
        .lines()
        .map(String::from)
        .collect();
    after_reset.sort();
    Seen {
        stats,
        prometheus,
        clusters,
        after_reset,
    }
}

#[test]
fn per_endpoint_stats_as_envoy() {
    let u = Upstreams {
        ok: status_upstream::start(200).0,
        bad: status_upstream::start(503).0,
        down: closed_port(),
        slow: status_upstream::start(0).0,
        plain: status_upstream::start(200).0,
    };
    let courier = run(Kind::Courier, &courier_bin(), &u);
    // courier's own expectations, whether or not Envoy is installed.
    for line in [
        "cluster.ok.endpoint.OK.rq_success: 3",
        "cluster.ok.endpoint.OK.rq_total: 3",
        "cluster.bad.endpoint.BAD.rq_error: 2",
        "cluster.down.endpoint.DOWN.cx_connect_fail: 2",
        "cluster.down.endpoint.DOWN.rq_error: 2",
        "cluster.slow.endpoint.SLOW.rq_timeout: 1",
        "cluster.slow.endpoint.SLOW.healthy: 1",
    ] {
        assert!(
            courier.stats.iter().any(|l| l == line),
            "{line} missing in {:#?}",
            courier.stats
        );
    }
    assert!(!courier.stats.iter().any(|l| l.contains("PLAIN")));
    assert_eq!(
        courier.stats, courier.after_reset,
        "reset_counters changed host stats"
    );
    assert!(
        courier.prometheus.iter().any(|l| l
            == "envoy_cluster_endpoint_rq_success{envoy_cluster_name=\"ok\",envoy_endpoint_address=\"OK\",envoy_endpoint_hostname=\"a.example\"} 3"),
        "{:#?}",
        courier.prometheus
    );
    let Some(envoy_bin) = envoy_bin() else {
        eprintln!("COURIER_ENVOY not set: Envoy comparison skipped");
        return;
    };
    let envoy = run(Kind::Envoy, &envoy_bin, &u);
    assert_eq!(envoy.stats, courier.stats, "/stats endpoint lines");
    assert_eq!(
        envoy.prometheus, courier.prometheus,
        "/stats/prometheus endpoint families"
    );
    assert_eq!(envoy.clusters, courier.clusters, "/clusters host lines");
    assert_eq!(
        envoy.after_reset, courier.after_reset,
        "after /reset_counters"
    );
}
