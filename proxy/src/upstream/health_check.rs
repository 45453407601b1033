//! Active health checks (HTTP, gRPC `grpc.health.v1`, TCP), run on the
//! main thread: one task per host and check. A host starts unhealthy (as in
//! Envoy, panic mode still routes to it) and turns healthy after one pass; then
//! `unhealthy_threshold` failures (a non-retriable unexpected status at once)
//! remove it and `healthy_threshold` passes restore it. Changes republish the
//! host set; workers only read it.

use super::UpstreamCluster;
use super::health_event::{Event, FailureType, HealthEventLog, What};
use super::host::Host;
use bytes::Bytes;
use courier_config::cluster::{
    Endpoint, GrpcHealthCheck, HealthCheck, HealthCheckKind, HttpHealthCheck, Locality,
    TcpHealthCheck, payloads_match,
};
use http::{Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;
use tokio::net::TcpStream;

/// A host's active health-check state (main thread writes, the host set reads).
#[derive(Debug, Default)]
pub struct HostHealth {
    failed: AtomicBool,
    checked: AtomicBool,
    passes: AtomicU32,
    failures: AtomicU32,
    /// Checks run for this host (set once, when they start).
    watched: AtomicBool,
}

impl HostHealth {
    /// Whether active health checking has marked the host unhealthy.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Marks the host as a check would (tests of what reads the mark).
    #[cfg(test)]
    pub(crate) fn set_failed(&self, failed: bool) {
        self.failed.store(failed, Ordering::Relaxed);
    }
}

impl super::lazy::Lazy<HostHealth> {
    /// Whether active health checking has marked the host unhealthy (never,
    /// before any check: only hosts of checked clusters get the state).
    pub fn failed(&self) -> bool {
        self.get().is_some_and(HostHealth::failed)
    }
}

/// One check's verdict.
enum Verdict {
    Pass,
    /// Failed: a network failure or a retriable answer counts towards
    /// `unhealthy_threshold`; any other wrong answer is unhealthy at once.
    Fail {
        /// Why.
        failure: FailureType,
        /// A retriable status (`retriable_statuses`).
        retriable: bool,
        /// The HTTP status the host answered (0: none).
        status: u16,
    },
}

impl Verdict {
    /// No usable answer (connect failure, reset, timeout).
    const NETWORK: Self = Self::Fail {
        failure: FailureType::Network,
        retriable: true,
        status: 0,
    };

    /// A wrong answer: unhealthy at once.
    fn active(status: u16) -> Self {
        Self::Fail {
            failure: FailureType::Active,
            retriable: false,
            status,
        }
    }
}

/// Starts the checks of every cluster that has them. Their hosts start
/// unhealthy until a first pass, as in Envoy (panic mode still routes to them).
pub fn spawn(clusters: &super::ClusterManager) {
    for c in &clusters.clusters() {
        spawn_one(c);
    }
}

/// Starts `c`'s checks (when it has some) until the cluster retires.
pub fn spawn_one(c: &Arc<UpstreamCluster>) {
    spawn_checks(c, true);
}

/// Starts `c`'s checks; with `fresh`, its hosts start unhealthy until a first
/// pass. A cluster updated over CDS that kept its predecessor's hosts keeps
/// their health as checked so far (`fresh` false): no traffic blip. Hosts that
/// DNS or EDS add later are found by a watcher and start unhealthy.
pub fn spawn_checks(c: &Arc<UpstreamCluster>, fresh: bool) {
    if c.config.health_checks.is_empty() {
        return;
    }
    // This cluster version runs its own checks; its predecessor's stop as it retires.
    for host in c.hosts().hosts() {
        host.health.watched.store(false, Ordering::Relaxed);
    }
    let logs: Logs = c
        .config
        .health_checks
        .iter()
        .map(|hc| match HealthEventLog::open(&hc.event_logs) {
            Ok(log) => log.map(Arc::new),
            Err(e) => {
                tracing::warn!(cluster = %c.config.name, error = %e, "health check event log");
                None
            }
        })
        .collect();
    start_new_hosts(c, &logs, fresh);
    tokio::spawn(watch(Arc::clone(c), logs));
}

/// Each health check's event log, in the cluster's order.
type Logs = Arc<[Option<Arc<HealthEventLog>>]>;

/// Starts the checks of every host of `cluster` that has none yet (marked
/// unhealthy first when `unhealthy_first`); returns whether there was one.
fn start_new_hosts(cluster: &Arc<UpstreamCluster>, logs: &Logs, unhealthy_first: bool) -> bool {
    let mut added = false;
    for host in cluster.hosts().hosts() {
        if host.health.watched.swap(true, Ordering::Relaxed) {
            continue;
        }
        if unhealthy_first {
            host.health.failed.store(true, Ordering::Relaxed);
        }
        added = true;
        for (hc, log) in cluster.config.health_checks.iter().zip(logs.iter()) {
            tokio::spawn(run(
                Arc::clone(cluster),
                hc.clone(),
                log.clone(),
                Arc::clone(host),
            ));
        }
    }
    if added {
        super::outlier::republish_now(cluster);
    }
    added
}

/// Hosts that DNS or EDS add later are checked too: the host set is looked at
/// every `interval` (at most a second apart) for hosts without checks.
async fn watch(cluster: Arc<UpstreamCluster>, logs: Logs) {
    let every = cluster
        .config
        .health_checks
        .iter()
        .map(|hc| hc.interval)
        .min()
        .unwrap_or(Duration::from_secs(1))
        .clamp(Duration::from_millis(10), Duration::from_secs(1));
    while !cluster.retired() {
        tokio::time::sleep(every).await;
        start_new_hosts(&cluster, &logs, true);
    }
}

async fn run(
    cluster: Arc<UpstreamCluster>,
    hc: HealthCheck,
    log: Option<Arc<HealthEventLog>>,
    host: Arc<Host>,
) {
    tokio::time::sleep(jitter(hc.initial_jitter)).await;
    while !cluster.retired() {
        let verdict = match tokio::time::timeout(hc.timeout, check(&cluster, &hc, &host)).await {
            Ok(v) => v,
            Err(_) => Verdict::NETWORK,
        };
        let changed = update(&cluster, &host, &hc, log.as_deref(), verdict);
        if changed {
            super::outlier::republish_now(&cluster);
        }
        // Right after a change the edge intervals apply.
        let every = if changed && host.health.failed() {
            hc.unhealthy_edge_interval
        } else if changed {
            hc.healthy_edge_interval
        } else if host.health.failed() {
            hc.unhealthy_interval
        } else if traffic(&cluster) {
            hc.interval
        } else {
            hc.no_traffic_interval
        };
        let extra = jitter(hc.interval_jitter)
            + every.mul_f64(f64::from(fastrand::u32(0..=hc.interval_jitter_percent)) / 100.0);
        tokio::time::sleep(every + extra).await;
        // A host that left the set is no longer checked.
        if !cluster.hosts().hosts().any(|h| Arc::ptr_eq(h, &host)) {
            return;
        }
    }
}

fn jitter(max: Duration) -> Duration {
    let ms = max.as_millis() as u64;
    Duration::from_millis(if ms == 0 { 0 } else { fastrand::u64(0..=ms) })
}

fn traffic(cluster: &UpstreamCluster) -> bool {
    cluster.hosts().hosts().any(|h| {
        h.stats
            .get()
            .is_some_and(|s| s.rq_total.load(Ordering::Relaxed) > 0)
    })
}

/// Applies a verdict; returns whether the host's health changed. Events go to
/// `log` as Envoy logs them: a host turning healthy or unhealthy; a failed check
/// when it is the host's first (or `always_log_health_check_failures`); a passed
/// check that changed nothing with `always_log_health_check_success`.
fn update(
    cluster: &UpstreamCluster,
    host: &Host,
    hc: &HealthCheck,
    log: Option<&HealthEventLog>,
    v: Verdict,
) -> bool {
    let h = &host.health;
    // A never-checked host is healthy after one pass.
    let first = !h.checked.swap(true, Ordering::Relaxed);
    let event = |what| {
        if let Some(log) = log {
            let (endpoint, locality) = endpoint_and_locality(cluster, host).unzip();
            log.write(&Event {
                checker: checker_type(&hc.kind),
                host: host.address,
                cluster: &cluster.config.name,
                metadata: endpoint.map(|e| &e.metadata),
                locality: locality.flatten(),
                what,
            });
        }
    };
    match v {
        Verdict::Pass => {
            h.failures.store(0, Ordering::Relaxed);
            let passes = h.passes.fetch_add(1, Ordering::Relaxed) + 1;
            super::outlier::uneject_on_health_check(cluster, host);
            if h.failed() && (first || passes >= hc.healthy_threshold) {
                h.failed.store(false, Ordering::Relaxed);
                if cluster.config.lb.slow_start.is_some() {
                    // Envoy's last_hc_pass_time: turning healthy by active
                    // health checking (re)starts slow start.
                    host.set_slow_start_since(tokio::time::Instant::now());
                }
                event(What::AddHealthy { first_check: first });
                return true;
            }
            if hc.always_log_success {
                event(What::Success);
            }
            false
        }
        Verdict::Fail {
            failure,
            retriable,
            status,
        } => {
            h.passes.store(0, Ordering::Relaxed);
            let failures = h.failures.fetch_add(1, Ordering::Relaxed) + 1;
            let now = (!retriable && failure == FailureType::Active)
                || failures >= hc.unhealthy_threshold;
            let changed = !h.failed() && now;
            if changed {
                h.failed.store(true, Ordering::Relaxed);
                event(What::Eject { failure, status });
            }
            if first || hc.always_log_failures {
                event(What::Failure {
                    failure,
                    first_check: first,
                    status,
                });
            }
            changed
        }
    }
}

/// Envoy's `HealthCheckerType` name of a check.
fn checker_type(kind: &HealthCheckKind) -> &'static str {
    match kind {
        HealthCheckKind::Http(_) => "HTTP",
        HealthCheckKind::Tcp(_) => "TCP",
        HealthCheckKind::Grpc(_) => "GRPC",
    }
}

