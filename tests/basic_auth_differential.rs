//! The Basic authentication filter (`envoy.filters.http.basic_auth`, Envoy
//! Gateway's `basic-auth` case) beside real Envoy: the same requests through both
//! proxies from one bootstrap — no credential, another scheme, good and bad
//! passwords, a credential that is not `user:password`, a password with `:`, a
//! spoofed username header, two `authorization` headers, a long path (the realm's
//! URI is cut), a route with the filter disabled, per-route user lists (one of them
//! empty) and Envoy Gateway's shape (a filter disabled in the connection manager,
//! enabled by a route's `BasicAuthPerRoute`, reading `authentication_header`) —
//! comparing status, `www-authenticate`, `content-type`, body (for a forwarded
//! request: what the upstream received, `authorization` and the username header)
//! and the `http.ba.basic_auth.*` counters; and, on a second listener, a filter
//! with `allow_missing` (no credential or another scheme passes, uncounted) and
//! `emit_dynamic_metadata` (`username` in the filter's namespace), both listeners'
//! access logs (`%RESPONSE_CODE_DETAILS%`, the metadata) compared line by line.
//! Without Envoy (`COURIER_ENVOY`) only courier is checked.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test basic_auth_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent};
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::{courier_bin, echo_upstream, envoy_bin};
use std::net::SocketAddr;

// user1:pass1, user2:pass2, user3:a:b.
const FILTERS: &str = r##"- name: envoy.filters.http.basic_auth
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuth
    users:
      inline_string: "# users\nuser1:{SHA}8FePHnF0saQcTqjG4X96ijuIySo=\n\nuser2:{SHA}i+UhJqb95FCnFio2UdWJu1HpV50=\nuser3:{SHA}3OptnM09ILoVSfbZtd3mB0IViII=\n"
    forward_username_header: X-User
- name: envoy.filters.http.basic_auth/eg
  disabled: true
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuth
    users: { inline_bytes: "Zm9vOntTSEF9WXMyM0FnLzVJT1dxWkN3OVFHYVZEZEh3SDAwPQ==" }
    authentication_header: X-Auth
"##;

