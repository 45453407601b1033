//! HTTP/1.1 as raw bytes on both ends of a proxy, for the tests that look at
//! what the wire carries (header name case, reason phrases, chunked trailers):
//! an upstream that records each whole request as received and answers what
//! the test says, and a client that sends bytes and reads the response to the
//! connection's close.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

/// How long either end waits for bytes before giving up.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request target.
    pub path: String,
    /// The request line and header lines as sent (case kept).
    pub head: String,
    /// The trailer lines of a chunked body (case kept).
    pub trailers: Vec<String>,
}

/// A raw HTTP/1.1 upstream on its own threads.
pub struct RawUpstream {
    /// Where it listens.
    pub addr: SocketAddr,
    rx: mpsc::Receiver<Received>,
}

impl RawUpstream {
    /// Starts one answering each request with the bytes `reply` gives for it.
    pub fn start(reply: fn(&Received) -> String) -> RawUpstream {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("address");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let tx = tx.clone();
                std::thread::spawn(move || serve(s, &tx, reply));
            }
        });
        RawUpstream { addr, rx }
    }

    /// The next request received (waits up to ten seconds).
    pub fn next(&self) -> Option<Received> {
        self.rx.recv_timeout(TIMEOUT).ok()
    }
}

fn serve(mut s: TcpStream, tx: &mpsc::Sender<Received>, reply: fn(&Received) -> String) {
    let _ = s.set_read_timeout(Some(TIMEOUT));
    let mut buf = Vec::new();
    loop {
        let Some((received, used)) = parse_request(&buf) else {
            let mut chunk = [0u8; 4096];
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        buf.drain(..used);
        let answer = reply(&received);
        let _ = tx.send(received);
        if s.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// Where `needle` first occurs in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A whole request at the start of `buf`, and its length. Bodies are chunked
/// or `content-length` framed.
fn parse_request(buf: &[u8]) -> Option<(Received, usize)> {
    let head_end = find(buf, b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..head_end - 4]).into_owned();
    let lower = head.to_ascii_lowercase();
    let path = head.split(' ').nth(1).unwrap_or("").to_string();
    let length = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    let received = |trailers| Received {
        path: path.clone(),
        head: head.clone(),
        trailers,
    };
    if !lower.contains("transfer-encoding: chunked") {
        let end = head_end + length.unwrap_or(0);
        return (buf.len() >= end).then(|| (received(Vec::new()), end));
    }
    // The last chunk, then trailer lines up to an empty one.
    let last = head_end - 2 + find(&buf[head_end - 2..], b"\r\n0\r\n")? + 5;
    let end = last + find(&buf[last - 2..], b"\r\n\r\n")? + 2;
    let trailers = lines(&buf[last..end - 2]);
    Some((received(trailers), end))
}

fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// A response as the client read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status line.
    pub status_line: String,
    /// The header lines (case kept), in order.
    pub headers: Vec<String>,
    /// The body (decoded from chunked encoding).
    pub body: String,
    /// The trailer lines of a chunked body (case kept).
    pub trailers: Vec<String>,
}

/// Sends `request` (whole, ending with `connection: close`) to `addr` and
/// reads the response until the connection closes.
pub fn exchange(addr: &str, request: &str) -> Answer {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    s.write_all(request.as_bytes()).expect("send");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let head_end = find(&raw, b"\r\n\r\n").expect("a response head") + 4;
    let mut head = lines(&raw[..head_end]);
    let status_line = head.remove(0);
    let chunked = head
        .iter()
        .any(|h| h.eq_ignore_ascii_case("transfer-encoding: chunked"));
    let mut rest = &raw[head_end..];
    if !chunked {
        return Answer {
            status_line,
            headers: head,
            body: String::from_utf8_lossy(rest).into_owned(),
            trailers: Vec::new(),
        };
    }
    let mut body = Vec::new();
    loop {
        let line_end = find(rest, b"\r\n").expect("a chunk size");
        let size = std::str::from_utf8(&rest[..line_end])
            .ok()
            .and_then(|n| usize::from_str_radix(n, 16).ok())
            .expect("a hex chunk size");
        rest = &rest[line_end + 2..];
        if size == 0 {
            break;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
    Answer {
        status_line,
        headers: head,
        body: String::from_utf8_lossy(&body).into_owned(),
        trailers: lines(rest),
    }
}