/// The configured endpoint `host` came from (STATIC by address, DNS by name),
/// for its `health_check_config`.
fn endpoint_of<'a>(cluster: &'a UpstreamCluster, host: &Host) -> Option<&'a Endpoint> {
    endpoint_and_locality(cluster, host).map(|(e, _)| e)
}

/// The configured endpoint `host` came from and its locality.
fn endpoint_and_locality<'a>(
    cluster: &'a UpstreamCluster,
    host: &Host,
) -> Option<(&'a Endpoint, Option<&'a Locality>)> {
    cluster
        .config
        .load_assignment
        .as_ref()?
        .priorities
        .iter()
        .flat_map(|p| p.localities.iter())
        .flat_map(|l| l.endpoints.iter().map(move |e| (e, l.locality.as_ref())))
        .find(|(e, _)| match &e.address {
            courier_config::core::Address::Pipe(p) => host.pipe_path() == Some(p.path.as_str()),
            courier_config::core::Address::Socket(sa) => {
                sa.port == host.address.port()
                    && match sa.ip {
                        Some(ip) => ip == host.address.ip(),
                        None => {
                            sa.host == host.hostname()
                                || e.hostname.as_deref() == Some(host.hostname())
                        }
                    }
            }
        })
}

async fn check(cluster: &UpstreamCluster, hc: &HealthCheck, host: &Host) -> Verdict {
    // `health_check_config.port_value` and `.hostname` of the host's endpoint
    // redirect the check and override its `Host`, as in Envoy.
    let endpoint = endpoint_of(cluster, host);
    let mut target = host.address;
    if let Some(p) = endpoint.and_then(|e| e.health_check_port) {
        target.set_port(p);
    }
    let hostname = endpoint.and_then(|e| e.health_check_hostname.as_deref());
    if let Some(path) = host.pipe_path() {
        // A pipe host is checked over its socket (plaintext: the data plane
        // refuses TLS to pipe hosts).
        let Ok(unix) = crate::upstream::pool::connect_unix(path).await else {
            return Verdict::NETWORK;
        };
        return probe(cluster, hc, hostname, unix).await;
    }
    let Ok(mut tcp) = TcpStream::connect(target).await else {
        return Verdict::NETWORK;
    };
    // A TLS host is checked over TLS (its transport socket, or the one the
    // check's `transport_socket_match_criteria` picks, as in Envoy): a failed
    // handshake fails the check. Its PROXY header names no downstream
    // connection (v2 `LOCAL`, v1 the check's own addresses).
    let socket = hc.transport_socket.unwrap_or(host.socket);
    if let Some(version) = cluster.sockets.proxy_protocol(socket)
        && crate::upstream::pool::write_proxy_header(&mut tcp, version, None)
            .await
            .is_err()
    {
        return Verdict::NETWORK;
    }
    match cluster.sockets.tls(socket) {
        None => probe(cluster, hc, hostname, tcp).await,
        Some(tls) => {
            let handshake = match check_alpn(cluster, hc) {
                Some(alpn) => tls.handshake_offering(tcp, target, alpn).await,
                None => tls.handshake(tcp, target, None, host.hostname()).await,
            };
            match handshake {
                Ok(stream) => probe(cluster, hc, hostname, stream).await,
                Err(_) => Verdict::NETWORK,
            }
        }
    }
}

