//! Malformed and hostile HTTP/1.1 and HTTP/2 input, sent as raw bytes to real
//! Envoy and to courier from one bootstrap (Envoy's edge limits: 100 streams,
//! 64 KiB stream window, 60 KiB headers), comparing what each answered and what
//! the upstream received. Request smuggling variants (CL+TE, duplicate
//! content-length, obfuscated transfer-encoding, bare CR/LF), invalid header
//! names and values, oversized request lines, absolute-form, and HTTP/2 floods
//! (rapid reset, CONTINUATION, SETTINGS, PING), too many streams and oversized
//! header lists. Every case also asserts that a rejected request reached the
//! upstream not at all, and an accepted one exactly once.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "hostile/cases.rs"]
mod cases;
#[path = "hostile/h2.rs"]
mod h2;
#[path = "hostile/upstream.rs"]
mod upstream;

use cases::{Case, Expect, Outcome};
use courier_tests::differential::{bootstrap, hcm_listener};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes: [{ match: { prefix: "/" }, route: { cluster: up } }]
"#;

const EDGE_HCM: &str = "use_remote_address: true
common_http_protocol_options: {headers_with_underscores_action: REJECT_REQUEST}
http2_protocol_options: {max_concurrent_streams: 100, initial_stream_window_size: 65536, initial_connection_window_size: 1048576}";

fn config(upstream: std::net::SocketAddr) -> String {
    let mut yaml = bootstrap(&[hcm_listener("edge", EDGE_HCM, VHOSTS)]);
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

/// Sends `bytes` on a new connection and reads what comes back (bounded).
fn exchange(addr: &str, case: &Case) -> Outcome {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    // A peer that stops reading must not block the writer forever.
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(&case.bytes);
    let mut out = Vec::new();
    let mut buf = [0u8; 16384];
    let mut closed = false;
    // Bounded by count: at most 400 reads (and each by the read timeout).
    for _ in 0..400 {
        match s.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if !case.h2 && cases::h1_complete(&out) {
                    // Did the proxy close after the reply? (short wait)
                    s.set_read_timeout(Some(Duration::from_millis(300)))
                        .unwrap();
                }
                if case.h2 && h2::saw_goaway(&out) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    if case.h2 {
        Outcome::H2(h2::summary(&out, closed))
    } else {
        Outcome::H1 {
            status: cases::status(&out),
            closed,
        }
    }
}

struct Run {
    outcome: Outcome,
    /// Requests of this case the upstream received.
    upstream: Vec<String>,
}

fn run_all(proxy: &Proxy, up: &upstream::Upstream, cases: &[Case]) -> Vec<Run> {
    let addr = proxy.listener("edge").unwrap().to_string();
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        // Eight at a time: enough to keep the run short on two cores.
        let mut out = Vec::with_capacity(cases.len());
        for chunk in cases.chunks(8) {
            let handles: Vec<_> = chunk
                .iter()
                .map(|c| {
                    let addr = addr.clone();
                    scope.spawn(move || exchange(&addr, c))
                })
                .collect();
            out.extend(handles.into_iter().map(|h| h.join().unwrap()));
        }
        out
    });
    // Let in-flight upstream requests land before counting.
    std::thread::sleep(Duration::from_millis(300));
    let seen = up.drain();
    outcomes
        .into_iter()
        .zip(cases)
        .map(|(outcome, c)| Run {
            outcome,
            upstream: seen
                .iter()
                .filter(|r| r.case == c.id)
                .map(|r| r.text.clone())
                .collect(),
        })
        .collect()
}

#[test]
fn hostile_inputs_match_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let cases = cases::all();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let up = upstream::Upstream::start();
    let yaml = config(up.addr);

    let mut report = Vec::new();
    let mut failures = Vec::new();
    let mut results = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy.clone()), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(kind, &bin, &yaml, &["edge"]).unwrap();
        let runs = run_all(&proxy, &up, &cases);
        // Still serving after the whole corpus.
        let ok = Case::h1(
            "after",
            "GET / HTTP/1.1\r\nhost: edge\r\nconnection: close",
            "",
            Expect::Forward,
        );
        let after = exchange(proxy.listener("edge").unwrap(), &ok);
        if !matches!(
            after,
            Outcome::H1 {
                status: Some(200),
                ..
            }
        ) {
            failures.push(format!("{kind}: not serving after the corpus: {after:?}"));
        }
        let _ = up.drain();
        results.push(runs);
    }
    let (envoy_runs, courier_runs) = (&results[0], &results[1]);
    for ((c, e), r) in cases.iter().zip(envoy_runs).zip(courier_runs) {
        report.push(format!(
            "{:<40} envoy {:<40} upstream {}  | courier {:<40} upstream {}",
            c.name,
            e.outcome.to_string(),
            e.upstream.len(),
            r.outcome.to_string(),
            r.upstream.len()
        ));
        for (kind, run) in [("envoy", e), ("courier", r)] {
            if let Err(why) = c.expect.check(&run.outcome, run.upstream.len()) {
                let text = format!(
                    "{} ({kind}): {why}; upstream saw {:?}",
                    c.name, run.upstream
                );
                // Envoy is the oracle: its own deviations from the expectation are
                // reported, courier's fail.
                if kind == "courier" {
                    failures.push(text);
                } else {
                    report.push(format!("  note: {text}"));
                }
            }
        }
        let same = e.outcome.category() == r.outcome.category();
        match (&c.differs, same) {
            (None, false) => failures.push(format!(
                "{}: envoy {} but courier {}",
                c.name, e.outcome, r.outcome
            )),
            (Some(why), false) => report.push(format!("  differs on purpose: {why}")),
            (Some(_), true) => report.push(format!("  note: {} now agrees with Envoy", c.name)),
            (None, true) => {}
        }
        // What reached the upstream must be the same request.
        if e.upstream.len() == 1 && r.upstream.len() == 1 && c.differs.is_none() {
            let (a, b) = (
                cases::comparable(&e.upstream[0]),
                cases::comparable(&r.upstream[0]),
            );
            if a != b {
                failures.push(format!(
                    "{}: upstream saw\n envoy:   {a:?}\n courier: {b:?}",
                    c.name
                ));
            }
        }
    }
    println!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
