//! The corpus: each case is raw bytes and what must come of them.

use crate::h2;

/// What a case must produce, on courier and on Envoy alike.
#[derive(Debug, Clone, Copy)]
pub enum Expect {
    /// Refused (4xx/5xx, reset, GOAWAY or closed) and never sent upstream.
    Reject,
    /// Answered by the upstream, which saw it exactly once.
    Forward,
    /// Either; the upstream saw it at most once, never split in two.
    Either,
    /// A flood: any outcome, at most this many requests upstream.
    Bounded(usize),
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// HTTP/1.1: the status line, if any, and whether the connection closed.
    H1 { status: Option<u16>, closed: bool },
    /// HTTP/2 frames.
    H2(h2::Summary),
}

impl Outcome {
    /// What is compared between the proxies.
    pub fn category(&self) -> String {
        match self {
            Outcome::H1 {
                status: Some(s), ..
            } => format!("status {s}"),
            Outcome::H1 { status: None, .. } => "no response".into(),
            // HTTP/2 refusals take many equivalent shapes (RST_STREAM,
            // GOAWAY, close): compared is whether the request was refused.
            Outcome::H2(_) if self.refused() => "refused".into(),
            Outcome::H2(_) => "answered".into(),
        }
    }

    fn refused(&self) -> bool {
        match self {
            Outcome::H1 { status, .. } => status.is_none_or(|s| s >= 400),
            Outcome::H2(s) => {
                s.goaway.is_some() || s.reset_count > 0 || s.closed || s.responses == 0
            }
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::H1 { status, closed } => write!(
                f,
                "{}{}",
                status.map_or("no response".to_string(), |s| s.to_string()),
                if *closed { " +close" } else { "" }
            ),
            Outcome::H2(s) => write!(
                f,
                "resp {} rst {:?}x{} goaway {:?}{}",
                s.responses,
                s.resets,
                s.reset_count,
                s.goaway,
                if s.closed { " +close" } else { "" }
            ),
        }
    }
}

impl Expect {
    /// Checks an outcome and the number of upstream requests of the case.
    pub fn check(&self, o: &Outcome, upstream: usize) -> Result<(), String> {
        match self {
            Expect::Reject if !o.refused() => Err(format!("not refused: {o}")),
            Expect::Reject if upstream > 0 => Err("refused but sent upstream".into()),
            Expect::Forward if upstream != 1 => Err(format!("upstream saw it {upstream} times")),
            Expect::Forward if o.refused() => Err(format!("refused: {o}")),
            Expect::Either if upstream > 1 => Err(format!("upstream saw {upstream} requests")),
            Expect::Bounded(n) if upstream > *n => Err(format!("upstream saw {upstream} > {n}")),
            _ => Ok(()),
        }
    }
}

/// One input.
pub struct Case {
    /// Report name.
    pub name: &'static str,
    /// The `x-case` value the upstream records.
    pub id: String,
    /// Raw bytes sent.
    pub bytes: Vec<u8>,
    /// Parsed as HTTP/2 frames.
    pub h2: bool,
    /// The expectation.
    pub expect: Expect,
    /// Where courier's outcome differs from Envoy's on purpose, and why.
    pub differs: Option<&'static str>,
}

impl Case {
    /// An HTTP/1.1 case: `head` (request line and headers, no final CRLF), then
    /// `x-case`, the blank line and `body`.
    pub fn h1(name: &'static str, head: &str, body: &str, expect: Expect) -> Case {
        let mut bytes = head.as_bytes().to_vec();
        bytes.extend_from_slice(format!("\r\nx-case: {name}\r\n\r\n").as_bytes());
        bytes.extend_from_slice(body.as_bytes());
        Case {
            name,
            id: name.to_string(),
            bytes,
            h2: false,
            expect,
            differs: None,
        }
    }

    /// An HTTP/1.1 case sent exactly as given (no `x-case`).
    fn h1_raw(name: &'static str, bytes: &[u8], expect: Expect) -> Case {
        Case {
            name,
            id: name.to_string(),
            bytes: bytes.to_vec(),
            h2: false,
            expect,
            differs: None,
        }
    }

