//! Active health checks, end to end: hosts failing `/healthz` (or a gRPC health
//! service saying NOT_SERVING) leave the balancer's rotation after
//! `unhealthy_threshold` checks and return after `healthy_threshold`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use support::programmable::{Act, upstream};
use support::{H1, courier_with, static_cluster};

const ROUTES: &str = "- match: {prefix: \"/\"}\n  route: {cluster: u}\n";

/// Sends `n` requests; how many reached the host counting into `work` meanwhile.
async fn hits(h: &mut H1, work: &AtomicU64, n: usize) -> u64 {
    let before = work.load(Ordering::SeqCst);
    for _ in 0..n {
        assert_eq!(h.get("/work", &[]).await.status, 200);
    }
    work.load(Ordering::SeqCst) - before
}

/// Polls (bounded) until `cond` holds.
async fn eventually(mut cond: impl AsyncFnMut() -> bool) -> bool {
    for _ in 0..100 {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn a_host_failing_healthz_is_removed_and_restored() {
    let sick = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicU64::new(0));
    let work = Arc::new(AtomicU64::new(0));
    let (s, c2, w) = (Arc::clone(&sick), Arc::clone(&checks), Arc::clone(&work));
    let (bad, _) = upstream(move |_, p| {
        if p.uri.path() != "/healthz" {
            w.fetch_add(1, Ordering::SeqCst);
        } else {
            c2.fetch_add(1, Ordering::SeqCst);
            assert_eq!(p.headers.get("host").unwrap(), "hc.example");
            return Act::Status(if s.load(Ordering::SeqCst) { 503 } else { 200 });
        }
        Act::Status(200)
    })
    .await;
    let mut addrs = vec![bad];
    for _ in 0..2 {
        addrs.push(upstream(|_, _| Act::Status(200)).await.0);
    }
    let hc = "health_checks:\n- timeout: 1s\n  interval: 0.05s\n  no_traffic_interval: 0.05s\n  unhealthy_threshold: 2\n  healthy_threshold: 3\n  http_health_check: {path: /healthz, host: hc.example}\n";
    let c = courier_with("", "", ROUTES, &static_cluster("u", &addrs, hc)).await;
    let mut h = H1::connect(c.listener).await;
    // Healthy: it takes its share.
    assert!(eventually(async || hits(&mut h, &work, 30).await > 0).await);
    sick.store(true, Ordering::SeqCst);
    // Removed after two failed checks: nothing reaches it any more.
    assert!(eventually(async || hits(&mut h, &work, 30).await == 0).await);
    let failing = checks.load(Ordering::SeqCst);
    assert_eq!(hits(&mut h, &work, 60).await, 0);
    sick.store(false, Ordering::SeqCst);
    // Back after three passing checks.
    assert!(eventually(async || hits(&mut h, &work, 30).await > 0).await);
    assert!(checks.load(Ordering::SeqCst) >= failing + 3);
}

#[tokio::test]
async fn a_tcp_check_removes_a_closed_port() {
    let (good, good_log) = upstream(|_, _| Act::Status(200)).await;
    let dead = support::programmable::closed_port();
    let (other, _) = upstream(|_, _| Act::Status(200)).await;
    let hc = "health_checks:\n- timeout: 1s\n  interval: 0.05s\n  no_traffic_interval: 0.05s\n  unhealthy_threshold: 1\n  healthy_threshold: 1\n  tcp_health_check: {}\n";
    let c = courier_with(
        "",
        "",
        ROUTES,
        &static_cluster("u", &[good, dead, other], hc),
    )
    .await;
    let mut h = H1::connect(c.listener).await;
    // Once checked, every request succeeds: the closed port is out of rotation.
    assert!(
        eventually(async || {
            for _ in 0..30 {
                if h.get("/work", &[]).await.status != 200 {
                    return false;
                }
            }
            true
        })
        .await
    );
    assert!(good_log.count.load(Ordering::SeqCst) > 0);
}

#[tokio::test]
async fn grpc_not_serving_removes_the_host() {
    let serving = Arc::new(AtomicBool::new(true));
    let work = Arc::new(AtomicU64::new(0));
    let (s, w) = (Arc::clone(&serving), Arc::clone(&work));
    let (bad, _) = upstream(move |_, p| {
        if p.uri.path() == "/grpc.health.v1.Health/Check" {
            return Act::GrpcHealth(if s.load(Ordering::SeqCst) { 1 } else { 2 });
        }
        w.fetch_add(1, Ordering::SeqCst);
        Act::Status(200)
    })
    .await;
    let mut addrs = vec![bad];
    for _ in 0..2 {
        let good = upstream(|_, p| {
            if p.uri.path() == "/grpc.health.v1.Health/Check" {
                Act::GrpcHealth(1)
            } else {
                Act::Status(200)
            }
        });
        addrs.push(good.await.0);
    }
    let extra = "typed_extension_protocol_options:\n  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n    \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n    explicit_http_config:\n      http2_protocol_options: {}\nhealth_checks:\n- timeout: 1s\n  interval: 0.05s\n  no_traffic_interval: 0.05s\n  unhealthy_threshold: 1\n  healthy_threshold: 1\n  grpc_health_check: {service_name: svc}\n";
    let c = courier_with("", "", ROUTES, &static_cluster("u", &addrs, extra)).await;
    let mut h = H1::connect(c.listener).await;
    assert!(eventually(async || hits(&mut h, &work, 30).await > 0).await);
    serving.store(false, Ordering::SeqCst);
    assert!(eventually(async || hits(&mut h, &work, 30).await == 0).await);
    assert_eq!(hits(&mut h, &work, 60).await, 0);
}

#[tokio::test]
async fn health_check_config_port_value_and_hostname_redirect_the_check() {
    let on_traffic_port = Arc::new(AtomicU64::new(0));
    let t = Arc::clone(&on_traffic_port);
    let (traffic, _) = upstream(move |_, p| {
        if p.uri.path() == "/healthz" {
            t.fetch_add(1, Ordering::SeqCst);
        }
        Act::Status(200)
    })
    .await;
    let (checked, log) = upstream(|_, _| Act::Status(200)).await;
    let cluster = format!(
        "- name: u\n  connect_timeout: 1s\n  health_checks:\n  - timeout: 1s\n    interval: 0.05s\n    no_traffic_interval: 0.05s\n    unhealthy_threshold: 1\n    healthy_threshold: 1\n    http_health_check: {{path: /healthz, host: cluster.example}}\n  load_assignment:\n    cluster_name: u\n    endpoints:\n    - lb_endpoints:\n      - endpoint:\n          address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}\n          health_check_config: {{port_value: {}, hostname: endpoint.example}}\n",
        traffic.port(),
        checked.port()
    );
    let c = courier_with("", "", ROUTES, &cluster).await;
    assert!(eventually(async || log.count.load(Ordering::SeqCst) >= 2).await);
    assert_eq!(on_traffic_port.load(Ordering::SeqCst), 0);
    let seen = log.seen.lock().await;
    assert_eq!(seen[0].headers.get("host").unwrap(), "endpoint.example");
    drop(seen);
    // Traffic still goes to the endpoint's own port.
    let r = H1::connect(c.listener).await.get("/work", &[]).await;
    assert_eq!(r.status, 200);
}

/// HTTP `send` / `receive`: the check is a POST carrying the payload (with its
/// `content-length`), and passes only while the response body holds the expected
/// payloads in order; a body without them removes the host at once (before the
/// status is looked at), as Envoy's payload mismatch does.
#[tokio::test]
async fn http_check_sends_a_payload_and_matches_the_answer() {
    let pong = Arc::new(AtomicBool::new(true));
    let work = Arc::new(AtomicU64::new(0));
    let (p, w) = (Arc::clone(&pong), Arc::clone(&work));
    let (checked, log) = upstream(move |_, req| {
        if req.uri.path() != "/healthz" {
            w.fetch_add(1, Ordering::SeqCst);
            return Act::Status(200);
        }
        // Statuses pass either way: only the body decides.
        Act::Body(
            200,
            if p.load(Ordering::SeqCst) {
                "<pi-ng> then po-ng!"
            } else {
                "po-ng then pi-ng"
            },
        )
    })
    .await;
    // Two more hosts that pass, so that one unhealthy host leaves the cluster out of
    // panic mode.
    let (other, _) = upstream(|_, _| Act::Body(200, "pi po")).await;
    let (third, _) = upstream(|_, _| Act::Body(200, "pi po")).await;
    // `text` is hex: "pi-ng" sent; "pi", "po" expected in that order.
    let hc = "health_checks:\n- timeout: 1s\n  interval: 0.05s\n  no_traffic_interval: 0.05s\n  unhealthy_threshold: 3\n  healthy_threshold: 1\n  http_health_check:\n    path: /healthz\n    method: POST\n    send: {text: '70692d6e67'}\n    receive: [{text: '7069'}, {binary: cG8=}]\n";
    let c = courier_with(
        "",
        "",
        ROUTES,
        &static_cluster("u", &[checked, other, third], hc),
    )
    .await;
    let mut h = H1::connect(c.listener).await;
    assert!(eventually(async || hits(&mut h, &work, 30).await > 0).await);
    {
        let seen = log.seen.lock().await;
        let check = seen.iter().find(|s| s.path == "/healthz").unwrap();
        assert_eq!(check.method, "POST");
        assert_eq!(&check.body[..], b"pi-ng");
        assert_eq!(check.headers.get("content-length").unwrap(), "5");
    }
    // "po" now only comes before "pi": out of order is a mismatch, and one
    // mismatch (unhealthy_threshold 3 notwithstanding) removes the host.
    pong.store(false, Ordering::SeqCst);
    assert!(eventually(async || hits(&mut h, &work, 30).await == 0).await);
    assert_eq!(hits(&mut h, &work, 60).await, 0);
}

/// A TCP server answering a health check: reads the 4-byte payload (recorded in
/// `sent`), then while `answer` holds writes "..po" and "ng.." in two writes, else
/// "nope".
async fn tcp_probe(
    answer: Arc<AtomicBool>,
    sent: Arc<tokio::sync::Mutex<Vec<Vec<u8>>>>,
) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = probe.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = probe.accept().await {
            let (a, s) = (Arc::clone(&answer), Arc::clone(&sent));
            tokio::spawn(async move {
                let mut buf = [0u8; 4];
                if conn.read_exact(&mut buf).await.is_err() {
                    return;
                }
                s.lock().await.push(buf.to_vec());
                if a.load(Ordering::SeqCst) {
                    let _ = conn.write_all(b"..po").await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let _ = conn.write_all(b"ng..").await;
                } else {
                    let _ = conn.write_all(b"nope").await;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            });
        }
    });
    addr
}

