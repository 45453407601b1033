use super::*;

/// Feeds `input` in reads of `step` bytes as the socket wrapper does (held
/// bytes first, then the new ones) and returns what hyper would get, and the
/// refusal.
fn run(input: &[u8], step: usize) -> (Vec<u8>, Option<Refusal>) {
    run_with(RULES, input, step)
}

const RULES: Rules = Rules {
    accept_http_10: false,
    reject_fragment: true,
};

fn run_with(rules: Rules, input: &[u8], step: usize) -> (Vec<u8>, Option<Refusal>) {
    let mut c = H1Check::new(rules, 4096);
    let mut held = Vec::new();
    let mut out = Vec::new();
    for piece in input.chunks(step.max(1)) {
        if !c.active() {
            out.extend_from_slice(piece);
            continue;
        }
        held.extend_from_slice(piece);
        let r = c.check(&mut held);
        out.extend_from_slice(&held[..r.deliver]);
        held.drain(..r.held);
    }
    // The end: what is held goes as it is.
    out.extend_from_slice(&held);
    (out, c.refusal())
}

fn same_at_every_split(input: &[u8]) -> (Vec<u8>, Option<Refusal>) {
    let whole = run(input, input.len());
    for step in 1..input.len().min(40) {
        assert_eq!(
            run(input, step),
            whole,
            "step {step}: {:?}",
            String::from_utf8_lossy(input)
        );
    }
    whole
}

fn passes(input: &str) {
    let (out, refusal) = same_at_every_split(input.as_bytes());
    assert_eq!(refusal, None, "{input:?}");
    assert_eq!(String::from_utf8_lossy(&out), input);
}

fn refused(input: &str, want: Refusal) -> Vec<u8> {
    let (out, refusal) = same_at_every_split(input.as_bytes());
    assert_eq!(refusal, Some(want), "{input:?}");
    assert!(
        out.contains(&0),
        "the refused head reaches hyper zeroed: {out:?}"
    );
    out
}

