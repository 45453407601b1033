//! Envoy's HTTP/1.1 codec rules, case by case: the same raw bytes sent to real
//! Envoy and to courier (one bootstrap, each proxy with its own upstream),
//! comparing every response (status, headers but `date`, body), what followed
//! them, whether the connection was closed, and the requests the upstream
//! received (or that it received none). Framing (content-length and
//! transfer-encoding, chunks), request targets, header names and values
//! (obs-fold, bare CR), sizes, HTTP/1.0, keep-alive, `Expect: 100-continue`
//! and pipelining. A case where courier differs on purpose says why; it
//! fails if the difference goes away, so the list stays true.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "h1_codec/cases.rs"]
mod cases;
#[path = "hostile/upstream.rs"]
mod upstream;
#[path = "h1_codec/wire.rs"]
mod wire;

use cases::Case;
use courier_tests::differential::{bootstrap, hcm_listener};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::time::Duration;
use wire::{Exchange, Resp};

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes: [{ match: { prefix: "/" }, route: { cluster: up } }]
"#;

fn config(upstream: std::net::SocketAddr) -> String {
    let mut yaml = bootstrap(&[
        hcm_listener("h1", "", VHOSTS),
        hcm_listener(
            "h10",
            "http_protocol_options: {accept_http_10: true, default_host_for_http_10: h}",
            VHOSTS,
        ),
        hcm_listener("small", "max_request_headers_kb: 2", VHOSTS),
    ]);
    yaml.push_str(&format!(
        "  clusters:
  - name: up
    connect_timeout: 2s
    load_assignment:
      cluster_name: up
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}}}]}}]
",
        upstream.port()
    ));
    yaml
}

/// What one proxy made of one case.
struct Run {
    exchange: Exchange,
    /// The requests of this case the upstream received, comparable and sorted.
    upstream: Vec<String>,
}

/// Response headers each proxy sets its own way (only their presence is compared).
const VARYING: &[&str] = &["date", "x-envoy-upstream-service-time", "x-request-id"];

fn describe(r: &Resp) -> String {
    let mut headers: Vec<String> = r
        .headers
        .iter()
        .map(|(k, v)| {
            if VARYING.contains(&k.as_str()) {
                format!("{k}: *")
            } else {
                format!("{k}: {v}")
            }
        })
        .collect();
    headers.sort_unstable();
    format!(
        "{} [{}] {:?}",
        r.status,
        headers.join("; "),
        String::from_utf8_lossy(&r.body)
    )
}

impl Run {
    /// The comparable summary, one item per line.
    fn lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self.exchange.responses.iter().map(describe).collect();
        if !self.exchange.rest.is_empty() {
            out.push(format!(
                "then {:?}",
                String::from_utf8_lossy(&self.exchange.rest)
            ));
        }
        out.push(if self.exchange.closed {
            "closed".into()
        } else {
            "kept open".into()
        });
        out.push(format!("upstream received {}", self.upstream.len()));
        out.extend(self.upstream.iter().map(|u| format!("  {u:?}")));
        out
    }
}

/// Runs every case against `proxy`, 16 connections at a time.
fn run_all(proxy: &Proxy, up: &upstream::Upstream, cases: &[Case]) -> Vec<Run> {
    let exchanges: Vec<Exchange> = std::thread::scope(|scope| {
        let mut out = Vec::with_capacity(cases.len());
        for chunk in cases.chunks(16) {
            let handles: Vec<_> = chunk
                .iter()
                .map(|c| {
                    let addr = proxy.listener(c.listener).unwrap().to_string();
                    scope.spawn(move || wire::exchange(&addr, &c.steps, c.head))
                })
                .collect();
            out.extend(handles.into_iter().map(|h| h.join().unwrap()));
        }
        out
    });
    // Let in-flight upstream requests land before counting.
    std::thread::sleep(Duration::from_millis(300));
    let seen = up.drain();
    exchanges
        .into_iter()
        .zip(cases)
        .map(|(exchange, c)| {
            let mut upstream: Vec<String> = seen
                .iter()
                .filter(|r| r.case == c.name)
                .map(|r| comparable(&r.text))
                .collect();
            upstream.sort_unstable();
            Run { exchange, upstream }
        })
        .collect()
}

/// An upstream request without the headers each proxy sets its own way.
fn comparable(text: &str) -> String {
    let mut lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            !["x-request-id:", "x-envoy-expected-rq-timeout-ms:"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    // Header order is each proxy's own.
    lines[1..].sort_unstable();
    lines.join("\n")
}

#[test]
fn h1_codec_rules_match_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let cases = cases::all();
    assert!(cases.len() >= 100, "{} cases", cases.len());
    let mut names = std::collections::HashSet::new();
    for c in &cases {
        assert!(names.insert(c.name), "duplicate case {}", c.name);
    }
    // Each proxy has its own upstream, so both run at once.
    let runs: Vec<Vec<Run>> = std::thread::scope(|scope| {
        let handles: Vec<_> = [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())]
            .into_iter()
            .map(|(kind, bin)| {
                let cases = &cases;
                scope.spawn(move || {
                    let up = upstream::Upstream::start();
                    let proxy = Proxy::start(kind, &bin, &config(up.addr), cases::LISTENERS)
                        .unwrap_or_else(|e| panic!("{kind}: {e}"));
                    run_all(&proxy, &up, cases)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut failures = Vec::new();
    for ((c, e), r) in cases.iter().zip(&runs[0]).zip(&runs[1]) {
        let (el, rl) = (e.lines(), r.lines());
        let same = el == rl;
        let mark = match (same, c.differs) {
            (true, None) => "same ",
            (false, Some(_)) => "known",
            _ => "DIFF ",
        };
        println!("{mark} {} [{}]", c.name, c.listener);
        if !same || std::env::var_os("H1_CODEC_VERBOSE").is_some() {
            println!("  envoy:   {}", el.join("\n           "));
            println!("  courier: {}", rl.join("\n           "));
        }
        match (same, c.differs) {
            (false, None) => failures.push(format!("{}: courier differs from Envoy", c.name)),
            (true, Some(_)) => failures.push(format!(
                "{}: marked as a known difference, but courier now agrees with Envoy",
                c.name
            )),
            (false, Some(why)) => println!("  differs on purpose: {why}"),
            (true, None) => {}
        }
    }
    println!("{} cases, {} failures", cases.len(), failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
