//! What a TCP proxy connection writes to its access logs: response flags (a
//! connection can collect several, `UF,URX`), the upstream, the byte counts.

use crate::access_log::{Logs, Pending, ResponseSide};
use crate::request::body::RequestProgress;
use crate::router::facts::Upstreamed;
use courier_config::listener::{Listener, TcpProxy};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;
use tokio::time::Instant;

/// Response flags a TCP proxy sets, in the order Envoy prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Flag {
    /// `UH`: no healthy host.
    NoHealthyUpstream = 0,
    /// `UF`: a connect attempt failed or timed out.
    UpstreamConnectionFailure = 1,
    /// `UO`: the cluster's `max_connections` is reached.
    UpstreamOverflow = 2,
    /// `URX`: `max_connect_attempts` attempts failed.
    UpstreamRetryLimitExceeded = 3,
    /// `DT`: `max_downstream_connection_duration` passed.
    DurationTimeout = 4,
    /// `NC`: the cluster does not exist.
    NoClusterFound = 5,
}

const SHORT: [&str; 6] = ["UH", "UF", "UO", "URX", "DT", "NC"];

/// A set of [`Flag`]s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags(u8);

impl Flags {
    /// Adds `f`.
    pub fn set(&mut self, f: Flag) {
        self.0 |= 1 << (f as u8);
    }

    /// Whether `f` is set.
    #[cfg(test)]
    pub fn has(self, f: Flag) -> bool {
        self.0 & (1 << (f as u8)) != 0
    }

    /// `%RESPONSE_FLAGS%`: the short names joined with commas; `None` for none.
    pub fn text(self) -> Option<&'static str> {
        // Every combination is rendered once per process (64 short strings):
        // the log's response side holds a `&'static str`.
        static ALL: OnceLock<Vec<&'static str>> = OnceLock::new();
        if self.0 == 0 {
            return None;
        }
        let all = ALL.get_or_init(|| {
            (0u8..64)
                .map(|bits| {
                    let names: Vec<&str> = (0..SHORT.len())
                        .filter(|i| bits & (1 << i) != 0)
                        .map(|i| SHORT[i])
                        .collect();
                    &*Box::leak(names.join(",").into_boxed_str())
                })
                .collect()
        });
        all.get(usize::from(self.0)).copied()
    }
}

/// What a connection's log lines need besides the config.
#[derive(Debug)]
pub struct Record {
    /// Wall-clock start (`%START_TIME%`).
    pub start: SystemTime,
    /// Monotonic start (`%DURATION%`).
    pub started: Instant,
    /// The downstream peer.
    pub peer: crate::request::conn::Peer,
    /// Our address on the downstream connection.
    pub local: crate::request::conn::Peer,
    /// The TLS client's SNI.
    pub server_name: Option<String>,
    /// The ClientHello's fingerprints, when the listener computes them.
    pub fingerprints: Option<Arc<crate::tls::fingerprint::Fingerprints>>,
    /// The downstream connection's id.
    pub connection_id: u64,
    /// The flags so far.
    pub flags: Flags,
    /// The cluster and host of the last attempt.
    pub upstream: Option<Upstreamed>,
    /// Connect attempts made.
    pub attempts: u32,
    /// The listener, when it has access logs of its own.
    pub listener: Option<Arc<Listener>>,
    /// The chain's network RBAC verdict, when it has the filter.
    pub rbac: Option<Arc<crate::request::termination::Termination>>,
}

impl Record {
    /// Writes a line to each of `config`'s logs with the bytes moved so far.
    pub fn write(&self, config: &Arc<TcpProxy>, received: u64, sent: u64) {
        if config.access_log.is_empty() {
            return;
        }
        let logs = Logs::Tcp {
            config: Arc::clone(config),
            attempts: self.attempts,
        };
        self.pending(logs, received).write(self.response(sent));
    }

    /// Writes the connection's last lines: the TCP proxy's, then the
    /// listener's (a listener logs each connection once, when it ends).
    pub fn finish(&self, config: &Arc<TcpProxy>, received: u64, sent: u64) {
        self.write(config, received, sent);
        if let Some(listener) = &self.listener {
            let logs = Logs::Listener {
                listener: Arc::clone(listener),
                attempts: self.attempts,
                protocol: None,
            };
            self.pending(logs, received).write(self.response(sent));
        }
    }

    fn pending(&self, logs: Logs, received: u64) -> Pending {
        let progress = RequestProgress {
            received: AtomicU64::new(received),
            done_ms: AtomicU64::new(u64::MAX),
        };
        Pending {
            logs,
            start: self.start,
            started: self.started,
            // Not rendered for TCP (see the renderer); placeholders only.
            method: http::Method::GET,
            uri: http::Uri::default(),
            version: http::Version::HTTP_11,
            headers: http::HeaderMap::new(),
            peer: self.peer.clone(),
            remote: None,
            local: self.local.clone(),
            server_name: self.server_name.clone(),
            fingerprints: self.fingerprints.clone(),
            connection_id: self.connection_id,
            request: Arc::new(progress),
            span: None,
        }
    }

    fn response(&self, sent: u64) -> ResponseSide {
        ResponseSide {
            // Envoy's `%RESPONSE_CODE%` of a TCP connection.
            status: 0,
            flag: self.flags.text(),
            upstream: self.upstream.clone(),
            bytes_sent: sent,
            termination_details: self
                .rbac
                .as_ref()
                .and_then(|v| v.details().map(str::to_string)),
            ..ResponseSide::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_render_in_envoys_order() {
        let mut f = Flags::default();
        assert_eq!(f.text(), None);
        f.set(Flag::UpstreamRetryLimitExceeded);
        f.set(Flag::UpstreamConnectionFailure);
        assert_eq!(f.text(), Some("UF,URX"));
        assert!(f.has(Flag::UpstreamConnectionFailure));
        assert!(!f.has(Flag::NoHealthyUpstream));
        let mut g = Flags::default();
        g.set(Flag::NoClusterFound);
        assert_eq!(g.text(), Some("NC"));
    }
}
