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
