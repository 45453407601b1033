//! The TCP proxy against real upstream servers on loopback: bytes both ways,
//! half-close, backpressure, connect retries, the idle timeout (on tokio's
//! paused clock), stats and access log lines.

use super::*;
use courier_config::load::Format;
use courier_config::snapshot::Snapshot;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy with `extra` (YAML flow-map entries) and clusters `clusters`
/// (a YAML list), and the cluster manager built from them.
fn setup(extra: &str, clusters: &str) -> (Arc<TcpProxy>, Arc<ClusterManager>) {
    let yaml = format!(
        r#"
static_resources:
  listeners:
  - name: tcp
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: t, {extra}}}
  clusters:
{clusters}
"#
    );
    let b =
        courier_config::bootstrap_from_str(&yaml, Format::Yaml).unwrap_or_else(|e| panic!("{e}"));
    let tcp = Arc::clone(b.listeners[0].filter_chains[0].tcp_proxy().unwrap());
    let cm = ClusterManager::new(&Snapshot::from_bootstrap(&b)).unwrap();
    (tcp, Arc::new(cm))
}

/// A static cluster `name` of hosts on 127.0.0.1 at `ports`, with `extra` fields.
fn cluster(name: &str, ports: &[u16], extra: &str) -> String {
    let eps: Vec<String> = ports
        .iter()
        .map(|p| format!("{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {p}}}}}}}}}"))
        .collect();
    format!(
        "  - {{name: {name}, connect_timeout: 1s, load_assignment: {{cluster_name: {name}, endpoints: [{{lb_endpoints: [{}]}}]}}{extra}}}\n",
        eps.join(", ")
    )
}

/// A port nothing listens on.
async fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

/// Serves one proxied connection: returns the client's end and the task.
async fn start(
    config: Arc<TcpProxy>,
    clusters: Arc<ClusterManager>,
    stats: Arc<TcpStats>,
) -> (TcpStream, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (server, peer) = l.accept().await.unwrap();
    let session = Session {
        dynamic_port: None,
        config,
        stats,
        peer: crate::request::conn::Peer::Ip(peer),
        local: crate::request::conn::Peer::Ip(server.local_addr().unwrap()),
        server_name: None,
        fingerprints: None,
        buffer_limit: 1024 * 1024,
        clusters,
        worker_stats: Arc::default(),
        drain: None,
        listener_log: None,
        connection_id: crate::request::conn::next_connection_id(),
        accepted: (std::time::SystemTime::now(), tokio::time::Instant::now()),
        rbac: None,
    };
    (client, tokio::spawn(serve(server, session)))
}

fn cluster_stats(cm: &ClusterManager, name: &str) -> Arc<crate::upstream::UpstreamCluster> {
    cm.get(name).unwrap()
}

#[tokio::test]
async fn bytes_both_ways_and_half_close_downstream_first() {
    // The upstream reads to the end, then answers: the client's FIN reached
    // it, and its answer still comes back over the half-closed connection.
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = up.local_addr().unwrap().port();
    let upstream = tokio::spawn(async move {
        let (mut s, _) = up.accept().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        s.write_all(b"got: ").await.unwrap();
        s.write_all(&got).await.unwrap();
        got
    });
    let (tcp, cm) = setup("cluster: c", &cluster("c", &[port], ""));
    let stats = Arc::new(TcpStats::default());
    let (mut client, task) = start(tcp, Arc::clone(&cm), Arc::clone(&stats)).await;
    client.write_all(b"hello").await.unwrap();
    client.shutdown().await.unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    assert_eq!(answer, b"got: hello");
    assert_eq!(upstream.await.unwrap(), b"hello");
    task.await.unwrap();
    assert_eq!(stats.cx_total.get(), 1);
    assert_eq!(stats.rx_bytes_total.get(), 5);
    assert_eq!(stats.tx_bytes_total.get(), 10);
    assert_eq!(stats.tx_bytes_buffered.get(), 0);
    let c = cluster_stats(&cm, "c");
    assert_eq!(c.stats.cx_total.get(), 1);
    assert_eq!(c.stats.cx_connect_fail.get(), 0);
}

