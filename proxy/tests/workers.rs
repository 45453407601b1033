//! `--concurrency N` through the real binary: every worker takes connections
//! (the kernel spreads them over the workers' `SO_REUSEPORT` sockets), as the
//! per-worker listener stats (`listener.<address>.worker_<n>.*`) show.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use support::*;

#[tokio::test]
async fn both_workers_take_connections() {
    let route =
        "- match: {prefix: \"/\"}\n  direct_response: {status: 200, body: {inline_string: hi}}\n";
    let unused = static_cluster("unused", &["127.0.0.1:1".parse().unwrap()], "");
    let c = courier_args(&["--concurrency", "2"], "", "", route, &unused).await;
    let n = 64;
    for _ in 0..n {
        // A new connection each time: a new source port, hashed afresh by the kernel.
        let r = H1::connect(c.listener).await.get("/", &[]).await;
        assert_eq!((r.status, r.body.as_str()), (200, "hi"));
    }
    // Envoy names listener stats by the configured address (port 0 here).
    let addr = "127.0.0.1_0";
    let total = stat(&c, &format!("listener.{addr}.downstream_cx_total")).await;
    let w0 = stat(&c, &format!("listener.{addr}.worker_0.downstream_cx_total")).await;
    let w1 = stat(&c, &format!("listener.{addr}.worker_1.downstream_cx_total")).await;
    assert_eq!(total, n, "{}", get_text(&c.admin, "/stats").await);
    assert_eq!(w0 + w1, n);
    // All 64 on one worker would happen with probability 2^-63.
    assert!(w0 > 0 && w1 > 0, "worker_0: {w0}, worker_1: {w1}");
    assert_eq!(
        stat(&c, &format!("listener.{addr}.worker_2.downstream_cx_total")).await,
        0
    );
}
