//! What the compressor tests share: an HTTP/1.1 upstream with one response per path, the
//! filter configs, and decoders for the three encodings.

use courier_tests::client::{self, Protocol, Request, Response};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};

/// A body long enough to compress, recognisable when decoded.
pub fn text_body() -> Vec<u8> {
    (0..200)
        .map(|i| format!("line {i}: the quick brown fox jumps over the lazy dog\n"))
        .collect::<String>()
        .into_bytes()
}

/// The upstream's answer to `path`: status, extra headers, body, and whether it is sent
/// chunked (without a length).
fn answer(path: &str, accept: &str) -> (u16, Vec<String>, Vec<u8>, bool) {
    let text = text_body();
    let seen = format!("x-seen-accept-encoding: {accept}");
    let (status, headers, body, chunked): (u16, Vec<&str>, Vec<u8>, bool) = match path {
        "/text" | "/off" => (200, vec!["content-type: text/plain"], text, false),
        "/chunked" => (
            200,
            vec!["content-type: text/plain; charset=utf-8"],
            text,
            true,
        ),
        "/json" => (200, vec!["content-type: application/json"], text, false),
        "/small" => (
            200,
            vec!["content-type: text/plain"],
            b"tiny body".to_vec(),
            false,
        ),
        "/image" => (200, vec!["content-type: image/png"], text, false),
        "/encoded" => (
            200,
            vec!["content-type: text/plain", "content-encoding: gzip"],
            text,
            false,
        ),
        "/etag" => (
            200,
            vec!["content-type: text/plain", "etag: \"abc123\""],
            text,
            false,
        ),
        "/weak-etag" => (
            200,
            vec!["content-type: text/plain", "etag: W/\"abc123\""],
            text,
            false,
        ),
        "/no-transform" => (
            200,
            vec![
                "content-type: text/plain",
                "cache-control: public, no-transform",
            ],
            text,
            false,
        ),
        "/vary" => (
            200,
            vec!["content-type: text/plain", "vary: Origin"],
            text,
            false,
        ),
        "/partial" => (206, vec!["content-type: text/plain"], text, false),
        _ => (404, vec![], Vec::new(), false),
    };
    let mut h: Vec<String> = headers.into_iter().map(str::to_string).collect();
    h.push(seen);
    (status, h, body, chunked)
}

/// Starts the upstream; it serves keep-alive connections until the test ends.
pub fn upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || serve(s));
        }
    });
    addr
}

fn serve(s: std::net::TcpStream) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut s = s;
    loop {
        let mut first = String::new();
        if r.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        let mut accept = String::from("-");
        let mut encoding = String::from("-");
        let mut chunked = false;
        let mut length = 0usize;
        for _ in 0..200 {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
            let lower = h.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("accept-encoding:") {
                accept = v.trim().to_string();
            }
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            if let Some(v) = lower.strip_prefix("content-encoding:") {
                encoding = v.trim().to_string();
            }
            if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
                chunked = true;
            }
        }
        let received = if chunked {
            match read_chunked(&mut r) {
                Some(b) => b,
                None => return,
            }
        } else {
            let mut b = vec![0; length];
            if r.read_exact(&mut b).is_err() {
                return;
            }
            b
        };
        let path = first.split(' ').nth(1).unwrap_or("/").to_string();
        let (status, headers, body, chunked) = if path == "/echo" {
            // The request body as it arrived, in a type no filter compresses.
            let headers = vec![
                "content-type: application/octet-stream".to_string(),
                format!("x-seen-content-encoding: {encoding}"),
            ];
            (200, headers, received, false)
        } else {
            answer(&path, &accept)
        };
        let mut out = format!("HTTP/1.1 {status} X\r\n");
        for h in headers {
            out.push_str(&h);
            out.push_str("\r\n");
        }
        let head_only = first.starts_with("HEAD ");
        if chunked {
            out.push_str("transfer-encoding: chunked\r\n\r\n");
            let mut bytes = out.into_bytes();
            if !head_only {
                for piece in body.chunks(700) {
                    bytes.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                    bytes.extend_from_slice(piece);
                    bytes.extend_from_slice(b"\r\n");
                }
                bytes.extend_from_slice(b"0\r\n\r\n");
            }
            if s.write_all(&bytes).is_err() {
                return;
            }
        } else {
            out.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
            let mut bytes = out.into_bytes();
            if !head_only {
                bytes.extend_from_slice(&body);
            }
            if s.write_all(&bytes).is_err() {
                return;
            }
        }
    }
}

/// A chunked request body, trailers skipped.
fn read_chunked(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let mut size = String::new();
        r.read_line(&mut size).ok()?;
        let n = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
        if n == 0 {
            loop {
                let mut t = String::new();
                if r.read_line(&mut t).ok()? == 0 || t == "\r\n" {
                    return Some(out);
                }
            }
        }
        let mut chunk = vec![0; n + 2];
        r.read_exact(&mut chunk).ok()?;
        out.extend_from_slice(&chunk[..n]);
    }
}

