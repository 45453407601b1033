//! UDP listeners and their `envoy.filters.udp_listener.udp_proxy` listener
//! filter: datagrams from each downstream peer go to a host of a cluster over
//! a session of their own (Envoy's `UdpProxyFilter`).
//!
//! A UDP listener has no filter chains; its only listener filter is the UDP
//! proxy. What the filter allows and courier does not build (hash policies,
//! the original source IP, session filters, HTTP tunneling, GRO settings,
//! matchers keyed on the datagram) is refused with its path: by its absence
//! from [`SUPPORT`], or in code where the message is shared with another
//! filter (`xds` matchers).

use super::access_log::{self, AccessLog};
use crate::core;
use crate::ctx::Ctx;
use crate::extensions::{UDP_PROXY as UDP_PROXY_TYPE, UDP_PROXY_ROUTE as ROUTE_TYPE};
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::core::v3::UdpSocketConfig;
use envoy_types::pb::envoy::config::listener::v3 as lpb;
use envoy_types::pb::envoy::extensions::filters::udp::udp_proxy::v3 as pb;
use envoy_types::pb::xds::r#type::matcher::v3 as xpb;
use std::sync::Arc;
use std::time::Duration;

/// Envoy's default `idle_timeout` of a session (60 s).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Envoy's default `max_rx_datagram_size` (`DEFAULT_UDP_MAX_DATAGRAM_SIZE`).
pub const DEFAULT_MAX_RX_DATAGRAM_SIZE: usize = 1500;

/// Fields of the UDP proxy messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.extensions.filters.udp.udp_proxy.v3.UdpProxyConfig",
        &[
            "stat_prefix",
            "cluster",
            "matcher",
            "idle_timeout",
            "access_log",
            "upstream_socket_config",
            "use_per_packet_load_balancing",
            "access_log_options",
            "proxy_access_log",
            "hash_policies",
        ],
    ),
    (
        "envoy.extensions.filters.udp.udp_proxy.v3.UdpProxyConfig.HashPolicy",
        crate::support::ALL,
    ),
    // `flush_access_log_on_tunnel_connected` flushes when an HTTP tunnel
    // connects; tunneling is refused, so it never does, as in Envoy without one.
    (
        "envoy.extensions.filters.udp.udp_proxy.v3.UdpProxyConfig.UdpAccessLogOptions",
        &[
            "access_log_flush_interval",
            "flush_access_log_on_tunnel_connected",
        ],
    ),
    (
        "envoy.extensions.filters.udp.udp_proxy.v3.Route",
        &["cluster"],
    ),
    // `prefer_gro` (receive offload) is refused by its absence.
    (
        "envoy.config.core.v3.UdpSocketConfig",
        &["max_rx_datagram_size"],
    ),
    // `quic_options` (QUIC listeners) is refused by its absence;
    // `listener::udp_listener` then skips the checks a QUIC listener does not get.
    (
        "envoy.config.listener.v3.UdpListenerConfig",
        &["downstream_socket_config"],
    ),
];

/// A validated UDP proxy filter.
#[derive(Debug, Clone, PartialEq)]
pub struct UdpProxy {
    /// Stats prefix (`udp.<stat_prefix>.`).
    pub stat_prefix: String,
    /// The cluster every session goes to; `None`: the matcher has no action,
    /// so every datagram counts as `downstream_sess_no_route` (Envoy's empty route).
    pub cluster: Option<String>,
    /// No datagram either way for this long ends a session (default 60 s).
    pub idle_timeout: Duration,
    /// Session access logs, written when a session ends.
    pub access_log: Vec<AccessLog>,
    /// `proxy_access_log`: the proxy's own lines, written when a worker's
    /// filter goes (its listener updated or removed, the worker stopping).
    pub proxy_access_log: Vec<AccessLog>,
    /// `access_log_options.access_log_flush_interval`: a session also writes
    /// its lines this often while it lasts (Envoy's `UdpPeriodic` lines).
    pub access_log_flush_interval: Option<Duration>,
    /// `use_per_packet_load_balancing`: every datagram picks a host, and a
    /// peer has a session per host it was sent to.
    pub per_packet_load_balancing: bool,
    /// `upstream_socket_config.max_rx_datagram_size` (default 1500), checked
    /// as Envoy checks it. Envoy reads upstream sockets with GRO (the default
    /// `prefer_gro` of this config; setting it is refused), in 64 KiB buffers
    /// that this size does not limit, so neither does courier.
    pub upstream_max_rx_datagram_size: usize,
    /// `hash_policies` (at most one): a consistent-hashing cluster (RING_HASH,
    /// MAGLEV) picks a session's host by this hash; others ignore it.
    pub hash: Option<UdpHash>,
}

/// A UDP proxy's hash policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UdpHash {
    /// `source_ip`: the peer's IP address.
    SourceIp,
    /// `key`: this fixed string (every session hashes alike).
    Key(String),
}

