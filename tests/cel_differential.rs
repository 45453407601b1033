//! CEL against real Envoy: the RBAC filter's unified matcher with
//! `CelMatcher`s over `HttpAttributesCelMatchInput` (a parsed AST, as Envoy
//! Gateway sends for its authorization policies, and a string), and access
//! logs filtered by `envoy.access_loggers.extension_filters.cel`. Both proxies
//! run one bootstrap, get the same requests, and must answer with the same
//! statuses and write the same lines to each log; courier's are also checked
//! against the lines each expression should select.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test cel_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{
    bootstrap, hcm_listener_filters, loopback_cluster, same_lines, with_clusters,
};
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::raw_http1;
use std::path::Path;

/// `request.path.startsWith('/admin')` as a parsed AST (Envoy Gateway's form).
const ADMIN_PREFIX: &str = r#"{callExpr: {function: startsWith, target: {id: "2", selectExpr: {field: path, operand: {id: "1", identExpr: {name: request}}}}, args: [{id: "4", constExpr: {stringValue: /admin}}]}, id: "3"}"#;

/// `request.headers['x-env'] == 'prod' && source.address.startsWith('127.0.0.1:')`.
const PROD_FROM_LOOPBACK: &str = r#"{id: "9", callExpr: {function: "_&&_", args: [{id: "4", callExpr: {function: "_==_", args: [{id: "3", callExpr: {function: "_[_]", args: [{id: "2", selectExpr: {field: headers, operand: {id: "1", identExpr: {name: request}}}}, {id: "5", constExpr: {stringValue: x-env}}]}}, {id: "6", constExpr: {stringValue: prod}}]}}, {id: "8", callExpr: {function: startsWith, target: {id: "7", selectExpr: {field: address, operand: {id: "10", identExpr: {name: source}}}}, args: [{id: "11", constExpr: {stringValue: "127.0.0.1:"}}]}}]}}"#;

/// A policy `condition`: `request.headers['x-block'] == 'yes'`.
const BLOCKED: &str = r#"{id: "4", callExpr: {function: "_==_", args: [{id: "3", callExpr: {function: "_[_]", args: [{id: "2", selectExpr: {field: headers, operand: {id: "1", identExpr: {name: request}}}}, {id: "5", constExpr: {stringValue: x-block}}]}}, {id: "6", constExpr: {stringValue: "yes"}}]}}"#;

/// The access logs: (file, CEL expression).
const LOGS: &[(&str, &str)] = &[
    ("errors.log", "response.code >= 400"),
    (
        "post.log",
        "request.method == 'POST' && request.size == 5 && response.code_details == 'direct_response'",
    ),
    (
        "cluster.log",
        "xds.cluster_name == 'echo' && upstream.port > 0 && response.code_details == 'via_upstream'",
    ),
    (
        "query.log",
        "request.headers['x-env'] == 'dev' && request.url_path == '/app' && request.query == 'q=1'",
    ),
    ("direct.log", "response.headers['x-direct'] == 'yes'"),
    (
        "ends.log",
        "source.address.startsWith('127.0.0.1:') && destination.port > 0 && request.protocol == 'HTTP/1.1'",
    ),
    // A missing header is an error: no line, ever.
    ("never.log", "request.headers['missing'] == 'x'"),
];