/// The clusters `up` (HTTP/1.1, at `addr`) and `h2up` (h2c, at `h2`), YAML under
/// `static_resources`.
pub fn cluster(addr: SocketAddr, h2: SocketAddr) -> String {
    format!(
        "clusters:\n- name: up\n  connect_timeout: 1s\n  load_assignment:\n    cluster_name: up\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n- name: h2up\n  connect_timeout: 1s\n  typed_extension_protocol_options:\n    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n      \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n      explicit_http_config: {{ http2_protocol_options: {{}} }}\n  load_assignment:\n    cluster_name: h2up\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n",
        addr.port(),
        h2.port()
    )
}

/// One compressor filter (YAML list item) named `envoy.filters.http.compressor.<lib>`
/// with `library` (`Gzip`, `Brotli`, `Zstd`) and `extra` lines in the Compressor.
pub fn filter(lib: &str, library: &str, extra: &str) -> String {
    format!(
        "- name: envoy.filters.http.compressor.{lib}\n  typed_config:\n    \"@type\": type.googleapis.com/envoy.extensions.filters.http.compressor.v3.Compressor\n    compressor_library:\n      name: text_{lib}\n      typed_config:\n        \"@type\": type.googleapis.com/envoy.extensions.compression.{lib}.compressor.v3.{library}\n{}",
        extra
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    )
}

/// Istio's three filters (brotli, zstd, gzip), with Istio's content types plus JSON.
pub fn istio_filters() -> String {
    let common = "response_direction_config:\n  common_config:\n    content_type: [text/plain, application/json, application/openmetrics-text]\n";
    [
        filter("brotli", "Brotli", common),
        filter("zstd", "Zstd", common),
        filter("gzip", "Gzip", common),
    ]
    .concat()
}

/// A GET of `path` on `addr` with `accept-encoding: accept` (none for `None`).
// Each test binary that includes this file uses its own part of it.
#[allow(dead_code)]
pub fn get(addr: &str, protocol: Protocol, path: &str, accept: Option<&str>) -> Response {
    request(addr, protocol, "GET", path, accept)
}

/// A POST of `body` (`content-type: text/plain`) to `path`.
#[allow(dead_code)]
pub fn post(addr: &str, protocol: Protocol, path: &str, body: &[u8]) -> Response {
    let req = Request {
        method: "POST".into(),
        path: path.into(),
        authority: "example.com".into(),
        headers: vec![("content-type".to_string(), "text/plain".to_string())],
        body: body.to_vec(),
    };
    client::send(addr, protocol, &req).unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

/// A body as it is encoded with `encoding` decoded (`None` when it does not decode).
pub fn decode_as(encoding: &str, body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let ok = match encoding {
        "gzip" => flate2::read::GzDecoder::new(body)
            .read_to_end(&mut out)
            .is_ok(),
        "br" => brotli::Decompressor::new(body, 4096)
            .read_to_end(&mut out)
            .is_ok(),
        "zstd" => zstd::stream::decode_all(body).map(|d| out = d).is_ok(),
        _ => false,
    };
    ok.then_some(out)
}

/// [`get`] with another method.
pub fn request(
    addr: &str,
    protocol: Protocol,
    method: &str,
    path: &str,
    accept: Option<&str>,
) -> Response {
    let req = Request {
        method: method.into(),
        path: path.into(),
        authority: "example.com".into(),
        headers: accept
            .map(|a| vec![("accept-encoding".to_string(), a.to_string())])
            .unwrap_or_default(),
        body: Vec::new(),
    };
    client::send(addr, protocol, &req).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// The body decoded as its `content-encoding` says; a body that does not decode (the
/// upstream's `/encoded` claims gzip over plain text) is returned as it came.
pub fn decoded(r: &Response) -> Vec<u8> {
    r.header("content-encoding")
        .and_then(|e| decode_as(&e, &r.body))
        .unwrap_or_else(|| r.body.clone())
}

/// A response body sent as separate frames: data, then trailers.
struct Frames(std::collections::VecDeque<hyper::body::Frame<bytes::Bytes>>);

impl hyper::body::Body for Frames {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// An h2c upstream answering every request with the text body in several DATA frames
/// followed by trailers (`x-trailer: done`), as a gRPC-web or streaming service does.
pub fn h2_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    l.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            loop {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                let service = hyper::service::service_fn(|_req| async {
                    let mut frames: std::collections::VecDeque<_> = text_body()
                        .chunks(1000)
                        .map(|c| hyper::body::Frame::data(bytes::Bytes::copy_from_slice(c)))
                        .collect();
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("x-trailer", http::HeaderValue::from_static("done"));
                    frames.push_back(hyper::body::Frame::trailers(trailers));
                    Ok::<_, std::convert::Infallible>(
                        http::Response::builder()
                            .header("content-type", "text/plain")
                            .body(Frames(frames))
                            .unwrap(),
                    )
                });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(s), service),
                );
            }
        });
    });
    addr
}