/// The one protocol a check of an `auto_config` cluster offers by ALPN: the
/// one it speaks (other clusters offer what their connections do).
fn check_alpn(cluster: &UpstreamCluster, hc: &HealthCheck) -> Option<&'static [u8]> {
    use courier_config::cluster::{HealthCheckCodec, UpstreamProtocol};
    if cluster.config.http.protocol != UpstreamProtocol::Auto {
        return None;
    }
    match &hc.kind {
        HealthCheckKind::Http(h) if h.codec == HealthCheckCodec::Http1 => Some(b"http/1.1"),
        HealthCheckKind::Http(_) | HealthCheckKind::Grpc(_) => Some(b"h2"),
        HealthCheckKind::Tcp(_) => None,
    }
}

async fn probe<T>(
    cluster: &UpstreamCluster,
    hc: &HealthCheck,
    hostname: Option<&str>,
    io: T,
) -> Verdict
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    match &hc.kind {
        HealthCheckKind::Tcp(t) => tcp(t, io).await,
        HealthCheckKind::Http(h) => http(cluster, h, hostname, io).await,
        HealthCheckKind::Grpc(g) => grpc(cluster, g, hostname, io).await,
    }
}

async fn http<T>(
    cluster: &UpstreamCluster,
    h: &HttpHealthCheck,
    hostname: Option<&str>,
    tcp: T,
) -> Verdict
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let authority = hostname
        .map(str::to_string)
        .or_else(|| h.host.clone())
        .unwrap_or_else(|| cluster.config.name.clone());
    let mut req = Request::builder()
        .method(h.method)
        .uri(h.path.as_str())
        .header(header::HOST, authority.as_str())
        .header(header::USER_AGENT, "Envoy/HC")
        .body(Full::new(Bytes::from(h.send.clone().unwrap_or_default())));
    if let Ok(r) = &mut req {
        let hs = r.headers_mut();
        for name in &h.request_headers_to_remove {
            hs.remove(name.as_str());
        }
        for a in &h.request_headers_to_add {
            if let (Ok(n), Ok(v)) = (
                http::HeaderName::try_from(a.name.as_str()),
                http::HeaderValue::try_from(a.value.as_str()),
            ) && (a.keep_empty_value || !a.value.is_empty())
            {
                hs.append(n, v);
            }
        }
        if let Some(send) = &h.send {
            hs.insert(header::CONTENT_LENGTH, send.len().into());
        }
    }
    let Ok(req) = req else {
        return Verdict::NETWORK;
    };
    let resp = match h.codec {
        courier_config::cluster::HealthCheckCodec::Http1 => {
            let Ok((mut send, conn)) =
                hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await
            else {
                return Verdict::NETWORK;
            };
            tokio::spawn(conn);
            match send.send_request(req).await {
                Ok(r) => r,
                Err(_) => return Verdict::NETWORK,
            }
        }
        courier_config::cluster::HealthCheckCodec::Http2 => {
            let Ok((mut send, conn)) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                    .await
            else {
                return Verdict::NETWORK;
            };
            tokio::spawn(conn);
            match send.send_request(req).await {
                Ok(r) => r,
                Err(_) => return Verdict::NETWORK,
            }
        }
    };
    let status = resp.status().as_u16();
    // The body's first `response_buffer_size` bytes must hold the `receive`
    // payloads; a mismatch fails at once, before the status is looked at.
    if !h.receive.is_empty() {
        let Some(body) = body_prefix(resp.into_body(), h.response_buffer_size).await else {
            return Verdict::NETWORK;
        };
        if !payloads_match(&h.receive, &body) {
            return Verdict::active(status);
        }
    }
    let within = |ranges: &[std::ops::Range<u16>]| ranges.iter().any(|r| r.contains(&status));
    if within(&h.expected_statuses) {
        Verdict::Pass
    } else if within(&h.retriable_statuses) {
        Verdict::Fail {
            failure: FailureType::Active,
            retriable: true,
            status,
        }
    } else {
        Verdict::active(status)
    }
}

