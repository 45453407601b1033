//! The `envoy.filters.network.tcp_proxy` network filter: raw bytes to a cluster.

use super::access_log::{self, AccessLog};
use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3 as pb;
use std::time::Duration;

/// Fields of the tcp_proxy messages courier implements. `metadata_match`
/// (subset load balancing), `on_demand`, `tunneling_config`, the PROXY
/// protocol TLVs, the connect modes and early data, and the deprecated access
/// log fields are refused by their absence.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
        &[
            "stat_prefix",
            "cluster",
            "weighted_clusters",
            "idle_timeout",
            "access_log",
            "max_connect_attempts",
            "backoff_options",
            "hash_policy",
            "max_downstream_connection_duration",
            "access_log_options",
        ],
    ),
    (
        "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.WeightedCluster",
        &["clusters"],
    ),
    (
        "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.WeightedCluster.ClusterWeight",
        &["name", "weight"],
    ),
    (
        "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.TcpAccessLogOptions",
        &["flush_access_log_on_connected", "flush_access_log_on_start"],
    ),
    // Hash policies only steer hash-based balancers (ring hash, maglev), which
    // courier's clusters do not have: Envoy ignores the policy for the others.
    ("envoy.type.v3.HashPolicy", &["source_ip"]),
    ("envoy.type.v3.HashPolicy.SourceIp", &[]),
    (
        "envoy.config.core.v3.BackoffStrategy",
        &["base_interval", "max_interval"],
    ),
];

/// Envoy's default `idle_timeout` (1 hour).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

/// Which cluster a connection goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpCluster {
    /// `cluster`.
    Single(String),
    /// `weighted_clusters`: names and weights, picked per connection attempt.
    Weighted(Vec<(String, u32)>),
}

impl TcpCluster {
    /// The cluster for a connection attempt, given a random number: by weight
    /// over the sum of the weights, as Envoy's `WeightedClusterUtil::pickCluster`.
    pub fn pick(&self, random: u64) -> &str {
        match self {
            TcpCluster::Single(name) => name,
            TcpCluster::Weighted(list) => {
                let total: u64 = list.iter().map(|(_, w)| u64::from(*w)).sum();
                let mut at = if total == 0 { 0 } else { random % total };
                for (name, w) in list {
                    if at < u64::from(*w) {
                        return name;
                    }
                    at -= u64::from(*w);
                }
                list.last().map_or("", |(n, _)| n.as_str())
            }
        }
    }
}

/// `backoff_options`: the wait before each connect retry (jittered exponential).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// `base_interval`.
    pub base: Duration,
    /// `max_interval` (default 10 × base).
    pub max: Duration,
}

/// A validated tcp_proxy filter.
#[derive(Debug, Clone)]
pub struct TcpProxy {
    /// Stats prefix (`tcp.<stat_prefix>.`).
    pub stat_prefix: String,
    /// Where connections go.
    pub cluster: TcpCluster,
    /// No bytes either way for this long closes both connections (default 1 h; `None` = off).
    pub idle_timeout: Option<Duration>,
    /// Connect attempts before giving up (default 1).
    pub max_connect_attempts: u32,
    /// Wait between connect attempts; `None`: retry at once (Envoy: the next loop iteration).
    pub backoff: Option<Backoff>,
    /// A connection is closed this long after it was accepted.
    pub max_downstream_connection_duration: Option<Duration>,
    /// Access logs, written when the connection ends.
    pub access_log: Vec<AccessLog>,
    /// `access_log_options.flush_access_log_on_start`: a line when the connection starts.
    pub flush_access_log_on_start: bool,
    /// `access_log_options.flush_access_log_on_connected`: a line once the upstream connects.
    pub flush_access_log_on_connected: bool,
    /// `hash_policy: [{source_ip: {}}]`: a consistent-hashing cluster picks
    /// the upstream by the downstream IP's hash (others ignore it, as in Envoy).
    pub hash_source_ip: bool,
}

