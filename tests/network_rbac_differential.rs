//! The network RBAC filter (`envoy.filters.network.rbac`, Envoy Gateway's
//! tcp-route-authorization case) in front of a TCP proxy, against real
//! Envoy: listeners that deny or allow loopback clients by source IP, in the
//! `rules` form and in Envoy Gateway's unified `matcher` form, and one that
//! denies them in front of an HTTP connection manager. Both proxies
//! must echo or close the same connections, connect upstream the same way
//! (the TCP proxy connects before the first byte, which RBAC judges), count
//! the same `<stat_prefix>.rbac.*` stats and write the same listener
//! access-log lines (`%CONNECTION_TERMINATION_DETAILS%`, `%RESPONSE_FLAGS%`).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test network_rbac_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client;
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// An upstream that echoes every read back, counting the connections it accepts.
fn echo() -> (u16, Arc<AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicU64::new(0));
    let count = Arc::clone(&accepted);
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            count.fetch_add(1, Ordering::SeqCst);
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
    (port, accepted)
}

/// A `rules` engine: `action` with one policy naming 127.0.0.0/8 peers
/// (`source_ip` or `direct_remote_ip`).
fn rules(action: &str, principal: &str) -> String {
    format!(
        r#"rules:
            action: {action}
            policies:
              "loopback peers":
                permissions: [{{any: true}}]
                principals: [{{{principal}: {{address_prefix: 127.0.0.0, prefix_len: 8}}}}]"#
    )
}

/// Envoy Gateway's `matcher` form: `verb` loopback sources (`SourceIPInput`),
/// then `on_no_match` the other verb.
fn matcher(verb: &str, other: &str, cidr: &str) -> String {
    format!(
        r#"matcher:
            matcher_list:
              matchers:
              - predicate:
                  single_predicate:
                    input:
                      name: client_ip
                      typed_config: {{"@type": type.googleapis.com/envoy.extensions.matching.common_inputs.network.v3.SourceIPInput}}
                    custom_match:
                      name: ip_matcher
                      typed_config:
                        "@type": type.googleapis.com/envoy.extensions.matching.input_matchers.ip.v3.Ip
                        cidr_ranges: [{{address_prefix: {cidr}, prefix_len: 8}}]
                        stat_prefix: client_ip
                on_match:
                  action:
                    name: {verb}-loopback
                    typed_config: {{"@type": type.googleapis.com/envoy.config.rbac.v3.Action, name: {verb}-loopback, action: {verb}}}
            on_no_match:
              action:
                name: default
                typed_config: {{"@type": type.googleapis.com/envoy.config.rbac.v3.Action, name: default, action: {other}}}"#
    )
}

