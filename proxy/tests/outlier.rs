//! Outlier detection, end to end: ten programmable upstreams behind courier, some
//! failing; the detector ejects, returns and caps ejections as Envoy does.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::programmable::{Act, Log, upstream};
use support::{H1, courier_top, courier_with, stat, static_cluster};
use tokio::time::Instant;

const ROUTES: &str = "- match: {prefix: \"/\"}\n  route: {cluster: u}\n";

/// Ten upstreams; `bad(i)` decides how host `i` answers request `n`.
async fn ten(bad: fn(usize, u64) -> u16) -> (Vec<std::net::SocketAddr>, Vec<Arc<Log>>) {
    let mut addrs = Vec::new();
    let mut logs = Vec::new();
    for i in 0..10 {
        let (a, l) = upstream(move |n, _| Act::Status(bad(i, n))).await;
        addrs.push(a);
        logs.push(l);
    }
    (addrs, logs)
}

#[tokio::test]
async fn a_bad_host_is_ejected_returns_and_its_second_ejection_is_twice_as_long() {
    let (addrs, logs) = ten(|i, _| if i == 0 { 503 } else { 200 }).await;
    let od = "outlier_detection: {consecutive_5xx: 3, interval: 0.3s, base_ejection_time: 0.5s}\n";
    // The interval is longer than the bad host takes to fail 3 more times once
    // back, so the multiplier has not decayed when it is ejected again.
    let c = courier_with("", "", ROUTES, &static_cluster("u", &addrs, od)).await;
    let mut h = H1::connect(c.listener).await;
    let bad = &logs[0];
    let mut last_hit: Option<Instant> = None;
    let mut seen = bad.count.load(Ordering::SeqCst);
    let mut gaps = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while gaps.len() < 2 && Instant::now() < until {
        h.get("/", &[]).await;
        let now = bad.count.load(Ordering::SeqCst);
        if now != seen {
            let t = Instant::now();
            if let Some(l) = last_hit
                && t - l >= Duration::from_millis(300)
            {
                gaps.push(t - l);
            }
            last_hit = Some(t);
            seen = now;
        }
    }
    assert_eq!(
        gaps.len(),
        2,
        "the bad host was not ejected twice and returned"
    );
    // Ejected for base_ejection_time, then twice that the second time.
    assert!(gaps[0] >= Duration::from_millis(500), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_millis(1000), "{gaps:?}");
    assert!(
        stat(
            &c,
            "cluster.u.outlier_detection.ejections_enforced_consecutive_5xx"
        )
        .await
            >= 2
    );
    assert!(
        stat(
            &c,
            "cluster.u.outlier_detection.ejections_detected_consecutive_5xx"
        )
        .await
            >= 2
    );
    // Good hosts were never ejected.
    assert!(stat(&c, "cluster.u.outlier_detection.ejections_enforced_total").await >= 2);
}

#[tokio::test]
async fn max_ejection_percent_caps_ejections() {
    let (addrs, logs) = ten(|i, _| if i < 3 { 503 } else { 200 }).await;
    let od = "outlier_detection: {consecutive_5xx: 2, interval: 1s, base_ejection_time: 30s, max_ejection_percent: 20}\n";
    let c = courier_with("", "", ROUTES, &static_cluster("u", &addrs, od)).await;
    let mut h = H1::connect(c.listener).await;
    for _ in 0..300 {
        h.get("/", &[]).await;
    }
    assert_eq!(
        stat(&c, "cluster.u.outlier_detection.ejections_active").await,
        2
    );
    assert!(stat(&c, "cluster.u.outlier_detection.ejections_overflow").await >= 1);
    // Two of the bad hosts get nothing more; the third still gets traffic.
    let before: Vec<u64> = logs[..3]
        .iter()
        .map(|l| l.count.load(Ordering::SeqCst))
        .collect();
    for _ in 0..100 {
        h.get("/", &[]).await;
    }
    let grew = logs[..3]
        .iter()
        .zip(&before)
        .filter(|(l, b)| l.count.load(Ordering::SeqCst) > **b)
        .count();
    assert_eq!(grew, 1);
}

