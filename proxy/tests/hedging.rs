//! `hedge_on_per_try_timeout`: a per-try timeout starts a retry without
//! cancelling the slow attempt, and the first good response wins.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;
use support::programmable::{Act, upstream};
use support::{H1, courier_with, stat, static_cluster};

const COUNTS: &str = "include_request_attempt_count: true\ninclude_attempt_count_in_response: true";

fn routes(hedge: bool) -> String {
    format!(
        "- match: {{prefix: \"/\"}}\n  route:\n    cluster: u\n    hedge_policy: {{hedge_on_per_try_timeout: {hedge}}}\n    retry_policy: {{retry_on: 5xx, num_retries: 1, per_try_timeout: 0.1s, retry_back_off: {{base_interval: 0.001s}}}}\n"
    )
}

#[tokio::test]
async fn the_hedged_attempt_answers_while_the_first_still_waits() {
    let (addr, log) = upstream(|n, _| if n == 0 { Act::Gate } else { Act::Status(200) }).await;
    let c = courier_with("", COUNTS, &routes(true), &static_cluster("u", &[addr], "")).await;
    let r = H1::connect(c.listener).await.get("/", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "");
    assert_eq!(r.header("x-envoy-attempt-count"), Some("2"));
    assert_eq!(log.count.load(Ordering::SeqCst), 2);
    assert_eq!(stat(&c, "cluster.u.upstream_rq_retry").await, 1);
    log.open_gate();
}

#[tokio::test]
async fn the_first_attempt_is_not_cancelled_and_can_win() {
    // The first answers after its per-try timeout but long before the hedge.
    let (addr, log) = upstream(|n, _| {
        if n == 0 {
            Act::Stall(Duration::from_millis(400))
        } else {
            Act::Gate
        }
    })
    .await;
    let c = courier_with("", COUNTS, &routes(true), &static_cluster("u", &[addr], "")).await;
    let r = H1::connect(c.listener).await.get("/", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "late");
    assert_eq!(log.count.load(Ordering::SeqCst), 2);
    // No per-try timeout is counted for a hedged attempt, as in Envoy.
    assert_eq!(stat(&c, "cluster.u.upstream_rq_per_try_timeout").await, 0);
    log.open_gate();
}

#[tokio::test]
async fn a_failed_hedge_leaves_the_first_attempt_to_answer() {
    // The hedge fails at once (no retries left for it); the first still answers.
    let (addr, log) = upstream(|n, _| {
        if n == 0 {
            Act::Stall(Duration::from_millis(400))
        } else {
            Act::Status(503)
        }
    })
    .await;
    let c = courier_with("", COUNTS, &routes(true), &static_cluster("u", &[addr], "")).await;
    let r = H1::connect(c.listener).await.get("/", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "late");
    assert_eq!(log.count.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn without_hedging_the_slow_attempt_is_cancelled() {
    let (addr, log) = upstream(|n, _| {
        if n == 0 {
            Act::Stall(Duration::from_millis(400))
        } else {
            Act::Status(200)
        }
    })
    .await;
    let c = courier_with(
        "",
        COUNTS,
        &routes(false),
        &static_cluster("u", &[addr], ""),
    )
    .await;
    let r = H1::connect(c.listener).await.get("/", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "");
    assert_eq!(stat(&c, "cluster.u.upstream_rq_per_try_timeout").await, 1);
    assert_eq!(log.count.load(Ordering::SeqCst), 2);
}
