//! Layer 4: network filters that carry bytes rather than HTTP. Today the TCP
//! proxy (`envoy.filters.network.tcp_proxy`): a connection whose filter chain
//! ends in it is proxied, byte for byte and both ways, to a host of its cluster.
//!
//! A connection runs in phases, as Envoy's filter does: pick a cluster (the
//! weighted pick is made again for each attempt), check `max_connections`,
//! pick a host with the cluster's balancer, connect (within the cluster's
//! `connect_timeout`), and on failure try again up to `max_connect_attempts`
//! times; then move bytes ([`pump`]) until both directions ended, an error,
//! the idle timeout, `max_downstream_connection_duration`, or the end of a
//! drained listener's drain time. The idle timer runs from the start, so a
//! connect that outlasts it ends the connection too. The access log lines are
//! written at the end (and at the start or once connected if asked).

mod connect;
mod log;
mod pump;
pub mod stats;
#[cfg(test)]
mod tests;

pub use stats::TcpStats;

use crate::stats::WorkerStats;
use crate::upstream::ClusterManager;
use courier_config::listener::access_log::AccessLog;
use courier_config::listener::{FilterChain, NetworkFilter, TcpProxy};
use log::{Flag, Record};
use pump::{Pump, Side};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Instant;

/// Every access log of a filter chain's network filter.
pub fn chain_access_logs(fc: &FilterChain) -> std::slice::Iter<'_, AccessLog> {
    match &fc.network {
        NetworkFilter::Http(h) => h.access_log.iter(),
        NetworkFilter::Tcp(t) => t.access_log.iter(),
    }
}

/// A downstream connection a TCP proxy chain took, and what serving it needs.
pub struct Session {
    /// The chain's TCP proxy.
    pub config: Arc<TcpProxy>,
    /// Its `tcp.<stat_prefix>.*` stats.
    pub stats: Arc<TcpStats>,
    /// The client.
    pub peer: crate::request::conn::Peer,
    /// Our address on the connection.
    pub local: crate::request::conn::Peer,
    /// The SNI of a TLS client.
    pub server_name: Option<String>,
    /// The ClientHello's fingerprints, when the listener computes them.
    pub fingerprints: Option<Arc<crate::tls::fingerprint::Fingerprints>>,
    /// `sni_dynamic_forward_proxy.port_value`, when the chain has that filter
    /// and the client sent an SNI: the port of a dynamic forward proxy
    /// cluster's host (else 80, or 443 for a TLS cluster).
    pub dynamic_port: Option<u16>,
    /// The listener's `per_connection_buffer_limit_bytes`.
    pub buffer_limit: u32,
    /// The clusters.
    pub clusters: Arc<ClusterManager>,
    /// This worker's stats (its clusters' counters).
    pub worker_stats: Arc<WorkerStats>,
    /// Turns true when the chain drains (its listener removed or changed),
    /// and how long its connections then have.
    pub drain: Option<(watch::Receiver<bool>, Duration)>,
    /// The listener, when it has access logs (a line when the connection ends).
    pub listener_log: Option<Arc<courier_config::listener::Listener>>,
    /// The connection's id, shared with the listener's lines.
    pub connection_id: u64,
    /// When the connection was accepted.
    pub accepted: (SystemTime, Instant),
    /// The verdict of the chain's network RBAC filters, when it has them.
    pub rbac: Option<Arc<crate::request::termination::Termination>>,
}

/// Serves `stream` on a task of its own, holding `guards` (the worker's
/// connection counts) until the connection ends.
pub fn spawn<S, G>(stream: S, session: Session, guards: G)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    G: Send + 'static,
{
    tokio::spawn(async move {
        serve(stream, session).await;
        drop(guards);
    });
}

/// Why the byte phase ended.
enum End {
    /// Both directions ended, or an I/O error on one side.
    Pump(Result<(), Side>),
    /// No bytes either way for `idle_timeout`.
    Idle,
    /// `max_downstream_connection_duration` passed.
    MaxDuration,
    /// The listener drained and its drain time passed.
    Drained,
}

/// The read size for a listener's buffer limit: Envoy reads in slices of
/// 16 KiB whatever the limit, and `0` means no limit.
fn read_size(limit: u32) -> usize {
    match limit {
        0 => pump::MAX_READ,
        n => (n as usize).clamp(16 * 1024, pump::MAX_READ),
    }
}

