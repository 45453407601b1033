//! Listeners: addresses, filter chains and their matches, and the HTTP connection manager.

pub mod access_log;
pub mod connection_limit;
pub mod filter_chain;
pub mod grpc_access_log;
pub mod hcm;
pub mod http_options;
pub mod ip_detection;
pub mod log_filter;
pub mod network_rbac;
pub mod otel_access_log;
pub mod proxy_protocol;
pub mod sni_dfp;
pub mod socket_options;
pub mod tcp_proxy;
pub mod udp_proxy;

pub use filter_chain::{FilterChain, FilterChainMatch, NetworkFilter, TransportProtocol};
pub use hcm::{HttpConnectionManager, RouteSpecifier};
pub use tcp_proxy::TcpProxy;
pub use udp_proxy::{UdpHash, UdpListener, UdpProxy};

use crate::config_source::ConfigSourceKind;
use crate::core::{self, Address};
use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::listener::v3 as pb;

/// Fields of the listener messages this module owns.
const OWN: &[Support] = &[
    (
        "envoy.config.listener.v3.Listener",
        &[
            "name",
            "address",
            "stat_prefix",
            "filter_chains",
            "default_filter_chain",
            "per_connection_buffer_limit_bytes",
            "listener_filters",
            "traffic_direction",
            "max_connections_to_accept_per_socket_event",
            "bypass_overload_manager",
            "ignore_global_conn_limit",
            "freebind",
            "socket_options",
            "access_log",
            "udp_listener_config",
        ],
    ),
    (
        "envoy.config.core.v3.SocketOption",
        &[
            "description",
            "level",
            "name",
            "int_value",
            "buf_value",
            "state",
        ],
    ),
    (
        "envoy.config.listener.v3.FilterChain",
        &[
            "filter_chain_match",
            "filters",
            "transport_socket",
            "name",
            "transport_socket_connect_timeout",
        ],
    ),
    (
        "envoy.config.listener.v3.FilterChainMatch",
        &[
            "server_names",
            "transport_protocol",
            "application_protocols",
        ],
    ),
    ("envoy.config.listener.v3.Filter", &["name", "typed_config"]),
    // Listener filters other than tls_inspector are refused by `translate` at
    // their element; listing the fields here keeps the walker from reporting
    // the same element twice.
    (
        "envoy.config.listener.v3.ListenerFilter",
        &["name", "typed_config"],
    ),
    // The filter chain code always peeks at the ClientHello (Envoy adds the
    // inspector itself when a chain needs it); the fingerprints are computed
    // only when asked for.
    (
        "envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector",
        &["enable_ja3_fingerprinting", "enable_ja4_fingerprinting"],
    ),
];

const LEN: usize = OWN.len()
    + hcm::SUPPORT.len()
    + access_log::SUPPORT.len()
    + tcp_proxy::SUPPORT.len()
    + udp_proxy::SUPPORT.len()
    + ip_detection::SUPPORT.len()
    + log_filter::SUPPORT.len()
    + proxy_protocol::SUPPORT.len()
    + connection_limit::SUPPORT.len()
    + network_rbac::SUPPORT.len();

/// Fields of the listener messages courier implements (listener, connection
/// manager, TCP proxy, access logs).
pub(crate) const SUPPORT: &[Support] = &concat::<LEN>([
    OWN,
    hcm::SUPPORT,
    access_log::SUPPORT,
    tcp_proxy::SUPPORT,
    udp_proxy::SUPPORT,
    ip_detection::SUPPORT,
    log_filter::SUPPORT,
    proxy_protocol::SUPPORT,
    connection_limit::SUPPORT,
    network_rbac::SUPPORT,
]);

/// Joins the submodules' tables at compile time (the walker reads one table per module).
const fn concat<const N: usize>(parts: [&[Support]; 10]) -> [Support; N] {
    let mut out: [Support; N] = [("", &[]); N];
    let mut k = 0;
    let mut i = 0;
    while i < parts.len() {
        let mut j = 0;
        while j < parts[i].len() {
            out[k] = parts[i][j];
            k += 1;
            j += 1;
        }
        i += 1;
    }
    out
}

/// The TLS inspector listener filter: TLS detection, SNI and ALPN for chain matching.
pub const TLS_INSPECTOR: &str = "envoy.filters.listener.tls_inspector";
/// The TLS inspector's config type.
const TLS_INSPECTOR_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector";

