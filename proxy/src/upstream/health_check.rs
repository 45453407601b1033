//! Active health checks (HTTP, gRPC `grpc.health.v1`, TCP connect), run on the
//! main thread: one task per host and check. A host starts unhealthy (as in
//! Envoy, panic mode still routes to it) and turns healthy after one pass; then
//! `unhealthy_threshold` failures (a non-retriable unexpected status at once)
//! remove it and `healthy_threshold` passes restore it. Changes republish the
//! host set; workers only read it.

use super::UpstreamCluster;
use super::host::Host;
use bytes::Bytes;
use courier_config::cluster::{
    Endpoint, GrpcHealthCheck, HealthCheck, HealthCheckKind, HttpHealthCheck,
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
    /// Counts towards `unhealthy_threshold`.
    Fail,
    /// Unhealthy at once (an unexpected, non-retriable status).
    FailNow,
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
    start_new_hosts(c, fresh);
    tokio::spawn(watch(Arc::clone(c)));
}

/// Starts the checks of every host of `cluster` that has none yet (marked
/// unhealthy first when `unhealthy_first`); returns whether there was one.
fn start_new_hosts(cluster: &Arc<UpstreamCluster>, unhealthy_first: bool) -> bool {
    let mut added = false;
    for host in cluster.hosts().hosts() {
        if host.health.watched.swap(true, Ordering::Relaxed) {
            continue;
        }
        if unhealthy_first {
            host.health.failed.store(true, Ordering::Relaxed);
        }
        added = true;
        for hc in &cluster.config.health_checks {
            tokio::spawn(run(Arc::clone(cluster), hc.clone(), Arc::clone(host)));
        }
    }
    if added {
        super::outlier::republish_now(cluster);
    }
    added
}

/// Hosts that DNS or EDS add later are checked too: the host set is looked at
/// every `interval` (at most a second apart) for hosts without checks.
async fn watch(cluster: Arc<UpstreamCluster>) {
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
        start_new_hosts(&cluster, true);
    }
}

async fn run(cluster: Arc<UpstreamCluster>, hc: HealthCheck, host: Arc<Host>) {
    tokio::time::sleep(jitter(hc.initial_jitter)).await;
    while !cluster.retired() {
        let verdict = match tokio::time::timeout(hc.timeout, check(&cluster, &hc, &host)).await {
            Ok(v) => v,
            Err(_) => Verdict::Fail,
        };
        let changed = update(&cluster, &host, &hc, verdict);
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

/// Applies a verdict; returns whether the host's health changed.
fn update(cluster: &UpstreamCluster, host: &Host, hc: &HealthCheck, v: Verdict) -> bool {
    let h = &host.health;
    // A never-checked host is healthy after one pass.
    let first = !h.checked.swap(true, Ordering::Relaxed);
    match v {
        Verdict::Pass => {
            h.failures.store(0, Ordering::Relaxed);
            let passes = h.passes.fetch_add(1, Ordering::Relaxed) + 1;
            super::outlier::uneject_on_health_check(cluster, host);
            if h.failed() && (first || passes >= hc.healthy_threshold) {
                h.failed.store(false, Ordering::Relaxed);
                return true;
            }
            false
        }
        Verdict::Fail | Verdict::FailNow => {
            h.passes.store(0, Ordering::Relaxed);
            let failures = h.failures.fetch_add(1, Ordering::Relaxed) + 1;
            let now = matches!(v, Verdict::FailNow) || failures >= hc.unhealthy_threshold;
            if !h.failed() && now {
                h.failed.store(true, Ordering::Relaxed);
                return true;
            }
            false
        }
    }
}

/// The configured endpoint `host` came from (STATIC by address, DNS by name),
/// for its `health_check_config`.
fn endpoint_of<'a>(cluster: &'a UpstreamCluster, host: &Host) -> Option<&'a Endpoint> {
    cluster
        .config
        .load_assignment
        .as_ref()?
        .endpoints()
        .find(|e| match &e.address {
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
            return Verdict::Fail;
        };
        return probe(cluster, hc, hostname, unix).await;
    }
    let Ok(tcp) = TcpStream::connect(target).await else {
        return Verdict::Fail;
    };
    // A TLS host is checked over TLS (its transport socket, or the one the
    // check's `transport_socket_match_criteria` picks, as in Envoy): a failed
    // handshake fails the check.
    match cluster
        .sockets
        .tls(hc.transport_socket.unwrap_or(host.socket))
    {
        None => probe(cluster, hc, hostname, tcp).await,
        Some(tls) => {
            let handshake = match check_alpn(cluster, hc) {
                Some(alpn) => tls.handshake_offering(tcp, target, alpn).await,
                None => tls.handshake(tcp, target, None).await,
            };
            match handshake {
                Ok(stream) => probe(cluster, hc, hostname, stream).await,
                Err(_) => Verdict::Fail,
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
        HealthCheckKind::TcpConnect => None,
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
        HealthCheckKind::TcpConnect => Verdict::Pass,
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
        .body(Full::new(Bytes::new()));
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
    }
    let Ok(req) = req else { return Verdict::Fail };
    let status = match h.codec {
        courier_config::cluster::HealthCheckCodec::Http1 => {
            let Ok((mut send, conn)) =
                hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await
            else {
                return Verdict::Fail;
            };
            tokio::spawn(conn);
            match send.send_request(req).await {
                Ok(r) => r.status().as_u16(),
                Err(_) => return Verdict::Fail,
            }
        }
        courier_config::cluster::HealthCheckCodec::Http2 => {
            let Ok((mut send, conn)) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                    .await
            else {
                return Verdict::Fail;
            };
            tokio::spawn(conn);
            match send.send_request(req).await {
                Ok(r) => r.status().as_u16(),
                Err(_) => return Verdict::Fail,
            }
        }
    };
    let within = |ranges: &[std::ops::Range<u16>]| ranges.iter().any(|r| r.contains(&status));
    if within(&h.expected_statuses) {
        Verdict::Pass
    } else if within(&h.retriable_statuses) {
        Verdict::Fail
    } else {
        Verdict::FailNow
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
        return Verdict::Fail;
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
        return Verdict::Fail;
    };
    let Ok(resp) = send.send_request(req).await else {
        return Verdict::Fail;
    };
    if resp.status() != http::StatusCode::OK {
        return Verdict::Fail;
    }
    let Ok(body) = resp.into_body().collect().await else {
        return Verdict::Fail;
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
        Verdict::Fail
    }
}