    /// An HTTP/2 case: the connection preface, then `frames`.
    fn h2(name: &'static str, frames: Vec<u8>, expect: Expect) -> Case {
        let mut bytes = h2::start();
        bytes.extend(frames);
        Case {
            name,
            id: name.to_string(),
            bytes,
            h2: true,
            expect,
            differs: None,
        }
    }

    fn differs(mut self, why: &'static str) -> Case {
        self.differs = Some(why);
        self
    }
}

/// The status code of an HTTP/1.1 response.
pub fn status(bytes: &[u8]) -> Option<u16> {
    let line = bytes.split(|b| *b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    text.strip_prefix("HTTP/1.1 ")
        .or_else(|| text.strip_prefix("HTTP/1.0 "))?
        .get(..3)?
        .parse()
        .ok()
}

/// Whether a whole HTTP/1.1 response (head and `content-length` body) arrived.
pub fn h1_complete(bytes: &[u8]) -> bool {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    bytes.len() >= end + 4 + len
}

/// An upstream request without the headers each proxy sets its own way.
pub fn comparable(text: &str) -> String {
    let mut lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            ![
                "x-request-id:",
                "x-forwarded-for:",
                "x-envoy-expected-rq-timeout-ms:",
                "x-envoy-external-address:",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .collect();
    // Header order is each proxy's own.
    lines.sort_unstable();
    lines.join("\n")
}

const GET: &str = "GET / HTTP/1.1\r\nhost: edge";

fn post(headers: &str) -> String {
    format!("POST / HTTP/1.1\r\nhost: edge\r\n{headers}")
}

/// Every case.
pub fn all() -> Vec<Case> {
    use Expect::*;
    let big = "a".repeat(70 * 1024);
    let many: String = (0..101).map(|i| format!("\r\nx-h{i}: v")).collect();
    let mut c = vec![
        // Controls.
        Case::h1("h1_valid_get", GET, "", Forward),
        Case::h1(
            "h1_valid_post_cl",
            &post("content-length: 5"),
            "hello",
            Forward,
        ),
        Case::h1(
            "h1_valid_chunked",
            &post("transfer-encoding: chunked"),
            "5\r\nhello\r\n0\r\n\r\n",
            Forward,
        ),
        // Content-Length and Transfer-Encoding smuggling.
        Case::h1(
            "cl_and_te",
            &post("content-length: 5\r\ntransfer-encoding: chunked"),
            "0\r\n\r\n",
            Reject,
        ),
        Case::h1(
            "te_and_cl",
            &post("transfer-encoding: chunked\r\ncontent-length: 13"),
            "0\r\n\r\nSMUGGLED",
            Reject,
        ),
        Case::h1(
            "cl_duplicate_differing",
            &post("content-length: 5\r\ncontent-length: 6"),
            "hello!",
            Reject,
        ),
        Case::h1(
            "cl_duplicate_same",
            &post("content-length: 5\r\ncontent-length: 5"),
            "hello",
            Reject,
        ),
        Case::h1(
            "cl_comma_list",
            &post("content-length: 5, 6"),
            "hello!",
            Reject,
        ),
        Case::h1("cl_negative", &post("content-length: -1"), "", Reject),
        Case::h1("cl_plus_sign", &post("content-length: +5"), "hello", Reject),
        Case::h1("cl_hex", &post("content-length: 0x5"), "hello", Reject),
        Case::h1(
            "cl_inner_space",
            &post("content-length: 1 0"),
            "hello",
            Reject,
        ),
        Case::h1(
            "cl_overflow",
            &post("content-length: 99999999999999999999999"),
            "",
            Reject,
        ),
        Case::h1(
            "te_space_before_colon",
            &post("transfer-encoding : chunked"),
            "0\r\n\r\n",
            Reject,
        ),
        Case::h1(
            "te_unknown_coding",
            &post("transfer-encoding: xchunked"),
            "0\r\n\r\n",
            Reject,
        ),
        Case::h1(
            "te_chunked_twice",
            &post("transfer-encoding: chunked, chunked"),
            "0\r\n\r\n",
            Reject,
        ),
        Case::h1(
            "te_identity",
            &post("transfer-encoding: identity"),
            "",
            Reject,
        ),
        Case::h1(
            "te_gzip_then_chunked",
            &post("transfer-encoding: gzip, chunked"),
            "0\r\n\r\n",
            Either,
        ),
        Case::h1(
            "te_vertical_tab",
            &post("transfer-encoding: \x0bchunked"),
            "0\r\n\r\n",
            Reject,
        ),
        Case::h1(
            "te_obs_fold",
            &post("transfer-encoding:\r\n chunked"),
            "0\r\n\r\n",
            Forward,
        ),
        Case::h1(
            "te_http10",
            "POST / HTTP/1.0\r\nhost: edge\r\ntransfer-encoding: chunked",
            "0\r\n\r\n",
            Reject,
        ),
        Case::h1(
            "chunk_size_invalid",
            &post("transfer-encoding: chunked"),
            "zz\r\nhello\r\n0\r\n\r\n",
            Reject,
        ),
        Case::h1(
            "chunk_size_overflow",
            &post("transfer-encoding: chunked"),
            "fffffffffffffffff1\r\nhello\r\n0\r\n\r\n",
            Reject,
        ),
        Case::h1(
            "chunk_missing_crlf",
            &post("transfer-encoding: chunked"),
            "5\r\nhelloX0\r\n\r\n",
            Reject,
        ),
        // Line endings, control characters, header names and values.
        Case::h1(
            "bare_cr_in_value",
            "GET / HTTP/1.1\r\nhost: edge\r\nx-a: a\rb",
            "",
            Forward,
        ),
        Case::h1(
            "nul_in_value",
            "GET / HTTP/1.1\r\nhost: edge\r\nx-a: a\0b",
            "",
            Reject,
        ),
        Case::h1("bare_cr_line_end", "GET / HTTP/1.1\rhost: edge", "", Reject),
        Case::h1(
            "space_in_header_name",
            "GET / HTTP/1.1\r\nhost: edge\r\nx a: b",
            "",
            Reject,
        ),
        Case::h1(
            "paren_in_header_name",
            "GET / HTTP/1.1\r\nhost: edge\r\nx(a): b",
            "",
            Reject,
        ),
        Case::h1(
            "empty_header_name",
            "GET / HTTP/1.1\r\nhost: edge\r\n: b",
            "",
            Reject,
        ),
        Case::h1(
            "header_without_colon",
            "GET / HTTP/1.1\r\nhost: edge\r\nxab",
            "",
            Reject,
        ),
        Case::h1(
            "obs_fold_value",
            "GET / HTTP/1.1\r\nhost: edge\r\nx-a: b\r\n c",
            "",
            Forward,
        ),
        Case::h1(
            "space_before_first_header",
            "GET / HTTP/1.1\r\n host: edge",
            "",
            Reject,
        ),
        Case::h1(
            "underscore_header",
            "GET / HTTP/1.1\r\nhost: edge\r\nx_a: b",
            "",
            Reject,
        ),
        // Sizes.
        Case::h1(
            "oversized_request_line",
            &format!("GET /{big} HTTP/1.1\r\nhost: edge"),
            "",
            Reject,
        ),
        Case::h1(
            "oversized_header_value",
            &format!("GET / HTTP/1.1\r\nhost: edge\r\nx-big: {big}"),
            "",
            Reject,
        ),
        Case::h1(
            "too_many_headers",
            &format!("GET / HTTP/1.1\r\nhost: edge{many}"),
            "",
            Reject,
        ),
        // Request lines.
        Case::h1(
            "absolute_form",
            "GET http://edge/abs?q=1 HTTP/1.1\r\nhost: edge",
            "",
            Forward,
        ),
        Case::h1(
            "absolute_form_other_host",
            "GET http://other.test/abs HTTP/1.1\r\nhost: edge",
            "",
            Forward,
        ),
        Case::h1(
            "invalid_method_char",
            "G(T / HTTP/1.1\r\nhost: edge",
            "",
            Reject,
        ),
        Case::h1(
            "lowercase_version",
            "GET / http/1.1\r\nhost: edge",
            "",
            Reject,
        ),
        Case::h1(
            "unknown_version",
            "GET / HTTP/1.7\r\nhost: edge",
            "",
            Reject,
        ),
        Case::h1(
            "relative_path_no_slash",
            "GET abc HTTP/1.1\r\nhost: edge",
            "",
            Reject,
        ),
        Case::h1("missing_host", "GET / HTTP/1.1", "", Reject),
        Case::h1(
            "http10_default_refused",
            "GET / HTTP/1.0\r\nhost: edge",
            "",
            Reject,
        ),
        Case::h1_raw("http09", b"GET /\r\n\r\n", Reject),
        Case::h1(
            "get_with_smuggled_body",
            "GET / HTTP/1.1\r\nhost: edge\r\ncontent-length: 36",
            "GET /smuggled HTTP/1.1\r\nhost: edge\r\n",
            Either,
        ),
        Case::h1(
            "chunked_get_body",
            "GET / HTTP/1.1\r\nhost: edge\r\ntransfer-encoding: chunked",
            "5\r\nhello\r\n0\r\n\r\n",
            Forward,
        ),
        Case::h1(
            "websocket_not_enabled",
            "GET / HTTP/1.1\r\nhost: edge\r\nconnection: upgrade\r\nupgrade: websocket",
            "",
            Reject,
        ),
    ];
    // HTTP/2.
    let ok = |id: &str| {
        h2::frame(
            h2::HEADERS,
            h2::END_HEADERS | h2::END_STREAM,
            1,
            &h2::request(id, &[]),
        )
    };
    let with = |id: &str, extra: &[(&str, &str)]| {
        h2::frame(
            h2::HEADERS,
            h2::END_HEADERS | h2::END_STREAM,
            1,
            &h2::request(id, extra),
        )
    };
    c.push(Case::h2("h2_valid", ok("h2_valid"), Forward));
    c.push(Case::h2(
        "h2_uppercase_name",
        with("h2_uppercase_name", &[("X-Upper", "1")]),
        Reject,
    ));
    c.push(Case::h2(
        "h2_connection_header",
        with("h2_connection_header", &[("connection", "keep-alive")]),
        Reject,
    ));
    c.push(Case::h2(
        "h2_te_gzip",
        with("h2_te_gzip", &[("te", "gzip")]),
        Reject,
    ));
    c.push(Case::h2(
        "h2_crlf_in_value",
        with("h2_crlf_in_value", &[("x-a", "a\r\nb")]),
        Reject,
    ));
    c.push(Case::h2(
        "h2_underscore",
        with("h2_underscore", &[("x_a", "1")]),
        Reject,
    ));
    c.push(Case::h2(
        "h2_missing_path",
        h2::frame(
            h2::HEADERS,
            h2::END_HEADERS | h2::END_STREAM,
            1,
            &h2::block(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":authority", "edge"),
                ("x-case", "h2_missing_path"),
            ]),
        ),
        Reject,
    ));
    // A header list over max_request_headers_kb (60 KiB), in CONTINUATION frames.
    let list = h2::request("h2_oversized_header_list", &[("x-big", &big)]);
    let mut frames = Vec::new();
    let parts: Vec<&[u8]> = list.chunks(16 * 1024).collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let flags = if last { h2::END_HEADERS } else { 0 };
        if i == 0 {
            frames.extend(h2::frame(h2::HEADERS, flags | h2::END_STREAM, 1, part));
        } else {
            frames.extend(h2::frame(h2::CONTINUATION, flags, 1, part));
        }
    }
    c.push(Case::h2("h2_oversized_header_list", frames, Reject));
    // CONTINUATION flood: a header block that never ends.
    let mut frames = h2::frame(
        h2::HEADERS,
        h2::END_STREAM,
        1,
        &h2::request("h2_continuation_flood", &[]),
    );
    let filler = h2::block(&[("x-f", &"b".repeat(1000))]);
    for _ in 0..2000 {
        frames.extend(h2::frame(h2::CONTINUATION, 0, 1, &filler));
    }
    c.push(Case::h2("h2_continuation_flood", frames, Reject));
    // Rapid reset: streams opened and cancelled at once.
    let mut frames = Vec::new();
    for i in 0..1000u32 {
        let id = 2 * i + 1;
        frames.extend(h2::frame(
            h2::HEADERS,
            h2::END_HEADERS | h2::END_STREAM,
            id,
            &h2::request("h2_rapid_reset", &[]),
        ));
        frames.extend(h2::frame(h2::RST_STREAM, 0, id, &8u32.to_be_bytes()));
    }
    c.push(Case::h2("h2_rapid_reset", frames, Bounded(1000)));
    let mut frames = Vec::new();
    for _ in 0..5000 {
        frames.extend(h2::frame(h2::SETTINGS, 0, 0, &[]));
    }
    c.push(Case::h2("h2_settings_flood", frames, Bounded(0)));
    let mut frames = Vec::new();
    for i in 0..5000u64 {
        frames.extend(h2::frame(h2::PING, 0, 0, &i.to_be_bytes()));
    }
    c.push(Case::h2("h2_ping_flood", frames, Bounded(0)));
    // Empty DATA frames without END_STREAM (CVE-2019-9518): Envoy's limit is one
    // in a row; the connection is closed (`http2.inbound_empty_frames_flood`).
    let mut frames = h2::frame(
        h2::HEADERS,
        h2::END_HEADERS,
        1,
        &h2::request("h2_empty_data_flood", &[]),
    );
    for _ in 0..100 {
        frames.extend(h2::frame(h2::DATA, 0, 1, &[]));
    }
    c.push(Case::h2("h2_empty_data_flood", frames, Bounded(1)));
    // A request body that never ends must not reach the upstream as a whole request.
    c.push(Case::h2(
        "h2_body_never_ends",
        h2::frame(
            h2::HEADERS,
            h2::END_HEADERS,
            1,
            &h2::request("h2_body_never_ends", &[]),
        ),
        Bounded(0),
    ));
    // More concurrent streams than max_concurrent_streams (100): bodies never end.
    let mut frames = Vec::new();
    for i in 0..150u32 {
        frames.extend(h2::frame(
            h2::HEADERS,
            h2::END_HEADERS,
            2 * i + 1,
            &h2::request("h2_too_many_streams", &[]),
        ));
    }
    c.push(Case::h2("h2_too_many_streams", frames, Bounded(0)));
    // DATA beyond content-length.
    let mut frames = h2::frame(
        h2::HEADERS,
        h2::END_HEADERS,
        1,
        &h2::request("h2_data_over_content_length", &[("content-length", "2")]),
    );
    frames.extend(h2::frame(h2::DATA, h2::END_STREAM, 1, b"abcdef"));
    c.push(Case::h2("h2_data_over_content_length", frames, Reject));
    // DATA beyond the 64 KiB stream window.
    let mut frames = h2::frame(
        h2::HEADERS,
        h2::END_HEADERS,
        1,
        &h2::request("h2_window_overflow", &[]),
    );
    let chunk = vec![b'x'; 16 * 1024];
    for _ in 0..5 {
        frames.extend(h2::frame(h2::DATA, 0, 1, &chunk));
    }
    c.push(Case::h2("h2_window_overflow", frames, Reject));
    // Odd stream ids must increase.
    let mut frames = h2::frame(
        h2::HEADERS,
        h2::END_HEADERS | h2::END_STREAM,
        5,
        &h2::request("h2_stream_id_regression", &[]),
    );
    frames.extend(h2::frame(
        h2::HEADERS,
        h2::END_HEADERS | h2::END_STREAM,
        3,
        &h2::request("h2_stream_id_regression", &[]),
    ));
    c.push(
        Case::h2("h2_stream_id_regression", frames, Bounded(1)).differs(
            "h2 treats a lower stream id as a connection PROTOCOL_ERROR (RFC 9113 5.1.1) and sends GOAWAY before answering stream 5; Envoy answers stream 5",
        ),
    );
    c
}