// admin:secret on /other-users; foo:bar on /eg.
const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/open" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.basic_auth:
        "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
        disabled: true
  - match: { prefix: "/other-users" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.basic_auth:
        "@type": type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuthPerRoute
        users: { inline_string: "admin:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=" }
  - match: { prefix: "/empty-users" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.basic_auth:
        "@type": type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuthPerRoute
        users: { inline_string: "" }
  - match: { prefix: "/eg" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.basic_auth:
        "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
        disabled: true
      envoy.filters.http.basic_auth/eg:
        "@type": type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuthPerRoute
        users: { inline_bytes: "Zm9vOntTSEF9WXMyM0FnLzVJT1dxWkN3OVFHYVZEZEh3SDAwPQ==" }
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

const OPTIONAL: &str = r##"- name: envoy.filters.http.basic_auth/securitypolicy/optional
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuth
    users: { inline_string: "user1:{SHA}8FePHnF0saQcTqjG4X96ijuIySo=" }
    allow_missing: true
    emit_dynamic_metadata: true
"##;

const OPTIONAL_VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

/// A file access log `file` with the reply's details and the optional filter's
/// metadata.
fn log(file: &str) -> String {
    format!(
        r#"access_log:
- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: {file}
    log_format:
      text_format_source:
        inline_string: "%REQ(:PATH)% %RESPONSE_CODE% %RESPONSE_CODE_DETAILS% %DYNAMIC_METADATA(envoy.filters.http.basic_auth/securitypolicy/optional)% %DYNAMIC_METADATA(envoy.filters.http.basic_auth/securitypolicy/optional:username)%\n"
"#
    )
}

fn yaml(up: SocketAddr) -> String {
    format!(
        "{}  clusters:\n{}",
        bootstrap(&[
            hcm_listener_filters("ba", &log("ba.log"), FILTERS, VHOSTS),
            hcm_listener_filters("bam", &log("bam.log"), OPTIONAL, OPTIONAL_VHOSTS)
        ]),
        indent(
            &format!(
                "- name: up\n  connect_timeout: 2s\n  load_assignment:\n    cluster_name: up\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
                up.port()
            ),
            2
        )
    )
}

/// A request: path, headers.
type Case = (&'static str, &'static [(&'static str, &'static str)]);

const GOOD: &str = "Basic dXNlcjE6cGFzczE=";

const CASES: &[Case] = &[
    ("/a?q=1", &[]),
    ("/a", &[("authorization", "Bearer abc")]),
    ("/a", &[("authorization", GOOD)]),
    ("/a", &[("authorization", "Basic dXNlcjE6YmFk")]),
    ("/a", &[("authorization", "Basic eHl6")]),
    ("/a", &[("authorization", "basic dXNlcjE6cGFzczE=")]),
    ("/a", &[("authorization", "Basic dXNlcjE6cGFzczE")]),
    ("/a", &[("authorization", "Basic dXNlcjE6cGFzczE===")]),
    ("/a", &[("authorization", "Basic  dXNlcjE6cGFzczE=")]),
    ("/a", &[("authorization", "Basic dXNlcjM6YTpi")]),
    ("/a", &[("authorization", "Basic OnBhc3Mx")]),
    ("/a", &[("authorization", "Basic ")]),
    ("/a", &[("authorization", GOOD), ("x-user", "someone-else")]),
    (
        "/a",
        &[
            ("authorization", "Basic dXNlcjE6YmFk"),
            ("authorization", GOOD),
        ],
    ),
    (
        "/a/0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789?x=y",
        &[],
    ),
    ("/a", &[("x-envoy-original-path", "/elsewhere")]),
    ("/a", &[("x-forwarded-proto", "https")]),
    ("/open", &[("authorization", "Bearer abc")]),
    ("/other-users", &[("authorization", GOOD)]),
    (
        "/other-users",
        &[("authorization", "Basic YWRtaW46c2VjcmV0")],
    ),
    ("/empty-users", &[("authorization", GOOD)]),
    ("/eg", &[("authorization", GOOD)]),
    ("/eg", &[("x-auth", "Basic Zm9vOmJhcg==")]),
    ("/eg", &[("x-auth", GOOD)]),
];

/// Requests to the `allow_missing` listener: (path, authorization).
const OPTIONAL_CASES: &[(&str, Option<&str>)] = &[
    ("/none", None),
    ("/bearer", Some("Bearer abc")),
    ("/good", Some(GOOD)),
    ("/bad", Some("Basic dXNlcjE6YmFk")),
    ("/format", Some("Basic eHl6")),
];

/// What one proxy answered: the replies, the counters and the two access logs.
type Run = (Vec<String>, Vec<String>, Vec<String>);

fn run(kind: Kind, bin: &std::path::Path) -> Run {
    let up = echo_upstream::start(&["authorization", "x-auth", "x-user"]);
    let p = Proxy::start(kind, bin, &yaml(up), &["ba", "bam"]).unwrap();
    let mut out = Vec::new();
    for (protocol, (path, headers)) in CASES
        .iter()
        .map(|c| (Protocol::Http1, c))
        .chain([0, 2, 14].iter().map(|&i| (Protocol::H2c, &CASES[i])))
    {
        let r = client::send(
            p.listener("ba").unwrap(),
            protocol,
            &Request {
                method: "GET".into(),
                path: (*path).into(),
                authority: "example.com".into(),
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                body: Vec::new(),
            },
        )
        .unwrap();
        out.push(format!(
            "{protocol} {path} {headers:?} -> {} www-authenticate={:?} content-type={:?} {:?}",
            r.status,
            r.header("www-authenticate"),
            r.header("content-type"),
            String::from_utf8_lossy(&r.body)
        ));
    }
    for (path, auth) in OPTIONAL_CASES {
        let r = client::send(
            p.listener("bam").unwrap(),
            Protocol::Http1,
            &Request {
                method: "GET".into(),
                path: (*path).into(),
                authority: "example.com".into(),
                headers: auth
                    .iter()
                    .map(|a| ("authorization".to_string(), a.to_string()))
                    .collect(),
                body: Vec::new(),
            },
        )
        .unwrap();
        out.push(format!(
            "optional {path} {auth:?} -> {} www-authenticate={:?} {:?}",
            r.status,
            r.header("www-authenticate"),
            String::from_utf8_lossy(&r.body)
        ));
    }
    let stats = client::get(&p.admin, "/stats").unwrap();
    let stats = String::from_utf8_lossy(&stats.body)
        .lines()
        .filter(|l| l.contains(".basic_auth."))
        .map(str::to_string)
        .collect();
    // Envoy flushes log files every 10 s, and on exit.
    let quit = Request {
        method: "POST".into(),
        path: "/quitquitquit".into(),
        authority: p.admin.clone(),
        headers: Vec::new(),
        body: Vec::new(),
    };
    client::send(&p.admin, Protocol::Http1, &quit).unwrap();
    let mut logs = Vec::new();
    for (file, n) in [
        ("ba.log", out.len() - OPTIONAL_CASES.len()),
        ("bam.log", OPTIONAL_CASES.len()),
    ] {
        logs.extend(
            poll(500, || {
                let text = std::fs::read_to_string(p.dir().join(file)).ok()?;
                let lines: Vec<String> = text.lines().map(|l| format!("{file}: {l}")).collect();
                (lines.len() >= n).then_some(lines)
            })
            .unwrap_or_else(|| panic!("{kind:?}: {file} is short")),
        );
    }
    (out, stats, logs)
}

#[test]
fn basic_auth_as_envoy() {
    let (c, c_stats, c_logs) = run(Kind::Courier, &courier_bin());
    println!(
        "courier:\n{}\n{c_stats:#?}\n{}",
        c.join("\n"),
        c_logs.join("\n")
    );
    assert!(
        c[0].contains(
            "-> 401 www-authenticate=Some(\"Basic realm=\\\"http://example.com/a?q=1\\\"\")"
        ) && c[0].ends_with("\"User authentication failed. Missing username and password.\""),
        "{}",
        c[0]
    );
    assert!(
        c[2].ends_with("\"/a\\nauthorization: Basic dXNlcjE6cGFzczE=\\nx-user: user1\\n\""),
        "{}",
        c[2]
    );
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED the Envoy comparison: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let (e, e_stats, e_logs) = run(Kind::Envoy, &envoy);
    println!(
        "envoy:\n{}\n{e_stats:#?}\n{}",
        e.join("\n"),
        e_logs.join("\n")
    );
    for (c, e) in c.iter().zip(&e) {
        assert_eq!(c, e);
    }
    assert_eq!(c_stats, e_stats);
    // Lines of one file in request order (one connection per request, one worker).
    assert_eq!(c_logs, e_logs);
}
