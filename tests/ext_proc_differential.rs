//! The external processing filter (`envoy.filters.http.ext_proc`) beside real Envoy, as
//! Envoy Gateway emits it for an `EnvoyExtensionPolicy` that processes no phase: every
//! header and trailer mode `SKIP`. One filter is disabled in the connection manager and
//! enabled per route by an empty `FilterConfig` (with the processor's `retry_policy`),
//! another (with a `stat_prefix`) runs everywhere, turned off on one route by
//! `ExtProcPerRoute.disabled` and given `overrides` on another. Both proxies must pass
//! every request through untouched, never connect to the processor, and show Envoy's
//! ext_proc counters at 0. Without Envoy (`COURIER_ENVOY`) only courier is checked.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test ext_proc_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent};
use courier_tests::echo_upstream;
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const SKIP_ALL: &str = "{ request_header_mode: SKIP, response_header_mode: SKIP, request_trailer_mode: SKIP, response_trailer_mode: SKIP }";

fn filters() -> String {
    format!(
        r#"- name: envoy.filters.http.ext_proc/envoyextensionpolicy/default/policy/extproc/0
  disabled: true
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
    grpc_service:
      envoy_grpc: {{ authority: "grpc-backend.envoy-gateway:8000", cluster_name: proc }}
      timeout: 10s
      retry_policy:
        num_retries: 2
        retry_back_off: {{ base_interval: 0.2s, max_interval: 3s }}
        retry_on: "5xx,deadline-exceeded,internal,unavailable"
    processing_mode: {SKIP_ALL}
- name: envoy.filters.http.ext_proc/always
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
    stat_prefix: pfx
    failure_mode_allow: true
    message_timeout: 1s
    allow_mode_override: true
    grpc_service: {{ envoy_grpc: {{ cluster_name: proc }} }}
    processing_mode: {{ request_header_mode: SKIP, response_header_mode: SKIP }}
"#
    )
}

fn vhosts() -> String {
    format!(
        r#"- name: all
  domains: ["*"]
  routes:
  - match: {{ prefix: "/eg" }}
    route: {{ cluster: up }}
    typed_per_filter_config:
      envoy.filters.http.ext_proc/envoyextensionpolicy/default/policy/extproc/0:
        "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
        config: {{}}
  - match: {{ prefix: "/off" }}
    route: {{ cluster: up }}
    typed_per_filter_config:
      envoy.filters.http.ext_proc/always:
        "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute
        disabled: true
  - match: {{ prefix: "/over" }}
    route: {{ cluster: up }}
    typed_per_filter_config:
      envoy.filters.http.ext_proc/always:
        "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute
        overrides:
          processing_mode: {SKIP_ALL}
          failure_mode_allow: false
  - match: {{ prefix: "/" }}
    route: {{ cluster: up }}
"#
    )
}

fn cluster(name: &str, addr: SocketAddr, h2: bool) -> String {
    let proto = if h2 {
        "  typed_extension_protocol_options:\n    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n      \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n      explicit_http_config: { http2_protocol_options: {} }\n"
    } else {
        ""
    };
    format!(
        "- name: {name}\n  connect_timeout: 2s\n{proto}  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
        addr.port()
    )
}

fn yaml(up: SocketAddr, proc_addr: SocketAddr) -> String {
    format!(
        "{}  clusters:\n{}\n{}",
        bootstrap(&[hcm_listener_filters("ep", "", &filters(), &vhosts())]),
        indent(&cluster("up", up, false), 2),
        indent(&cluster("proc", proc_addr, true), 2),
    )
}

/// A processor address that only counts the connections made to it.
fn processor() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let n = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&n);
    std::thread::spawn(move || {
        for s in l.incoming() {
            seen.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    (addr, n)
}

const PATHS: &[&str] = &["/eg/a?x=1", "/off", "/over", "/plain"];

fn run(kind: Kind, bin: &std::path::Path) -> (Vec<String>, Vec<String>, usize) {
    let up = echo_upstream::start(&["x-client", "content-length"]);
    let (proc_addr, connections) = processor();
    let p = Proxy::start(kind, bin, &yaml(up, proc_addr), &["ep"]).unwrap();
    let mut out = Vec::new();
    for protocol in [Protocol::Http1, Protocol::H2c] {
        for path in PATHS {
            let r = client::send(
                p.listener("ep").unwrap(),
                protocol,
                &Request {
                    method: "GET".into(),
                    path: (*path).into(),
                    authority: "example.com".into(),
                    headers: vec![("x-client".into(), "c".into())],
                    body: Vec::new(),
                },
            )
            .unwrap();
            out.push(format!(
                "{protocol} {path} -> {} {:?}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
    }
    let stats = client::get(&p.admin, "/stats").unwrap();
    let stats = String::from_utf8_lossy(&stats.body)
        .lines()
        .filter(|l| l.starts_with("http.ep.ext_proc."))
        .map(str::to_string)
        .collect();
    (out, stats, connections.load(Ordering::SeqCst))
}

#[test]
fn ext_proc_skip_all_as_envoy() {
    let (c, c_stats, c_conns) = run(Kind::Courier, &courier_bin());
    println!("courier:\n{}\n{c_stats:#?}", c.join("\n"));
    assert_eq!(c_conns, 0, "courier connected to the processor");
    for line in &c {
        assert!(line.contains("-> 200"), "{line}");
        assert!(line.contains("x-client: c"), "{line}");
    }
    assert_eq!(c_stats.len(), 34, "{c_stats:#?}");
    assert!(c_stats.contains(&"http.ep.ext_proc.streams_started: 0".to_string()));
    assert!(c_stats.contains(&"http.ep.ext_proc.pfx.streams_started: 0".to_string()));
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED the Envoy comparison: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let (e, e_stats, e_conns) = run(Kind::Envoy, &envoy);
    println!("envoy:\n{}\n{e_stats:#?}", e.join("\n"));
    assert_eq!(e_conns, 0, "Envoy connected to the processor");
    assert_eq!(c, e);
    assert_eq!(c_stats, e_stats);
}