/// The PROXY protocol listener filter's type URL.
pub const PROXY_PROTOCOL_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.listener.proxy_protocol.v3.ProxyProtocol";

/// Envoy's default `per_connection_buffer_limit_bytes` (1 MiB).
pub const DEFAULT_BUFFER_LIMIT: u32 = 1024 * 1024;

/// `traffic_direction` (informational: stats and tracing use it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrafficDirection {
    /// Not given.
    Unspecified,
    /// Traffic into the local service.
    Inbound,
    /// Traffic out of the local service.
    Outbound,
}

/// A validated listener.
#[derive(Debug, Clone)]
pub struct Listener {
    /// Name (generated from the address when the config gives none, as Envoy
    /// generates one).
    pub name: String,
    /// Where it listens: a TCP address or a Unix domain socket.
    pub address: Address,
    /// Stats prefix of the listener (`listener.<stat_prefix>.`); empty = from the address.
    pub stat_prefix: String,
    /// Filter chains in config order.
    pub filter_chains: Vec<FilterChain>,
    /// Takes connections no chain matches.
    pub default_filter_chain: Option<Box<FilterChain>>,
    /// Per-connection buffer limit, both directions (default 1 MiB).
    pub per_connection_buffer_limit_bytes: u32,
    /// Traffic direction.
    pub traffic_direction: TrafficDirection,
    /// `max_connections_to_accept_per_socket_event`: connections a worker
    /// accepts in a row before it lets its other work run; `None` (Envoy's
    /// default) accepts every pending connection first.
    pub max_accepts_per_event: Option<u32>,
    /// `bypass_overload_manager`: the overload manager's actions, on
    /// connections and on requests, do not apply to this listener.
    pub bypass_overload_manager: bool,
    /// `ignore_global_conn_limit`: the global downstream connection limit
    /// neither refuses nor counts this listener's connections.
    pub ignore_global_conn_limit: bool,
    /// `freebind`: bound with `IP_FREEBIND` (`IPV6_FREEBIND`), so the address
    /// need not be configured on the host yet.
    pub freebind: bool,
    /// `socket_options`, set on the listening sockets.
    pub socket_options: socket_options::SocketOptions,
    /// `access_log`: a line per connection when it closes (and for one no
    /// filter chain takes), with the connection's facts.
    pub access_log: Vec<access_log::AccessLog>,
    /// The PROXY protocol listener filter, when the listener has one: the
    /// client's addresses come from the header each connection starts with.
    pub proxy_protocol: Option<proxy_protocol::ProxyProtocol>,
    /// `tls_inspector`'s `enable_ja3_fingerprinting`: the ClientHello's JA3
    /// hash (`%TLS_JA3_FINGERPRINT%`).
    pub ja3: bool,
    /// `tls_inspector`'s `enable_ja4_fingerprinting` (`%TLS_JA4_FINGERPRINT%`).
    pub ja4: bool,
    /// Set for a UDP listener (`protocol: UDP`): its UDP proxy. Such a
    /// listener has no filter chains.
    pub udp: Option<UdpListener>,
}

/// A `path_config_source` file an RDS connection manager of a listener reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdsPathSource<'a> {
    /// Path of the `path` field relative to the listener, e.g.
    /// `filter_chains[0].filters[0].typed_config.rds.config_source.path_config_source.path`.
    pub field: String,
    /// The file.
    pub file: &'a str,
}

impl Listener {
    /// Every filter chain, the default one last.
    pub fn all_filter_chains(&self) -> impl Iterator<Item = &FilterChain> {
        self.filter_chains
            .iter()
            .chain(self.default_filter_chain.as_deref())
    }

    /// The `path_config_source` files named by this listener's RDS connection managers.
    pub fn rds_path_sources(&self) -> Vec<RdsPathSource<'_>> {
        self.all_filter_chains()
            .filter_map(|fc| match &fc.hcm()?.route_specifier {
                RouteSpecifier::Rds { config_source, .. } => match &config_source.kind {
                    ConfigSourceKind::Path { path, .. } => Some(RdsPathSource {
                        field: format!(
                            "{}.rds.config_source.path_config_source.path",
                            fc.hcm_config_path
                        ),
                        file: path.as_str(),
                    }),
                    _ => None,
                },
                RouteSpecifier::Inline(_) => None,
            })
            .collect()
    }
}

