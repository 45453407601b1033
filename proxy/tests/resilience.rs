//! Retries and circuit breakers, end to end: the real courier binary in front of
//! programmable upstreams on loopback that fail, stall or refuse on command.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::programmable::{Act, closed_port, upstream};
use support::{H1, courier_args, courier_with, stat, static_cluster};

const COUNTS: &str = "include_request_attempt_count: true\ninclude_attempt_count_in_response: true";

fn route(policy: &str) -> String {
    format!("- match: {{prefix: \"/\"}}\n  route:\n    cluster: u\n    retry_policy: {policy}\n")
}

#[tokio::test]
async fn five_xx_is_retried_num_retries_times_with_attempt_counts() {
    let (addr, log) = upstream(|_, _| Act::Status(503)).await;
    let c = courier_with(
        "",
        COUNTS,
        &route("{retry_on: 5xx, num_retries: 3, retry_back_off: {base_interval: 0.001s}}"),
        &static_cluster("u", &[addr], ""),
    )
    .await;
    let mut h = H1::connect(c.listener).await;
    let r = h.get("/", &[]).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-envoy-attempt-count"), Some("4"));
    assert_eq!(log.count.load(Ordering::SeqCst), 4);
    let attempts: Vec<_> = log
        .seen
        .lock()
        .await
        .iter()
        .map(|s| s.attempt.clone().unwrap())
        .collect();
    assert_eq!(attempts, ["1", "2", "3", "4"]);
    assert_eq!(stat(&c, "cluster.u.upstream_rq_retry").await, 3);
    assert_eq!(
        stat(&c, "cluster.u.upstream_rq_retry_limit_exceeded").await,
        1
    );
    assert_eq!(stat(&c, "cluster.u.upstream_rq_503").await, 4);
}

