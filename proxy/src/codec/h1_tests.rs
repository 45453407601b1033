//! Parking, in process: a connection served over an in-memory stream on a
//! current-thread runtime with tokio's paused clock, so a park (after
//! [`PARK_AFTER`] of quiet) and the timeouts happen in logical time. Parks are
//! counted per thread (`heap_trim::test_parks`).

use super::PARK_AFTER;
use crate::codec::Codec;
use crate::filter_chain::HttpFilters;
use crate::request::conn::{ConnInfo, chain_at, next_connection_id};
use crate::request::phase::Phase;
use crate::stats::WorkerStats;
use crate::upstream::ClusterManager;
use crate::upstream::client::ClusterClient;
use arc_swap::ArcSwap;
use courier_config::snapshot::Snapshot;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// A connection manager with direct responses; `extra` adds to its options.
fn bootstrap(codec: &str, extra: &str) -> String {
    format!(
        r#"
static_resources:
  listeners:
  - name: park
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: park
          codec_type: {codec}
{extra}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: /}}
                direct_response: {{status: 200, body: {{inline_string: "hello"}}}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#
    )
}

/// One served connection: the client's end, the server's phase, and its stats.
struct Served {
    client: DuplexStream,
    phase: watch::Sender<Phase>,
    retire: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

fn serve(codec: &str, extra: &str) -> Served {
    let yaml = bootstrap(codec, extra);
    let bootstrap = courier_config::bootstrap_from_str(&yaml, courier_config::load::Format::Yaml)
        .expect("bootstrap");
    let snapshot = Arc::new(ArcSwap::from_pointee(Snapshot::from_bootstrap(&bootstrap)));
    let clusters = Arc::new(ClusterManager::new(&snapshot.load()).expect("clusters"));
    let http_filters = Arc::new(
        HttpFilters::build(&bootstrap, &ClusterClient::new(Arc::clone(&clusters)))
            .expect("filters"),
    );
    let listener = snapshot
        .load()
        .listeners
        .first()
        .cloned()
        .expect("listener");
    let peer = SocketAddr::from(([192, 0, 2, 1], 40000));
    let local = SocketAddr::from(([127, 0, 0, 1], 10000));
    let limits = Arc::new(crate::codec::serve::Limits::of(
        chain_at(&listener, 0).and_then(|fc| fc.hcm().map(|h| &**h)),
    ));
    let codec = chain_at(&listener, 0).map_or(Codec::Auto, |fc| {
        crate::codec::codec(fc.hcm().unwrap().codec_type, None)
    });
    let info = Arc::new(ConnInfo {
        listener,
        filter_chain_index: 0,
        peer: crate::request::conn::Peer::Ip(peer),
        local: crate::request::conn::Peer::Ip(local),
        tls: false,
        mtls: false,
        client_cert: None,
        facts: crate::filter_chain::conn_facts(peer, local, None, None),
        http_filters: http_filters.chain(0, 0),
        buffer_limit: 1 << 20,
        wire: None,
        server_name: None,
        fingerprints: None,
        id: next_connection_id(),
    });
    let (phase, shutdown) = watch::channel(Phase::Serving);
    let (retire, signal) = watch::channel(false);
    let conn = crate::codec::serve::Conn {
        info,
        codec,
        limits,
        snapshot: Arc::new(crate::request::snapshot::WorkerSnapshot::new(snapshot)),
        worker_stats: Arc::new(WorkerStats::default()),
        hcm_stats: Arc::default(),
        listener_drain: Some(crate::codec::serve::ListenerDrain {
            signal,
            drain_time: Duration::from_secs(4),
        }),
        clusters,
        shutdown,
    };
    let (client, server) = tokio::io::duplex(64 * 1024);
    let task = tokio::spawn(crate::codec::serve::serve(server, conn));
    Served {
        client,
        phase,
        retire,
        task,
    }
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nhost: a\r\n\r\n";

/// Reads one response (head and its `content-length` body), a byte at a
/// time so a pipelined next response stays unread; `None` at EOF.
async fn response(c: &mut DuplexStream) -> Option<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 1];
    for _ in 0..4096 {
        if let Some(end) = out.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&out[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if out.len() >= end + 4 + len {
                assert_eq!(out.len(), end + 4 + len, "more than one response");
                return Some(String::from_utf8_lossy(&out).into_owned());
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(600), c.read(&mut buf))
            .await
            .expect("no response")
            .expect("read");
        if n == 0 {
            assert!(
                out.is_empty(),
                "cut short: {}",
                String::from_utf8_lossy(&out)
            );
            return None;
        }
        out.extend_from_slice(&buf[..n]);
    }
    panic!("response too long");
}

/// Asserts `r` is the direct response, kept alive.
fn assert_hello(r: Option<String>) {
    let r = r.expect("a response");
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.ends_with("\r\n\r\nhello"), "{r}");
    assert!(!r.contains("connection: close"), "{r}");
}

