//! The HTTP gRPC access logger of one worker, as Envoy's per-thread access log
//! service client: each entry becomes an `HTTPAccessLogEntry` in the worker's
//! batch for that logger; `buffer_size_bytes` of entries, or the
//! `buffer_flush_interval` timer, send the batch as one
//! `StreamAccessLogsMessage` on the worker's long-lived `StreamAccessLogs`
//! stream to the service's cluster (the node and `log_name` in its first
//! message only). A service that is down or slow loses entries
//! (`access_logs.grpc_access_log.logs_dropped`), never requests; a stream that
//! ended is opened again at the next flush.

use super::Entry;
use crate::request::conn::Peer;
use crate::stats::{Counter, Sample};
use courier_config::listener::grpc_access_log::HttpGrpcAccessLog;
use envoy_types::pb::envoy::config::core::v3::{
    Address, Node, SocketAddress, address, socket_address,
};
use envoy_types::pb::envoy::data::accesslog::v3 as data;
use envoy_types::pb::envoy::service::accesslog::v3 as svc;
use http::{HeaderMap, Method, Version};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, UNIX_EPOCH};
use tokio::sync::mpsc;

static NODE: OnceLock<Node> = OnceLock::new();

/// Sets the node the streams' identifiers name.
pub fn set_node(node: Node) {
    let _ = NODE.set(node);
}

/// `access_logs.grpc_access_log.*`, shared by every logger as in Envoy.
static WRITTEN: Counter = Counter::new();
static DROPPED: Counter = Counter::new();

/// The loggers' samples.
pub fn samples(out: &mut Vec<Sample>) {
    if WRITTEN.get() + DROPPED.get() > 0 {
        out.push((
            "access_logs.grpc_access_log.logs_written".into(),
            WRITTEN.get(),
        ));
        out.push((
            "access_logs.grpc_access_log.logs_dropped".into(),
            DROPPED.get(),
        ));
    }
}

/// Zeroes the counters (`/reset_counters`).
pub fn reset_counters() {
    WRITTEN.reset();
    DROPPED.reset();
}

/// The stream a batch's entries go on.
type Stream = Option<mpsc::Sender<svc::StreamAccessLogsMessage>>;

/// This worker's batches: per config, its entries and its stream.
type Batch = super::batch::Batch<HttpGrpcAccessLog, data::HttpAccessLogEntry, Stream>;

/// Dials a gRPC channel to a cluster (the xDS streams' dialer, handed in by
/// the worker's wiring: the access log sits below xDS on the request path).
pub type Dial = fn(
    Arc<crate::upstream::ClusterManager>,
    String,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<tonic::transport::Channel, String>> + Send>,
>;

/// What a worker's streams are opened with.
#[derive(Clone)]
struct Dialer {
    clusters: Arc<crate::upstream::ClusterManager>,
    dial: Dial,
}

#[derive(Default)]
struct Loggers {
    clusters: Option<Dialer>,
    batches: super::batch::Batches<HttpGrpcAccessLog, data::HttpAccessLogEntry, Stream>,
}

thread_local! {
    static LOGGERS: RefCell<Loggers> = RefCell::default();
}

/// Sets this worker's clusters (its streams go to their hosts) and dialer.
pub fn start(clusters: Arc<crate::upstream::ClusterManager>, dial: Dial) {
    LOGGERS.with_borrow_mut(|l| l.clusters = Some(Dialer { clusters, dial }));
}

/// Adds `e` to this worker's batch for `config`, sending the batch once it
/// reaches `buffer_size_bytes`.
pub fn record(config: &Arc<HttpGrpcAccessLog>, e: &Entry<'_>) {
    let entry = entry(config, e);
    let size = prost::Message::encoded_len(&entry);
    let limit = config.buffer_size_bytes as usize;
    let arm = LOGGERS.with_borrow_mut(|l| {
        let Loggers { clusters, batches } = l;
        let (b, pushed) = batches.push(config, entry, size, limit, || None)?;
        if pushed.full {
            send(clusters.as_ref(), b);
        }
        Some(super::batch::needs_timer(b))
    });
    if arm == Some(true) {
        super::batch::arm(config.buffer_flush_interval, Arc::clone(config), flush);
    }
}

/// The flush timer of `config`'s batch fired.
fn flush(config: &Arc<HttpGrpcAccessLog>) {
    LOGGERS.with_borrow_mut(|l| {
        let Loggers { clusters, batches } = l;
        if let Some(b) = batches.fired(config) {
            send(clusters.as_ref(), b);
        }
    });
}

/// Sends every batch now (a worker's last act when it stops); whether any
/// entry was sent.
pub fn flush_at_exit() -> bool {
    LOGGERS.with_borrow_mut(|l| {
        let Loggers { clusters, batches } = l;
        let mut sent = false;
        for b in batches.iter_mut() {
            sent |= !b.items.is_empty();
            send(clusters.as_ref(), b);
        }
        sent
    })
}

/// Sends `b`'s entries (if any) on its stream, opening one if it has none.
fn send(clusters: Option<&Dialer>, b: &mut Batch) {
    if b.items.is_empty() {
        return;
    }
    let entries = b.take();
    let n = entries.len() as u64;
    let logs = Some(svc::stream_access_logs_message::LogEntries::HttpLogs(
        svc::stream_access_logs_message::HttpAccessLogEntries { log_entry: entries },
    ));
    if let Some(tx) = b.state.as_ref().filter(|tx| !tx.is_closed()) {
        let msg = svc::StreamAccessLogsMessage {
            identifier: None,
            log_entries: logs,
        };
        match tx.try_send(msg) {
            Ok(()) => WRITTEN.add(n),
            Err(_) => {
                DROPPED.add(n);
                b.state = None;
            }
        }
        return;
    }
    let first = svc::StreamAccessLogsMessage {
        identifier: Some(svc::stream_access_logs_message::Identifier {
            node: NODE.get().cloned(),
            log_name: b.config.log_name.clone(),
        }),
        log_entries: logs,
    };
    b.state = clusters.and_then(|c| open(c, &b.config, first));
    if b.state.is_some() {
        WRITTEN.add(n);
    } else {
        DROPPED.add(n);
    }
}

/// Opens a `StreamAccessLogs` stream to the service's cluster (in the
/// background) with `first` queued.
fn open(
    dialer: &Dialer,
    config: &HttpGrpcAccessLog,
    first: svc::StreamAccessLogsMessage,
) -> Option<mpsc::Sender<svc::StreamAccessLogsMessage>> {
    let rt = tokio::runtime::Handle::try_current().ok()?;
    let (tx, rx) = mpsc::channel(16);
    tx.try_send(first).ok()?;
    let dialer = dialer.clone();
    let cluster = config.cluster.clone();
    let metadata = config.initial_metadata.clone();
    rt.spawn(async move {
        let channel = match (dialer.dial)(dialer.clusters, cluster.clone()).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(%cluster, error = %e, "access log service unreachable");
                return;
            }
        };
        let mut client = svc::access_log_service_client::AccessLogServiceClient::new(channel);
        let req = crate::upstream::client::grpc_stream(rx, &metadata);
        // The stream lives until the service ends it or the worker drops the sender.
        if let Err(e) = client.stream_access_logs(req).await {
            tracing::debug!(%cluster, error = %e, "access log service stream ended");
        }
    });
    Some(tx)
}