/// Translates a `Listener`.
pub fn translate(l: &pb::Listener, path: &Path<'_>, ctx: &mut Ctx) -> Option<Listener> {
    if is_udp(l) {
        return udp_listener(l, path, ctx);
    }
    let address = core::address(l.address.as_ref(), &path.field("address"), ctx);
    if l.udp_listener_config.is_some() {
        ctx.unsupported(
            &path.field("udp_listener_config"),
            "udp_listener_config on a TCP listener",
        );
    }
    let lfp = path.field("listener_filters");
    let mut proxy_protocol = None;
    let (mut ja3, mut ja4) = (false, false);
    for (i, f) in l.listener_filters.iter().enumerate() {
        use envoy_types::pb::envoy::extensions::filters::listener::proxy_protocol::v3 as pp;
        use pb::listener_filter::ConfigType;
        let typed = match &f.config_type {
            Some(ConfigType::TypedConfig(any)) if any.type_url == PROXY_PROTOCOL_TYPE => Some(any),
            _ => None,
        };
        if let Some(any) = typed {
            let fp = lfp.index(i);
            let tp = fp.field("typed_config");
            if proxy_protocol.is_some() {
                ctx.unsupported(&fp, "a second proxy_protocol listener filter");
            } else if let Some(m) = core::unpack::<pp::ProxyProtocol>(any, &tp, ctx) {
                proxy_protocol = proxy_protocol::translate(&m, &tp, ctx);
            }
        } else if f.name != TLS_INSPECTOR {
            ctx.unsupported(&lfp.index(i), format!("listener filter {}", f.name));
        } else if let Some(ConfigType::TypedConfig(any)) = &f.config_type
            && any.type_url == TLS_INSPECTOR_TYPE
        {
            use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3 as ti;
            let tp = lfp.index(i);
            if let Some(m) = core::unpack::<ti::TlsInspector>(any, &tp.field("typed_config"), ctx) {
                ja3 |= m.enable_ja3_fingerprinting.is_some_and(|b| b.value);
                ja4 |= m.enable_ja4_fingerprinting.is_some_and(|b| b.value);
            }
        }
    }
    let cp = path.field("filter_chains");
    let mut filter_chains: Vec<FilterChain> = l
        .filter_chains
        .iter()
        .enumerate()
        .filter_map(|(i, fc)| {
            filter_chain::translate(fc, &format!("filter_chains[{i}]"), &cp.index(i), ctx)
        })
        .collect();
    filter_chain::check_duplicates(&l.filter_chains, &cp, ctx);
    let dp = path.field("default_filter_chain");
    let mut default_filter_chain = l.default_filter_chain.as_ref().and_then(|fc| {
        if fc.filter_chain_match.is_some() {
            // Envoy ignores it there; say so rather than ignore it silently.
            ctx.unsupported(
                &dp.field("filter_chain_match"),
                "filter_chain_match on the default filter chain",
            );
        }
        filter_chain::translate(fc, "default_filter_chain", &dp, ctx).map(Box::new)
    });
    if l.bypass_overload_manager {
        // Every connection manager of the listener knows (its requests' checks
        // run where the listener is not at hand).
        for fc in filter_chains
            .iter_mut()
            .chain(default_filter_chain.as_deref_mut())
        {
            if let NetworkFilter::Http(h) = &mut fc.network {
                std::sync::Arc::make_mut(h).bypass_overload_manager = true;
            }
        }
    }
    if l.filter_chains.is_empty() && l.default_filter_chain.is_none() {
        // Envoy's wording.
        ctx.error(&cp, "no filter chains specified");
    }
    let max_accepts_per_event = l
        .max_connections_to_accept_per_socket_event
        .as_ref()
        .map(|v| v.value);
    if max_accepts_per_event == Some(0) {
        // Envoy's rule (PGV `gt: 0`).
        ctx.error(
            &path.field("max_connections_to_accept_per_socket_event"),
            "must be greater than 0",
        );
    }
    let address = address?;
    Some(Listener {
        filter_chains,
        default_filter_chain,
        max_accepts_per_event,
        socket_options: socket_options::translate(
            &l.socket_options,
            &path.field("socket_options"),
            ctx,
        ),
        proxy_protocol,
        ja3,
        ja4,
        ..common(l, address, path, ctx)
    })
}

