//! Normal clients' latency through a proxy while slow-loris clients hold
//! connections open (issue 8's benchmark).
//!
//! Usage: `bench-slowloris ADDR SLOW_CONNECTIONS SECONDS`. First a baseline:
//! four keep-alive clients send `GET /` back to back for SECONDS and their
//! latencies are recorded. Then SLOW_CONNECTIONS connections each send the
//! start of a request (`GET / HTTP/1.1`, `host`) and one more header line every
//! 2 s, never finishing it, while the same four clients run for SECONDS again.
//! Prints both phases' requests, p50 and p99, the p50 ratio, and how many slow
//! connections the proxy still held at the end (it may time them out: Envoy's
//! `request_headers_timeout`). Everything is bounded: connects and requests
//! have timeouts, each phase lasts SECONDS, slow connections are opened 200
//! at a time.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

type Error = Box<dyn std::error::Error + Send + Sync>;

const CLIENTS: usize = 4;
const STEP_TIMEOUT: Duration = Duration::from_secs(5);
const TRICKLE: Duration = Duration::from_secs(2);

/// Sends `GET /` on `s` and reads the response (Content-Length bodies); its latency.
async fn request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Duration> {
    let start = Instant::now();
    s.write_all(b"GET / HTTP/1.1\r\nhost: bench.local\r\n\r\n")
        .await
        .ok()?;
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(STEP_TIMEOUT, s.read(&mut chunk))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return head.starts_with("http/1.1 200").then(|| start.elapsed());
            }
        }
    }
}

/// Four clients for `secs`: every latency, and the failures.
async fn phase(addr: &str, secs: Duration) -> (Vec<Duration>, usize) {
    let until = Instant::now() + secs;
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let addr = addr.to_string();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut failed = 0usize;
                let mut buf = Vec::with_capacity(4096);
                while Instant::now() < until {
                    let Ok(Ok(mut s)) =
                        tokio::time::timeout(STEP_TIMEOUT, TcpStream::connect(addr.as_str())).await
                    else {
                        failed += 1;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let _ = s.set_nodelay(true);
                    while Instant::now() < until {
                        match request(&mut s, &mut buf).await {
                            Some(d) => lat.push(d),
                            None => {
                                failed += 1;
                                break;
                            }
                        }
                    }
                }
                (lat, failed)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut failed = 0;
    for t in tasks {
        if let Ok((l, f)) = t.await {
            all.extend(l);
            failed += f;
        }
    }
    all.sort();
    (all, failed)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A slow-loris connection: the start of a request, then a header line every
/// [`TRICKLE`] until `until`; whether the proxy still held it at the end.
async fn slow(addr: String, until: Instant) -> bool {
    let Ok(Ok(mut s)) = tokio::time::timeout(STEP_TIMEOUT, TcpStream::connect(addr.as_str())).await
    else {
        return false;
    };
    if s.write_all(b"GET / HTTP/1.1\r\nhost: bench.local\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut i = 0u32;
    while Instant::now() + TRICKLE < until {
        tokio::time::sleep(TRICKLE).await;
        i += 1;
        if s.write_all(format!("x-slow-{i}: 1\r\n").as_bytes())
            .await
            .is_err()
        {
            return false;
        }
    }
    // Still open: a read would block rather than see the proxy's close.
    let mut b = [0u8; 1];
    tokio::time::timeout(Duration::from_millis(10), s.read(&mut b))
        .await
        .is_err()
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let [_, addr, count, secs] = args.as_slice() else {
        return Err("usage: bench-slowloris ADDR SLOW_CONNECTIONS SECONDS".into());
    };
    let count: usize = count.parse()?;
    let secs = Duration::from_secs(secs.parse()?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let (base, base_failed) = phase(addr, secs).await;
        // Open the slow connections (200 at a time), then measure again while
        // they trickle.
        let until = Instant::now() + secs + Duration::from_secs(6);
        let mut slow_tasks = Vec::with_capacity(count);
        for start in (0..count).step_by(200) {
            for _ in 0..200.min(count - start) {
                slow_tasks.push(tokio::spawn(slow(addr.clone(), until)));
            }
            tokio::task::yield_now().await;
        }
        // Let them connect and send their first lines.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (loaded, loaded_failed) = phase(addr, secs).await;
        println!(
            "baseline: {} requests ({base_failed} failed) p50 {:?} p99 {:?}",
            base.len(),
            pct(&base, 0.5),
            pct(&base, 0.99)
        );
        println!(
            "with {count} slow-loris connections: {} requests ({loaded_failed} failed) p50 {:?} p99 {:?}",
            loaded.len(),
            pct(&loaded, 0.5),
            pct(&loaded, 0.99)
        );
        println!(
            "p50 ratio {:.2}",
            pct(&loaded, 0.5).as_secs_f64() / pct(&base, 0.5).as_secs_f64().max(1e-9)
        );
        let mut held = 0;
        for t in slow_tasks {
            if matches!(t.await, Ok(true)) {
                held += 1;
            }
        }
        println!("slow-loris connections still open at the end: {held}");
        Ok(())
    })
}