/// TCP `send` / `receive`: the payload is written on connect and the host passes
/// once the bytes read hold the expected payloads in order, across reads; a peer
/// that answers something else and closes fails.
#[tokio::test]
async fn tcp_check_sends_a_payload_and_waits_for_the_answer() {
    let answer = Arc::new(AtomicBool::new(true));
    let sent = Arc::new(tokio::sync::Mutex::new(Vec::new()));
    let probe_a = tcp_probe(Arc::clone(&answer), Arc::clone(&sent)).await;
    let probe_b = tcp_probe(Arc::new(AtomicBool::new(true)), Arc::default()).await;
    // Traffic goes to real upstreams; each host's check goes to its probe server
    // through `health_check_config.port_value`.
    let work = Arc::new(AtomicU64::new(0));
    let w = Arc::clone(&work);
    let (traffic, _) = upstream(move |_, _| {
        w.fetch_add(1, Ordering::SeqCst);
        Act::Status(200)
    })
    .await;
    let (other, _) = upstream(|_, _| Act::Status(200)).await;
    let cluster = format!(
        "- name: u\n  connect_timeout: 1s\n  health_checks:\n  - timeout: 1s\n    interval: 0.05s\n    no_traffic_interval: 0.05s\n    unhealthy_threshold: 1\n    healthy_threshold: 1\n    tcp_health_check: {{send: {{text: '70696e67'}}, receive: [{{binary: cG8=}}, {{text: '6e67'}}]}}\n  load_assignment:\n    cluster_name: u\n    endpoints:\n    - lb_endpoints:\n      - endpoint:\n          address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}\n          health_check_config: {{port_value: {}}}\n      - endpoint:\n          address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}\n          health_check_config: {{port_value: {}}}\n",
        traffic.port(),
        probe_a.port(),
        other.port(),
        probe_b.port(),
    );
    let c = courier_with("", "", ROUTES, &cluster).await;
    let mut h = H1::connect(c.listener).await;
    assert!(eventually(async || hits(&mut h, &work, 30).await > 0).await);
    assert_eq!(sent.lock().await[0], b"ping");
    answer.store(false, Ordering::SeqCst);
    assert!(eventually(async || hits(&mut h, &work, 30).await == 0).await);
    assert_eq!(hits(&mut h, &work, 60).await, 0);
    answer.store(true, Ordering::SeqCst);
    assert!(eventually(async || hits(&mut h, &work, 30).await > 0).await);
}