#[tokio::test]
async fn success_after_a_retry_counts_retry_success() {
    let (addr, log) = upstream(|n, _| Act::Status(if n == 0 { 502 } else { 200 })).await;
    let c = courier_with(
        "",
        COUNTS,
        &route("{retry_on: gateway-error, retry_back_off: {base_interval: 0.001s}}"),
        &static_cluster("u", &[addr], ""),
    )
    .await;
    let r = H1::connect(c.listener).await.get("/", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-envoy-attempt-count"), Some("2"));
    assert_eq!(log.count.load(Ordering::SeqCst), 2);
    assert_eq!(stat(&c, "cluster.u.upstream_rq_retry_success").await, 1);
}

#[tokio::test]
async fn connect_failure_is_retried_to_a_live_host() {
    let (addr, log) = upstream(|_, _| Act::Status(200)).await;
    let dead = closed_port();
    let c = courier_with(
        "",
        "",
        &route(
            "{retry_on: connect-failure, num_retries: 2, retry_back_off: {base_interval: 0.001s}, \
             retry_host_predicate: [{name: envoy.retry_host_predicates.previous_hosts, typed_config: \
             {\"@type\": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate}}]}",
        ),
        &static_cluster("u", &[dead, addr], ""),
    )
    .await;
    let mut h = H1::connect(c.listener).await;
    for _ in 0..6 {
        assert_eq!(h.get("/", &[]).await.status, 200);
    }
    assert_eq!(log.count.load(Ordering::SeqCst), 6);
    // Round robin sent some first attempts to the closed port.
    assert!(stat(&c, "cluster.u.upstream_cx_connect_fail").await >= 1);
    assert!(stat(&c, "cluster.u.upstream_rq_retry").await >= 1);
}

#[tokio::test]
async fn per_try_timeout_then_success() {
    let (addr, log) = upstream(|n, _| {
        if n == 0 {
            Act::Stall(Duration::from_secs(5))
        } else {
            Act::Status(200)
        }
    })
    .await;
    let c = courier_with(
        "",
        COUNTS,
        &route("{retry_on: 5xx, per_try_timeout: 0.2s, retry_back_off: {base_interval: 0.001s}}"),
        &static_cluster("u", &[addr], ""),
    )
    .await;
    let r = H1::connect(c.listener).await.get("/", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-envoy-attempt-count"), Some("2"));
    assert_eq!(log.count.load(Ordering::SeqCst), 2);
    assert_eq!(stat(&c, "cluster.u.upstream_rq_per_try_timeout").await, 1);
    // The upstream was told the per-try timeout.
    let seen = log.seen.lock().await;
    assert_eq!(
        seen[0]
            .headers
            .get("x-envoy-expected-rq-timeout-ms")
            .unwrap(),
        "200"
    );
}

#[tokio::test]
async fn per_try_timeout_without_retries_left_is_a_504() {
    let (addr, _log) = upstream(|_, _| Act::Stall(Duration::from_secs(5))).await;
    let c = courier_with(
        "",
        "",
        &route("{retry_on: reset, num_retries: 1, per_try_timeout: 0.1s, retry_back_off: {base_interval: 0.001s}}"),
        &static_cluster("u", &[addr], ""),
    )
    .await;
    let r = H1::connect(c.listener).await.get("/", &[]).await;
    assert_eq!(r.status, 504);
    assert_eq!(r.body, "upstream request timeout");
    assert_eq!(stat(&c, "cluster.u.upstream_rq_per_try_timeout").await, 2);
}

#[tokio::test]
async fn previous_hosts_never_repeats_a_host() {
    let mut hosts = Vec::new();
    let mut logs = Vec::new();
    for _ in 0..3 {
        let (a, l) = upstream(|_, _| Act::Status(503)).await;
        hosts.push(a);
        logs.push(l);
    }
    let c = courier_with(
        "",
        "",
        &route(
            "{retry_on: 5xx, num_retries: 2, host_selection_retry_max_attempts: 200, \
             retry_back_off: {base_interval: 0.001s}, retry_host_predicate: \
             [{name: envoy.retry_host_predicates.previous_hosts, typed_config: \
             {\"@type\": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate}}]}",
        ),
        &static_cluster("u", &hosts, "lb_policy: RANDOM\n"),
    )
    .await;
    let mut h = H1::connect(c.listener).await;
    for i in 1..=5u64 {
        assert_eq!(h.get("/", &[]).await.status, 503);
        // Three attempts, one per host.
        for l in &logs {
            assert_eq!(l.count.load(Ordering::SeqCst), i);
        }
    }
}

async fn post(c: &support::Courier, body: &'static [u8]) -> u16 {
    let req = Request::post("/")
        .header("host", "example.com")
        .body(Full::new(Bytes::from_static(body)))
        .unwrap();
    H1::connect(c.listener).await.send(req).await.status
}

#[tokio::test]
async fn a_body_beyond_the_buffer_limit_is_not_retried() {
    let (addr, log) = upstream(|_, _| Act::Status(503)).await;
    let routes = "- match: {prefix: \"/\"}\n  per_request_buffer_limit_bytes: 16\n  route:\n    cluster: u\n    retry_policy: {retry_on: 5xx, retry_back_off: {base_interval: 0.001s}}\n";
    let c = courier_with("", "", routes, &static_cluster("u", &[addr], "")).await;
    // Within the limit: sent twice, whole both times.
    assert_eq!(post(&c, b"0123456789").await, 503);
    assert_eq!(log.count.load(Ordering::SeqCst), 2);
    {
        let seen = log.seen.lock().await;
        assert!(seen.iter().all(|s| &s.body[..] == b"0123456789"));
    }
    // Past it: sent once, whole.
    let long = b"0123456789012345678901234567890123456789";
    assert_eq!(post(&c, long).await, 503);
    assert_eq!(log.count.load(Ordering::SeqCst), 3);
    assert_eq!(&log.seen.lock().await[2].body[..], &long[..]);
}

#[tokio::test]
async fn grpc_unavailable_is_retried_by_retry_grpc_on() {
    let (addr, log) = upstream(|n, _| Act::Grpc(if n == 0 { 14 } else { 0 })).await;
    let c = courier_with(
        "",
        "",
        &route("{retry_on: \"unavailable,cancelled\", retry_back_off: {base_interval: 0.001s}}"),
        &static_cluster("u", &[addr], ""),
    )
    .await;
    let r = H1::connect(c.listener)
        .await
        .get("/svc/Method", &[("content-type", "application/grpc")])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("grpc-status"), Some("0"));
    assert_eq!(log.count.load(Ordering::SeqCst), 2);
    // Not retried: a status the policy does not name.
    let (addr, log) = upstream(|_, _| Act::Grpc(13)).await;
    let c = courier_with(
        "",
        "",
        &route("{retry_on: unavailable, retry_back_off: {base_interval: 0.001s}}"),
        &static_cluster("u", &[addr], ""),
    )
    .await;
    let r = H1::connect(c.listener).await.get("/", &[]).await;
    assert_eq!(r.header("grpc-status"), Some("13"));
    assert_eq!(log.count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn retry_headers_count_on_internal_requests_only_and_are_consumed() {
    let (addr, log) = upstream(|_, _| Act::Status(500)).await;
    let routes = "- match: {prefix: \"/\"}\n  route: {cluster: u}\n";
    let headers = [("x-envoy-retry-on", "5xx"), ("x-envoy-max-retries", "2")];
    // External (no internal address configured): ignored.
    let c = courier_with("", "", routes, &static_cluster("u", &[addr], "")).await;
    let r = H1::connect(c.listener).await.get("/", &headers).await;
    assert_eq!(r.status, 500);
    assert_eq!(log.count.load(Ordering::SeqCst), 1);
    // Internal (loopback peers trusted): three attempts.
    let internal = "use_remote_address: true\ninternal_address_config: {cidr_ranges: [{address_prefix: 127.0.0.1, prefix_len: 32}]}";
    let c = courier_with(internal, "", routes, &static_cluster("u", &[addr], "")).await;
    let r = H1::connect(c.listener).await.get("/", &headers).await;
    assert_eq!(r.status, 500);
    assert_eq!(log.count.load(Ordering::SeqCst), 4);
    let seen = log.seen.lock().await;
    assert!(
        seen.iter()
            .all(|s| !s.headers.contains_key("x-envoy-retry-on")
                && !s.headers.contains_key("x-envoy-max-retries"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_budget_bounds_concurrent_retries() {
    // Always failing, slowly enough that the 200 requests and their retries overlap.
    let (addr, log) = upstream(|_, _| Act::StallStatus(Duration::from_millis(200), 503)).await;
    let cluster = static_cluster(
        "u",
        &[addr],
        "circuit_breakers:\n  thresholds:\n  - retry_budget: {budget_percent: {value: 10}, min_retry_concurrency: 3}\n",
    );
    let c = courier_with(
        "",
        COUNTS,
        &route("{retry_on: 5xx, num_retries: 3, retry_back_off: {base_interval: 0.001s}}"),
        &cluster,
    )
    .await;
    let listener = c.listener;
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            tokio::spawn(async move { H1::connect(listener).await.get("/", &[]).await.status })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), 503);
    }
    // At most 10% of 200 active requests retry at once (one worker: no races).
    let max = log.retries_max.load(Ordering::SeqCst);
    assert!((1..=20).contains(&max), "{max} retries in flight at once");
    let overflow = stat(&c, "cluster.u.upstream_rq_retry_overflow").await;
    let retries = stat(&c, "cluster.u.upstream_rq_retry").await;
    assert!(overflow > 0, "no retry overflowed");
    // Every attempt reached the upstream but those whose connection failed
    // (on a loaded machine some connects outlast the 1 s connect timeout).
    let connect_failed = stat(&c, "cluster.u.upstream_cx_connect_fail").await;
    assert_eq!(
        log.count.load(Ordering::SeqCst),
        200 + retries - connect_failed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_requests_overflows_with_503_overloaded_across_workers() {
    let (addr, log) = upstream(|_, _| Act::Gate).await;
    let cluster = static_cluster(
        "u",
        &[addr],
        "circuit_breakers:\n  thresholds:\n  - max_requests: 10\n    track_remaining: true\n",
    );
    let routes = "- match: {prefix: \"/\"}\n  route: {cluster: u}\n";
    let c = courier_args(&["--concurrency", "2"], "", "", routes, &cluster).await;
    let listener = c.listener;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..50 {
        let tx = tx.clone();
        tokio::spawn(async move {
            let r = H1::connect(listener).await.get("/", &[]).await;
            let _ = tx.send(r);
        });
    }
    let mut overflowed = 0;
    for _ in 0..40 {
        let r = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.status, 503, "{r:?}");
        assert_eq!(r.header("x-envoy-overloaded"), Some("true"));
        assert_eq!(
            r.body,
            "upstream connect error or disconnect/reset before headers. reset reason: overflow"
        );
        overflowed += 1;
    }
    assert_eq!(overflowed, 40);
    // The 10 admitted reach the upstream (bounded wait).
    for _ in 0..250 {
        if log.count.load(Ordering::SeqCst) == 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(log.count.load(Ordering::SeqCst), 10);
    assert_eq!(
        stat(&c, "cluster.u.circuit_breakers.default.rq_open").await,
        1
    );
    assert_eq!(
        stat(&c, "cluster.u.circuit_breakers.default.remaining_rq").await,
        0
    );
    log.open_gate();
    for _ in 0..10 {
        let r = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.status, 200);
    }
    assert_eq!(stat(&c, "cluster.u.upstream_rq_pending_overflow").await, 40);
}

#[tokio::test]
async fn max_connections_queues_and_max_pending_requests_overflows() {
    let (addr, log) = upstream(|_, _| Act::Gate).await;
    let cluster = static_cluster(
        "u",
        &[addr],
        "circuit_breakers:\n  thresholds:\n  - {max_connections: 1, max_pending_requests: 1}\n",
    );
    let routes = "- match: {prefix: \"/\"}\n  route: {cluster: u}\n";
    let c = courier_with("", "", routes, &cluster).await;
    let listener = c.listener;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..3 {
        let tx = tx.clone();
        tokio::spawn(async move {
            let r = H1::connect(listener).await.get("/", &[]).await;
            let _ = tx.send(r);
        });
    }
    // One request has the only connection, one waits for it, one overflows.
    let first = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.status, 503);
    assert_eq!(first.header("x-envoy-overloaded"), Some("true"));
    for _ in 0..250 {
        if log.count.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(log.count.load(Ordering::SeqCst), 1);
    log.open_gate();
    for _ in 0..2 {
        let r = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.status, 200);
    }
    // The waiting request reused the one connection.
    assert_eq!(stat(&c, "cluster.u.upstream_cx_total").await, 1);
    assert_eq!(stat(&c, "cluster.u.upstream_cx_overflow").await, 2);
    assert_eq!(stat(&c, "cluster.u.upstream_rq_pending_overflow").await, 1);
}

#[tokio::test]
async fn rate_limited_back_off_waits_what_the_reset_header_says() {
    // Each request's first attempt is a 429 with `retry-after` (seconds) from the
    // request's `x-wait` header; its retry answers 200.
    let (addr, log) = upstream(|_, parts| {
        let first = parts
            .headers
            .get("x-envoy-attempt-count")
            .is_some_and(|v| v == "1");
        let wait = parts
            .headers
            .get("x-wait")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("0")
            .to_string();
        if first {
            Act::WithHeaders(429, vec![("retry-after", wait)])
        } else {
            Act::Status(200)
        }
    })
    .await;
    let c = courier_with(
        "",
        COUNTS,
        &route(
            "{retry_on: retriable-status-codes, retriable_status_codes: [429], \
             retry_back_off: {base_interval: 0.001s}, \
             rate_limited_retry_back_off: {reset_headers: [{name: Retry-After}], max_interval: 3s}}",
        ),
        &static_cluster("u", &[addr], ""),
    )
    .await;
    let mut h = H1::connect(c.listener).await;
    let started = tokio::time::Instant::now();
    let r = h.get("/", &[("x-wait", "1")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-envoy-attempt-count"), Some("2"));
    // The retry waited at least the second the upstream asked for.
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(
        stat(&c, "cluster.u.upstream_rq_retry_backoff_ratelimited").await,
        1
    );
    assert_eq!(
        stat(&c, "cluster.u.upstream_rq_retry_backoff_exponential").await,
        0
    );
    // Past max_interval the header is ignored: the exponential back-off applies.
    let r = h.get("/", &[("x-wait", "60")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        stat(&c, "cluster.u.upstream_rq_retry_backoff_exponential").await,
        1
    );
    assert_eq!(
        stat(&c, "cluster.u.upstream_rq_retry_backoff_ratelimited").await,
        1
    );
    assert_eq!(log.count.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn max_connection_pools_refuses_a_new_pool_until_one_retires() {
    // Two hosts behind round robin, room for one pool: the second host's request
    // finds no pool to use and is answered as Envoy does, 503 no healthy upstream.
    let (a, _) = upstream(|_, _| Act::Status(200)).await;
    let (b, _) = upstream(|_, _| Act::Status(200)).await;
    let cb = "circuit_breakers: {thresholds: [{max_connection_pools: 1, track_remaining: true}]}\n";
    let c = courier_with(
        "",
        "",
        "- match: {prefix: \"/\"}\n  route: {cluster: u}\n",
        &static_cluster("u", &[a, b], cb),
    )
    .await;
    let mut h = H1::connect(c.listener).await;
    assert_eq!(h.get("/", &[]).await.status, 200);
    let r = h.get("/", &[]).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.body, "no healthy upstream");
    assert_eq!(stat(&c, "cluster.u.upstream_cx_pool_overflow").await, 1);
    assert_eq!(
        stat(&c, "cluster.u.circuit_breakers.default.cx_pool_open").await,
        1
    );
    assert_eq!(
        stat(&c, "cluster.u.circuit_breakers.default.remaining_cx_pools").await,
        0
    );
    // Not a host failure: nothing was counted against the cluster's hosts.
    assert_eq!(stat(&c, "cluster.u.upstream_cx_none_healthy").await, 0);

    // Hosts that close every connection: a pool retires with its last
    // connection, so the other host gets its turn.
    let close = || Act::WithHeaders(200, vec![("connection", "close".to_string())]);
    let (a, la) = upstream(move |_, _| close()).await;
    let (b, lb) = upstream(move |_, _| close()).await;
    let cb = "circuit_breakers: {thresholds: [{max_connection_pools: 1}]}\n";
    let c = courier_with(
        "",
        "",
        "- match: {prefix: \"/\"}\n  route: {cluster: u}\n",
        &static_cluster("u", &[a, b], cb),
    )
    .await;
    let mut served = 0;
    for _ in 0..100 {
        if H1::connect(c.listener).await.get("/", &[]).await.status == 200 {
            served += 1;
        }
        if la.count.load(Ordering::SeqCst) >= 2 && lb.count.load(Ordering::SeqCst) >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        la.count.load(Ordering::SeqCst) >= 2,
        "host a served too few"
    );
    assert!(
        lb.count.load(Ordering::SeqCst) >= 2,
        "host b served too few"
    );
    assert!(served >= 4);
}