#[tokio::test]
async fn half_close_upstream_first() {
    // The upstream sends a banner and its FIN, then still reads: the client
    // sees the banner and the end, and what it sends after reaches upstream.
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = up.local_addr().unwrap().port();
    let upstream = tokio::spawn(async move {
        let (mut s, _) = up.accept().await.unwrap();
        s.write_all(b"banner").await.unwrap();
        s.shutdown().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        got
    });
    let (tcp, cm) = setup("cluster: c", &cluster("c", &[port], ""));
    let stats = Arc::new(TcpStats::default());
    let (mut client, task) = start(tcp, cm, Arc::clone(&stats)).await;
    let mut banner = Vec::new();
    client.read_to_end(&mut banner).await.unwrap();
    assert_eq!(banner, b"banner");
    client.write_all(b"after the upstream's FIN").await.unwrap();
    client.shutdown().await.unwrap();
    assert_eq!(upstream.await.unwrap(), b"after the upstream's FIN");
    task.await.unwrap();
}

#[tokio::test]
async fn a_slow_upstream_stops_the_client_with_bounded_buffers() {
    // The upstream takes the connection and reads nothing: the proxy stops
    // reading from the client once one read is pending, so what the client
    // can write stops growing (the kernel buffers on both legs, and one read).
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = up.local_addr().unwrap().port();
    let (hold_tx, hold_rx) = tokio::sync::oneshot::channel::<()>();
    let upstream = tokio::spawn(async move {
        let (s, _) = up.accept().await.unwrap();
        let _ = hold_rx.await;
        drop(s);
    });
    let (tcp, cm) = setup("cluster: c", &cluster("c", &[port], ""));
    let stats = Arc::new(TcpStats::default());
    let (client, task) = start(tcp, cm, Arc::clone(&stats)).await;
    let chunk = vec![7u8; 64 * 1024];
    let mut accepted = 0usize;
    let mut stalled_at = None;
    for _ in 0..400 {
        match client.try_write(&chunk) {
            Ok(n) => accepted += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // Let the proxy run; stop once nothing moved for a while.
                tokio::time::sleep(Duration::from_millis(10)).await;
                if stalled_at == Some(accepted) {
                    break;
                }
                stalled_at = Some(accepted);
            }
            Err(e) => panic!("{e}"),
        }
    }
    let first = accepted;
    tokio::time::sleep(Duration::from_millis(200)).await;
    while let Ok(n) = client.try_write(&chunk) {
        accepted += n;
    }
    assert_eq!(
        accepted, first,
        "the client could write on while upstream read nothing"
    );
    // The proxy holds at most one read for the upstream.
    assert!(stats.rx_bytes_buffered.get() <= pump::MAX_READ as u64);
    assert!(stats.paused_reading.get() >= 1);
    assert!(accepted < 64 * 1024 * 1024, "{accepted} bytes accepted");
    drop(hold_tx);
    upstream.await.unwrap();
    drop(client);
    task.await.unwrap();
    assert_eq!(
        stats.rx_bytes_buffered.get(),
        0,
        "the gauge goes back with the connection"
    );
}