/// The first `limit` bytes of a response body (all of it when `limit` is 0);
/// `None` when the body fails before its end.
async fn body_prefix(mut body: hyper::body::Incoming, limit: u64) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.ok()?.into_data() else {
            continue;
        };
        let room = if limit == 0 {
            data.len()
        } else {
            (limit as usize).saturating_sub(got.len()).min(data.len())
        };
        got.extend_from_slice(&data[..room]);
    }
    Some(got)
}

/// Bytes a TCP check holds while it searches them (Envoy's default connection
/// buffer limit).
const TCP_READ_LIMIT: usize = 1 << 20;

/// A TCP check: `send` written, then bytes read until they hold every `receive`
/// payload in order (Envoy keeps reading until then or the timeout). A peer that
/// closes first fails the check; no payload expected passes on connect. Past
/// [`TCP_READ_LIMIT`] bytes without a match nothing more is read and the check
/// waits for its timeout, as Envoy's read-disabled connection does.
async fn tcp<T>(t: &TcpHealthCheck, mut io: T) -> Verdict
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if !t.send.is_empty() && io.write_all(&t.send).await.is_err() {
        return Verdict::NETWORK;
    }
    if t.receive.is_empty() {
        return Verdict::Pass;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if got.len() >= TCP_READ_LIMIT {
            return std::future::pending().await;
        }
        match io.read(&mut buf).await {
            Ok(0) | Err(_) => return Verdict::NETWORK,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        if payloads_match(&t.receive, &got) {
            return Verdict::Pass;
        }
    }
}