#[tokio::test]
async fn success_rate_ejects_the_host_failing_40_percent() {
    let (addrs, logs) = ten(|i, n| match i {
        0 if n % 5 < 2 => 503,
        0 => 200,
        _ if n % 100 == 99 => 503,
        _ => 200,
    })
    .await;
    let od = "outlier_detection: {interval: 0.5s, base_ejection_time: 30s, consecutive_5xx: 1000, \
              success_rate_request_volume: 20, success_rate_minimum_hosts: 5}\n";
    let c = courier_with("", "", ROUTES, &static_cluster("u", &addrs, od)).await;
    let mut h = H1::connect(c.listener).await;
    let until = Instant::now() + Duration::from_secs(10);
    let mut ejected = 0;
    while ejected == 0 && Instant::now() < until {
        for _ in 0..50 {
            h.get("/", &[]).await;
        }
        ejected = stat(
            &c,
            "cluster.u.outlier_detection.ejections_enforced_success_rate",
        )
        .await;
    }
    assert_eq!(ejected, 1);
    assert_eq!(
        stat(&c, "cluster.u.outlier_detection.ejections_active").await,
        1
    );
    let before = logs[0].count.load(Ordering::SeqCst);
    for _ in 0..100 {
        h.get("/", &[]).await;
    }
    assert_eq!(logs[0].count.load(Ordering::SeqCst), before);
}

#[tokio::test]
async fn with_every_host_ejected_panic_mode_still_routes_to_them() {
    let mut addrs = Vec::new();
    let mut logs = Vec::new();
    for _ in 0..2 {
        let (a, l) = upstream(|_, _| Act::Status(503)).await;
        addrs.push(a);
        logs.push(l);
    }
    let od = "outlier_detection: {consecutive_5xx: 2, interval: 1s, base_ejection_time: 30s, max_ejection_percent: 100}\n";
    let c = courier_with("", "", ROUTES, &static_cluster("u", &addrs, od)).await;
    let mut h = H1::connect(c.listener).await;
    let until = Instant::now() + Duration::from_secs(10);
    while stat(&c, "cluster.u.outlier_detection.ejections_active").await < 2
        && Instant::now() < until
    {
        h.get("/", &[]).await;
    }
    assert_eq!(
        stat(&c, "cluster.u.outlier_detection.ejections_active").await,
        2
    );
    // Healthy 0% is under the 50% panic threshold: both hosts still get traffic.
    let before: u64 = logs.iter().map(|l| l.count.load(Ordering::SeqCst)).sum();
    for _ in 0..10 {
        let r = h.get("/", &[]).await;
        assert_eq!(r.status, 503);
        assert_ne!(r.body, "no healthy upstream");
    }
    let after: u64 = logs.iter().map(|l| l.count.load(Ordering::SeqCst)).sum();
    assert_eq!(after - before, 10);
}

#[tokio::test]
async fn ejections_and_returns_are_written_to_the_event_log() {
    let (addrs, logs) = ten(|i, _| if i == 0 { 503 } else { 200 }).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outlier.log");
    let top = format!(
        "cluster_manager:\n  outlier_detection:\n    event_log_path: {}\n",
        path.display()
    );
    let od = "outlier_detection: {consecutive_5xx: 2, interval: 0.2s, base_ejection_time: 0.4s}\n";
    let c = courier_top(
        &["--concurrency", "1"],
        &top,
        "",
        "",
        ROUTES,
        &static_cluster("u", &addrs, od),
        "",
    )
    .await;
    let mut h = H1::connect(c.listener).await;
    // Until the bad host has been ejected and has come back.
    let until = Instant::now() + Duration::from_secs(10);
    let mut lines: Vec<serde_json::Value> = Vec::new();
    while Instant::now() < until {
        h.get("/", &[]).await;
        lines = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if lines.iter().any(|l| l["action"] == "UNEJECT") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let bad = addrs[0].to_string();
    let eject = lines
        .iter()
        .find(|l| l["action"] == "EJECT")
        .expect("an ejection event");
    assert_eq!(eject["type"], "CONSECUTIVE_5XX");
    assert_eq!(eject["cluster_name"], "u");
    assert_eq!(eject["upstream_url"], bad.as_str());
    assert_eq!(eject["enforced"], true);
    assert_eq!(eject["num_ejections"], 1);
    assert_eq!(eject["eject_consecutive_event"], serde_json::json!({}));
    // The first ejection has no earlier unejection to count from.
    assert!(eject.get("secs_since_last_action").is_none());
    assert!(eject["timestamp"].as_str().unwrap().ends_with('Z'));
    let uneject = lines
        .iter()
        .find(|l| l["action"] == "UNEJECT")
        .expect("an unejection event");
    assert_eq!(uneject["upstream_url"], bad.as_str());
    assert_eq!(uneject["secs_since_last_action"], "0");
    // Only the bad host is ever named.
    assert!(lines.iter().all(|l| l["upstream_url"] == bad.as_str()));
    assert!(logs[0].count.load(Ordering::SeqCst) >= 2);
}
