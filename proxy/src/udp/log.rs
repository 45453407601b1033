//! A UDP session's access log line, written when the session ends: Envoy's
//! session stream info (downstream addresses, the host, bytes both ways,
//! start and duration, the `udp.proxy.session` dynamic metadata).

use crate::access_log::{DynamicMetadata, Logs, Pending, ResponseSide};
use crate::request::body::RequestProgress;
use crate::request::conn::Peer;
use crate::router::facts::Upstreamed;
use courier_config::listener::UdpProxy;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::SystemTime;
use tokio::time::Instant;

/// What a session counted, for its line (Envoy's `UdpSessionStats`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    /// Bytes from the downstream peer.
    pub rx_bytes: u64,
    /// Datagrams from the downstream peer.
    pub rx_datagrams: u64,
    /// Bytes sent back to the peer.
    pub tx_bytes: u64,
    /// Datagrams sent back to the peer.
    pub tx_datagrams: u64,
    /// Sends to the peer that failed.
    pub tx_errors: u64,
}

/// What a session's line needs besides its counts.
#[derive(Debug)]
pub struct Record {
    /// Wall-clock start (`%START_TIME%`).
    pub start: SystemTime,
    /// Monotonic start (`%DURATION%`).
    pub started: Instant,
    /// The downstream peer.
    pub peer: SocketAddr,
    /// The listener's address.
    pub local: SocketAddr,
    /// The session's id (`%CONNECTION_ID%`: Envoy numbers sessions apart
    /// from connections, from 0).
    pub id: u64,
    /// The session's cluster and host.
    pub upstream: Upstreamed,
    /// The upstream socket's address.
    pub upstream_local: Option<SocketAddr>,
    /// Envoy's response flag (`UO` for a session the cluster refused).
    pub flag: Option<&'static str>,
}

impl Record {
    /// Writes a line to each of `config`'s session logs.
    pub fn write(&self, config: &Arc<UdpProxy>, c: Counts) {
        if config.access_log.is_empty() {
            return;
        }
        let progress = RequestProgress {
            received: AtomicU64::new(c.rx_bytes),
            done_ms: AtomicU64::new(u64::MAX),
        };
        let pending = Pending {
            logs: Logs::Udp {
                config: Arc::clone(config),
                upstream_local: self.upstream_local,
                proxy: false,
            },
            start: self.start,
            started: self.started,
            // Not rendered for UDP (see the renderer); placeholders only.
            method: http::Method::GET,
            uri: http::Uri::default(),
            version: http::Version::HTTP_11,
            headers: http::HeaderMap::new(),
            peer: Peer::Ip(self.peer),
            remote: None,
            local: Peer::Ip(self.local),
            server_name: None,
            fingerprints: None,
            connection_id: self.id,
            request: Arc::new(progress),
            span: None,
        };
        pending.write(ResponseSide {
            // Envoy's `%RESPONSE_CODE%` of a session.
            status: 0,
            flag: self.flag,
            upstream: Some(self.upstream.clone()),
            bytes_sent: c.tx_bytes,
            dynamic_metadata: metadata(&self.upstream.cluster.name, c),
            ..ResponseSide::default()
        });
    }
}

/// Envoy's `udp.proxy.session` dynamic metadata of a session.
fn metadata(cluster: &str, c: Counts) -> DynamicMetadata {
    // Envoy's `Struct` prints its keys sorted: inserted in that order.
    let mut m = serde_json::Map::new();
    m.insert("bytes_received".into(), c.rx_bytes.into());
    m.insert("bytes_sent".into(), c.tx_bytes.into());
    m.insert("cluster_name".into(), cluster.into());
    m.insert("datagrams_received".into(), c.rx_datagrams.into());
    m.insert("datagrams_sent".into(), c.tx_datagrams.into());
    m.insert("errors_sent".into(), c.tx_errors.into());
    let mut map = courier_config::core::MetadataMap::new();
    map.insert("udp.proxy.session".into(), m);
    DynamicMetadata(map)
}

/// The filter's own line (`proxy_access_log`), written when a worker's
/// filter goes: bytes of every datagram it read and every one it sent back,
/// and Envoy's `udp.proxy.proxy` metadata (the stat prefix's counters).
#[derive(Debug)]
pub struct ProxyRecord {
    /// The proxy's config.
    pub config: Arc<UdpProxy>,
    /// `udp.<prefix>.*`.
    pub stats: Arc<super::UdpStats>,
    /// Wall-clock start (`%START_TIME%`).
    pub start: SystemTime,
    /// Monotonic start (`%DURATION%`).
    pub started: Instant,
    /// Bytes of the datagrams read (`%BYTES_RECEIVED%`).
    pub rx_bytes: u64,
    /// Bytes sent back to peers (`%BYTES_SENT%`), added by the sessions.
    pub tx_bytes: Arc<AtomicU64>,
    /// Counts as the worker's open work, so a stopping worker writes the line.
    pub _open: super::OpenGuard,
}

impl Drop for ProxyRecord {
    fn drop(&mut self) {
        let s = &self.stats;
        let mut m = serde_json::Map::new();
        for (k, v) in [
            ("bytes_received", s.rx_bytes.get()),
            ("bytes_sent", s.tx_bytes.get()),
            ("datagrams_received", s.rx_datagrams.get()),
            ("datagrams_sent", s.tx_datagrams.get()),
            ("errors_received", s.rx_errors.get()),
            ("errors_sent", s.tx_errors.get()),
            ("idle_timeout", s.idle_timeout.get()),
            ("no_route", s.no_route.get()),
            ("session_total", s.sess_total.get()),
        ] {
            m.insert(k.into(), v.into());
        }
        let mut map = courier_config::core::MetadataMap::new();
        map.insert("udp.proxy.proxy".into(), m);
        let unspecified = Peer::Ip(SocketAddr::from(([0, 0, 0, 0], 0)));
        let pending = Pending {
            logs: Logs::Udp {
                config: Arc::clone(&self.config),
                upstream_local: None,
                proxy: true,
            },
            start: self.start,
            started: self.started,
            method: http::Method::GET,
            uri: http::Uri::default(),
            version: http::Version::HTTP_11,
            headers: http::HeaderMap::new(),
            // Not rendered for the proxy's line (see the renderer).
            peer: unspecified.clone(),
            remote: None,
            local: unspecified,
            server_name: None,
            fingerprints: None,
            connection_id: 0,
            request: Arc::new(RequestProgress {
                received: AtomicU64::new(self.rx_bytes),
                done_ms: AtomicU64::new(u64::MAX),
            }),
            span: None,
        };
        pending.write(ResponseSide {
            bytes_sent: self.tx_bytes.load(std::sync::atomic::Ordering::Relaxed),
            dynamic_metadata: DynamicMetadata(map),
            ..ResponseSide::default()
        });
    }
}