/// A UDP listener: its proxy and how it reads.
#[derive(Debug, Clone, PartialEq)]
pub struct UdpListener {
    /// The listener's UDP proxy filter.
    pub proxy: Arc<UdpProxy>,
    /// Largest datagram read from downstream
    /// (`udp_listener_config.downstream_socket_config`, default 1500).
    pub max_rx_datagram_size: usize,
}

/// Translates the UDP side of a listener whose address is UDP: its listener
/// filters (exactly one, the UDP proxy) and `udp_listener_config`. Filter
/// chains are refused by the caller.
pub fn translate(l: &lpb::Listener, path: &Path<'_>, ctx: &mut Ctx) -> Option<UdpListener> {
    let lfp = path.field("listener_filters");
    let mut proxy = None;
    for (i, f) in l.listener_filters.iter().enumerate() {
        let fp = lfp.index(i);
        if i > 0 {
            // Envoy runs the filters in turn, but the UDP proxy stops every
            // datagram: a second filter would never see one.
            ctx.unsupported(&fp, "more than one UDP listener filter");
            continue;
        }
        proxy = listener_filter(f, &fp, ctx);
    }
    if l.listener_filters.is_empty() {
        // Envoy binds it and drops every datagram; nothing to build for that.
        ctx.unsupported(&lfp, "a UDP listener without the udp_proxy listener filter");
    }
    let max_rx_datagram_size = match &l.udp_listener_config {
        Some(u) => {
            u.downstream_socket_config
                .as_ref()
                .map_or(Some(DEFAULT_MAX_RX_DATAGRAM_SIZE), |s| {
                    socket_config(
                        s,
                        &path
                            .field("udp_listener_config")
                            .field("downstream_socket_config"),
                        ctx,
                    )
                })
        }
        None => Some(DEFAULT_MAX_RX_DATAGRAM_SIZE),
    };
    Some(UdpListener {
        proxy: Arc::new(proxy?),
        max_rx_datagram_size: max_rx_datagram_size?,
    })
}

fn listener_filter(f: &lpb::ListenerFilter, path: &Path<'_>, ctx: &mut Ctx) -> Option<UdpProxy> {
    use lpb::listener_filter::ConfigType;
    match &f.config_type {
        Some(ConfigType::TypedConfig(any)) if any.type_url == UDP_PROXY_TYPE => {
            let tp = path.field("typed_config");
            let c = core::unpack::<pb::UdpProxyConfig>(any, &tp, ctx)?;
            proxy(&c, &tp, ctx)
        }
        Some(ConfigType::TypedConfig(any)) => {
            // Envoy's wording: no UDP listener filter of that type.
            ctx.unsupported(
                path,
                format!("UDP listener filter {} ({})", f.name, any.type_url),
            );
            None
        }
        _ => {
            ctx.error(
                path,
                format!(
                    "Didn't find a registered implementation for '{}' with type URL: ''",
                    f.name
                ),
            );
            None
        }
    }
}

/// Translates an `UdpProxyConfig`.
pub fn proxy(c: &pb::UdpProxyConfig, path: &Path<'_>, ctx: &mut Ctx) -> Option<UdpProxy> {
    use pb::udp_proxy_config::RouteSpecifier as R;
    if c.stat_prefix.is_empty() {
        // PGV `min_len: 1`.
        ctx.error(&path.field("stat_prefix"), "must not be empty");
    }
    let cluster = match &c.route_specifier {
        Some(R::Cluster(name)) if name.is_empty() => {
            // PGV `min_len: 1`.
            ctx.error(&path.field("cluster"), "must not be empty");
            None
        }
        Some(R::Cluster(name)) => Some(Some(name.clone())),
        Some(R::Matcher(m)) => matcher(m, &path.field("matcher"), ctx),
        None => {
            // PGV: the oneof is required.
            ctx.error(path, "one of cluster or matcher is required");
            None
        }
    };
    let ip = path.field("idle_timeout");
    let idle_timeout = core::duration_or(c.idle_timeout.as_ref(), DEFAULT_IDLE_TIMEOUT, &ip, ctx);
    if idle_timeout < Duration::from_millis(1) {
        // Envoy would end every session as its first datagram arrives
        // (a zero timer); nobody means that.
        ctx.unsupported(&ip, "an idle_timeout below 1ms");
    }
    let upstream_max_rx_datagram_size = match &c.upstream_socket_config {
        Some(s) => socket_config(s, &path.field("upstream_socket_config"), ctx)?,
        None => DEFAULT_MAX_RX_DATAGRAM_SIZE,
    };
    let access_log = access_log::translate_all(&c.access_log, &path.field("access_log"), ctx);
    let proxy_access_log =
        access_log::translate_all(&c.proxy_access_log, &path.field("proxy_access_log"), ctx);
    let op = path.field("access_log_options");
    let fp = op.field("access_log_flush_interval");
    let access_log_flush_interval = c
        .access_log_options
        .as_ref()
        .and_then(|o| o.access_log_flush_interval.as_ref())
        .and_then(|d| core::duration(d, &fp, ctx));
    if access_log_flush_interval.is_some_and(|d| d < Duration::from_millis(1)) {
        // PGV `gte: 1ms`.
        ctx.error(&fp, "must be at least 1ms");
    }
    let hash = hash_policy(&c.hash_policies, &path.field("hash_policies"), ctx);
    Some(UdpProxy {
        hash,
        stat_prefix: c.stat_prefix.clone(),
        cluster: cluster?,
        idle_timeout,
        access_log,
        proxy_access_log,
        access_log_flush_interval,
        per_packet_load_balancing: c.use_per_packet_load_balancing,
        upstream_max_rx_datagram_size,
    })
}

