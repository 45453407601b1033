//! The TCP proxy's upstream connection: cluster, circuit breaker, host,
//! connect, and the retries `max_connect_attempts` allows.

use super::Session;
use super::log::{Flag, Record};
use crate::router::facts::Upstreamed;
use crate::stats::ClusterStats;
use crate::upstream::pool::{self, OpenConn, SendError};
use crate::upstream::stream::UpstreamStream;
use crate::upstream::{UpstreamCluster, outlier};
use courier_config::listener::tcp_proxy::Backoff;
use std::sync::Arc;
use std::time::Duration;

/// A connected upstream: the stream, and what counts it as open (the host's
/// `cx_active`, the cluster's `max_connections` slot) until dropped.
pub struct Connected {
    stream: UpstreamStream,
    open: OpenConn,
}

impl Connected {
    /// The stream and the counts' guard.
    pub fn into_parts(self) -> (UpstreamStream, OpenConn) {
        (self.stream, self.open)
    }
}

/// The cluster's counters on this worker (clusters added over CDS count in
/// shared ones).
fn cluster_stats<'a>(s: &'a Session, c: &'a UpstreamCluster) -> &'a ClusterStats {
    match c.stat_slot.and_then(|i| s.worker_stats.clusters.get(i)) {
        Some((_, stats)) => stats,
        None => &c.stats,
    }
}

/// Connects to a host of the session's cluster; `None` once it gives up,
/// with the reason in `rec`'s flags and the stats.
pub async fn connect(s: &Session, rec: &mut Record) -> Option<Connected> {
    let cfg = &s.config;
    loop {
        let name = cfg.cluster.pick(fastrand::u64(..));
        let Some(cluster) = s.clusters.get(name) else {
            s.stats.cx_no_route.inc();
            rec.flags.set(Flag::NoClusterFound);
            return None;
        };
        let stats = cluster_stats(s, &cluster);
        rec.upstream = Some(Upstreamed {
            host: None,
            cluster: Arc::clone(&cluster.config),
        });
        // Checked before a host is picked, as Envoy does (its TCP pool would
        // otherwise queue the connection for good).
        let Some(slot) = cluster.circuit.try_connection(false) else {
            stats.cx_overflow.inc();
            rec.flags.set(Flag::UpstreamOverflow);
            return None;
        };
        // Envoy's tcp_proxy source_ip hash: xxHash64 of the client's address.
        let hash = cfg
            .hash_source_ip
            .then(|| s.peer.ip())
            .flatten()
            .map(|ip| crate::upstream::hashing::xxhash64(ip.to_string().as_bytes(), 0));
        let host = match &cluster.dynamic {
            // A dynamic forward proxy cluster connects to the client's SNI
            // (resolved first, as the SNI filter has Envoy do).
            Some(d) => match s.server_name.as_deref().filter(|n| !n.is_empty()) {
                Some(sni) => d.host(sni, s.dynamic_port).await,
                None => None,
            },
            None => cluster.choose_hashed(hash),
        };
        let Some(host) = host else {
            stats.cx_none_healthy.inc();
            rec.flags.set(Flag::NoHealthyUpstream);
            return None;
        };
        rec.attempts += 1;
        rec.upstream = Some(Upstreamed {
            host: Some(Arc::clone(&host)),
            cluster: Arc::clone(&cluster.config),
        });
        let downstream =
            crate::upstream::proxy_header::Downstream::of(&s.peer, &s.local, s.connection_id);
        match pool::connect(&cluster, &host, stats, downstream).await {
            Ok(stream) => {
                // Envoy's LocalOriginConnectSuccessFinal.
                outlier::record_status(&cluster, &host, 200);
                let open = OpenConn::unpooled(&host, slot);
                return Some(Connected { stream, open });
            }
            Err(SendError::ConnectTimeout) => {
                rec.flags.set(Flag::UpstreamConnectionFailure);
                outlier::record_timeout(&cluster, &host);
            }
            Err(e) => {
                rec.flags.set(Flag::UpstreamConnectionFailure);
                outlier::record_failure(&cluster, &host, &e);
            }
        }
        drop(slot);
        if rec.attempts >= cfg.max_connect_attempts {
            rec.flags.set(Flag::UpstreamRetryLimitExceeded);
            stats.cx_connect_attempts_exceeded.inc();
            return None;
        }
        // Envoy retries on a later loop iteration, after the backoff if any.
        match cfg.backoff {
            Some(b) => tokio::time::sleep(backoff(b, rec.attempts)).await,
            None => tokio::task::yield_now().await,
        }
    }
}

/// Envoy's jittered exponential backoff before retry `n` (1-based): a random
/// wait below `base × (2ⁿ − 1)`, capped at `max`.
fn backoff(b: Backoff, n: u32) -> Duration {
    let factor = (1u64 << n.min(32)) - 1;
    let ceiling = b
        .base
        .saturating_mul(factor.min(u64::from(u32::MAX)) as u32);
    let ceiling = ceiling.min(b.max).as_millis().max(1) as u64;
    Duration::from_millis(fastrand::u64(..ceiling))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let b = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_millis(500),
        };
        for _ in 0..100 {
            assert!(backoff(b, 1) < Duration::from_millis(100));
            assert!(backoff(b, 2) < Duration::from_millis(300));
            assert!(backoff(b, 10) < Duration::from_millis(500));
        }
    }
}