/// Lets the connection sit quiet long enough to park.
async fn quiet() {
    tokio::time::sleep(PARK_AFTER * 3).await;
}

/// `elapsed` lies in `[from, from + 1 s)`: the timer fired on time, once.
fn assert_within_a_second_of(elapsed: Duration, from: Duration) {
    assert!(
        elapsed >= from && elapsed < from + Duration::from_secs(1),
        "{elapsed:?}, expected {from:?} to {:?}",
        from + Duration::from_secs(1)
    );
}

fn parks() -> u64 {
    crate::heap_trim::test_parks()
}

#[tokio::test(start_paused = true)]
async fn a_parked_connection_serves_the_next_requests() {
    let mut s = serve("HTTP1", "");
    for round in 1..=3u64 {
        s.client.write_all(GET).await.unwrap();
        assert_hello(response(&mut s.client).await);
        quiet().await;
        assert_eq!(parks(), round);
    }
    // Back to back, the connection does not park between requests.
    for _ in 0..3 {
        s.client.write_all(GET).await.unwrap();
        assert_hello(response(&mut s.client).await);
    }
    assert_eq!(parks(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_has_not_sent_yet_holds_no_codec() {
    // Codec AUTO and HTTP1 both start parked: no park is needed.
    for codec in ["AUTO", "HTTP1"] {
        let mut s = serve(codec, "");
        quiet().await;
        s.client.write_all(GET).await.unwrap();
        assert_hello(response(&mut s.client).await);
    }
    assert_eq!(parks(), 0);
}

#[tokio::test(start_paused = true)]
async fn pipelined_requests_and_a_partial_head_survive_a_park() {
    let mut s = serve("HTTP1", "");
    // Two whole requests and the start of a third in one write.
    let mut bytes = [GET, GET].concat();
    bytes.extend_from_slice(b"GET / HT");
    s.client.write_all(&bytes).await.unwrap();
    assert_hello(response(&mut s.client).await);
    assert_hello(response(&mut s.client).await);
    quiet().await;
    // The codec was ended with the partial head unparsed; the next one
    // starts from those bytes.
    assert_eq!(parks(), 1);
    s.client
        .write_all(b"TP/1.1\r\nhost: a\r\n\r\n")
        .await
        .unwrap();
    assert_hello(response(&mut s.client).await);
}

#[tokio::test(start_paused = true)]
async fn a_request_trickled_across_parks_is_answered_whole() {
    let mut s = serve("HTTP1", "");
    s.client.write_all(GET).await.unwrap();
    assert_hello(response(&mut s.client).await);
    quiet().await;
    assert_eq!(parks(), 1);
    // One byte per pause, each pause longer than the park delay.
    for b in GET {
        s.client.write_all(&[*b]).await.unwrap();
        quiet().await;
    }
    // Not answered `connection: close` (a fresh codec ended mid-head would).
    assert_hello(response(&mut s.client).await);
    quiet().await;
    s.client.write_all(GET).await.unwrap();
    assert_hello(response(&mut s.client).await);
}

#[tokio::test(start_paused = true)]
async fn the_h2_preface_split_across_reads_is_served_as_http2_on_auto() {
    let mut s = serve("AUTO", "");
    let preface = super::super::h2_flood::PREFACE;
    s.client.write_all(&preface[..4]).await.unwrap();
    quiet().await;
    s.client.write_all(&preface[4..]).await.unwrap();
    // An empty SETTINGS frame.
    s.client
        .write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0])
        .await
        .unwrap();
    let mut head = [0u8; 9];
    s.client.read_exact(&mut head).await.unwrap();
    // The server's SETTINGS frame.
    assert_eq!(head[3], 4, "{head:?}");
}

/// Reads HTTP/2 frames until one of type `kind`; `None` at EOF.
async fn frame_of(c: &mut DuplexStream, kind: u8) -> Option<Vec<u8>> {
    for _ in 0..64 {
        let mut head = [0u8; 9];
        if c.read_exact(&mut head).await.is_err() {
            return None;
        }
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0u8; len];
        c.read_exact(&mut payload).await.ok()?;
        if head[3] == kind {
            return Some(payload);
        }
    }
    panic!("no frame of type {kind}");
}

