//! `request_mirror_policies` end to end: copies of a route's requests reach the
//! mirror clusters' upstreams (host with `-shadow`, unless disabled; the body
//! too), as often as `runtime_fraction` says, and never change the answer the
//! client gets: a mirror that stalls or fails is not waited for.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::Bytes;
use http_body_util::Full;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::programmable::{Act, Log, upstream};
use support::*;

async fn wait_count(log: &Log, n: u64) -> bool {
    for _ in 0..100 {
        if log.count.load(Ordering::SeqCst) >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn routes(policies: &str) -> String {
    format!(
        "- match: {{prefix: \"/\"}}\n  route:\n    cluster: main\n    request_mirror_policies:\n{policies}"
    )
}

#[tokio::test]
async fn copies_reach_the_mirrors_and_the_answer_is_the_main_cluster_s() {
    let (main, main_log) = upstream(|_, _| Act::Status(201)).await;
    let (shadow, shadow_log) = upstream(|_, _| Act::Status(500)).await;
    let (plain, plain_log) = upstream(|_, _| Act::Stall(Duration::from_secs(5))).await;
    let (never, never_log) = upstream(|_, _| Act::Status(200)).await;
    let policies = "    - cluster: shadow\n    - cluster: plain\n      disable_shadow_host_suffix_append: true\n      runtime_fraction: {default_value: {numerator: 100}}\n    - cluster: never\n      runtime_fraction: {default_value: {numerator: 0}}\n";
    let clusters = [
        static_cluster("main", &[main], ""),
        static_cluster("shadow", &[shadow], ""),
        static_cluster("plain", &[plain], ""),
        static_cluster("never", &[never], ""),
    ]
    .concat();
    let c = courier("", &routes(policies), &clusters).await;
    let mut h = H1::connect(c.listener).await;

    // A GET: the main answer (201), not the shadow's 500, and not held up by
    // the mirror that stalls for 5 s.
    let started = tokio::time::Instant::now();
    let get = http::Request::get("/a?q=1")
        .header("host", "api.example.com:8080")
        .body(Full::default())
        .unwrap();
    let r = h.send(get).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(wait_count(&shadow_log, 1).await && wait_count(&plain_log, 1).await);
    let host = |log: &Arc<Log>| {
        let log = Arc::clone(log);
        async move {
            let seen = log.seen.lock().await;
            seen.last()
                .unwrap()
                .headers
                .get("host")
                .unwrap()
                .to_str()
                .unwrap()
                .to_string()
        }
    };
    assert_eq!(host(&main_log).await, "api.example.com:8080");
    assert_eq!(host(&shadow_log).await, "api.example.com-shadow:8080");
    assert_eq!(host(&plain_log).await, "api.example.com:8080");

    // A POST: its body reaches the mirror too.
    let req = http::Request::post("/b")
        .header("host", "api.example.com")
        .body(Full::new(Bytes::from_static(b"payload")))
        .unwrap();
    assert_eq!(h.send(req).await.status, 201);
    assert!(wait_count(&shadow_log, 2).await);
    {
        let seen = shadow_log.seen.lock().await;
        let last = seen.last().unwrap();
        assert_eq!(&last.body[..], b"payload");
        assert_eq!(last.headers.get("host").unwrap(), "api.example.com-shadow");
    }
    assert_eq!(main_log.count.load(Ordering::SeqCst), 2);
    // The fraction 0 mirror never gets a copy.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(never_log.count.load(Ordering::SeqCst), 0);
    // The copies count in their clusters' stats.
    assert_eq!(stat(&c, "cluster.shadow.upstream_rq_500").await, 2);
}

#[tokio::test]
async fn a_fraction_mirrors_about_that_share() {
    let (main, _) = upstream(|_, _| Act::Status(200)).await;
    let (shadow, shadow_log) = upstream(|_, _| Act::Status(200)).await;
    let policies = "    - cluster: shadow\n      runtime_fraction: {default_value: {numerator: 250000, denominator: MILLION}}\n";
    let clusters = [
        static_cluster("main", &[main], ""),
        static_cluster("shadow", &[shadow], ""),
    ]
    .concat();
    let c = courier("", &routes(policies), &clusters).await;
    let mut h = H1::connect(c.listener).await;
    for _ in 0..400 {
        assert_eq!(h.get("/", &[]).await.status, 200);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // 25 % of 400 = 100; binomial standard deviation ~ 8.7.
    let n = shadow_log.count.load(Ordering::SeqCst);
    assert!((60..=140).contains(&n), "{n} of 400 mirrored");
}
