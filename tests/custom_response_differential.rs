//! The custom_response filter against real Envoy, in Envoy Gateway's shape
//! (`responseOverride` policies: filters disabled on the connection manager
//! and enabled per route, plus one on everywhere): both proxies run one
//! bootstrap and get the same requests; the status line, every response
//! header but `date` and the body must be the same, and courier's are checked
//! against what each policy should answer.
//!
//! Covered: status, status class, response header (exact, prefix, regex),
//! local-reply and CEL (`response.code`) inputs under `and` / `or` matchers;
//! a policy's status, text body and header actions; replaced upstream
//! responses, direct responses and the router's own 503; a response no policy
//! matches passes unchanged.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test custom_response_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{
    bootstrap, hcm_listener_filters, loopback_cluster, same_lines, with_clusters,
};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::raw_http1::{self, RawUpstream, Received};
use std::path::Path;

fn input(kind: &str, extra: &str) -> String {
    format!(
        r#"{{name: i, typed_config: {{"@type": type.googleapis.com/envoy.type.matcher.v3.{kind}{extra}}}}}"#
    )
}

fn status_is(code: &str) -> String {
    format!(
        "{{single_predicate: {{input: {}, value_match: {{exact: \"{code}\"}}}}}}",
        input("HttpResponseStatusCodeMatchInput", "")
    )
}

fn header_matches(name: &str, matcher: &str) -> String {
    format!(
        "{{single_predicate: {{input: {}, value_match: {matcher}}}}}",
        input(
            "HttpResponseHeaderMatchInput",
            &format!(", header_name: {name}")
        )
    )
}

/// `response.code >= 501 && response.code <= 511`, as Envoy Gateway sends it.
const CEL_5XX: &str = r#"{single_predicate: {input: {name: c, typed_config: {"@type": type.googleapis.com/xds.type.matcher.v3.HttpAttributesCelMatchInput}}, custom_match: {name: cel, typed_config: {"@type": type.googleapis.com/xds.type.matcher.v3.CelMatcher, expr_match: {cel_expr_parsed: {expr: {id: "9", callExpr: {function: "_&&_", args: [{id: "3", callExpr: {function: "_>=_", args: [{id: "2", selectExpr: {field: code, operand: {id: "1", identExpr: {name: response}}}}, {id: "4", constExpr: {int64Value: "501"}}]}}, {id: "7", callExpr: {function: "_<=_", args: [{id: "6", selectExpr: {field: code, operand: {id: "5", identExpr: {name: response}}}}, {id: "8", constExpr: {int64Value: "511"}}]}}]}}}}}}}}"#;

fn local(fields: &str) -> String {
    format!(
        r#"{{action: {{name: a, typed_config: {{"@type": type.googleapis.com/envoy.extensions.http.custom_response.local_response_policy.v3.LocalResponsePolicy, {fields}}}}}}}"#
    )
}

fn custom_response(name: &str, disabled: bool, rules: &[(String, String)]) -> String {
    let matchers: Vec<String> = rules
        .iter()
        .map(|(p, a)| format!("{{predicate: {p}, on_match: {a}}}"))
        .collect();
    format!(
        r#"- name: envoy.filters.http.custom_response/{name}
  disabled: {disabled}
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.custom_response.v3.CustomResponse
    custom_response_matcher: {{matcher_list: {{matchers: [{}]}}}}
"#,
        matchers.join(", ")
    )
}

