//! The bootstrap-level fields of Istio's, Envoy Gateway's and Contour's
//! bootstraps, against real Envoy and courier from one bootstrap:
//! `layered_runtime` (a static layer with the corpus's keys and values, an admin
//! layer: `/runtime` and `/runtime_modify`), `admin.profile_path` (the profiler
//! endpoints), `deferred_stat_options` (a cluster's traffic stats appear at its
//! first use), `default_regex_engine`, `cluster_manager.enable_deferred_cluster_creation`,
//! `envoy.reloadable_features.google_grpc_disable_tls_13`, Istio's
//! `cluster_manager.load_stats_config` with nowhere to report (valid, but both
//! stop at start-up)
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
      envoy.reloadable_features.google_grpc_disable_tls_13: true
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
        e.runtime["entries"]["envoy.reloadable_features.google_grpc_disable_tls_13"],
        entry("true")
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

/// Istio's `load_stats_config` without a service (its `lrs` bootstrap): valid
/// for both, and serving it both log why and exit with status 0.
#[test]
fn load_stats_config_without_a_service_stops_as_envoy_stops() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let yaml = format!(
        "{}cluster_manager:\n  load_stats_config: {{api_type: GRPC, transport_api_version: V3}}\n",
        bootstrap(&[hcm_listener("in", "", VHOSTS)])
            + "  clusters:\n  - name: up\n    load_assignment: {cluster_name: up}\n"
    );
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("bootstrap.yaml");
        std::fs::write(&config, &yaml).unwrap();
        let validate = std::process::Command::new(&bin)
            .args(["--mode", "validate", "-c"])
            .arg(&config)
            .output()
            .unwrap();
        assert!(validate.status.success(), "{kind} validate: {validate:?}");
        let mut cmd = std::process::Command::new(&bin);
        cmd.arg("-c").arg(&config).args(["--concurrency", "1"]);
        if kind == Kind::Envoy {
            cmd.arg("--use-dynamic-base-id");
        }
        let mut child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Bounded: 10 s to stop.
        let status = (0..500).find_map(|_| {
            std::thread::sleep(Duration::from_millis(20));
            child.try_wait().unwrap()
        });
        if status.is_none() {
            let _ = child.kill();
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(status.map(|s| s.code()), Some(Some(0)), "{kind}: {err}");
        assert!(
            err.contains("Skipping initialization of secondary cluster: API configs must have either a gRPC service or a cluster name defined"),
            "{kind}: {err}"
        );
    }
}

// ---- application_log_config and the log flags ----

/// Runs `kind` serving `yaml` with `args` until it has logged a while after
/// admin is up; its log lines (stderr, or the `--log-path` file if given as
/// `{dir}/app.log`). `Err` with the output when it exits (as a refused config does).
fn serve_log(kind: Kind, yaml: &str, args: &[&str]) -> Result<Vec<String>, String> {
    let bin = match kind {
        Kind::Envoy => envoy_bin().unwrap(),
        Kind::Courier => courier_bin(),
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bootstrap.yaml");
    std::fs::write(&config, yaml).unwrap();
    let admin_path = dir.path().join("admin-address");
    let stderr = dir.path().join("stderr");
    let app_log = dir.path().join("app.log");
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("-c")
        .arg(&config)
        .arg("--admin-address-path")
        .arg(&admin_path)
        .args(["--concurrency", "1"])
        .args(
            args.iter()
                .map(|a| a.replace("{dir}", &dir.path().display().to_string())),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap());
    if kind == Kind::Envoy {
        cmd.arg("--use-dynamic-base-id");
    }
    let mut child = cmd.spawn().unwrap();
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    // Bounded by count: up to 10 s for admin to come up.
    for _ in 0..500 {
        if let Ok(Some(_)) = child.try_wait() {
            return Err(read(&stderr));
        }
        if admin_path.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The listener's and workers' lines come once admin is up.
    std::thread::sleep(Duration::from_millis(500));
    let _ = child.kill();
    let _ = child.wait();
    let log = if args.iter().any(|a| a.contains("app.log")) {
        read(&app_log)
    } else {
        read(&stderr)
    };
    Ok(log.lines().map(str::to_string).collect())
}

fn log_bootstrap(app_log_config: &str) -> String {
    format!(
        "{app_log_config}{}",
        bootstrap(&[hcm_listener(
            "in",
            "",
            r#"
- name: all
  domains: ["*"]
  routes: [{ match: { prefix: "/" }, direct_response: { status: 200 } }]
"#
        )])
    )
}

/// Envoy's default format, as a pattern over one line.
const DEFAULT_LINE: &str = r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\]\[\d+\]\[(trace|debug|info|warning|error|critical)\]\[[a-z_0-9]+\] \[[^\]]*:\d+\] ";

/// The lines of `log` after the last one in the default format (the
/// bootstrap is loaded before the configured format applies); each must
/// match `configured`; how many there are.
fn after_default(kind: Kind, log: &[String], configured: &regex::Regex) -> usize {
    let default = regex::Regex::new(DEFAULT_LINE).unwrap();
    let first = log
        .iter()
        .position(|l| !default.is_match(l))
        .unwrap_or(log.len());
    let rest = &log[first..];
    for l in rest {
        assert!(
            configured.is_match(l),
            "{kind}: {l:?} is not in the configured format"
        );
    }
    assert!(
        !rest.is_empty(),
        "{kind} logged nothing in the configured format: {log:#?}"
    );
    rest.len()
}

