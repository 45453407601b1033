//! HTTP/1.1 on the wire for the codec suite: a client that sends raw bytes in
//! steps and reads until the proxy closes or goes quiet, and a parser that cuts
//! what came back into responses.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One response as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resp {
    /// The status code.
    pub status: u16,
    /// Headers (lower-case names) in the order sent.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked).
    pub body: Vec<u8>,
}

impl Resp {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What came back on one connection.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The responses, in order.
    pub responses: Vec<Resp>,
    /// Bytes after the last whole response (none normally).
    pub rest: Vec<u8>,
    /// The proxy closed the connection.
    pub closed: bool,
}

/// How long the proxy may stay quiet before the exchange is over. Envoy
/// closes a connection it refused only after `delayed_close_timeout` (1 s).
const QUIET: Duration = Duration::from_millis(1600);

/// Sends `steps` on a new connection to `addr`, pausing between steps, and
/// reads until the proxy closes or stays quiet.
pub fn exchange(addr: &str, steps: &[Vec<u8>], head: bool) -> Exchange {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    let mut closed = false;
    for (i, step) in steps.iter().enumerate() {
        // A proxy that already closed may refuse the write: what it said counts.
        let _ = s.write_all(step);
        let last = i + 1 == steps.len();
        let wait = if last {
            QUIET
        } else {
            Duration::from_millis(400)
        };
        s.set_read_timeout(Some(wait)).unwrap();
        let mut buf = [0u8; 16384];
        // Bounded by count (and each read by the timeout).
        for _ in 0..400 {
            match s.read(&mut buf) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(_) => break,
            }
        }
        if closed {
            break;
        }
    }
    let (responses, rest) = parse(&out, head);
    Exchange {
        responses,
        rest,
        closed,
    }
}

/// Cuts `bytes` into responses (to HEAD requests: without bodies); what
/// does not parse is left over.
pub fn parse(mut bytes: &[u8], head: bool) -> (Vec<Resp>, Vec<u8>) {
    let mut out = Vec::new();
    while let Some((resp, used)) = one(bytes, head) {
        out.push(resp);
        bytes = &bytes[used..];
    }
    (out, bytes.to_vec())
}

fn one(bytes: &[u8], head_request: bool) -> Option<(Resp, usize)> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&bytes[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let status: u16 = status_line
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| status_line.strip_prefix("HTTP/1.0 "))?
        .get(..3)?
        .parse()
        .ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut resp = Resp {
        status,
        headers,
        body: Vec::new(),
    };
    let mut at = end + 4;
    if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
        return Some((resp, at));
    }
    if resp
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let line_end = at + bytes[at..].windows(2).position(|w| w == b"\r\n")?;
            let size_text = std::str::from_utf8(&bytes[at..line_end]).ok()?;
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            at = line_end + 2;
            if size == 0 {
                // Trailers until the empty line.
                let t = at + bytes[at..].windows(2).position(|w| w == b"\r\n")?;
                return Some((resp, t + 2));
            }
            resp.body.extend_from_slice(bytes.get(at..at + size)?);
            at += size + 2;
        }
    }
    let len: usize = match resp.header("content-length") {
        Some(v) => v.parse().ok()?,
        // Until the close: everything left.
        None => bytes.len() - at,
    };
    resp.body = bytes.get(at..at + len)?.to_vec();
    Some((resp, at + len))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_pipelined_and_chunked() {
        let bytes = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\nHTTP/1.1 4";
        let (r, rest) = super::parse(bytes, false);
        assert_eq!(r.len(), 3);
        assert_eq!(r[2].body, b"ab");
        assert_eq!(rest, b"HTTP/1.1 4");
    }
}