/// `hash_policies`, with Envoy's checks (at most one; `source_ip` true; a
/// non-empty `key`).
fn hash_policy(
    list: &[pb::udp_proxy_config::HashPolicy],
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<UdpHash> {
    use pb::udp_proxy_config::hash_policy::PolicySpecifier as S;
    if list.len() > 1 {
        // PGV `max_items: 1`.
        ctx.error(path, "at most one hash policy");
        return None;
    }
    let p = path.index(0);
    match list.first()?.policy_specifier.as_ref() {
        Some(S::SourceIp(true)) => Some(UdpHash::SourceIp),
        Some(S::SourceIp(false)) => {
            // PGV `const: true`.
            ctx.error(&p.field("source_ip"), "must be true");
            None
        }
        Some(S::Key(k)) if k.is_empty() => {
            ctx.error(&p.field("key"), "must not be empty");
            None
        }
        Some(S::Key(k)) => Some(UdpHash::Key(k.clone())),
        None => {
            ctx.error(&p, "one of source_ip or key is required");
            None
        }
    }
}

/// The route of the matcher: only its `on_no_match` action (a `Route`) is
/// built; matching on the datagram's addresses is refused with its path.
fn matcher(m: &xpb::Matcher, path: &Path<'_>, ctx: &mut Ctx) -> Option<Option<String>> {
    use xpb::matcher::MatcherType;
    match &m.matcher_type {
        Some(MatcherType::MatcherList(_)) => {
            ctx.unsupported(&path.field("matcher_list"), "matcher_list");
            return None;
        }
        Some(MatcherType::MatcherTree(_)) => {
            ctx.unsupported(&path.field("matcher_tree"), "matcher_tree");
            return None;
        }
        None => {}
    }
    let Some(om) = &m.on_no_match else {
        // Nothing matches: Envoy's empty route, every datagram without one.
        return Some(None);
    };
    let op = path.field("on_no_match");
    if om.keep_matching {
        ctx.unsupported(&op.field("keep_matching"), "keep_matching");
        return None;
    }
    match &om.on_match {
        Some(xpb::matcher::on_match::OnMatch::Action(a)) => {
            let ap = op.field("action");
            let tp = ap.field("typed_config");
            match &a.typed_config {
                Some(any) if any.type_url == ROUTE_TYPE => {
                    let r = core::unpack::<pb::Route>(any, &tp, ctx)?;
                    if r.cluster.is_empty() {
                        // PGV `min_len: 1`.
                        ctx.error(&tp.field("cluster"), "must not be empty");
                        return None;
                    }
                    Some(Some(r.cluster))
                }
                Some(any) => {
                    // Envoy's wording.
                    ctx.error(
                        &tp,
                        format!(
                            "Didn't find a registered implementation for '{}' with type URL: '{}'",
                            a.name,
                            any.type_url
                                .trim_start_matches(crate::extensions::TYPE_URL_PREFIX)
                        ),
                    );
                    None
                }
                None => {
                    ctx.error(&tp, "is required");
                    None
                }
            }
        }
        Some(xpb::matcher::on_match::OnMatch::Matcher(_)) => {
            ctx.unsupported(&op.field("matcher"), "nested matcher");
            None
        }
        None => {
            ctx.error(&op, "needs an action");
            None
        }
    }
}

/// `max_rx_datagram_size` of a `UdpSocketConfig` (PGV: 1..=65535).
fn socket_config(s: &UdpSocketConfig, path: &Path<'_>, ctx: &mut Ctx) -> Option<usize> {
    match s.max_rx_datagram_size.as_ref().map(|v| v.value) {
        None => Some(DEFAULT_MAX_RX_DATAGRAM_SIZE),
        Some(n @ 1..=65535) => Some(n as usize),
        Some(_) => {
            ctx.error(
                &path.field("max_rx_datagram_size"),
                "value must be inside range (0, 65536)",
            );
            None
        }
    }
}

#[cfg(test)]
#[path = "udp_proxy_tests.rs"]
mod tests;