fn socket(a: std::net::SocketAddr) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: a.ip().to_string(),
            port_specifier: Some(socket_address::PortSpecifier::PortValue(u32::from(
                a.port(),
            ))),
            ..Default::default()
        })),
    }
}

fn peer(p: &Peer) -> Option<Address> {
    match p {
        Peer::Ip(a) => Some(socket(*a)),
        Peer::Pipe(path) => Some(Address {
            address: Some(address::Address::Pipe(
                envoy_types::pb::envoy::config::core::v3::Pipe {
                    path: path.to_string(),
                    mode: 0,
                },
            )),
        }),
    }
}

fn proto_duration(d: Duration) -> envoy_types::pb::google::protobuf::Duration {
    envoy_types::pb::google::protobuf::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// Envoy's `ResponseFlags` message from the short flags (`UF,URX`).
fn response_flags(flags: Option<&str>) -> data::ResponseFlags {
    let mut f = data::ResponseFlags::default();
    for flag in flags.unwrap_or("").split(',') {
        match flag {
            "LH" => f.failed_local_healthcheck = true,
            "UH" => f.no_healthy_upstream = true,
            "UT" => f.upstream_request_timeout = true,
            "LR" => f.local_reset = true,
            "UR" => f.upstream_remote_reset = true,
            "UF" => f.upstream_connection_failure = true,
            "UC" => f.upstream_connection_termination = true,
            "UO" => f.upstream_overflow = true,
            "NR" => f.no_route_found = true,
            "DI" => f.delay_injected = true,
            "FI" => f.fault_injected = true,
            "RL" => f.rate_limited = true,
            "UAEX" => {
                f.unauthorized_details = Some(data::response_flags::Unauthorized {
                    reason: data::response_flags::unauthorized::Reason::ExternalService as i32,
                })
            }
            "RLSE" => f.rate_limit_service_error = true,
            "DC" => f.downstream_connection_termination = true,
            "URX" => f.upstream_retry_limit_exceeded = true,
            "SI" => f.stream_idle_timeout = true,
            "IH" => f.invalid_envoy_request_headers = true,
            "DPE" => f.downstream_protocol_error = true,
            "UMSDR" => f.upstream_max_stream_duration_reached = true,
            "NFCF" => f.no_filter_config_found = true,
            "DT" => f.duration_timeout = true,
            "UPE" => f.upstream_protocol_error = true,
            "NC" => f.no_cluster_found = true,
            "OM" => f.overload_manager = true,
            "DF" => f.dns_resolution_failure = true,
            "DR" => f.downstream_remote_reset = true,
            _ => {}
        }
    }
    f
}

fn method(m: &Method) -> i32 {
    use envoy_types::pb::envoy::config::core::v3::RequestMethod as M;
    (match *m {
        Method::GET => M::Get,
        Method::HEAD => M::Head,
        Method::POST => M::Post,
        Method::PUT => M::Put,
        Method::DELETE => M::Delete,
        Method::CONNECT => M::Connect,
        Method::OPTIONS => M::Options,
        Method::TRACE => M::Trace,
        Method::PATCH => M::Patch,
        _ => M::MethodUnspecified,
    }) as i32
}

fn protocol(v: Version) -> i32 {
    use data::http_access_log_entry::HttpVersion as V;
    (match v {
        Version::HTTP_10 => V::Http10,
        Version::HTTP_11 => V::Http11,
        Version::HTTP_2 => V::Http2,
        Version::HTTP_3 => V::Http3,
        _ => V::ProtocolUnspecified,
    }) as i32
}

/// The configured headers of `map` that it has (repeated values joined with `,`).
fn picked(map: &HeaderMap, names: &[String]) -> HashMap<String, String> {
    names
        .iter()
        .filter_map(|n| {
            let values: Vec<&str> = map
                .get_all(n.as_str())
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            (!values.is_empty()).then(|| (n.clone(), values.join(",")))
        })
        .collect()
}

/// The header bytes as Envoy counts them: each name's and value's length.
fn header_bytes(map: &HeaderMap) -> u64 {
    map.iter()
        .map(|(k, v)| (k.as_str().len() + v.len()) as u64)
        .sum()
}

/// The entry as an `HTTPAccessLogEntry`.
fn entry(c: &HttpGrpcAccessLog, e: &Entry<'_>) -> data::HttpAccessLogEntry {
    let (req, resp) = (e.req, e.resp);
    let header = |name: &str| {
        req.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let start = req.start.duration_since(UNIX_EPOCH).unwrap_or_default();
    let upstream = resp.upstream.as_ref();
    let common = data::AccessLogCommon {
        sample_rate: 1.0,
        downstream_remote_address: req.remote.map(socket).or_else(|| peer(&req.peer)),
        downstream_local_address: peer(&req.local),
        downstream_direct_remote_address: peer(&req.peer),
        tls_properties: req.server_name.as_ref().map(|sni| data::TlsProperties {
            tls_sni_hostname: sni.clone(),
            ja3_fingerprint: req
                .fingerprints
                .as_ref()
                .and_then(|f| f.ja3.clone())
                .unwrap_or_default(),
            ..Default::default()
        }),
        start_time: Some(envoy_types::pb::google::protobuf::Timestamp {
            seconds: i64::try_from(start.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(start.subsec_nanos()).unwrap_or(0),
        }),
        time_to_last_rx_byte: e
            .request_duration
            .map(|ms| proto_duration(Duration::from_millis(ms))),
        duration: Some(proto_duration(e.duration)),
        upstream_remote_address: upstream
            .and_then(|u| u.host.as_ref())
            .filter(|h| h.pipe_path().is_none())
            .map(|h| socket(h.address)),
        upstream_cluster: upstream.map(|u| u.cluster.name.clone()).unwrap_or_default(),
        response_flags: Some(response_flags(resp.flag)),
        route_name: resp.route_name.clone().unwrap_or_default(),
        upstream_request_attempt_count: u32::from(upstream.is_some_and(|u| u.host.is_some())),
        ..Default::default()
    };
    let path = req.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let authority = req
        .uri
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_else(|| header("host"));
    let scheme = req.uri.scheme_str().map_or_else(
        || {
            if req.server_name.is_some() {
                "https".to_string()
            } else {
                "http".to_string()
            }
        },
        str::to_string,
    );
    data::HttpAccessLogEntry {
        common_properties: Some(common),
        protocol_version: protocol(req.version),
        request: Some(data::HttpRequestProperties {
            request_method: method(&req.method),
            scheme,
            authority,
            path: path.to_string(),
            user_agent: header("user-agent"),
            referer: header("referer"),
            forwarded_for: header("x-forwarded-for"),
            request_id: header("x-request-id"),
            original_path: header("x-envoy-original-path"),
            request_headers_bytes: header_bytes(&req.headers),
            request_body_bytes: e.bytes_received,
            request_headers: picked(&req.headers, &c.request_headers),
            ..Default::default()
        }),
        response: Some(data::HttpResponseProperties {
            response_code: (resp.status != 0).then_some(
                envoy_types::pb::google::protobuf::UInt32Value {
                    value: u32::from(resp.status),
                },
            ),
            response_headers_bytes: header_bytes(&resp.headers),
            response_body_bytes: resp.bytes_sent,
            response_headers: picked(&resp.headers, &c.response_headers),
            response_trailers: resp
                .trailers
                .as_ref()
                .map(|t| picked(t, &c.response_trailers))
                .unwrap_or_default(),
            response_code_details: super::render::code_details(resp)
                .unwrap_or_default()
                .to_string(),
            ..Default::default()
        }),
    }
}
