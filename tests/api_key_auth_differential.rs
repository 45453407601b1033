//! The API key authentication filter (`envoy.filters.http.api_key_auth`, Envoy
//! Gateway's `api-key-auth` case) beside real Envoy: the same requests through
//! both proxies from one bootstrap — no key, keys in a header (`Bearer ` or not,
//! repeated, empty), in the query (percent-encoded names and values, repeated
//! parameters) and in cookies (quoted, repeated, several `cookie` headers), unknown
//! keys, `hide_credentials` removing the key from every source (the query rebuilt
//! in Envoy's order), per-route `allowed_clients` (403), per-route credentials,
//! key sources and forwarding (which replaces the filter's even when unset, as in
//! Envoy 1.40), a route with the filter disabled, and Envoy Gateway's shape (a
//! disabled filter without credentials or key sources, enabled by a route's
//! `ApiKeyAuthPerRoute`) — comparing status, body (for a forwarded request: the
//! target and the headers the upstream received), the access log's
//! `%RESPONSE_CODE_DETAILS%` and the `http.ak.api_key_auth.*` counters. Without Envoy (`COURIER_ENVOY`) only courier
//! is checked.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test api_key_auth_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent};
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::{courier_bin, echo_upstream, envoy_bin};
use std::net::SocketAddr;

const FILTERS: &str = r#"- name: envoy.filters.http.api_key_auth
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth
    credentials: [{ key: k1, client: c1 }, { key: k2, client: c2 }]
    key_sources: [{ header: X-Api-Key }, { query: api_key }, { cookie: apikey }]
    forwarding: { header: X-Client, hide_credentials: true }