#[tokio::test]
async fn a_slow_client_stops_the_upstream() {
    // The other way round: the upstream writes without end, the client reads nothing.
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = up.local_addr().unwrap().port();
    let written = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let w = Arc::clone(&written);
    let upstream = tokio::spawn(async move {
        let (mut s, _) = up.accept().await.unwrap();
        let chunk = vec![1u8; 64 * 1024];
        while let Ok(n) = s.write(&chunk).await {
            w.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let (tcp, cm) = setup("cluster: c", &cluster("c", &[port], ""));
    let stats = Arc::new(TcpStats::default());
    let (client, task) = start(tcp, cm, Arc::clone(&stats)).await;
    // Stalled once nothing more is written for 10 polls in a row (a busy
    // machine may pause the pump for a poll or two before buffers fill).
    let mut last = usize::MAX;
    let mut still = 0;
    for _ in 0..500 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = written.load(std::sync::atomic::Ordering::Relaxed);
        still = if now == last { still + 1 } else { 0 };
        if still == 10 {
            break;
        }
        last = now;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(written.load(std::sync::atomic::Ordering::Relaxed), last);
    assert!(stats.tx_bytes_buffered.get() <= pump::MAX_READ as u64);
    drop(client);
    task.await.unwrap();
    upstream.abort();
}

#[tokio::test(start_paused = true)]
async fn idle_timeout_closes_both_sides() {
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = up.local_addr().unwrap().port();
    let upstream = tokio::spawn(async move {
        let (mut s, _) = up.accept().await.unwrap();
        let mut got = Vec::new();
        // Ends when the proxy closes the upstream connection.
        let _ = s.read_to_end(&mut got).await;
        got
    });
    let (tcp, cm) = setup("cluster: c, idle_timeout: 5s", &cluster("c", &[port], ""));
    let stats = Arc::new(TcpStats::default());
    let started = tokio::time::Instant::now();
    let (mut client, task) = start(tcp, cm, Arc::clone(&stats)).await;
    client.write_all(b"x").await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Activity at 3 s moves the deadline to 8 s.
    client.write_all(b"y").await.unwrap();
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(8) && elapsed < Duration::from_secs(9),
        "{elapsed:?}"
    );
    assert_eq!(upstream.await.unwrap(), b"xy");
    task.await.unwrap();
    assert_eq!(stats.idle_timeout.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn max_downstream_connection_duration() {
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = up.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = up.accept().await.unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink).await;
    });
    let (tcp, cm) = setup(
        "cluster: c, max_downstream_connection_duration: 2s",
        &cluster("c", &[port], ""),
    );
    let stats = Arc::new(TcpStats::default());
    let (mut client, task) = start(tcp, cm, Arc::clone(&stats)).await;
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest).await;
    task.await.unwrap();
    assert_eq!(stats.max_duration.get(), 1);
    assert_eq!(stats.idle_timeout.get(), 0);
}

/// An upstream that greets every connection with `hello`, then reads to the
/// end and closes.
async fn greeter() -> u16 {
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = up.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = up.accept().await {
            tokio::spawn(async move {
                let _ = s.write_all(b"hello").await;
                let _ = s.shutdown().await;
                let _ = s.read_to_end(&mut Vec::new()).await;
            });
        }
    });
    port
}

#[tokio::test]
async fn connect_failures_are_retried_then_the_client_is_closed() {
    let open = greeter().await;
    let closed = closed_port().await;
    // Round robin from a random start over [closed, open]: the second
    // connection's first pick is the closed host whatever the first did.
    let (tcp, cm) = setup(
        "cluster: c, max_connect_attempts: 3",
        &cluster("c", &[closed, open], ""),
    );
    let stats = Arc::new(TcpStats::default());
    for _ in 0..2 {
        let fails = cluster_stats(&cm, "c").stats.cx_connect_fail.get();
        let (mut client, task) = start(Arc::clone(&tcp), Arc::clone(&cm), Arc::clone(&stats)).await;
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hello");
        // The upstream's FIN came through; the client ends its half.
        drop(client);
        task.await.unwrap();
        assert!(cluster_stats(&cm, "c").stats.cx_connect_fail.get() - fails <= 1);
    }
    assert!(cluster_stats(&cm, "c").stats.cx_connect_fail.get() >= 1);

    // Every host closed: three attempts, then the client's connection closes.
    let (tcp, cm) = setup(
        "cluster: c, max_connect_attempts: 3",
        &cluster("c", &[closed], ""),
    );
    let (mut client, task) = start(tcp, Arc::clone(&cm), Arc::clone(&stats)).await;
    let mut got = Vec::new();
    let _ = client.read_to_end(&mut got).await;
    assert!(got.is_empty());
    task.await.unwrap();
    let c = cluster_stats(&cm, "c");
    assert_eq!(c.stats.cx_total.get(), 3);
    assert_eq!(c.stats.cx_connect_fail.get(), 3);
    assert_eq!(c.stats.cx_connect_attempts_exceeded.get(), 1);
}