#[test]
fn application_log_formats_as_envoy() {
    if envoy_bin().is_none() {
        eprintln!("SKIPPED: no Envoy (set COURIER_ENVOY)");
        return;
    }
    // Istio's text format (every Istio bootstrap).
    let istio = log_bootstrap(
        "application_log_config:\n  log_format:\n    text_format: \"%Y-%m-%dT%T.%fZ\\t%l\\tenvoy %n %g:%#\\t%v\\tthread=%t\"\n",
    );
    let istio_line = regex::Regex::new(
        r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\t(trace|debug|info|warning|error|critical)\tenvoy [a-z_0-9]+ \S+:\d+\t.*\tthread=\d+$",
    )
    .unwrap();
    // A JSON format: flags in string values, other values as they are.
    let json = log_bootstrap(
        "application_log_config:\n  log_format:\n    json_format: {Timestamp: \"%Y-%m-%dT%T.%F\", ThreadId: \"%t\", Level: \"%l\", Message: \"%j\", Num: 5, Nested: {Logger: \"%n\"}}\n",
    );
    let default = regex::Regex::new(DEFAULT_LINE).unwrap();
    let flagged = regex::Regex::new(r"^[TDIWEC]\|[a-z_0-9]+\|").unwrap();
    let timestamp = regex::Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}$").unwrap();
    for kind in [Kind::Envoy, Kind::Courier] {
        let log = serve_log(kind, &istio, &["-l", "info"]).unwrap();
        after_default(kind, &log, &istio_line);

        let log = serve_log(kind, &json, &["-l", "info"]).unwrap();
        let lines: Vec<&String> = log.iter().filter(|l| !default.is_match(l)).collect();
        assert!(!lines.is_empty(), "{kind}: {log:#?}");
        for l in lines {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{kind}: {l:?}: {e}"));
            assert!(
                timestamp.is_match(v["Timestamp"].as_str().unwrap()),
                "{kind}: {l}"
            );
            assert!(
                v["ThreadId"].as_str().unwrap().parse::<u64>().is_ok(),
                "{kind}: {l}"
            );
            assert!(
                ["trace", "debug", "info", "warning", "error", "critical"]
                    .contains(&v["Level"].as_str().unwrap()),
                "{kind}: {l}"
            );
            assert!(v["Message"].is_string(), "{kind}: {l}");
            assert_eq!(v["Num"], 5, "{kind}: {l}");
            assert!(v["Nested"]["Logger"].is_string(), "{kind}: {l}");
        }

        // --log-format from the first line, to --log-path.
        let log = serve_log(
            kind,
            &log_bootstrap(""),
            &[
                "-l",
                "info",
                "--log-format",
                "%L|%n|%v",
                "--log-path",
                "{dir}/app.log",
            ],
        )
        .unwrap();
        assert!(!log.is_empty(), "{kind} wrote nothing to --log-path");
        for l in &log {
            assert!(flagged.is_match(l), "{kind}: {l:?}");
        }
        // --component-log-level: upstream at debug leaves the rest at warning.
        let log = serve_log(
            kind,
            &log_bootstrap(""),
            &[
                "-l",
                "warning",
                "--component-log-level",
                "upstream:debug",
                "--log-format",
                "%l %n",
            ],
        )
        .unwrap();
        for l in &log {
            let (level, component) = l.split_once(' ').unwrap();
            assert!(
                component == "upstream" || !matches!(level, "trace" | "debug" | "info"),
                "{kind}: {l:?}"
            );
        }
    }
}

#[test]
fn application_log_refusals_as_envoy() {
    if envoy_bin().is_none() {
        eprintln!("SKIPPED: no Envoy (set COURIER_ENVOY)");
        return;
    }
    let text = log_bootstrap("application_log_config: {log_format: {text_format: \"%v\"}}\n");
    let json_v =
        log_bootstrap("application_log_config: {log_format: {json_format: {m: \"%v\"}}}\n");
    let cases: [(&str, &[&str], &str); 4] = [
        (
            &text,
            &["--log-format", "%v"],
            "Only one of ApplicationLogConfig.log_format or CLI option --log-format can be specified.",
        ),
        (
            &json_v,
            &[],
            "Usage of %v is unavailable for JSON log formats",
        ),
        (
            &text,
            &["--component-log-level", "bogus:debug"],
            "invalid component specified 'bogus'",
        ),
        (
            &text,
            &["--component-log-level", "upstream:loud"],
            "invalid log level specified 'loud'",
        ),
    ];
    for (yaml, args, message) in cases {
        for kind in [Kind::Envoy, Kind::Courier] {
            let out = serve_log(kind, yaml, args)
                .err()
                .unwrap_or_else(|| panic!("{kind} served with {args:?}"));
            assert!(out.contains(message), "{kind} {args:?}: {out}");
        }
    }
}