fn config(echo: u16) -> String {
    let logs: String = LOGS
        .iter()
        .map(|(file, expr)| {
            format!(
                r#"
- name: envoy.access_loggers.file
  filter:
    extension_filter:
      name: envoy.access_loggers.extension_filters.cel
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter
        expression: "{expr}"
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: {file}
    log_format: {{text_format_source: {{inline_string: "%REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE%\n"}}}}"#
            )
        })
        .collect();
    let cel = |expr: &str| {
        format!(
            r#"{{single_predicate: {{input: {{name: request-data, typed_config: {{"@type": type.googleapis.com/xds.type.matcher.v3.HttpAttributesCelMatchInput}}}}, custom_match: {{name: cel_matcher, typed_config: {{"@type": type.googleapis.com/xds.type.matcher.v3.CelMatcher, expr_match: {expr}}}}}}}}}"#
        )
    };
    let action = |name: &str, action: &str| {
        format!(
            r#"{{action: {{name: {name}, typed_config: {{"@type": type.googleapis.com/envoy.config.rbac.v3.Action, name: {name}, action: {action}}}}}}}"#
        )
    };
    let deny_admin = cel(&format!("{{cel_expr_parsed: {{expr: {ADMIN_PREFIX}}}}}"));
    // The deprecated `parsed_expr` (google.api.expr.v1alpha1): the same AST.
    let deny_prod = cel(&format!("{{parsed_expr: {{expr: {PROD_FROM_LOOPBACK}}}}}"));
    let matcher_rbac = format!(
        r#"- name: envoy.filters.http.rbac
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
    matcher:
      matcher_list:
        matchers:
        - {{predicate: {deny_admin}, on_match: {}}}
        - {{predicate: {deny_prod}, on_match: {}}}
      on_no_match: {}"#,
        action("deny-admin", "DENY"),
        action("deny-prod", "DENY"),
        action("allow", "ALLOW"),
    );
    let condition_rbac = format!(
        r#"- name: envoy.filters.http.rbac
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
    rules:
      action: DENY
      policies:
        blocked:
          permissions: [{{any: true}}]
          principals: [{{any: true}}]
          condition: {BLOCKED}"#
    );
    let http_routes = r#"- name: all
  domains: ["*"]
  routes:
  - match: {prefix: /direct}
    direct_response: {status: 404, body: {inline_string: "no\n"}}
    response_headers_to_add: [{header: {key: x-direct, value: "yes"}}]
  - match: {prefix: /post}
    direct_response: {status: 200, body: {inline_string: "posted\n"}}
  - match: {prefix: /}
    route: {cluster: echo}"#;
    let rules_routes = r#"- name: all
  domains: ["*"]
  routes:
  - match: {prefix: /}
    direct_response: {status: 200, body: {inline_string: "ok\n"}}"#;
    with_clusters(
        &bootstrap(&[
            hcm_listener_filters(
                "http",
                &format!("access_log:{logs}"),
                &matcher_rbac,
                http_routes,
            ),
            hcm_listener_filters("rules", "", &condition_rbac, rules_routes),
        ]),
        &[loopback_cluster("echo", echo, "")],
    )
}

/// The requests: (listener, method, target, extra header lines, body).
const REQUESTS: &[(&str, &str, &str, &str, &str)] = &[
    ("http", "GET", "/app?q=1", "x-env: dev\r\n", ""),
    ("http", "POST", "/post", "", "hello"),
    ("http", "GET", "/admin/users", "", ""),
    ("http", "GET", "/app", "x-env: prod\r\n", ""),
    ("http", "GET", "/direct", "", ""),
    ("rules", "GET", "/", "x-block: yes\r\n", ""),
    ("rules", "GET", "/", "x-block: no\r\n", ""),
];

fn observe(kind: Kind, bin: &Path, echo: u16) -> Vec<String> {
    let p = Proxy::start(kind, bin, &config(echo), &["http", "rules"])
        .unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::new();
    for (listener, method, target, extra, body) in REQUESTS {
        let addr = p.listener(listener).unwrap();
        let req = format!(
            "{method} {target} HTTP/1.1\r\nhost: x\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let got = raw_http1::exchange(addr, &req);
        out.push(format!("{listener} {method} {target}: {}", got.status_line));
    }
    // Every request is answered, so every line is written; `errors.log` has the
    // most (three) and is flushed with the rest.
    for (file, _) in LOGS {
        let path = p.dir().join(file);
        let want = expected(file).len();
        let lines = poll(1000, || {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<String> = text.lines().map(|l| format!("{file}: {l}")).collect();
            (lines.len() >= want).then_some(lines)
        })
        .unwrap_or_else(|| panic!("{kind}: {file} has fewer than {want} lines"));
        out.extend(lines);
    }
    out
}

/// The lines each log should hold: what its expression selects.
fn expected(file: &str) -> &'static [&'static str] {
    match file {
        "errors.log" => &["GET /admin/users 403", "GET /app 403", "GET /direct 404"],
        "post.log" => &["POST /post 200"],
        "cluster.log" => &["GET /app?q=1 200"],
        "query.log" => &["GET /app?q=1 200"],
        "direct.log" => &["GET /direct 404"],
        "ends.log" => &[
            "GET /app?q=1 200",
            "POST /post 200",
            "GET /admin/users 403",
            "GET /app 403",
            "GET /direct 404",
        ],
        _ => &[],
    }
}

#[test]
fn cel_matchers_and_log_filters_as_envoy_evaluates_them() {
    let echo = courier_tests::echo_upstream::start(&[]).port();
    let Some(lines) = same_lines(|kind, bin| observe(kind, bin, echo)) else {
        return;
    };
    let mut want: Vec<String> = [
        "http GET /app?q=1: HTTP/1.1 200 OK",
        "http POST /post: HTTP/1.1 200 OK",
        "http GET /admin/users: HTTP/1.1 403 Forbidden",
        "http GET /app: HTTP/1.1 403 Forbidden",
        "http GET /direct: HTTP/1.1 404 Not Found",
        "rules GET /: HTTP/1.1 403 Forbidden",
        "rules GET /: HTTP/1.1 200 OK",
    ]
    .map(String::from)
    .to_vec();
    for (file, _) in LOGS {
        want.extend(expected(file).iter().map(|l| format!("{file}: {l}")));
    }
    assert_eq!(lines, want);
}
