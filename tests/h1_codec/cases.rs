//! The HTTP/1.1 codec cases: raw bytes, sent in one or more steps.

/// The listeners of the suite's bootstrap.
pub const LISTENERS: &[&str] = &["h1", "h10", "small"];

/// One case.
pub struct Case {
    /// Report name; also the `x-case` header the upstream records.
    pub name: &'static str,
    /// The listener it goes to.
    pub listener: &'static str,
    /// Bytes sent, with a pause between steps.
    pub steps: Vec<Vec<u8>>,
    /// Where courier differs from Envoy on purpose, and why.
    pub differs: Option<&'static str>,
    /// The responses have no body (HEAD).
    pub head: bool,
}

impl Case {
    fn on(mut self, listener: &'static str) -> Case {
        self.listener = listener;
        self
    }

    /// Sends `bytes` after a pause.
    fn then(mut self, bytes: &str) -> Case {
        self.steps.push(bytes.as_bytes().to_vec());
        self
    }
}

/// A request: `lines` (request line, then headers) joined by CRLF, `x-case`
/// added last (or where a line is `@`), the blank line, then `body`.
fn req(name: &str, lines: &[&str], body: &str) -> String {
    let tag = format!("x-case: {name}");
    let mut out = String::new();
    let mut tagged = false;
    for l in lines {
        if *l == "@" {
            tagged = true;
            out.push_str(&tag);
        } else {
            out.push_str(l);
        }
        out.push_str("\r\n");
    }
    if !tagged {
        out.push_str(&tag);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    out.push_str(body);
    out
}

fn case(name: &'static str, lines: &[&str], body: &str) -> Case {
    raw(name, &req(name, lines, body))
}

fn raw(name: &'static str, bytes: &str) -> Case {
    Case {
        name,
        listener: "h1",
        steps: vec![bytes.as_bytes().to_vec()],
        differs: None,
        head: false,
    }
}

fn raw_bytes(name: &'static str, bytes: Vec<u8>) -> Case {
    Case {
        name,
        listener: "h1",
        steps: vec![bytes],
        differs: None,
        head: false,
    }
}

fn get(name: &'static str, extra: &[&str]) -> Case {
    let mut lines = vec!["GET / HTTP/1.1", "host: h"];
    lines.extend_from_slice(extra);
    case(name, &lines, "")
}

fn post(name: &'static str, extra: &[&str], body: &str) -> Case {
    let mut lines = vec!["POST / HTTP/1.1", "host: h"];
    lines.extend_from_slice(extra);
    case(name, &lines, body)
}

fn target(name: &'static str, request_line: &str) -> Case {
    case(name, &[request_line, "host: h"], "")
}

const TE: &str = "transfer-encoding: chunked";

/// Message framing: content-length, transfer-encoding, chunks.
fn framing() -> Vec<Case> {
    vec![
        get("get_basic", &[]),
        post("post_cl", &["content-length: 5"], "hello"),
        post("post_chunked", &[TE], "5\r\nhello\r\n0\r\n\r\n"),
        post("chunk_extension", &[TE], "5;a=b\r\nhello\r\n0\r\n\r\n"),
        post("chunk_trailers", &[TE], "5\r\nhello\r\n0\r\nx-t: 1\r\n\r\n"),
        post("chunk_upper_hex", &[TE], "A\r\n0123456789\r\n0\r\n\r\n"),
        post("chunk_leading_zeros", &[TE], "005\r\nhello\r\n0\r\n\r\n"),
        post("cl_then_te", &["content-length: 5", TE], "0\r\n\r\n"),
        post(
            "te_then_cl",
            &[TE, "content-length: 13"],
            "0\r\n\r\nSMUGGLED",
        ),
        post(
            "cl_twice_same",
            &["content-length: 5", "content-length: 5"],
            "hello",
        ),
        post(
            "cl_twice_differing",
            &["content-length: 5", "content-length: 6"],
            "hello!",
        ),
        post("cl_list_same", &["content-length: 5, 5"], "hello"),
        post("cl_empty", &["content-length:"], ""),
        post("cl_leading_zero", &["content-length: 05"], "hello"),
        post("cl_trailing_space", &["content-length: 5   "], "hello"),
        post("cl_negative", &["content-length: -1"], ""),
        post(
            "te_chunked_upper",
            &["transfer-encoding: CHUNKED"],
            "0\r\n\r\n",
        ),
        post("te_identity", &["transfer-encoding: identity"], ""),
        post("te_gzip", &["transfer-encoding: gzip"], ""),
        post(
            "te_gzip_chunked",
            &["transfer-encoding: gzip, chunked"],
            "0\r\n\r\n",
        ),
        post(
            "te_chunked_gzip",
            &["transfer-encoding: chunked, gzip"],
            "0\r\n\r\n",
        ),
        post("te_xchunked", &["transfer-encoding: xchunked"], "0\r\n\r\n"),
        post("te_two_headers", &[TE, TE], "0\r\n\r\n"),
        post("te_empty", &["transfer-encoding:"], ""),
        post(
            "te_padded",
            &["transfer-encoding:   chunked  "],
            "0\r\n\r\n",
        ),
        post("chunk_size_invalid", &[TE], "zz\r\nhello\r\n0\r\n\r\n"),
        post(
            "chunk_size_overflow",
            &[TE],
            "fffffffffffffffff1\r\nhello\r\n0\r\n\r\n",
        ),
        post("chunk_missing_crlf", &[TE], "5\r\nhelloX0\r\n\r\n"),
        post("chunk_size_space", &[TE], "5 \r\nhello\r\n0\r\n\r\n"),
        post("chunk_size_negative", &[TE], "-5\r\nhello\r\n0\r\n\r\n"),
        post("chunk_size_plus", &[TE], "+5\r\nhello\r\n0\r\n\r\n"),
        post("chunk_bare_lf", &[TE], "5\nhello\n0\n\n"),
        post("chunk_data_too_long", &[TE], "3\r\nhello\r\n0\r\n\r\n"),
        // The bad chunk comes after the request was forwarded.
        post("chunk_invalid_later", &[TE], "5\r\nhello\r\n").then("zz\r\n"),
        post("cl_body_later", &["content-length: 5"], "he").then("llo"),
        post("chunked_body_later", &[TE], "5\r\nhel").then("lo\r\n0\r\n\r\n"),
        get("get_with_cl_body", &["content-length: 3"]).then("abc"),
    ]
}

/// Request lines and request targets.
fn targets() -> Vec<Case> {
    vec![
        case("asterisk_options", &["OPTIONS * HTTP/1.1", "host: h"], ""),
        target("asterisk_get", "GET * HTTP/1.1"),
        target("absolute_http", "GET http://h/abs?q=1 HTTP/1.1"),
        target("absolute_https", "GET https://h/abs HTTP/1.1"),
        target("absolute_ftp", "GET ftp://h/abs HTTP/1.1"),
        target("absolute_no_path", "GET http://h HTTP/1.1"),
        target("absolute_other_host", "GET http://other/abs HTTP/1.1"),
        target("connect_authority", "CONNECT h:443 HTTP/1.1"),
        target("connect_path", "CONNECT /path HTTP/1.1"),
        target("connect_absolute", "CONNECT http://h/ HTTP/1.1"),
        target("authority_form_get", "GET h:80 HTTP/1.1"),
        target("fragment", "GET /a#b HTTP/1.1"),
        target("fragment_query", "GET /a?x=1#b HTTP/1.1"),
        target("fragment_empty", "GET /a# HTTP/1.1"),
        target("path_no_slash", "GET abc HTTP/1.1"),
        target("path_space", "GET /a b HTTP/1.1"),
        target("path_quote", "GET /a?b=\"c\" HTTP/1.1"),
        target("path_pipe_brace", "GET /a|{b} HTTP/1.1"),
        raw_bytes(
            "path_utf8",
            req("path_utf8", &["GET /caf\u{e9} HTTP/1.1", "host: h"], "").into_bytes(),
        ),
        raw_bytes("path_ctl", {
            let mut b = b"GET /a\x01b HTTP/1.1\r\nhost: h\r\n".to_vec();
            b.extend_from_slice(b"x-case: path_ctl\r\n\r\n");
            b
        }),
        target("method_lower", "get / HTTP/1.1"),
        target("method_custom", "FOO / HTTP/1.1"),
        Case {
            head: true,
            ..target("method_head", "HEAD / HTTP/1.1")
        },
        target("request_line_double_space", "GET  / HTTP/1.1"),
        target("request_line_trailing_space", "GET / HTTP/1.1 "),
        target("version_lower", "GET / http/1.1"),
        target("version_1_2", "GET / HTTP/1.2"),
        target("version_2_0", "GET / HTTP/2.0"),
        target("version_garbage", "GET / HTTP/x.y"),
        raw("http09", "GET /\r\n\r\n"),
        raw(
            "leading_crlf",
            &format!(
                "\r\n{}",
                req("leading_crlf", &["GET / HTTP/1.1", "host: h"], "")
            ),
        ),
    ]
}

/// Header names and values.
fn headers() -> Vec<Case> {
    vec![
        get("obs_fold", &["x-a: b", " c"]),
        get("obs_fold_tab", &["x-a: b", "\tc"]),
        get("obs_fold_spaces", &["x-a: b  ", "   c  "]),
        get("obs_fold_twice", &["x-a: b", " c", " d"]),
        post(
            "obs_fold_te",
            &["transfer-encoding:", " chunked"],
            "0\r\n\r\n",
        ),
        case("obs_fold_first", &["GET / HTTP/1.1", " host: h"], ""),
        get("bare_cr_value", &["x-a: a\rb"]),
        get("bare_cr_two", &["x-a: a\r\rb"]),
        get("bare_cr_name", &["x-\ra: b"]),
        raw(
            "bare_lf_lines",
            "GET / HTTP/1.1\nhost: h\nx-case: bare_lf_lines\n\n",
        ),
        get("space_before_colon", &["x-a : b"]),
        get("tab_in_value", &["x-a: a\tb"]),
        get("del_in_value", &["x-a: a\x7fb"]),
        raw_bytes("obs_text_value", {
            let mut b =
                b"GET / HTTP/1.1\r\nhost: h\r\nx-case: obs_text_value\r\nx-a: caf\xe9\r\n\r\n"
                    .to_vec();
            b.shrink_to_fit();
            b
        }),
        raw_bytes(
            "utf8_name",
            req(
                "utf8_name",
                &["GET / HTTP/1.1", "host: h", "x-\u{e9}: b"],
                "",
            )
            .into_bytes(),
        ),
        get("at_in_name", &["x@a: b"]),
        get("tchars_name", &["x!#$%&'*+-.^`|~a: b"]),
        get("empty_value", &["x-a:"]),
        get("padded_value", &["x-a:   b  c   "]),
        get("nul_in_value", &["x-a: a\0b"]),
        get("ctl_in_value", &["x-a: a\x01b"]),
        case("host_missing", &["GET / HTTP/1.1"], ""),
        get("host_twice", &["host: h"]),
        get("host_twice_differing", &["host: other"]),
        case("host_empty", &["GET / HTTP/1.1", "host:"], ""),
        case("host_with_space", &["GET / HTTP/1.1", "host: a b"], ""),
        get("connection_close", &["connection: close"]),
        get(
            "connection_token_list",
            &["connection: keep-alive, x-a", "x-a: 1"],
        ),
        get("te_trailers", &["te: trailers"]),
        get("te_gzip_header", &["te: gzip"]),
        get(
            "upgrade_h2c",
            &[
                "connection: upgrade, http2-settings",
                "upgrade: h2c",
                "http2-settings: AAMAAABkAAQAAP__",
            ],
        ),
    ]
}

/// Sizes (listener `small`: `max_request_headers_kb: 2`; others 60 KiB).
fn sizes() -> Vec<Case> {
    let long = |n: usize| "a".repeat(n);
    let many: Vec<String> = (0..101).map(|i| format!("x-h{i}: v")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let (l1, l3) = (
        format!("GET /{} HTTP/1.1", long(1500)),
        format!("GET /{} HTTP/1.1", long(3000)),
    );
    let (h1, h3) = (
        format!("x-a: {}", long(1500)),
        format!("x-a: {}", long(3000)),
    );
    let (l59, l61) = (
        format!("GET /{} HTTP/1.1", long(59 * 1024)),
        format!("GET /{} HTTP/1.1", long(61 * 1024)),
    );
    let h61 = format!("x-a: {}", long(61 * 1024));
    vec![
        case("small_line_fits", &[&l1, "host: h"], "").on("small"),
        case("small_line_over", &[&l3, "host: h"], "").on("small"),
        get("small_header_fits", &[&h1]).on("small"),
        get("small_header_over", &[&h3]).on("small"),
        case("line_59k", &[&l59, "host: h"], ""),
        case("line_61k", &[&l61, "host: h"], ""),
        get("header_61k", &[&h61]),
        get("headers_101", &many),
        get("headers_99", &many[..99]),
    ]
}

/// HTTP/1.0, keep-alive, Expect, pipelining.
fn connections() -> Vec<Case> {
    let g = |n| req(n, &["GET / HTTP/1.1", "host: h"], "");
    vec![
        target("http10_refused", "GET / HTTP/1.0"),
        target("http10", "GET / HTTP/1.0").on("h10"),
        case("http10_no_host", &["GET / HTTP/1.0"], "").on("h10"),
        get("http10_keepalive_on_11", &["connection: keep-alive"]).on("h10"),
        case(
            "http10_keepalive",
            &["GET / HTTP/1.0", "host: h", "connection: keep-alive"],
            "",
        )
        .on("h10"),
        case(
            "http10_post_cl",
            &["POST / HTTP/1.0", "host: h", "content-length: 5"],
            "hello",
        )
        .on("h10"),
        case(
            "http10_te",
            &["POST / HTTP/1.0", "host: h", TE],
            "0\r\n\r\n",
        )
        .on("h10"),
        get("http11_on_h10", &[]).on("h10"),
        raw("keepalive_two", &g("keepalive_two")).then(&g("keepalive_two")),
        raw(
            "close_then_more",
            &req(
                "close_then_more",
                &["GET / HTTP/1.1", "host: h", "connection: close"],
                "",
            ),
        )
        .then(&g("close_then_more")),
        post(
            "expect_100",
            &["content-length: 5", "expect: 100-continue"],
            "",
        )
        .then("hello"),
        post(
            "expect_100_upper",
            &["content-length: 5", "expect: 100-Continue"],
            "",
        )
        .then("hello"),
        post(
            "expect_100_with_body",
            &["content-length: 5", "expect: 100-continue"],
            "hello",
        ),
        post(
            "expect_other",
            &["content-length: 5", "expect: something"],
            "hello",
        ),
        case(
            "expect_100_http10",
            &[
                "POST / HTTP/1.0",
                "host: h",
                "content-length: 5",
                "expect: 100-continue",
            ],
            "",
        )
        .on("h10")
        .then("hello"),
        raw("pipeline_two", &(g("pipeline_two") + &g("pipeline_two"))),
        raw(
            "pipeline_three",
            &(g("pipeline_three") + &g("pipeline_three") + &g("pipeline_three")),
        ),
        raw(
            "pipeline_post_get",
            &(req(
                "pipeline_post_get",
                &["POST / HTTP/1.1", "host: h", "content-length: 3"],
                "abc",
            ) + &g("pipeline_post_get")),
        ),
        raw(
            "pipeline_chunked_get",
            &(req(
                "pipeline_chunked_get",
                &["POST / HTTP/1.1", "host: h", TE],
                "3\r\nabc\r\n0\r\n\r\n",
            ) + &g("pipeline_chunked_get")),
        ),
        raw(
            "pipeline_then_bad",
            &(g("pipeline_then_bad") + "GET / HTTP/1.1\r\nhost: h\r\nx a: b\r\n\r\n"),
        ),
        raw(
            "pipeline_then_cl_te",
            &(g("pipeline_then_cl_te")
                + &req(
                    "pipeline_then_cl_te",
                    &["POST / HTTP/1.1", "host: h", "content-length: 3", TE],
                    "0\r\n\r\n",
                )),
        ),
        raw(
            "pipeline_then_obs_fold",
            &(g("pipeline_then_obs_fold")
                + &req(
                    "pipeline_then_obs_fold",
                    &["GET / HTTP/1.1", "host: h", "x-a: b", " c"],
                    "",
                )),
        ),
        raw(
            "pipeline_close_first",
            &(req(
                "pipeline_close_first",
                &["GET / HTTP/1.1", "host: h", "connection: close"],
                "",
            ) + &g("pipeline_close_first")),
        ),
        // A head cut in the middle of a line (and of an obs-fold).
        raw("head_split", "GET / HTTP/1.1\r\nhost: h\r\nx-ca")
            .then("se: head_split\r\nx-a: b\r\n")
            .then(" c\r\n\r\n"),
        raw(
            "head_split_cr",
            "GET / HTTP/1.1\r\nhost: h\r\nx-case: head_split_cr\r",
        )
        .then("\nx-a: b\r")
        .then("c\r\n\r\n"),
    ]
}

/// Where courier answers differently from Envoy on purpose (README lists
/// them): the case, and why.
const DIFFERS: &[(&str, &str)] = &[
    (
        "chunk_data_too_long",
        "Envoy takes the chunk's 3 bytes, skips to the line's end and forwards a cut body; courier refuses chunk data not followed by CRLF (RFC 9112 7.1): 400",
    ),
    (
        "connect_authority",
        "Envoy's path routes do not match CONNECT (404); courier's prefix route matches it and forwards the CONNECT (not fixed yet)",
    ),
    (
        "path_quote",
        "hyper's request-target parser refuses bytes Envoy forwards (\", <, >, \\, ^, `, {, |, }): 400 and close (the suite's hyper upstream refuses them from Envoy too)",
    ),
    (
        "method_lower",
        "Envoy's codec knows a fixed list of methods (400 for others); courier forwards any token method",
    ),
    (
        "method_custom",
        "Envoy's codec knows a fixed list of methods (400 for others); courier forwards any token method",
    ),
    (
        "request_line_double_space",
        "Envoy's parser tolerates extra spaces in the request line; hyper's refuses them (400), as RFC 9112 3 allows",
    ),
    (
        "request_line_trailing_space",
        "Envoy's parser tolerates extra spaces in the request line; hyper's refuses them (400), as RFC 9112 3 allows",
    ),
    (
        "host_twice",
        "Envoy joins repeated host headers into one (h,h); courier forwards both",
    ),
    (
        "host_twice_differing",
        "Envoy joins repeated host headers into one (h,other); courier forwards both",
    ),
    (
        "host_with_space",
        "Envoy's codec refuses a host that is not a valid authority (400); courier forwards it",
    ),
    (
        "upgrade_h2c",
        "Envoy drops an h2c upgrade and serves the request as HTTP/1.1; courier refuses the upgrade it has no config for (403)",
    ),
    (
        "http10_keepalive",
        "Envoy keeps an HTTP/1.0 keep-alive connection (connection: keep-alive); courier closes it after the response",
    ),
    (
        "http10_te",
        "hyper refuses transfer-encoding in HTTP/1.0 (400, RFC 9112 6.1); Envoy with accept_http_10 takes it",
    ),
    (
        "expect_100_http10",
        "hyper sends 100 Continue to HTTP/1.1 clients only (RFC 9110 10.1.1); Envoy to HTTP/1.0 too",
    ),
];

/// Every case.
pub fn all() -> Vec<Case> {
    let mut c = framing();
    c.extend(targets());
    c.extend(headers());
    c.extend(sizes());
    c.extend(connections());
    for case in &mut c {
        case.differs = DIFFERS
            .iter()
            .find(|(name, _)| *name == case.name)
            .map(|(_, why)| *why);
    }
    c
}