#[tokio::test]
async fn no_cluster_no_host_and_overflow_close_at_once() {
    let stats = Arc::new(TcpStats::default());
    let (tcp, cm) = setup("cluster: missing", &cluster("c", &[1], ""));
    let (mut client, task) = start(tcp, cm, Arc::clone(&stats)).await;
    assert_eq!(client.read(&mut [0; 8]).await.unwrap_or(0), 0);
    task.await.unwrap();
    assert_eq!(stats.cx_no_route.get(), 1);

    // max_connections 1: the second connection overflows while the first is open.
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = up.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = up.accept().await.unwrap();
        let _ = s.read_to_end(&mut Vec::new()).await;
    });
    let (tcp, cm) = setup(
        "cluster: c",
        &cluster(
            "c",
            &[port],
            ", circuit_breakers: {thresholds: [{max_connections: 1}]}",
        ),
    );
    let (mut first, t1) = start(Arc::clone(&tcp), Arc::clone(&cm), Arc::clone(&stats)).await;
    first.write_all(b"x").await.unwrap();
    // The first is connected once its byte is counted.
    while stats.rx_bytes_total.get() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (mut second, t2) = start(tcp, Arc::clone(&cm), Arc::clone(&stats)).await;
    assert_eq!(second.read(&mut [0; 8]).await.unwrap_or(0), 0);
    t2.await.unwrap();
    assert_eq!(cluster_stats(&cm, "c").stats.cx_overflow.get(), 1);
    drop(first);
    t1.await.unwrap();
}

#[tokio::test]
async fn access_log_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tcp.log");
    let port = greeter().await;
    let closed = closed_port().await;
    let format = "%UPSTREAM_HOST% %UPSTREAM_CLUSTER% %BYTES_RECEIVED% %BYTES_SENT% %RESPONSE_FLAGS% %RESPONSE_FLAGS_LONG% %RESPONSE_CODE% %PROTOCOL% %REQ(:METHOD)% %UPSTREAM_REQUEST_ATTEMPT_COUNT%\\n";
    let log = |cluster: &str| {
        format!(
            "cluster: {cluster}, max_connect_attempts: 2, access_log: [{{name: f, typed_config: {{'@type': type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog, path: '{}', log_format: {{text_format_source: {{inline_string: \"{format}\"}}}}}}}}]",
            path.display()
        )
    };
    let clusters = cluster("c", &[closed, port], "") + &cluster("dead", &[closed], "");
    let stats = Arc::new(TcpStats::default());
    // Two connections to [closed, open]: the second tries the closed host first.
    let (tcp, cm) = setup(&log("c"), &clusters);
    for _ in 0..2 {
        let (mut client, task) = start(Arc::clone(&tcp), Arc::clone(&cm), Arc::clone(&stats)).await;
        client.write_all(b"abc").await.unwrap();
        client.shutdown().await.unwrap();
        client.read_to_end(&mut Vec::new()).await.unwrap();
        task.await.unwrap();
    }
    // Every attempt refused.
    let (tcp, cm) = setup(&log("dead"), &clusters);
    let (mut client, task) = start(tcp, cm, Arc::clone(&stats)).await;
    client.read_to_end(&mut Vec::new()).await.unwrap();
    task.await.unwrap();
    // No such cluster.
    let (tcp, cm) = setup(&log("nowhere"), &clusters);
    let (mut client, task) = start(tcp, cm, stats).await;
    client.read_to_end(&mut Vec::new()).await.unwrap();
    task.await.unwrap();
    // Lines are written by the writer thread: wait for it.
    crate::access_log::writer::flush_and_wait();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(
        lines[1],
        format!("127.0.0.1:{port} c 3 5 UF UpstreamConnectionFailure 0 - - 2")
    );
    assert_eq!(
        lines[2],
        format!(
            "127.0.0.1:{closed} dead 0 0 UF,URX UpstreamConnectionFailure,UpstreamRetryLimitExceeded 0 - - 2"
        )
    );
    assert_eq!(lines[3], "- - 0 0 NC NoClusterFound 0 - - 0");
}
