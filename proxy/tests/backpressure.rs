//! Backpressure on both sides: a body the far side does not read is not
//! swallowed by courier. A client uploading 128 MiB to an upstream that stops
//! reading gets only as far as the sockets' buffers hold; so does an upstream
//! sending 128 MiB to a client that stops reading. Once the far side reads
//! again every byte arrives, in order.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use support::{courier_with, static_cluster};

const BODY: u64 = 128 << 20;
/// What the four sockets on the way (client send, courier receive and send,
/// far side receive) may hold on loopback, with room: far below the body.
const SOCKET_ROOM: u64 = 48 << 20;

/// 64 KiB of the pattern, plus room to start anywhere in it.
fn pattern() -> Vec<u8> {
    (0..64 * 1024 + 251u64).map(|i| (i % 251) as u8).collect()
}

/// Reads a head; its `content-length`.
fn read_head(r: &mut BufReader<TcpStream>) -> u64 {
    let mut length = 0;
    for _ in 0..100 {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        if let Some((n, v)) = line.split_once(':')
            && n.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap();
        }
    }
    length
}

/// Reads `n` bytes, checking each is `(offset % 251) as u8`.
fn read_pattern(r: &mut impl Read, n: u64) -> u64 {
    let pattern = pattern();
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen = 0u64;
    while seen < n {
        let want = usize::try_from((n - seen).min(buf.len() as u64)).unwrap();
        let got = r.read(&mut buf[..want]).unwrap();
        assert!(got > 0, "closed after {seen} bytes");
        let at = usize::try_from(seen % 251).unwrap();
        assert!(
            buf[..got] == pattern[at..at + got],
            "bytes from {seen} differ"
        );
        seen += got as u64;
    }
    seen
}

/// Writes `n` pattern bytes, counting them in `written` as the socket takes them.
fn write_pattern(w: &mut impl Write, n: u64, written: &AtomicU64) {
    let chunk = pattern();
    let mut sent = 0u64;
    while sent < n {
        // Each write starts where the pattern is.
        let at = usize::try_from(sent % 251).unwrap();
        let take = usize::try_from((n - sent).min(64 * 1024)).unwrap();
        w.write_all(&chunk[at..at + take]).unwrap();
        sent += take as u64;
        written.store(sent, Ordering::SeqCst);
    }
}

/// Waits (bounded) until `written` stops growing; its value then.
fn settled(written: &AtomicU64) -> u64 {
    let mut last = written.load(Ordering::SeqCst);
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(200));
        let now = written.load(Ordering::SeqCst);
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_the_upstream_does_not_read_is_held_back() {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let up_addr = upstream.local_addr().unwrap();
    let go = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let (go2, received2) = (Arc::clone(&go), Arc::clone(&received));
    std::thread::spawn(move || {
        let (s, _) = upstream.accept().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let length = read_head(&mut r);
        // Stop reading until told.
        while !go2.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
        }
        received2.store(read_pattern(&mut r, length), Ordering::SeqCst);
        let mut s = s;
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .unwrap();
    });
    let c = courier_with("", "", ROUTE, &static_cluster("u", &[up_addr], "")).await;
    let listener: SocketAddr = c.listener;
    let written = Arc::new(AtomicU64::new(0));
    let w2 = Arc::clone(&written);
    let client = std::thread::spawn(move || {
        let mut s = TcpStream::connect(listener).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        write!(
            s,
            "POST /up HTTP/1.1\r\nhost: example.com\r\nconnection: close\r\ncontent-length: {BODY}\r\n\r\n"
        )
        .unwrap();
        write_pattern(&mut s, BODY, &w2);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    });
    let held = tokio::task::spawn_blocking({
        let w = Arc::clone(&written);
        move || settled(&w)
    })
    .await
    .unwrap();
    println!("client wrote {held} bytes while the upstream did not read");
    assert!(
        held < SOCKET_ROOM,
        "courier took {held} bytes the upstream did not read"
    );
    go.store(true, Ordering::SeqCst);
    let out = tokio::task::spawn_blocking(move || client.join().unwrap())
        .await
        .unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert_eq!(received.load(Ordering::SeqCst), BODY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_the_client_does_not_read_is_held_back() {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let up_addr = upstream.local_addr().unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let w2 = Arc::clone(&written);
    std::thread::spawn(move || {
        let (s, _) = upstream.accept().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        read_head(&mut r);
        let mut s = s;
        write!(s, "HTTP/1.1 200 OK\r\ncontent-length: {BODY}\r\n\r\n").unwrap();
        write_pattern(&mut s, BODY, &w2);
    });
    let c = courier_with("", "", ROUTE, &static_cluster("u", &[up_addr], "")).await;
    let mut s = TcpStream::connect(c.listener).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(b"GET /down HTTP/1.1\r\nhost: example.com\r\n\r\n")
        .unwrap();
    let r = BufReader::new(s);
    // The head, then nothing read for a while.
    let (length, held, mut r) = tokio::task::spawn_blocking({
        let w = Arc::clone(&written);
        move || {
            let mut r = r;
            let length = read_head(&mut r);
            (length, settled(&w), r)
        }
    })
    .await
    .unwrap();
    assert_eq!(length, BODY);
    println!("upstream wrote {held} bytes while the client did not read");
    assert!(
        held < SOCKET_ROOM,
        "courier took {held} bytes the client did not read"
    );
    let got = tokio::task::spawn_blocking(move || read_pattern(&mut r, BODY))
        .await
        .unwrap();
    assert_eq!(got, BODY);
}

const ROUTE: &str = "- match: {prefix: \"/\"}\n  route: {cluster: u, timeout: 0s}\n";
