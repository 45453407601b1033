//! Minimal HTTP clients for end-to-end tests: HTTP/1.1 written and read as raw
//! bytes over a std `TcpStream` (so the test sees what was on the wire, header
//! case and all), and h2c with prior knowledge through hyper's client.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long any one request may take before the client gives up.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The protocol a request is sent with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1, one request per connection (`connection: close`).
    Http1,
    /// HTTP/2 over cleartext TCP with prior knowledge.
    H2c,
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Protocol::Http1 => "HTTP/1.1",
            Protocol::H2c => "h2c",
        })
    }
}

/// A request to send.
#[derive(Debug, Clone)]
pub struct Request {
    /// The method.
    pub method: String,
    /// The request target (`/path?query`).
    pub path: String,
    /// `host` (HTTP/1.1) or `:authority` (h2c).
    pub authority: String,
    /// Extra headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body (sent with `content-length` when not empty).
    pub body: Vec<u8>,
}

/// A response as received.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Headers in the order received, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body (decoded from chunked encoding if needed).
    pub body: Vec<u8>,
    /// Trailers (h2c), names lower-cased.
    pub trailers: Vec<(String, String)>,
}

impl Response {
    /// The values of header `name` joined with `,` (`None` when absent).
    pub fn header(&self, name: &str) -> Option<String> {
        joined(&self.headers, name)
    }

    /// The values of trailer `name` joined with `,` (`None` when absent).
    pub fn trailer(&self, name: &str) -> Option<String> {
        joined(&self.trailers, name)
    }
}

fn joined(list: &[(String, String)], name: &str) -> Option<String> {
    let values: Vec<&str> = list
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// Sends `req` to `addr` (`ip:port`) with `protocol` on a new connection.
pub fn send(addr: &str, protocol: Protocol, req: &Request) -> Result<Response, String> {
    match protocol {
        Protocol::Http1 => http1(addr, req),
        Protocol::H2c => h2c(addr, req),
    }
}

/// A plain `GET` over HTTP/1.1 (admin endpoints).
pub fn get(addr: &str, path: &str) -> Result<Response, String> {
    http1(
        addr,
        &Request {
            method: "GET".into(),
            path: path.into(),
            authority: addr.into(),
            headers: Vec::new(),
            body: Vec::new(),
        },
    )
}

/// Whether `addr` names a Unix domain socket (a path: `/…`, or `@name` for
/// an abstract one) rather than `ip:port`.
pub fn is_unix(addr: &str) -> bool {
    addr.starts_with('/') || addr.starts_with('@')
}

/// Connects to a Unix domain socket path (`@name`: abstract).
pub fn connect_unix(addr: &str) -> std::io::Result<std::os::unix::net::UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixStream};
    match addr.strip_prefix('@') {
        Some(name) => UnixStream::connect_addr(&SocketAddr::from_abstract_name(name)?),
        None => UnixStream::connect(addr),
    }
}

fn http1(addr: &str, req: &Request) -> Result<Response, String> {
    if is_unix(addr) {
        let s = connect_unix(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        s.set_read_timeout(Some(TIMEOUT))
            .map_err(|e| e.to_string())?;
        return http1_on(s, addr, req);
    }
    let s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    http1_on(s, addr, req)
}

fn http1_on(mut s: impl Read + Write, addr: &str, req: &Request) -> Result<Response, String> {
    // A socket path is no authority: `localhost` stands in.
    let authority = if is_unix(&req.authority) {
        "localhost"
    } else {
        req.authority.as_str()
    };
    let mut head = format!(
        "{} {} HTTP/1.1\r\nhost: {}\r\n",
        req.method, req.path, authority
    );
    for (k, v) in &req.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !req.body.is_empty() {
        head.push_str(&format!("content-length: {}\r\n", req.body.len()));
    }
    head.push_str("connection: close\r\n\r\n");
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(&req.body))
        .map_err(|e| format!("write to {addr}: {e}"))?;
    // Read until the response is complete rather than until the peer closes:
    // Envoy lingers up to its `delayed_close_timeout` (1 s) before closing, and
    // may reset the connection when it did not read the request body.
    let head_request = req.method == "HEAD";
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if let Ok(Some(resp)) = complete_http1(&raw, head_request) {
            return Ok(resp);
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if raw.is_empty() => return Err(format!("read from {addr}: {e}")),
            Err(_) => break,
        }
    }
    parse_http1(&raw, head_request)
}

