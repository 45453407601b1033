//! Route `priority: HIGH`: its requests use their own pools and count against
//! the HIGH circuit-breaker thresholds, as in Envoy.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use support::programmable::{Act, upstream};
use support::{H1, courier_with, stat, static_cluster};

#[tokio::test]
async fn high_priority_requests_use_the_high_thresholds() {
    let (addr, _) = upstream(|_, _| Act::Status(200)).await;
    let routes = "- match: {prefix: \"/high\"}\n  route: {cluster: u, priority: HIGH}\n- match: {prefix: \"/\"}\n  route: {cluster: u}\n";
    // DEFAULT may open no connection and queue nothing.
    let cb =
        "circuit_breakers:\n  thresholds:\n  - {max_connections: 0, max_pending_requests: 0}\n";
    let c = courier_with("", "", routes, &static_cluster("u", &[addr], cb)).await;
    let mut h = H1::connect(c.listener).await;
    let r = h.get("/", &[]).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-envoy-overloaded"), Some("true"));
    // HIGH has its own (default) thresholds and pools.
    assert_eq!(h.get("/high", &[]).await.status, 200);
    assert_eq!(h.get("/high", &[]).await.status, 200);
    assert_eq!(stat(&c, "cluster.u.upstream_rq_pending_overflow").await, 1);

    let cb = "circuit_breakers:\n  thresholds:\n  - {priority: HIGH, max_requests: 0}\n";
    let c = courier_with("", "", routes, &static_cluster("u", &[addr], cb)).await;
    let mut h = H1::connect(c.listener).await;
    assert_eq!(h.get("/", &[]).await.status, 200);
    let r = h.get("/high", &[]).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-envoy-overloaded"), Some("true"));
}
