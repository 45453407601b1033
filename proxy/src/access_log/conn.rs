//! A listener's `access_log`: a line per downstream connection when it ends,
//! from the connection's own facts (as Envoy's connection-level stream info
//! holds them), and one for a connection no filter chain takes (`NR`,
//! `filter_chain_not_found`).
//!
//! A connection manager's connection counts its plaintext bytes on the wire
//! and the HTTP version its requests spoke (`request::wire`); a
//! TCP proxy's connection writes its own record to the listener's logs (see
//! `l4::log`), so it has no [`ConnLog`].

use crate::access_log::{Logs, Pending, ResponseSide};
use crate::request::body::RequestProgress;
use crate::request::conn::Peer;
use crate::request::wire::Wire;
use courier_config::listener::Listener;
use http::Version;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::SystemTime;
use tokio::time::Instant;

/// The facts of a downstream connection a listener line names.
#[derive(Debug, Clone)]
pub struct ConnFacts {
    /// When it was accepted (`%START_TIME%`).
    pub start: SystemTime,
    /// The same, monotonic (`%DURATION%`).
    pub started: Instant,
    /// The client.
    pub peer: Peer,
    /// Our address on it.
    pub local: Peer,
    /// The TLS client's SNI.
    pub server_name: Option<String>,
    /// Its id (`%CONNECTION_ID%`).
    pub connection_id: u64,
}

impl ConnFacts {
    /// The facts of a connection accepted now.
    pub fn now(peer: Peer, local: Peer, connection_id: u64) -> Self {
        Self {
            start: SystemTime::now(),
            started: Instant::now(),
            peer,
            local,
            server_name: None,
            connection_id,
        }
    }

    /// Writes a line to `listener`'s logs.
    pub fn write(
        &self,
        listener: &Arc<Listener>,
        protocol: Option<Version>,
        bytes: (u64, u64),
        resp: ResponseSide,
    ) {
        let pending = Pending {
            logs: Logs::Listener {
                listener: Arc::clone(listener),
                attempts: 0,
                protocol,
            },
            start: self.start,
            started: self.started,
            // A connection has no request: the renderer prints `-` for these.
            method: http::Method::GET,
            uri: http::Uri::default(),
            version: protocol.unwrap_or(Version::HTTP_11),
            headers: http::HeaderMap::new(),
            peer: self.peer.clone(),
            remote: None,
            local: self.local.clone(),
            server_name: self.server_name.clone(),
            fingerprints: None,
            connection_id: self.connection_id,
            request: Arc::new(RequestProgress {
                received: AtomicU64::new(bytes.0),
                done_ms: AtomicU64::new(u64::MAX),
            }),
            span: None,
        };
        pending.write(ResponseSide {
            bytes_sent: bytes.1,
            ..resp
        });
    }

    /// The line of a connection no filter chain takes: Envoy's `NR` flag and
    /// `filter_chain_not_found` details, nothing moved.
    pub fn no_filter_chain(&self, listener: &Arc<Listener>) {
        self.write(
            listener,
            None,
            (0, 0),
            ResponseSide {
                flag: Some("NR"),
                details: Some("filter_chain_not_found".to_string()),
                ..ResponseSide::default()
            },
        );
    }
}

/// Held while a connection manager serves a connection of a listener with
/// access logs: writes the connection's line when the connection ends.
#[derive(Debug)]
pub struct ConnLog {
    listener: Arc<Listener>,
    facts: ConnFacts,
    wire: Arc<Wire>,
    termination: Option<Arc<crate::request::termination::Termination>>,
}

impl ConnLog {
    /// A connection's log, if `listener` has access logs.
    pub fn new(listener: &Arc<Listener>, facts: ConnFacts) -> Option<Self> {
        (!listener.access_log.is_empty()).then(|| Self {
            listener: Arc::clone(listener),
            facts,
            wire: Arc::default(),
            termination: None,
        })
    }

    /// Where a network filter records why it closed the connection.
    pub fn set_termination(&mut self, t: Arc<crate::request::termination::Termination>) {
        self.termination = Some(t);
    }

    /// The counters the connection's stream and requests feed.
    pub fn wire(&self) -> Arc<Wire> {
        Arc::clone(&self.wire)
    }
}

impl Drop for ConnLog {
    fn drop(&mut self) {
        let w = &self.wire;
        let t = self.termination.as_deref();
        let (received, sent) = w.bytes();
        // A denied first read is counted as received, as Envoy's connection does.
        let received = received + t.map_or(0, |t| t.read());
        let resp = ResponseSide {
            termination_details: t.and_then(|t| t.details().map(str::to_string)),
            ..ResponseSide::default()
        };
        self.facts
            .write(&self.listener, w.version(), (received, sent), resp);
    }
}