fn filters() -> String {
    let json = "{key: Content-Type, value: application/json}";
    let gateway = custom_response(
        "gateway",
        true,
        &[
            (
                status_is("404"),
                local(
                    r#"body_format: {text_format: "gateway-1 Not Found"}, response_headers_to_add: [{append_action: OVERWRITE_IF_EXISTS_OR_ADD, header: {key: Content-Type, value: text/plain}}, {header: {key: X-Add-Header, value: added-404}}, {append_action: OVERWRITE_IF_EXISTS_OR_ADD, header: {key: X-Set-Header, value: set-404}}]"#,
                ),
            ),
            (
                format!(
                    "{{or_matcher: {{predicate: [{}, {CEL_5XX}]}}}}",
                    status_is("500")
                ),
                local(&format!(
                    r#"body_format: {{text_format: "{{\"error\": \"Internal Server Error\"}}\n"}}, response_headers_to_add: [{{append_action: OVERWRITE_IF_EXISTS_OR_ADD, header: {json}}}]"#
                )),
            ),
        ],
    );
    let route = custom_response(
        "route",
        true,
        &[
            (status_is("403"), local("status_code: 404")),
            (
                header_matches("X-Custom-Header", "{exact: custom-value}"),
                local(
                    r#"body_format: {text_format: "matched response header"}, response_headers_to_add: [{append_action: OVERWRITE_IF_EXISTS_OR_ADD, header: {key: Content-Type, value: text/plain}}]"#,
                ),
            ),
            (
                format!(
                    "{{and_matcher: {{predicate: [{}, {{and_matcher: {{predicate: [{}, {}]}}}}]}}}}",
                    status_is("503"),
                    header_matches("X-Error-Type", "{prefix: upstream-}"),
                    header_matches(
                        "X-Region",
                        "{safe_regex: {google_re2: {}, regex: \"^us-.*$\"}}"
                    ),
                ),
                local(&format!(
                    r#"status_code: 502, body: {{inline_string: "combined match"}}, response_headers_to_add: [{{append_action: OVERWRITE_IF_EXISTS_OR_ADD, header: {json}}}]"#
                )),
            ),
        ],
    );
    let everywhere = custom_response(
        "local",
        false,
        &[(
            format!(
                "{{and_matcher: {{predicate: [{}, {{single_predicate: {{input: {}, value_match: {{exact: \"true\"}}}}}}]}}}}",
                status_is("401"),
                input("HttpResponseLocalReplyMatchInput", "")
            ),
            local(r#"body_format: {text_format: "{\"error\": \"Unauthorized\"}"}"#),
        )],
    );
    format!("{gateway}{route}{everywhere}")
}

fn config(upstream: u16) -> String {
    let enable = |name: &str| {
        format!(
            r#"
    typed_per_filter_config:
      envoy.filters.http.custom_response/{name}:
        "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
        config: {{}}"#
        )
    };
    let (gw, rt) = (enable("gateway"), enable("route"));
    let vhosts = format!(
        r#"- name: all
  domains: ["*"]
  routes:
  - match: {{path: /gw/direct404}}
    direct_response: {{status: 404, body: {{inline_string: "direct"}}}}{gw}
  - match: {{path: /gw/nohost}}
    route: {{cluster: empty}}{gw}
  - match: {{prefix: /gw/}}
    route: {{cluster: up}}{gw}
  - match: {{prefix: /route/}}
    route: {{cluster: up}}{rt}
  - match: {{path: /direct401}}
    direct_response: {{status: 401, body: {{inline_string: "denied"}}}}
  - match: {{prefix: /}}
    route: {{cluster: up}}"#
    );
    with_clusters(
        &bootstrap(&[hcm_listener_filters("http", "", &filters(), &vhosts)]),
        &[
            loopback_cluster("up", upstream, ""),
            "- name: empty\n  connect_timeout: 1s\n  load_assignment: {cluster_name: empty}".into(),
        ],
    )
}

/// The upstream's answer for each path.
fn reply(r: &Received) -> String {
    let (status, headers, body) = match r.path.as_str() {
        "/gw/404" => ("404 Not Found", "", "upstream not found"),
        "/gw/500" => ("500 Internal Server Error", "", "boom"),
        "/gw/502" => ("502 Bad Gateway", "", "bad"),
        "/route/403" => ("403 Forbidden", "", "forbidden"),
        "/route/hdr" => ("200 OK", "x-custom-header: custom-value\r\n", "original"),
        "/route/503us" => (
            "503 Service Unavailable",
            "x-error-type: upstream-timeout\r\nx-region: us-west\r\n",
            "down",
        ),
        "/route/503eu" => (
            "503 Service Unavailable",
            "x-error-type: upstream-timeout\r\nx-region: eu-west\r\n",
            "down",
        ),
        "/up401" => ("401 Unauthorized", "", "who"),
        _ => ("200 OK", "", "fine"),
    };
    format!(
        "HTTP/1.1 {status}\r\n{headers}content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

const PATHS: &[&str] = &[
    "/gw/404",
    "/gw/500",
    "/gw/502",
    "/gw/200",
    "/gw/direct404",
    "/gw/nohost",
    "/route/403",
    "/route/hdr",
    "/route/503us",
    "/route/503eu",
    "/direct401",
    "/up401",
    "/other",
];

fn observe(kind: Kind, bin: &Path, upstream: u16) -> Vec<String> {
    let p = Proxy::start(kind, bin, &config(upstream), &["http"]).unwrap_or_else(|e| panic!("{e}"));
    let addr = p.listener("http").unwrap();
    PATHS
        .iter()
        .map(|path| {
            let a = raw_http1::exchange(
                addr,
                &format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"),
            );
            let mut headers: Vec<String> = a
                .headers
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .filter(|h| {
                    !h.starts_with("date:")
                        && !h.starts_with("x-envoy-upstream-service-time:")
                        && !h.starts_with("connection:")
                })
                .collect();
            headers.sort();
            format!(
                "{path}: {} [{}] {:?}",
                a.status_line,
                headers.join("; "),
                a.body
            )
        })
        .collect()
}

#[test]
fn custom_responses_replace_what_envoys_replace() {
    let up = RawUpstream::start(reply);
    let Some(lines) = same_lines(|kind, bin| observe(kind, bin, up.addr.port())) else {
        return;
    };
    let want = [
        r#"/gw/404: HTTP/1.1 404 Not Found [content-length: 19; content-type: text/plain; server: envoy; x-add-header: added-404; x-set-header: set-404] "gateway-1 Not Found""#,
        r#"/gw/500: HTTP/1.1 500 Internal Server Error [content-length: 35; content-type: application/json; server: envoy] "{\"error\": \"Internal Server Error\"}\n""#,
        r#"/gw/502: HTTP/1.1 502 Bad Gateway [content-length: 35; content-type: application/json; server: envoy] "{\"error\": \"Internal Server Error\"}\n""#,
        r#"/gw/200: HTTP/1.1 200 OK [content-length: 4; server: envoy] "fine""#,
        r#"/gw/direct404: HTTP/1.1 404 Not Found [content-length: 19; content-type: text/plain; server: envoy; x-add-header: added-404; x-set-header: set-404] "gateway-1 Not Found""#,
        r#"/gw/nohost: HTTP/1.1 503 Service Unavailable [content-length: 35; content-type: application/json; server: envoy] "{\"error\": \"Internal Server Error\"}\n""#,
        r#"/route/403: HTTP/1.1 404 Not Found [content-length: 0; server: envoy] """#,
        r#"/route/hdr: HTTP/1.1 200 OK [content-length: 23; content-type: text/plain; server: envoy] "matched response header""#,
        r#"/route/503us: HTTP/1.1 502 Bad Gateway [content-length: 14; content-type: application/json; server: envoy] "combined match""#,
        r#"/route/503eu: HTTP/1.1 503 Service Unavailable [content-length: 4; server: envoy; x-error-type: upstream-timeout; x-region: eu-west] "down""#,
        r#"/direct401: HTTP/1.1 401 Unauthorized [content-length: 25; content-type: text/plain; server: envoy] "{\"error\": \"Unauthorized\"}""#,
        r#"/up401: HTTP/1.1 401 Unauthorized [content-length: 3; server: envoy] "who""#,
        r#"/other: HTTP/1.1 200 OK [content-length: 4; server: envoy] "fine""#,
    ];
    assert_eq!(lines, want);
}
