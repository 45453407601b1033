//! The bootstrap-level fields of Istio's, Envoy Gateway's and Contour's
//! bootstraps, against real Envoy and courier from one bootstrap:
//! `layered_runtime` (a static layer with the corpus's keys and values, an admin
//! layer: `/runtime` and `/runtime_modify`), `admin.profile_path` (the profiler
//! endpoints), `deferred_stat_options` (a cluster's traffic stats appear at its
//! first use), `default_regex_engine`, `cluster_manager.enable_deferred_cluster_creation`
//! and `envoy.reloadable_features.http_reject_path_with_fragment: false` (a
//! path's `#fragment` is dropped before forwarding).

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;
use std::time::Duration;

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes: [{ match: { prefix: "/" }, route: { cluster: up } }]
"#;

/// An HTTP/1.1 upstream answering `200 ok`; sends each request line it reads.
fn upstream() -> (SocketAddr, mpsc::Receiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut w = s;
                // Bounded by count: at most 100 requests per connection.
                for _ in 0..100 {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let _ = tx.send(line.trim_end().to_string());
                    for _ in 0..200 {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                    }
                    if w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

fn config(up: SocketAddr) -> String {
    let mut yaml = bootstrap(&[hcm_listener("in", "", VHOSTS)]);
    let endpoint = |port: u16| {
        format!(
            "load_assignment: {{cluster_name: c, endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}}}]}}]}}"
        )
    };
    yaml = yaml.replacen(
        "admin:\n",
        "admin:\n  profile_path: /tmp/courier-test-envoy.prof\n",
        1,
    );
    yaml.push_str(&format!(
        "  clusters:
  - name: up
    connect_timeout: 2s
    {}
  - name: unused
    connect_timeout: 2s
    {}
layered_runtime:
  layers:
  - name: global config
    static_layer:
      envoy.deprecated_features:envoy.config.listener.v3.Listener.hidden_envoy_deprecated_use_original_dst: true
      envoy.reloadable_features.coalesce_lb_rebuilds_on_batch_update: false
      envoy.reloadable_features.http_reject_path_with_fragment: false
      envoy.reloadable_features.explicit_internal_address_config: true
      re2.max_program_size.error_level: 4294967295
      overload:
        global_downstream_max_connections: \"5000\"
  - name: admin
    admin_layer: {{}}
deferred_stat_options:
  enable_deferred_creation_stats: true
cluster_manager:
  enable_deferred_cluster_creation: true
default_regex_engine:
  name: envoy.regex_engines.google_re2
  typed_config:
    \"@type\": type.googleapis.com/envoy.extensions.regex_engines.v3.GoogleRE2
",
        endpoint(up.port()),
        endpoint(1),
    ));
    yaml
}

fn admin(p: &Proxy, method: &str, path: &str) -> (u16, String) {
    let r = client::send(
        &p.admin,
        Protocol::Http1,
        &Request {
            method: method.into(),
            path: path.into(),
            authority: p.admin.clone(),
            headers: Vec::new(),
            body: Vec::new(),
        },
    )
    .unwrap();
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

fn runtime(p: &Proxy) -> serde_json::Value {
    serde_json::from_str(&admin(p, "GET", "/runtime").1).unwrap()
}

/// Which of the watched traffic stats `/stats` has, with their values.
fn traffic_stats(p: &Proxy) -> Vec<String> {
    let text = admin(p, "GET", "/stats").1;
    text.lines()
        .filter(|l| {
            l.starts_with("cluster.up.upstream_rq_total:")
                || l.starts_with("cluster.unused.upstream_rq_total:")
                || l.starts_with("cluster.unused.upstream_cx_total:")
        })
        .map(str::to_string)
        .collect()
}

#[derive(Debug, PartialEq)]
struct Observed {
    runtime: serde_json::Value,
    modify: (u16, String),
    modify_get: u16,
    runtime_after: serde_json::Value,
    profilers: Vec<(u16, String)>,
    stats_before: Vec<String>,
    /// Status and what the upstream received, per request.
    fragments: Vec<(u16, String)>,
    stats_after: Vec<String>,
}

fn observe(p: &Proxy, upstream: &mpsc::Receiver<String>) -> Observed {
    let runtime_before = runtime(p);
    let modify = admin(
        p,
        "POST",
        "/runtime_modify?envoy.reloadable_features.explicit_internal_address_config=false&envoy.reloadable_features.retired_test_flag=true",
    );
    let modify_get = admin(p, "GET", "/runtime_modify?a=1").0;
    let runtime_after = runtime(p);
    let profilers = [
        "/cpuprofiler?enable=y",
        "/cpuprofiler?enable=n",
        "/cpuprofiler",
        "/heapprofiler?enable=y",
        "/heapprofiler?enable=n",
    ]
    .iter()
    .map(|path| admin(p, "POST", path))
    .collect();
    let stats_before = traffic_stats(p);
    let addr = p.listener("in").unwrap();
    let fragments = ["/a#frag", "/a%23b?q=1#x"]
        .iter()
        .map(|path| {
            let r = client::send(
                addr,
                Protocol::Http1,
                &Request {
                    method: "GET".into(),
                    path: (*path).into(),
                    authority: "x".into(),
                    headers: Vec::new(),
                    body: Vec::new(),
                },
            )
            .unwrap();
            let seen = upstream
                .recv_timeout(Duration::from_secs(5))
                .unwrap_or_default();
            (r.status, seen)
        })
        .collect();
    Observed {
        runtime: runtime_before,
        modify,
        modify_get,
        runtime_after,
        profilers,
        stats_before,
        fragments,
        stats_after: traffic_stats(p),
    }
}

#[test]
fn bootstrap_fields_behave_as_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let (up, seen) = upstream();
    let yaml = config(up);
    let e = observe(
        &Proxy::start(Kind::Envoy, &envoy, &yaml, &["in"]).unwrap(),
        &seen,
    );
    let c = observe(
        &Proxy::start(Kind::Courier, &courier_bin(), &yaml, &["in"]).unwrap(),
        &seen,
    );
    println!("envoy:   {e:#?}\ncourier: {c:#?}");
    // What Envoy does, stated, so a change on either side shows.
    let entry = |v: &str| serde_json::json!({"final_value": v, "layer_values": [v, ""]});
    assert_eq!(
        e.runtime["entries"]["overload.global_downstream_max_connections"],
        entry("5000")
    );
    assert_eq!(
        e.runtime["entries"]["envoy.reloadable_features.http_reject_path_with_fragment"],
        entry("false")
    );
    assert_eq!(
        e.runtime["layers"],
        serde_json::json!(["global config", "admin"])
    );
    assert_eq!(e.modify, (200, "OK\n".to_string()));
    assert_eq!(
        e.runtime_after["entries"]["envoy.reloadable_features.explicit_internal_address_config"],
        serde_json::json!({"final_value": "false", "layer_values": ["true", "false"]})
    );
    assert_eq!(
        e.profilers,
        vec![
            (500, "failure to start the profiler".to_string()),
            (200, "OK\n".to_string()),
            (400, "?enable=<y|n>\n".to_string()),
            (
                501,
                "The current build does not support heap profiler".to_string()
            ),
            (
                501,
                "The current build does not support heap profiler".to_string()
            ),
        ]
    );
    assert!(e.stats_before.is_empty(), "{:?}", e.stats_before);
    assert_eq!(
        e.fragments,
        vec![
            (200, "GET /a HTTP/1.1".to_string()),
            (200, "GET /a%23b?q=1 HTTP/1.1".to_string()),
        ]
    );
    assert_eq!(
        e.stats_after,
        vec!["cluster.up.upstream_rq_total: 2".to_string()]
    );
    assert_eq!(e, c);
}