/// The fields TCP and UDP listeners translate alike (the name, the buffer
/// limit, the traffic direction, the overload and limit switches, the access
/// logs), with the TCP-only ones empty.
fn common(l: &pb::Listener, address: Address, path: &Path<'_>, ctx: &mut Ctx) -> Listener {
    use envoy_types::pb::envoy::config::core::v3::TrafficDirection as T;
    let name = if l.name.is_empty() {
        generated_name(&address, path)
    } else {
        l.name.clone()
    };
    Listener {
        name,
        address,
        stat_prefix: l.stat_prefix.clone(),
        filter_chains: Vec::new(),
        default_filter_chain: None,
        per_connection_buffer_limit_bytes: core::u32_or(
            l.per_connection_buffer_limit_bytes.as_ref(),
            DEFAULT_BUFFER_LIMIT,
        ),
        traffic_direction: match T::try_from(l.traffic_direction) {
            Ok(T::Inbound) => TrafficDirection::Inbound,
            Ok(T::Outbound) => TrafficDirection::Outbound,
            _ => TrafficDirection::Unspecified,
        },
        max_accepts_per_event: None,
        bypass_overload_manager: l.bypass_overload_manager,
        ignore_global_conn_limit: l.ignore_global_conn_limit,
        freebind: core::bool_or(l.freebind.as_ref(), false),
        socket_options: socket_options::SocketOptions::default(),
        // On a UDP listener translated and checked; it has no connections to
        // log (its UDP proxy's `access_log` logs sessions).
        access_log: access_log::translate_all(&l.access_log, &path.field("access_log"), ctx),
        proxy_protocol: None,
        ja3: false,
        ja4: false,
        udp: None,
    }
}

/// Whether the listener's address is a UDP socket address.
fn is_udp(l: &pb::Listener) -> bool {
    use envoy_types::pb::envoy::config::core::v3::address::Address as A;
    use envoy_types::pb::envoy::config::core::v3::socket_address::Protocol;
    matches!(
        l.address.as_ref().and_then(|a| a.address.as_ref()),
        Some(A::SocketAddress(sa)) if sa.protocol == Protocol::Udp as i32
    )
}

/// Translates a UDP listener: its address (the UDP protocol is what makes it
/// one; `core::address` refuses UDP where courier has no use for it), no
/// filter chains, the UDP proxy listener filter. The TCP-only fields are refused.
fn udp_listener(l: &pb::Listener, path: &Path<'_>, ctx: &mut Ctx) -> Option<Listener> {
    let address = core::address_any_protocol(l.address.as_ref(), &path.field("address"), ctx);
    let quic = l
        .udp_listener_config
        .as_ref()
        .is_some_and(|u| u.quic_options.is_some());
    if quic {
        // A QUIC (HTTP/3) listener: the field walker refuses `quic_options`
        // at its path; its filter chains are valid there, so nothing else is said.
        return None;
    }
    let chains = l.filter_chains.len() + usize::from(l.default_filter_chain.is_some());
    if chains > 0 {
        // Envoy's wording (it counts `filter_chains` only).
        ctx.error(
            &path.field("filter_chains"),
            format!(
                "{} filter chain(s) specified for connection-less UDP listener.",
                l.filter_chains.len().max(1)
            ),
        );
    }
    if !l.socket_options.is_empty() {
        // The options courier sets are TCP ones.
        ctx.unsupported(
            &path.field("socket_options"),
            "socket_options on a UDP listener",
        );
    }
    let udp = udp_proxy::translate(l, path, ctx);
    let address = address?;
    let base = common(l, address, path, ctx);
    Some(Listener {
        udp: Some(udp?),
        ..base
    })
}

/// Envoy names an unnamed listener with a UUID; courier uses its address, which
/// is stable across reloads and unique (two listeners cannot bind one address).
/// Port 0 can repeat, so those also carry their place in the config.
fn generated_name(address: &Address, path: &Path<'_>) -> String {
    if address.socket().is_some_and(|sa| sa.port == 0) {
        format!("{address}@{path}")
    } else {
        address.to_string()
    }
}

#[cfg(test)]
pub(crate) mod test_util;
#[cfg(test)]
mod tests;