/// Translates a `TcpProxy`.
pub fn translate(t: &pb::TcpProxy, path: &Path<'_>, ctx: &mut Ctx) -> Option<TcpProxy> {
    use pb::tcp_proxy::ClusterSpecifier as S;
    if t.stat_prefix.is_empty() {
        // PGV `min_len: 1`.
        ctx.error(&path.field("stat_prefix"), "must not be empty");
    }
    let cluster = match &t.cluster_specifier {
        Some(S::Cluster(name)) => Some(TcpCluster::Single(name.clone())),
        Some(S::WeightedClusters(w)) => weighted(w, &path.field("weighted_clusters"), ctx),
        None => {
            // PGV: the oneof is required.
            ctx.error(path, "one of cluster or weighted_clusters is required");
            None
        }
    };
    let idle_timeout = core::optional_timeout(
        t.idle_timeout.as_ref(),
        Some(DEFAULT_IDLE_TIMEOUT),
        &path.field("idle_timeout"),
        ctx,
    );
    let max_connect_attempts = core::u32_or(t.max_connect_attempts.as_ref(), 1);
    if max_connect_attempts == 0 {
        // PGV `gte: 1`.
        ctx.error(
            &path.field("max_connect_attempts"),
            "must be greater than or equal to 1",
        );
    }
    let backoff = t
        .backoff_options
        .as_ref()
        .and_then(|b| backoff(b, &path.field("backoff_options"), ctx));
    let mdcd = path.field("max_downstream_connection_duration");
    let max_downstream_connection_duration = t
        .max_downstream_connection_duration
        .as_ref()
        .and_then(|d| core::duration(d, &mdcd, ctx));
    if max_downstream_connection_duration.is_some_and(|d| d < Duration::from_millis(1)) {
        // PGV `gte: 1ms`.
        ctx.error(&mdcd, "must be at least 1ms");
    }
    if t.hash_policy.len() > 1 {
        // PGV `max_items: 1`.
        ctx.error(&path.field("hash_policy"), "at most one hash policy");
    }
    let access_log = access_log::translate_all(&t.access_log, &path.field("access_log"), ctx);
    let options = t.access_log_options.unwrap_or_default();
    Some(TcpProxy {
        stat_prefix: t.stat_prefix.clone(),
        cluster: cluster?,
        idle_timeout,
        max_connect_attempts,
        backoff,
        max_downstream_connection_duration,
        access_log,
        flush_access_log_on_start: options.flush_access_log_on_start,
        flush_access_log_on_connected: options.flush_access_log_on_connected,
        // The support table lets only source_ip through.
        hash_source_ip: t.hash_policy.iter().any(|h| {
            matches!(
                h.policy_specifier,
                Some(envoy_types::pb::envoy::r#type::v3::hash_policy::PolicySpecifier::SourceIp(_))
            )
        }),
    })
}

fn weighted(
    w: &pb::tcp_proxy::WeightedCluster,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<TcpCluster> {
    let cp = path.field("clusters");
    if w.clusters.is_empty() {
        // PGV `min_items: 1`.
        ctx.error(&cp, "must have at least one cluster");
        return None;
    }
    let mut out = Vec::with_capacity(w.clusters.len());
    for (i, c) in w.clusters.iter().enumerate() {
        let p = cp.index(i);
        if c.name.is_empty() {
            ctx.error(&p.field("name"), "must not be empty");
        }
        if c.weight == 0 {
            // PGV `gte: 1`.
            ctx.error(&p.field("weight"), "must be greater than or equal to 1");
        }
        out.push((c.name.clone(), c.weight));
    }
    Some(TcpCluster::Weighted(out))
}

fn backoff(
    b: &envoy_types::pb::envoy::config::core::v3::BackoffStrategy,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Backoff> {
    let bp = path.field("base_interval");
    let Some(base) = b.base_interval.as_ref() else {
        ctx.error(&bp, "is required");
        return None;
    };
    let base = core::duration(base, &bp, ctx)?;
    if base < Duration::from_millis(1) {
        // PGV `gte: 1ms`.
        ctx.error(&bp, "must be at least 1ms");
        return None;
    }
    let max = core::duration_or(
        b.max_interval.as_ref(),
        base * 10,
        &path.field("max_interval"),
        ctx,
    );
    if max < base {
        // Envoy's wording.
        ctx.error(
            &path.field("max_interval"),
            "max_backoff_interval must be greater or equal to base_backoff_interval",
        );
        return None;
    }
    Some(Backoff { base, max })
}

#[cfg(test)]
#[path = "tcp_proxy_tests.rs"]
mod tests;
