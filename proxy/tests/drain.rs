//! Draining on SIGTERM through the real binary: requests in flight finish, new
//! connections are refused, HTTP/1.1 responses finished during the drain carry
//! `connection: close`, HTTP/2 clients get GOAWAY, and courier exits 0 within
//! `--drain-time-s`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use support::*;
use tokio::net::{TcpListener, TcpStream};

/// An upstream that holds every response ~1 s; counts the requests it received.
async fn slow_upstream(received: Arc<AtomicUsize>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let received = Arc::clone(&received);
            tokio::spawn(async move {
                let service = service_fn(move |_req: Request<Incoming>| {
                    received.fetch_add(1, Ordering::SeqCst);
                    async move {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from("slow done"))))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

const ROUTE: &str = "- match: {prefix: \"/\"}\n  route: {cluster: slow}\n";

/// Waits (bounded by count) until `n` requests reached the upstream.
async fn wait_for(received: &AtomicUsize, n: usize) {
    for _ in 0..500 {
        if received.load(Ordering::SeqCst) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "only {} of {n} requests reached the upstream",
        received.load(Ordering::SeqCst)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_lets_100_in_flight_requests_finish_and_refuses_new_connections() {
    let received = Arc::new(AtomicUsize::new(0));
    let up = slow_upstream(Arc::clone(&received)).await;
    let drain_time_s = 5;
    let mut c = courier_args(
        &[
            "--concurrency",
            "2",
            "--drain-time-s",
            &drain_time_s.to_string(),
        ],
        "",
        "",
        ROUTE,
        &static_cluster("slow", &[up], ""),
    )
    .await;
    let listener = c.listener;

    // 100 keep-alive HTTP/1.1 connections, one slow request each.
    let mut h1 = Vec::new();
    for _ in 0..100 {
        let mut conn = H1::connect(listener).await;
        h1.push(tokio::spawn(async move { conn.get("/", &[]).await }));
    }
    // One HTTP/2 connection with a slow stream in flight.
    let mut h2 = H2::connect(listener).await;
    let h2_req = {
        let mut h2 = H2(h2.0.clone());
        tokio::spawn(async move {
            let req = Request::get("http://example.com/")
                .body(Full::default())
                .unwrap();
            h2.send(req).await
        })
    };
    wait_for(&received, 101).await;

    let signalled = tokio::time::Instant::now();
    c.terminate();
    // Give the workers a moment to close their sockets; requests are still in flight.
    tokio::time::sleep(Duration::from_millis(200)).await;

    // New connections are refused (or reset at once, never served).
    for _ in 0..10 {
        if let Ok(mut s) = TcpStream::connect(listener).await {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let _ = s
                .write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                .await;
            let mut out = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(1), s.read_to_end(&mut out))
                .await
                .expect("a connection made during the drain hung instead of being refused");
            assert!(
                read.is_err() || out.is_empty(),
                "a new connection was served during the drain: {}",
                String::from_utf8_lossy(&out)
            );
        }
    }

    // Every in-flight request completes; HTTP/1.1 responses close their connection.
    for t in h1 {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, "slow done");
        assert_eq!(r.header("connection"), Some("close"), "{r:?}");
    }
    let r = h2_req.await.unwrap();
    assert_eq!((r.status, r.body.as_str()), (200, "slow done"));
    // The HTTP/2 connection got GOAWAY: it takes no new stream.
    let refused = tokio::time::timeout(Duration::from_secs(2), async {
        let req = Request::get("http://example.com/")
            .body(Full::default())
            .unwrap();
        h2.0.send_request(req).await
    })
    .await
    .expect("a new stream after GOAWAY hung");
    assert!(
        refused.is_err(),
        "a new HTTP/2 stream was served during the drain"
    );

    // Nothing is left in flight: courier exits 0 well before the drain time.
    let status = c.wait_exit(drain_time_s * 50 + 100).await;
    let elapsed = signalled.elapsed();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{status:?}");
    assert!(
        elapsed < Duration::from_secs(drain_time_s.into()),
        "exit took {elapsed:?}"
    );
    assert_eq!(received.load(Ordering::SeqCst), 101);
}

#[tokio::test]
async fn the_drain_time_bounds_the_wait_for_stuck_requests() {
    // An upstream that never answers: the drain cannot finish on its own.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let mut c = courier_args(
        &["--concurrency", "1", "--drain-time-s", "1"],
        "",
        "",
        ROUTE,
        &static_cluster("slow", &[up], ""),
    )
    .await;
    let mut conn = H1::connect(c.listener).await;
    let stuck = tokio::spawn(async move { conn.get("/", &[]).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = tokio::time::Instant::now();
    c.terminate();
    let status = c.wait_exit(250).await;
    let elapsed = signalled.elapsed();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{status:?}");
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(3),
        "exit after {elapsed:?} with a 1 s drain time"
    );
    stuck.abort();
    held.abort();
}