/// A listener whose RBAC filter has `stat_prefix: <name><dot>`.
fn listener(name: &str, dot: &str, rbac: &str) -> String {
    format!(
        r#"  - name: {name}
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    access_log:
    - name: envoy.access_loggers.file
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
        path: {name}.log
        log_format: {{text_format_source: {{inline_string: "[%RESPONSE_FLAGS%] [%CONNECTION_TERMINATION_DETAILS%] %BYTES_RECEIVED% %BYTES_SENT% %UPSTREAM_CLUSTER%\n"}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.rbac
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC
          stat_prefix: {name}{dot}
          {rbac}
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: {name}
          cluster: echo
"#
    )
}

const LISTENERS: [&str; 6] = [
    "rules_deny",
    "rules_allow",
    "shadowed",
    "matcher_deny",
    "matcher_allow",
    "http_deny",
];

/// The HTTP connection manager instead of the TCP proxy: denied on the
/// first bytes, before any HTTP is parsed.
fn http_listener(name: &str, rbac: &str) -> String {
    listener(name, ".", rbac).replace(
        r#"      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: http_deny
          cluster: echo
"#,
        r#"      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: http_deny
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{match: {prefix: /}, direct_response: {status: 200, body: {inline_string: ok}}}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
"#,
    )
}

fn yaml(up: u16) -> String {
    let shadowed = format!(
        "{}\n          shadow_{}\n          shadow_rules_stat_prefix: audit_",
        rules("ALLOW", "direct_remote_ip"),
        rules("DENY", "source_ip")
    );
    format!(
        "admin:\n  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}\nstatic_resources:\n  listeners:\n{}{}{}{}{}{}  clusters:\n  - name: echo\n    connect_timeout: 1s\n    load_assignment:\n      cluster_name: echo\n      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {up}}}}}}}}}]}}]\n",
        listener("rules_deny", ".", &rules("DENY", "source_ip")),
        listener(
            "rules_allow",
            ".",
            &rules("DENY", "remote_ip").replace("127.0.0.0", "10.0.0.0")
        ),
        listener("shadowed", ".", &shadowed),
        // Envoy Gateway's prefixes have no trailing dot.
        listener("matcher_deny", "", &matcher("DENY", "ALLOW", "127.0.0.0")),
        listener("matcher_allow", "", &matcher("DENY", "ALLOW", "10.0.0.0")),
        http_listener("http_deny", &rules("DENY", "direct_remote_ip")),
    )
}

/// A connection that says `hi` and reads what comes back: `echoed` when
/// served, `closed` when the proxy closed it; with whether the upstream saw
/// a connection meanwhile.
fn open(p: &Proxy, l: &str, upstream: &AtomicU64) -> String {
    let before = upstream.load(Ordering::SeqCst);
    let mut s = TcpStream::connect(p.listener(l).unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Before the first byte: does the upstream get connected?
    let early = poll(40, || {
        (upstream.load(Ordering::SeqCst) > before).then_some(())
    });
    let _ = s.write_all(b"hi");
    let mut buf = [0u8; 2];
    let verdict = match s.read(&mut buf) {
        Ok(2) => "echoed",
        _ => "closed",
    };
    let connected = upstream.load(Ordering::SeqCst) - before;
    format!(
        "{l}: {verdict}, upstream connected {connected} ({} the first byte)",
        if early.is_some() {
            "before"
        } else {
            "not before"
        }
    )
}

/// A connection that sends nothing and half-closes: is it judged on its
/// end of stream (Envoy's `onData` with no bytes)?
fn silent(p: &Proxy, l: &str) -> String {
    let mut s = TcpStream::connect(p.listener(l).unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut buf = [0u8; 16];
    let verdict = match s.read(&mut buf) {
        Ok(0) => "closed",
        Ok(_) => "answered",
        Err(_) => "reset",
    };
    format!("{l} half-closed at once: {verdict}")
}

fn stats(p: &Proxy) -> Vec<String> {
    let text = client::get(&p.admin, "/stats").unwrap();
    String::from_utf8_lossy(&text.body)
        .lines()
        .filter(|l| l.contains("rbac."))
        .map(str::to_string)
        .collect()
}

fn run(kind: Kind, bin: &std::path::Path, up: u16, upstream: &AtomicU64) -> Vec<String> {
    let p = Proxy::start(kind, bin, &yaml(up), &LISTENERS).unwrap();
    let mut out = Vec::new();
    for l in LISTENERS {
        out.push(open(&p, l, upstream));
    }
    out.push(silent(&p, "shadowed"));
    // Settled once the shadow engine has judged the silent one too.
    let judged = poll(250, || {
        let s = stats(&p);
        s.iter()
            .any(|l| l == "shadowed.rbac.audit_.shadow_denied: 2")
            .then_some(s)
    });
    out.extend(judged.unwrap_or_else(|| stats(&p)));
    for l in LISTENERS {
        let path = p.dir().join(format!("{l}.log"));
        let line = poll(1000, || {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            text.lines().next().map(|x| format!("{l}.log: {x}"))
        })
        .unwrap_or_else(|| format!("{l}.log: (no line)"));
        out.push(line);
    }
    out
}

#[test]
fn network_rbac_as_envoy() {
    let (up, upstream) = echo();
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED the Envoy comparison: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let e = run(Kind::Envoy, &envoy, up, &upstream);
    println!("envoy:\n{}", e.join("\n"));
    let c = run(Kind::Courier, &courier_bin(), up, &upstream);
    println!("courier:\n{}", c.join("\n"));
    assert_eq!(c, e);
}
