//! The `header_mutation` HTTP filter and the connection manager's
//! `early_header_mutation_extensions` (Envoy Gateway's late and early header
//! mutations): real Envoy and courier from one bootstrap, the same requests,
//! comparing status, body (the upstream's report of the request headers it
//! got) and every response header.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{Protocol, send};
use courier_tests::differential::{
    Bootstrap, Case, bootstrap, hcm_listener, hcm_listener_filters, run,
};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, echo_upstream, envoy_bin};

/// The request headers the upstream reports.
const REPORTED: &[&str] = &[
    "x-req-added",
    "x-drop",
    "x-strip-a",
    "x-over",
    "x-keep",
    "x-route",
    "removed-regex-1",
    "empty-header",
];

const MUTATIONS: &str = r#"- name: envoy.filters.http.header_mutation
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation
    mutations:
      request_mutations:
      - append: { header: { key: x-req-added, value: "v1,v2" } }
      - append: { header: { key: x-req-added, value: v3 } }
      - append: { append_action: OVERWRITE_IF_EXISTS_OR_ADD, header: { key: x-over, value: new } }
      - append: { append_action: OVERWRITE_IF_EXISTS_OR_ADD, header: { key: empty-header }, keep_empty_value: true }
      - remove: x-drop
      - remove_on_match: { key_matcher: { prefix: x-strip- } }
      response_mutations:
      - append: { header: { key: x-resp, value: r } }
      - append: { append_action: ADD_IF_ABSENT, header: { key: content-type, value: text/x-mutated } }
      - remove: x-route-resp
      - remove_on_match: { key_matcher: { suffix: -removed-suffix } }
"#;

const EARLY: &str = r#"early_header_mutation_extensions:
- name: envoy.http.early_header_mutation.header_mutation
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation
    mutations:
    - append: { append_action: OVERWRITE_IF_EXISTS_OR_ADD, header: { key: x-route, value: b } }
    - remove: x-drop
    - remove_on_match: { key_matcher: { safe_regex: { regex: "removed-regex-.*" } } }"#;

fn vhosts() -> String {
    r#"
- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/", headers: [{ name: x-route, string_match: { exact: b } }] }
    direct_response: { status: 200, body: { inline_string: "route b" } }
    response_headers_to_add:
    - header: { key: a-removed-suffix, value: "1" }
    - header: { key: x-route-resp, value: "1" }
  - match: { prefix: "/local" }
    direct_response: { status: 200, body: { inline_string: "local" } }
  - match: { prefix: "/" }
    route: { cluster: echo }
"#
    .to_string()
}

fn config(echo: std::net::SocketAddr) -> String {
    let vh = vhosts();
    let mut yaml = bootstrap(&[
        hcm_listener_filters("late", "", MUTATIONS, &vh),
        hcm_listener("early", EARLY, &vh),
    ]);
    yaml.push_str(&format!(
        "  clusters:
  - name: echo
    connect_timeout: 2s
    load_assignment:
      cluster_name: echo
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}}}]}}]
",
        echo.port()
    ));
    yaml
}

fn cases() -> Vec<Case> {
    let full = |c: Case| {
        c.header("x-drop", "1")
            .header("x-strip-a", "1")
            .header("x-over", "old")
            .header("x-keep", "1")
            .header("removed-regex-1", "1")
    };
    let mut out = Vec::new();
    for (listener, names) in [
        (
            "late",
            ["late-upstream", "late-h2c", "late-local", "late-route-b"],
        ),
        (
            "early",
            [
                "early-upstream",
                "early-h2c",
                "early-local",
                "early-route-b",
            ],
        ),
    ] {
        out.push(full(Case::get(names[0], listener, "t", "/up")));
        out.push(full(Case::get(names[1], listener, "t", "/up")).h2c());
        out.push(full(Case::get(names[2], listener, "t", "/local")));
        out.push(full(Case::get(names[3], listener, "t", "/up")).header("x-route", "b"));
    }
    out
}

#[test]
fn header_mutations_match_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let echo = echo_upstream::start(REPORTED);
    let yaml = config(echo);
    let failures = run(
        &envoy,
        &courier_bin(),
        &[Bootstrap {
            id: "header-mutation",
            yaml: yaml.clone(),
            listeners: vec!["late", "early"],
        }],
        &cases(),
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // What Envoy does, spelled out, so the comparison cannot pass on two wrong answers.
    let courier = Proxy::start(Kind::Courier, &courier_bin(), &yaml, &["late", "early"]).unwrap();
    let ask = |listener: &str, path: &str| {
        let c = full_request(path);
        send(courier.listener(listener).unwrap(), Protocol::Http1, &c).unwrap()
    };
    let late = ask("late", "/up");
    let body = String::from_utf8_lossy(&late.body).into_owned();
    assert!(
        body.contains("x-req-added: v1,v2") && body.contains("x-req-added: v3"),
        "{body}"
    );
    assert!(
        body.contains("x-over: new") && body.contains("x-keep: 1"),
        "{body}"
    );
    assert!(
        !body.contains("x-drop") && !body.contains("x-strip-a"),
        "{body}"
    );
    assert_eq!(late.header("x-resp").as_deref(), Some("r"));
    // The early rules ran before the route was chosen.
    let early = ask("early", "/up");
    assert_eq!(String::from_utf8_lossy(&early.body), "route b");
}

fn full_request(path: &str) -> courier_tests::client::Request {
    courier_tests::client::Request {
        method: "GET".into(),
        path: path.into(),
        authority: "t".into(),
        headers: [
            ("x-drop", "1"),
            ("x-strip-a", "1"),
            ("x-over", "old"),
            ("x-keep", "1"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        body: Vec::new(),
    }
}
