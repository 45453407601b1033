//! Opens many idle HTTP/1.1 keep-alive connections to a proxy, for the load
//! harness's memory figure (RSS growth per downstream connection).
//!
//! Usage: `bench-idle-conns ADDR COUNT HOLD_SECONDS [h2c]`. Each connection sends one
//! `GET /` and reads the whole response, so the proxy has set up its per-connection
//! HTTP state, then stays open and idle (with `h2c`: an HTTP/2 prior-knowledge
//! connection, kept with its client state). Prints `open N` (N connections that got a
//! response) once all are done, holds them for `HOLD_SECONDS`, then exits
//! (closing them). Connections are opened 200 at a time and each step has a timeout,
//! so the run is bounded.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Error = Box<dyn std::error::Error + Send + Sync>;

const BATCH: usize = 200;
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection that has completed one request, or `None` if any step failed.
async fn open(addr: String) -> Option<TcpStream> {
    let mut stream = tokio::time::timeout(STEP_TIMEOUT, TcpStream::connect(addr.as_str()))
        .await
        .ok()?
        .ok()?;
    let req = "GET / HTTP/1.1\r\nhost: bench.local\r\nuser-agent: bench-idle-conns\r\n\r\n";
    stream.write_all(req.as_bytes()).await.ok()?;
    // Read until the headers and the (small, Content-Length) body are in.
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    let done = tokio::time::timeout(STEP_TIMEOUT, async {
        loop {
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = find(&buf, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if buf.len() >= end + 4 + len {
                    return Some(());
                }
            }
            if buf.len() > 64 * 1024 {
                return None;
            }
        }
    })
    .await;
    matches!(done, Ok(Some(()))).then_some(stream)
}

/// An HTTP/2 (prior knowledge) connection that has completed one request; the
/// client half that keeps it open.
async fn open_h2(
    addr: String,
) -> Option<hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>> {
    let stream = tokio::time::timeout(STEP_TIMEOUT, TcpStream::connect(addr.as_str()))
        .await
        .ok()?
        .ok()?;
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .ok()?;
    tokio::spawn(conn);
    let req = http::Request::get("http://bench.local/")
        .body(http_body_util::Empty::new())
        .ok()?;
    let resp = tokio::time::timeout(STEP_TIMEOUT, send.send_request(req))
        .await
        .ok()?
        .ok()?;
    use http_body_util::BodyExt;
    tokio::time::timeout(STEP_TIMEOUT, resp.into_body().collect())
        .await
        .ok()?
        .ok()?;
    Some(send)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let (addr, count, hold, h2) = match args.as_slice() {
        [_, addr, count, hold] => (addr, count, hold, false),
        [_, addr, count, hold, p] if p == "h2c" => (addr, count, hold, true),
        _ => return Err("usage: bench-idle-conns ADDR COUNT HOLD_SECONDS [h2c]".into()),
    };
    let count: usize = count.parse()?;
    let hold = Duration::from_secs(hold.parse()?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut conns = Vec::with_capacity(count);
        let mut h2_conns = Vec::new();
        let mut failed = 0usize;
        for start in (0..count).step_by(BATCH) {
            let batch = BATCH.min(count - start);
            if h2 {
                let tasks: Vec<_> = (0..batch)
                    .map(|_| tokio::spawn(open_h2(addr.clone())))
                    .collect();
                for t in tasks {
                    match t.await {
                        Ok(Some(s)) => h2_conns.push(s),
                        _ => failed += 1,
                    }
                }
                continue;
            }
            let tasks: Vec<_> = (0..batch)
                .map(|_| tokio::spawn(open(addr.clone())))
                .collect();
            for t in tasks {
                match t.await {
                    Ok(Some(s)) => conns.push(s),
                    _ => failed += 1,
                }
            }
        }
        println!("open {} failed {failed}", conns.len() + h2_conns.len());
        tokio::time::sleep(hold).await;
        drop(conns);
        drop(h2_conns);
        Ok(())
    })
}