/// The response in `raw` if it is complete: framed by `content-length`, by the end
/// of a chunked body, or bodiless; `None` when more is needed (or it runs to EOF).
fn complete_http1(raw: &[u8], head_request: bool) -> Result<Option<Response>, String> {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let resp = parse_http1(raw, head_request)?;
    let bodiless = head_request
        || resp.status == 204
        || resp.status == 304
        || (100..200).contains(&resp.status);
    let rest = &raw[split + 4..];
    let done = if bodiless {
        true
    } else if resp
        .header("transfer-encoding")
        .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
    {
        rest.ends_with(b"0\r\n\r\n") && dechunk(rest).is_ok()
    } else if let Some(len) = resp.header("content-length") {
        len.parse::<usize>().is_ok_and(|len| rest.len() >= len)
    } else {
        false
    };
    Ok(done.then_some(resp))
}

/// Parses one HTTP/1.1 response read until the connection closed.
fn parse_http1(raw: &[u8], head_request: bool) -> Result<Response, String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in {:?}", String::from_utf8_lossy(raw)))?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|e| e.to_string())?;
    let rest = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut resp = Response {
        status,
        headers,
        body: Vec::new(),
        trailers: Vec::new(),
    };
    if head_request || status == 204 || status == 304 || (100..200).contains(&status) {
        return Ok(resp);
    }
    resp.body = if resp
        .header("transfer-encoding")
        .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
    {
        dechunk(rest)?
    } else if let Some(len) = resp.header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| format!("bad content-length {len}"))?;
        rest.get(..len)
            .ok_or_else(|| format!("body shorter than content-length {len}"))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(resp)
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunk size")?;
        let size_text = std::str::from_utf8(&rest[..eol]).map_err(|e| e.to_string())?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(rest.get(..size).ok_or("truncated chunk")?);
        rest = rest.get(size + 2..).ok_or("truncated chunk end")?;
    }
}

fn h2c(addr: &str, req: &Request) -> Result<Response, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        tokio::time::timeout(TIMEOUT, h2c_async(addr, req))
            .await
            .map_err(|_| format!("h2c request to {addr} timed out"))?
    })
}

async fn h2c_async(addr: &str, req: &Request) -> Result<Response, String> {
    let mut sender = if is_unix(addr) {
        let stream = tokio::net::UnixStream::from_std({
            let s = connect_unix(addr).map_err(|e| format!("connect {addr}: {e}"))?;
            s.set_nonblocking(true).map_err(|e| e.to_string())?;
            s
        })
        .map_err(|e| format!("connect {addr}: {e}"))?;
        let (sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .map_err(|e| format!("h2 handshake with {addr}: {e}"))?;
        tokio::spawn(conn);
        sender
    } else {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let (sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .map_err(|e| format!("h2 handshake with {addr}: {e}"))?;
        tokio::spawn(conn);
        sender
    };
    let mut builder = http::Request::builder()
        .method(req.method.as_str())
        .uri(format!("http://{}{}", req.authority, req.path));
    for (k, v) in &req.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let request = builder
        .body(Full::new(Bytes::from(req.body.clone())))
        .map_err(|e| format!("building the request: {e}"))?;
    let resp = sender
        .send_request(request)
        .await
        .map_err(|e| format!("h2c request to {addr}: {e}"))?;
    let (parts, body) = resp.into_parts();
    let collected = body
        .collect()
        .await
        .map_err(|e| format!("h2c body from {addr}: {e}"))?;
    let trailers = collected.trailers().map(pairs).unwrap_or_default();
    Ok(Response {
        status: parts.status.as_u16(),
        headers: pairs(&parts.headers),
        body: collected.to_bytes().to_vec(),
        trailers,
    })
}

fn pairs(map: &http::HeaderMap) -> Vec<(String, String)> {
    map.iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_content_length_and_chunked_bodies() {
        let r = parse_http1(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: 1\r\nx-a: 2\r\n\r\nhiXX",
            false,
        )
        .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hi"[..]));
        assert_eq!(r.header("x-a").as_deref(), Some("1,2"));
        let r = parse_http1(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n3;x\r\n!!!\r\n0\r\n\r\n",
            false,
        )
        .unwrap();
        assert_eq!(r.body, b"hi!!!");
        let r = parse_http1(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", true).unwrap();
        assert!(r.body.is_empty());
    }
}