/// HTTP/2 ends as HTTP/1.1 does, through the same end state
/// (crate::codec::ends): a retired listener version sends GOAWAY at once and
/// closes the connection at its drain time (4 s here).
#[tokio::test(start_paused = true)]
async fn a_retired_listener_sends_goaway_on_http2_then_closes_at_the_drain_time() {
    let mut s = serve("HTTP2", "");
    s.client
        .write_all(super::super::h2_flood::PREFACE)
        .await
        .unwrap();
    s.client
        .write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0])
        .await
        .unwrap();
    assert!(
        frame_of(&mut s.client, 4).await.is_some(),
        "server SETTINGS"
    );
    let retired = Instant::now();
    s.retire.send_replace(true);
    let goaway = frame_of(&mut s.client, 7).await.expect("GOAWAY");
    // NO_ERROR: a graceful GOAWAY.
    assert_eq!(goaway[4..8], [0, 0, 0, 0], "{goaway:?}");
    assert!(retired.elapsed() < Duration::from_secs(1));
    // Nothing more until the drain time closes it.
    let mut rest = Vec::new();
    let _ = s.client.read_to_end(&mut rest).await;
    assert!(
        retired.elapsed() >= Duration::from_secs(4),
        "{:?}",
        retired.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_parked_connection_closes_when_the_server_drains() {
    let mut s = serve("HTTP1", "");
    s.client.write_all(GET).await.unwrap();
    assert_hello(response(&mut s.client).await);
    quiet().await;
    assert_eq!(parks(), 1);
    s.phase.send_replace(Phase::ConnectionsDraining);
    // Closed without a byte.
    assert_eq!(response(&mut s.client).await, None);
    tokio::time::timeout(Duration::from_secs(5), s.task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_retired_listener_closes_a_parked_connection_after_the_drain_time() {
    let mut s = serve("HTTP1", "");
    s.client.write_all(GET).await.unwrap();
    assert_hello(response(&mut s.client).await);
    quiet().await;
    let retired = Instant::now();
    s.retire.send_replace(true);
    // Within the drain time (4 s) a request is answered `connection: close`.
    tokio::time::sleep(Duration::from_secs(1)).await;
    s.client.write_all(GET).await.unwrap();
    let r = response(&mut s.client)
        .await
        .expect("answered while draining");
    assert!(r.contains("\r\nconnection: close\r\n"), "{r}");
    assert_eq!(response(&mut s.client).await, None);
    assert!(retired.elapsed() < Duration::from_secs(4));
    // Without a request, closed at the drain time.
    let mut s = serve("HTTP1", "");
    s.client.write_all(GET).await.unwrap();
    assert_hello(response(&mut s.client).await);
    quiet().await;
    let retired = Instant::now();
    s.retire.send_replace(true);
    assert_eq!(response(&mut s.client).await, None);
    assert!(retired.elapsed() >= Duration::from_secs(4));
}

/// A request that arrives together with the retirement (one wake of the
/// connection's task for both, hyper's codec polled first) is answered
/// `connection: close`, as every request after the retirement is: the
/// flaky `xds_lds` drain test's race, made deterministic.
#[tokio::test(start_paused = true)]
async fn a_request_arriving_with_the_retirement_is_answered_connection_close() {
    let mut s = serve("HTTP1", "");
    s.client.write_all(GET).await.unwrap();
    assert_hello(response(&mut s.client).await);
    // Not parked: the codec is serving when both events land.
    s.retire.send_replace(true);
    s.client.write_all(GET).await.unwrap();
    let r = response(&mut s.client).await.expect("answered");
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains("\r\nconnection: close\r\n"), "{r}");
    assert_eq!(response(&mut s.client).await, None);
}

#[tokio::test(start_paused = true)]
async fn the_idle_timeout_and_drain_sequence_run_while_parked() {
    let extra =
        "          drain_timeout: 2s\n          common_http_protocol_options: {idle_timeout: 10s}";
    let mut s = serve("HTTP1", extra);
    s.client.write_all(GET).await.unwrap();
    assert_hello(response(&mut s.client).await);
    let idle_from = Instant::now();
    // Parked well before the idle timeout; closed at idle timeout + drain timeout.
    assert_eq!(response(&mut s.client).await, None);
    assert_eq!(parks(), 1);
    let closed_after = idle_from.elapsed();
    assert_within_a_second_of(closed_after, Duration::from_secs(12));
}

#[tokio::test(start_paused = true)]
async fn a_request_in_the_drain_sequence_after_a_park_is_answered_connection_close() {
    let extra = "          drain_timeout: 5s\n          common_http_protocol_options: {max_connection_duration: 6s}";
    let mut s = serve("HTTP1", extra);
    s.client.write_all(GET).await.unwrap();
    assert_hello(response(&mut s.client).await);
    quiet().await;
    assert_eq!(parks(), 1);
    // Past max_connection_duration, within drain_timeout.
    tokio::time::sleep(Duration::from_secs(5)).await;
    s.client.write_all(GET).await.unwrap();
    let r = response(&mut s.client)
        .await
        .expect("answered while draining");
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains("\r\nconnection: close\r\n"), "{r}");
    assert_eq!(response(&mut s.client).await, None);
}

#[tokio::test(start_paused = true)]
async fn the_request_headers_timeout_counts_from_the_first_byte_across_a_park() {
    let extra = "          request_headers_timeout: 5s";
    let mut s = serve("HTTP1", extra);
    s.client.write_all(GET).await.unwrap();
    assert_hello(response(&mut s.client).await);
    quiet().await;
    assert_eq!(parks(), 1);
    // The first byte wakes the parked connection and arms the timer.
    let first = Instant::now();
    s.client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    let r = response(&mut s.client).await.expect("a 408");
    assert!(r.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{r}");
    let after = first.elapsed();
    assert_within_a_second_of(after, Duration::from_secs(5));
    assert_eq!(response(&mut s.client).await, None);
}

#[tokio::test(start_paused = true)]
async fn a_client_closing_a_parked_connection_ends_it() {
    let mut s = serve("HTTP1", "");
    s.client.write_all(GET).await.unwrap();
    assert_hello(response(&mut s.client).await);
    quiet().await;
    s.client.shutdown().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), s.task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn max_connection_duration_closes_a_parked_connection_after_the_drain_timeout() {
    let extra = "          drain_timeout: 2s\n          common_http_protocol_options: {max_connection_duration: 6s}";
    let mut s = serve("HTTP1", extra);
    let opened = Instant::now();
    s.client.write_all(GET).await.unwrap();
    assert_hello(response(&mut s.client).await);
    // Parked at once; the lifetime ends at 6 s, the drain sequence 2 s later.
    assert_eq!(response(&mut s.client).await, None);
    assert_eq!(parks(), 1);
    let closed_after = opened.elapsed();
    assert_within_a_second_of(closed_after, Duration::from_secs(8));
}

#[tokio::test(start_paused = true)]
async fn a_drain_sequence_started_before_a_park_ends_on_time_while_parked() {
    // The lifetime ends while the codec still serves (before the park); the
    // drain sequence it starts goes on across the park, and the lifetime
    // does not start it again from the parked state.
    let extra = "          drain_timeout: 5s\n          common_http_protocol_options: {max_connection_duration: 0.5s}";
    let mut s = serve("HTTP1", extra);
    let opened = Instant::now();
    s.client.write_all(GET).await.unwrap();
    assert_hello(response(&mut s.client).await);
    assert_eq!(response(&mut s.client).await, None);
    assert_eq!(parks(), 1);
    let closed_after = opened.elapsed();
    assert_within_a_second_of(closed_after, Duration::from_millis(5500));
}

#[tokio::test(start_paused = true)]
async fn http1_safe_max_connection_duration_waits_for_the_next_request() {
    let extra = "          drain_timeout: 2s\n          http1_safe_max_connection_duration: true\n          common_http_protocol_options: {max_connection_duration: 6s}";
    let mut s = serve("HTTP1", extra);
    s.client.write_all(GET).await.unwrap();
    assert_hello(response(&mut s.client).await);
    // Long past the lifetime and what the drain sequence would take: still
    // open (without the option it closes at 8 s).
    let quiet = tokio::time::timeout(Duration::from_secs(30), response(&mut s.client)).await;
    assert!(quiet.is_err(), "closed: {quiet:?}");
    s.client.write_all(GET).await.unwrap();
    let r = response(&mut s.client).await.expect("answered");
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains("\r\nconnection: close\r\n"), "{r}");
    assert_eq!(response(&mut s.client).await, None);
}