/// Proxies `down` to the session's cluster until the connection ends.
pub async fn serve<S>(down: S, s: Session)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let cfg = Arc::clone(&s.config);
    s.stats.cx_total.inc();
    let (start, started) = s.accepted;
    let mut rec = Record {
        start,
        started,
        peer: s.peer.clone(),
        local: s.local.clone(),
        server_name: s.server_name.clone(),
        fingerprints: s.fingerprints.clone(),
        connection_id: s.connection_id,
        flags: Default::default(),
        upstream: None,
        attempts: 0,
        listener: s.listener_log.clone(),
        rbac: s.rbac.clone(),
    };
    if cfg.flush_access_log_on_start {
        rec.write(&cfg, 0, 0);
    }
    let max_end = cfg.max_downstream_connection_duration.map(|d| started + d);
    let mut timers = Timers {
        idle: cfg.idle_timeout,
        max_end,
        drain: s.drain.clone(),
        drain_end: None,
    };
    // Connecting: the idle timer already runs (Envoy starts it with the connection).
    let connected = {
        let mut attempt = Since {
            work: std::pin::pin!(connect::connect(&s, &mut rec)),
            at: started,
        };
        timers.race(&mut attempt).await
    };
    let up = match connected {
        Ok(Some(up)) => up,
        Ok(None) => {
            rec.finish(&cfg, 0, 0);
            return;
        }
        Err(end) => {
            timers.count(&end, &s.stats, &mut rec);
            rec.finish(&cfg, 0, 0);
            return;
        }
    };
    if cfg.flush_access_log_on_connected {
        rec.write(&cfg, 0, 0);
    }
    let (stream, _open) = up.into_parts();
    let mut pump = Pump::new(down, stream, read_size(s.buffer_limit), &s.stats);
    let end = match timers.race(&mut pump).await {
        Ok(r) => End::Pump(r),
        Err(end) => end,
    };
    match &end {
        End::Pump(Err(Side::Downstream)) if pump.upstream_backlog() > 0 => {
            // The client went away with bytes upstream has not taken yet:
            // they are written before the upstream closes (Envoy's flush).
            s.stats.flush_total.inc();
            s.stats.flush_active.inc();
            let wait = cfg.idle_timeout.unwrap_or(FLUSH_CAP);
            let _ = tokio::time::timeout(wait, pump.flush_upstream()).await;
            s.stats.flush_active.dec();
        }
        End::Pump(_) => {}
        other => timers.count(other, &s.stats, &mut rec),
    }
    // A denied first read is counted as received, as Envoy's connection does.
    let denied_read = s.rbac.as_ref().map_or(0, |v| v.read());
    rec.finish(&cfg, pump.received() + denied_read, pump.sent());
}

/// How long an upstream flush may take with the idle timeout off.
const FLUSH_CAP: Duration = Duration::from_secs(3600);

/// Work the idle timer watches: when bytes last moved.
trait Activity: std::future::Future + Unpin {
    /// When bytes last moved (the idle timer runs from there).
    fn last(&self) -> Instant;
}

impl<D, U> Activity for Pump<'_, D, U>
where
    D: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    fn last(&self) -> Instant {
        self.last_activity
    }
}

/// Work that moves no bytes (connecting): idle since `at`.
struct Since<F> {
    work: F,
    at: Instant,
}

impl<F: std::future::Future + Unpin> std::future::Future for Since<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        std::pin::Pin::new(&mut self.work).poll(cx)
    }
}

impl<F: std::future::Future + Unpin> Activity for Since<F> {
    fn last(&self) -> Instant {
        self.at
    }
}

/// The timers that end a connection whatever its bytes do.
struct Timers {
    idle: Option<Duration>,
    max_end: Option<Instant>,
    drain: Option<(watch::Receiver<bool>, Duration)>,
    drain_end: Option<Instant>,
}

impl Timers {
    /// Runs `work` until it finishes (`Ok`) or a timer ends the connection
    /// (`Err`).
    async fn race<W: Activity>(&mut self, work: &mut W) -> Result<W::Output, End> {
        loop {
            let idle_at = self.idle.map(|d| work.last() + d);
            let wake = [idle_at, self.max_end, self.drain_end]
                .into_iter()
                .flatten()
                .min();
            let sleep = async {
                match wake {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            let drained = async {
                match &mut self.drain {
                    Some((rx, _)) if self.drain_end.is_none() => {
                        if rx.wait_for(|d| *d).await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                out = &mut *work => return Ok(out),
                () = sleep => {}
                () = drained => {
                    let time = self.drain.as_ref().map_or(Duration::ZERO, |(_, t)| *t);
                    self.drain_end = Some(Instant::now() + time);
                    continue;
                }
            }
            let now = Instant::now();
            if self.max_end.is_some_and(|t| now >= t) {
                return Err(End::MaxDuration);
            }
            if self.drain_end.is_some_and(|t| now >= t) {
                return Err(End::Drained);
            }
            // Bytes may have moved since the timer was set: it is set again
            // from the last of them.
            if self.idle.is_some_and(|d| now >= work.last() + d) {
                return Err(End::Idle);
            }
        }
    }

    /// Counts a timer's end in the stats and the log's flags.
    fn count(&self, end: &End, stats: &TcpStats, rec: &mut Record) {
        match end {
            End::Idle => stats.idle_timeout.inc(),
            End::MaxDuration => {
                stats.max_duration.inc();
                rec.flags.set(Flag::DurationTimeout);
            }
            End::Drained | End::Pump(_) => {}
        }
    }
}