/// `always_log_health_check_failures` / `_success`: with them every failed and
/// every passed check is an event (without them, only a host's first failure and
/// its changes are); a host that starts unhealthy and never passes is never
/// ejected, so its events are failures only, the first marked `first_check`.
#[tokio::test]
async fn always_log_flags_log_every_check() {
    let (good, _) = upstream(|_, _| Act::Status(200)).await;
    let dead = support::programmable::closed_port();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("hc.log");
    let hc = format!(
        "health_checks:\n- timeout: 1s\n  interval: 0.05s\n  no_traffic_interval: 0.05s\n  unhealthy_threshold: 1\n  healthy_threshold: 1\n  always_log_health_check_failures: true\n  always_log_health_check_success: true\n  event_logger:\n  - name: envoy.health_check.event_sinks.file\n    typed_config:\n      \"@type\": type.googleapis.com/envoy.extensions.health_check.event_sinks.file.v3.HealthCheckEventFileSink\n      event_log_path: {}\n  tcp_health_check: {{}}\n",
        log.display()
    );
    let _c = courier_with("", "", ROUTES, &static_cluster("u", &[good, dead], &hc)).await;
    let lines = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let port = |v: &serde_json::Value| v["host"]["socket_address"]["port_value"].as_u64();
    let of = |p: u16| -> Vec<serde_json::Value> {
        lines()
            .into_iter()
            .filter(|v| port(v) == Some(u64::from(p)))
            .collect()
    };
    assert!(eventually(async || of(good.port()).len() >= 3 && of(dead.port()).len() >= 3).await);
    let g = of(good.port());
    assert_eq!(g[0]["add_healthy_event"]["first_check"], true);
    assert_eq!(g[0]["health_checker_type"], "TCP");
    assert!(
        g[1..]
            .iter()
            .all(|v| v.get("successful_health_check_event").is_some())
    );
    let d = of(dead.port());
    assert!(d.iter().all(|v| v.get("eject_unhealthy_event").is_none()));
    assert_eq!(d[0]["health_check_failure_event"]["first_check"], true);
    assert_eq!(
        d[0]["health_check_failure_event"]["failure_type"],
        "NETWORK"
    );
    assert!(
        d[1..]
            .iter()
            .all(|v| v["health_check_failure_event"]["first_check"] == false)
    );
}