#[test]
fn ordinary_requests_pass_untouched() {
    passes("GET / HTTP/1.1\r\nhost: h\r\n\r\n");
    passes("\r\nGET / HTTP/1.1\nhost: h\n\n");
    passes(
        "POST / HTTP/1.1\r\nhost: h\r\ncontent-length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nhost: h\r\n\r\n",
    );
    passes(
        "POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n5;a=b\r\nhello\r\nA\r\n0123456789\r\n0\r\nx-t: 1\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    );
    passes("OPTIONS * HTTP/1.1\r\nhost: h\r\n\r\n");
    passes("GET http://h/a HTTP/1.1\r\n\r\nGET HTTPS://h/a HTTP/1.1\r\n\r\n");
    passes("CONNECT h:443 HTTP/1.1\r\nhost: h\r\n\r\nanything \x00 goes");
    passes("GET / HTTP/1.1\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n\x00\x01");
    passes("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04");
}

#[test]
fn obs_fold_and_bare_cr_are_cleaned_as_envoy() {
    let cases = [
        ("x-a: b\r\n c\r\n", "x-a: b c\r\n"),
        ("x-a: b  \r\n   c\r\n", "x-a: b     c\r\n"),
        ("x-a: b\n\tc\n d\r\n", "x-a: b\tc d\r\n"),
        ("x-a: a\rb\r\n", "x-a: ab\r\n"),
        ("x-a: a\r\rb\r\n", "x-a: ab\r\n"),
        (
            "transfer-encoding:\r\n chunked\r\n",
            "transfer-encoding: chunked\r\n",
        ),
    ];
    for (header, want) in cases {
        let input = format!("GET / HTTP/1.1\r\n{header}\r\n");
        let want = format!("GET / HTTP/1.1\r\n{want}\r\n");
        let (out, refusal) = same_at_every_split(input.as_bytes());
        assert_eq!(refusal, None);
        assert_eq!(String::from_utf8_lossy(&out), want);
    }
    // A fold of the request line, and a CR in a name, are hyper's to refuse.
    passes("GET / HTTP/1.1\r\n host: h\r\n\r\n");
    passes("GET / HTTP/1.1\r\nx-\ra: b\r\n\r\n");
}

#[test]
fn envoy_refusals() {
    let post = |h: &str, body: &str| format!("POST / HTTP/1.1\r\nhost: h\r\n{h}\r\n\r\n{body}");
    refused(
        &post(
            "content-length: 1\r\ntransfer-encoding: chunked",
            "0\r\n\r\n",
        ),
        BAD_REQUEST,
    );
    refused(
        &post(
            "transfer-encoding: chunked\r\ncontent-length: 1",
            "0\r\n\r\n",
        ),
        BAD_REQUEST,
    );
    refused(
        &post("content-length: 1\r\ncontent-length: 1", "a"),
        BAD_REQUEST,
    );
    refused(&post("transfer-encoding: gzip", ""), NOT_IMPLEMENTED);
    refused(
        &post("transfer-encoding: chunked, gzip", ""),
        NOT_IMPLEMENTED,
    );
    refused(&post("transfer-encoding:", ""), NOT_IMPLEMENTED);
    // Control bytes: hyper's 400.
    passes(&post("transfer-encoding: \x0bchunked", ""));
    // A malformed chunk read with its head: refused before hyper sees any of it.
    for body in [
        "zz\r\n",
        "-5\r\n",
        "5\nhello\n0\n\n",
        "5\r\nhelloX",
        "fffffffffffffffff1\r\n",
    ] {
        let input = post("transfer-encoding: chunked", body);
        let (out, refusal) = run(input.as_bytes(), input.len());
        assert_eq!(refusal, Some(BAD_REQUEST), "{body:?}");
        assert_eq!(out.len(), input.len() - body.len(), "the body stays back");
    }
    for line in ["GET / HTTP/1.2", "GET /", "GET / HTTP/2.0"] {
        refused(&format!("{line}\r\nhost: h\r\n\r\n"), UPGRADE_REQUIRED);
    }
    refused(
        &post("", "")
            .replace("HTTP/1.1", "HTTP/1.0")
            .replace("\r\n\r\n\r\n", "\r\ntransfer-encoding: chunked\r\n\r\n"),
        UPGRADE_REQUIRED,
    );
    for line in [
        "GET * HTTP/1.1",
        "GET ftp://h/ HTTP/1.1",
        "CONNECT /a HTTP/1.1",
        "CONNECT http://h/ HTTP/1.1",
        "GET /caf\u{e9} HTTP/1.1",
    ] {
        refused(&format!("{line}\r\nhost: h\r\n\r\n"), BAD_REQUEST);
    }
    refused("GET /a#b HTTP/1.1\r\nhost: h\r\n\r\n", FRAGMENT);
}

/// A request line whose method is not a token is Envoy's 400, whatever its
/// version: it is left to hyper (which answers 400), never the HTTP/0.9 426.
#[test]
fn a_method_that_is_not_a_token_is_left_to_hyper() {
    for line in ["\x00\x01 garbage", "G(T / HTTP/1.1", "G\tT /"] {
        let input = format!("{line}\r\n\r\n");
        let (_, refusal) = same_at_every_split(input.as_bytes());
        assert_eq!(refusal, None, "{input:?}");
    }
}

#[test]
fn a_refusal_keeps_the_requests_before_it() {
    let first = "GET / HTTP/1.1\r\nhost: h\r\n\r\n";
    let input = format!("{first}GET * HTTP/1.1\r\nhost: h\r\n\r\nGET / HTTP/1.1\r\n\r\n");
    let (out, refusal) = same_at_every_split(input.as_bytes());
    assert_eq!(refusal, Some(BAD_REQUEST));
    assert!(out.starts_with(first.as_bytes()));
    assert_eq!(out[first.len()], 0);
    assert_eq!(
        out.len(),
        first.len() + "GET * HTTP/1.1\r\nhost: h\r\n\r\n".len()
    );
}

#[test]
fn a_malformed_chunk_after_the_head_went_is_left_to_hyper() {
    let mut c = H1Check::new(RULES, 4096);
    let mut head = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    assert_eq!(c.check(&mut head).deliver, head.len());
    let mut body = b"zz\r\n".to_vec();
    assert_eq!(c.check(&mut body).deliver, 4);
    assert!(!c.active());
    assert_eq!(c.refusal(), None);
}

#[test]
fn long_heads_go_to_hyper() {
    let mut c = H1Check::new(RULES, 100);
    let mut data = format!("GET /{} HTTP/1.1\r\n", "a".repeat(200)).into_bytes();
    let len = data.len();
    assert_eq!(
        c.check(&mut data),
        Checked {
            deliver: len,
            held: len
        }
    );
    assert!(!c.active());
}

#[test]
fn the_fragment_flag_off_leaves_it_to_hyper() {
    let rules = Rules {
        reject_fragment: false,
        ..RULES
    };
    let (_, refusal) = run_with(rules, b"GET /a#b HTTP/1.1\r\n\r\n", 100);
    assert_eq!(refusal, None);
}

#[test]
fn arbitrary_bytes_never_panic_and_split_alike() {
    let mut rng = fastrand::Rng::with_seed(21);
    let alphabet = b"GET POST/ HTTP/1.10\r\n:;#*abcxz-chunkedtransfer-encodingcontent-length 5\t";
    for _ in 0..2000 {
        let len = rng.usize(0..120);
        let input: Vec<u8> = (0..len)
            .map(|_| alphabet[rng.usize(..alphabet.len())])
            .collect();
        let whole = run(&input, input.len().max(1));
        let step = rng.usize(1..8);
        let split = run(&input, step);
        // A malformed chunk is refused only when read with its head.
        if memchr::memmem::find(&input, b"chunked").is_none() {
            assert_eq!(
                split,
                whole,
                "{:?} by {step}",
                String::from_utf8_lossy(&input)
            );
        }
    }
}
