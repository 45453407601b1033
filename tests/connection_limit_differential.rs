//! The connection limit network filter (`envoy.filters.network.connection_limit`,
//! Envoy Gateway's listener-connection-limit and listener-tcp-without-route
//! cases) against real Envoy: TCP proxy chains with a limit, with and without
//! a `delay`, get more connections than they take; both proxies must close
//! the same ones, serve the others, count the same
//! `connection_limit.<stat_prefix>.*` stats and write the same listener
//! access-log lines for the connections closed.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test connection_limit_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client;
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// An upstream that echoes every read back.
fn echo() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

fn listener(name: &str, limit: &str) -> String {
    format!(
        r#"  - name: {name}
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    access_log:
    - name: envoy.access_loggers.file
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
        path: {name}.log
        log_format: {{text_format_source: {{inline_string: "%RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% %BYTES_RECEIVED% %BYTES_SENT% %UPSTREAM_HOST% %UPSTREAM_CLUSTER%\n"}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.connection_limit
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit
          stat_prefix: {name}
          {limit}
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: {name}
          cluster: echo
"#
    )
}

fn yaml(up: u16) -> String {
    format!(
        "admin:\n  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}\nstatic_resources:\n  listeners:\n{}{}  clusters:\n  - name: echo\n    connect_timeout: 1s\n    load_assignment:\n      cluster_name: echo\n      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {up}}}}}}}}}]}}]\n",
        listener("two", "max_connections: 2"),
        listener("delayed", "max_connections: 1\n          delay: 0.5s"),
    )
}

/// A connection that says `hi` and reads what comes back: `echoed` when
/// served, `closed` when the proxy closed it.
fn open(p: &Proxy, l: &str) -> (TcpStream, &'static str) {
    let mut s = TcpStream::connect(p.listener(l).unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(b"hi");
    let mut buf = [0u8; 2];
    let verdict = match s.read(&mut buf) {
        Ok(2) => "echoed",
        _ => "closed",
    };
    (s, verdict)
}

fn stats(p: &Proxy) -> Vec<String> {
    let text = client::get(&p.admin, "/stats").unwrap();
    String::from_utf8_lossy(&text.body)
        .lines()
        .filter(|l| l.starts_with("connection_limit."))
        .map(str::to_string)
        .collect()
}

fn run(kind: Kind, bin: &std::path::Path, up: u16) -> Vec<String> {
    let p = Proxy::start(kind, bin, &yaml(up), &["two", "delayed"]).unwrap();
    let mut out = Vec::new();
    let (a, va) = open(&p, "two");
    let (_b, vb) = open(&p, "two");
    let (_c, vc) = open(&p, "two");
    out.push(format!("two: {va} {vb} {vc}"));
    // The refused one is closed: the gauge settles at the two served.
    let settled = |p: &Proxy, want: &str| {
        poll(250, || {
            let s = stats(p);
            s.iter().any(|l| l == want).then_some(s)
        })
        .unwrap_or_else(|| stats(p))
    };
    out.extend(settled(&p, "connection_limit.two.active_connections: 2"));
    drop(a);
    let _ = settled(&p, "connection_limit.two.active_connections: 1");
    let (_d, vd) = open(&p, "two");
    out.push(format!("two after one closed: {vd}"));
    let (_e, ve) = open(&p, "delayed");
    let (_f, vf) = open(&p, "delayed");
    out.push(format!("delayed: {ve} {vf}"));
    out.extend(settled(
        &p,
        "connection_limit.delayed.active_connections: 1",
    ));
    // The listeners' lines of the connections closed so far: the refused
    // ones and the one the client closed.
    for (l, n) in [("two", 2), ("delayed", 1)] {
        let path = p.dir().join(format!("{l}.log"));
        let lines = poll(1000, || {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let mut lines: Vec<String> = text.lines().map(|x| format!("{l}.log: {x}")).collect();
            lines.sort();
            (lines.len() >= n).then_some(lines)
        })
        .unwrap_or_else(|| panic!("{kind}: {l}.log has fewer than {n} lines"));
        out.extend(lines);
    }
    out
}

#[test]
fn connection_limit_as_envoy() {
    let up = echo();
    let c = run(Kind::Courier, &courier_bin(), up);
    println!("courier:\n{}", c.join("\n"));
    assert_eq!(c[0], "two: echoed echoed closed");
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED the Envoy comparison: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let e = run(Kind::Envoy, &envoy, up);
    println!("envoy:\n{}", e.join("\n"));
    assert_eq!(c, e);
}