- name: envoy.filters.http.api_key_auth/eg
  disabled: true
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth
"#;

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/key" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.api_key_auth:
        "@type": type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuthPerRoute
        allowed_clients: [c1]
  - match: { prefix: "/cookie" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.api_key_auth:
        "@type": type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuthPerRoute
        key_sources: [{ cookie: apikey }, { query: api_key }, { header: x-api-key }]
        forwarding: { header: x-client, hide_credentials: true }
  - match: { prefix: "/override" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.api_key_auth:
        "@type": type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuthPerRoute
        credentials: [{ key: k3, client: c3 }]
        forwarding: { header: x-client-2 }
  - match: { prefix: "/off" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.api_key_auth:
        "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
        disabled: true
  - match: { prefix: "/eg-nocreds" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.api_key_auth:
        "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
        disabled: true
      envoy.filters.http.api_key_auth/eg:
        "@type": type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuthPerRoute
        key_sources: [{ header: x-api-key }]
  - match: { prefix: "/eg-nosources" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.api_key_auth:
        "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
        disabled: true
      envoy.filters.http.api_key_auth/eg:
        "@type": type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuthPerRoute
        credentials: [{ key: k1, client: c1 }]
  - match: { prefix: "/eg" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.api_key_auth:
        "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
        disabled: true
      envoy.filters.http.api_key_auth/eg:
        "@type": type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuthPerRoute
        credentials: [{ client: client-1, key: key1 }]
        forwarding: { header: X-API-KEY-CLIENT-ID, hideCredentials: true }
        keySources: [{ header: X-API-KEY }, { header: X-API-KEY-2 }]
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

const LOG: &str = r#"access_log:
- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: ak.log
    log_format:
      text_format_source:
        inline_string: "%RESPONSE_CODE% %RESPONSE_CODE_DETAILS%\n"
"#;

fn yaml(up: SocketAddr) -> String {
    format!(
        "{}  clusters:\n{}",
        bootstrap(&[hcm_listener_filters("ak", LOG, FILTERS, VHOSTS)]),
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

const CASES: &[Case] = &[
    ("/a", &[]),
    ("/a", &[("x-api-key", "k1")]),
    ("/a", &[("x-api-key", "Bearer k2")]),
    ("/a", &[("x-api-key", "bearer k2")]),
    ("/a", &[("x-api-key", "nope")]),
    ("/a", &[("x-api-key", "k1"), ("x-api-key", "k2")]),
    ("/a?z=1&api_key=k1&a=2&a=0&b&c%3Dd=%41&y=%2541", &[]),
    ("/a?api%5Fkey=k%32&api_key=k1", &[]),
    ("/a?api_key=&x=1&&w", &[("cookie", "apikey=k1")]),
    ("/a?api_key=k+1", &[]),
    ("/a", &[("x-api-key", ""), ("cookie", "apikey=k2")]),
    (
        "/a",
        &[
            ("cookie", "x=1; apikey=\"k2\"; y=2"),
            ("cookie", "apikey=k3"),
        ],
    ),
    ("/a", &[("cookie", "flag;  a=1 ;apikey=k1; ;b=2")]),
    ("/a", &[("cookie", "apikey=; apikey=k1")]),
    ("/a", &[("cookie", "apikey =k1;apikey=k2")]),
    ("/a", &[("x-api-key", "k1"), ("x-client", "spoofed")]),
    ("/key", &[("x-api-key", "k1")]),
    ("/key", &[("x-api-key", "k2")]),
    ("/key", &[("x-api-key", "k9")]),
    (
        "/cookie?api_key=k1",
        &[("cookie", "apikey=k2; o=1"), ("x-api-key", "k1")],
    ),
    ("/cookie?q=1&api_key=k1", &[]),
    ("/override", &[("x-api-key", "k1")]),
    ("/override", &[("x-api-key", "k3")]),
    ("/off", &[]),
    ("/eg", &[("x-api-key-2", "key1"), ("x-api-key", "")]),
    ("/eg", &[("x-api-key", "k1")]),
    ("/eg-nocreds", &[("x-api-key", "k1")]),
    ("/eg-nosources", &[("x-api-key", "k1")]),
];

/// What one proxy answered: the replies, the counters and the access log.
type Run = (Vec<String>, Vec<String>, Vec<String>);

fn run(kind: Kind, bin: &std::path::Path) -> Run {
    let up = echo_upstream::start(&[
        "x-api-key",
        "x-api-key-2",
        "x-client",
        "x-client-2",
        "x-api-key-client-id",
        "cookie",
    ]);
    let p = Proxy::start(kind, bin, &yaml(up), &["ak"]).unwrap();
    let mut out = Vec::new();
    for (protocol, (path, headers)) in CASES
        .iter()
        .map(|c| (Protocol::Http1, c))
        .chain([0, 1, 6, 19].iter().map(|&i| (Protocol::H2c, &CASES[i])))
    {
        let r = client::send(
            p.listener("ak").unwrap(),
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
            "{protocol} {path} {headers:?} -> {} content-type={:?} {:?}",
            r.status,
            r.header("content-type"),
            String::from_utf8_lossy(&r.body)
        ));
    }
    let stats = client::get(&p.admin, "/stats").unwrap();
    let stats = String::from_utf8_lossy(&stats.body)
        .lines()
        .filter(|l| l.starts_with("http.ak.api_key_auth."))
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
    let log = poll(500, || {
        let text = std::fs::read_to_string(p.dir().join("ak.log")).ok()?;
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        (lines.len() >= out.len()).then_some(lines)
    })
    .unwrap_or_else(|| panic!("{kind:?}: ak.log is short"));
    (out, stats, log)
}

#[test]
fn api_key_auth_as_envoy() {
    let (c, c_stats, c_log) = run(Kind::Courier, &courier_bin());
    println!(
        "courier:\n{}\n{c_stats:#?}\n{}",
        c.join("\n"),
        c_log.join("\n")
    );
    assert!(
        c[0].ends_with(
            "-> 401 content-type=Some(\"text/plain\") \"Client authentication failed.\""
        ),
        "{}",
        c[0]
    );
    assert!(
        c[1].ends_with("-> 200 content-type=None \"/a\\nx-client: c1\\n\""),
        "{}",
        c[1]
    );
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED the Envoy comparison: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let (e, e_stats, e_log) = run(Kind::Envoy, &envoy);
    println!(
        "envoy:\n{}\n{e_stats:#?}\n{}",
        e.join("\n"),
        e_log.join("\n")
    );
    for (c, e) in c.iter().zip(&e) {
        assert_eq!(c, e);
    }
    assert_eq!(c_stats, e_stats);
    // In request order: one connection per request, one worker.
    assert_eq!(c_log, e_log);
}