/// `grpc.health.v1.Health/Check`: SERVING (1) passes.
async fn grpc<T>(
    cluster: &UpstreamCluster,
    g: &GrpcHealthCheck,
    hostname: Option<&str>,
    tcp: T,
) -> Verdict
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Ok((mut send, conn)) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await
    else {
        return Verdict::NETWORK;
    };
    tokio::spawn(conn);
    // HealthCheckRequest { service = 1 }, in a gRPC frame.
    let service = g.service_name.as_bytes();
    let mut msg = Vec::with_capacity(service.len() + 8);
    if !service.is_empty() {
        msg.push(0x0a);
        let mut n = service.len();
        // Varint length.
        for _ in 0..5 {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                msg.push(b);
                break;
            }
            msg.push(b | 0x80);
        }
        msg.extend_from_slice(service);
    }
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    frame.extend_from_slice(&msg);
    let authority = hostname
        .map(str::to_string)
        .or_else(|| g.authority.clone())
        .unwrap_or_else(|| cluster.config.name.clone());
    let Ok(req) = Request::post(format!("http://{authority}/grpc.health.v1.Health/Check"))
        .header(header::CONTENT_TYPE, "application/grpc")
        .header("te", "trailers")
        .header(header::USER_AGENT, "Envoy/HC")
        .body(Full::new(Bytes::from(frame)))
    else {
        return Verdict::NETWORK;
    };
    let Ok(resp) = send.send_request(req).await else {
        return Verdict::NETWORK;
    };
    // Any answer but SERVING is an active failure, unhealthy at once (Envoy maps a
    // non-200 status to a gRPC status and fails the check as ACTIVE).
    if resp.status() != http::StatusCode::OK {
        return Verdict::active(0);
    }
    let Ok(body) = resp.into_body().collect().await else {
        return Verdict::NETWORK;
    };
    let grpc_ok = body
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .is_none_or(|v| v.as_bytes() == b"0");
    let bytes = body.to_bytes();
    // HealthCheckResponse { status = 1 (varint) }: SERVING is 1.
    let serving = bytes
        .get(5..)
        .is_some_and(|m| m.windows(2).any(|w| w == [0x08, 0x01]));
    if grpc_ok && serving {
        Verdict::Pass
    } else {
        Verdict::active(0)
    }
}
