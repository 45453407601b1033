//! Filter chains: their matches (SNI, transport protocol, ALPN), TLS, and the
//! terminal network filter courier implements: the HTTP connection manager or
//! the TCP proxy.

use super::hcm::{self, HttpConnectionManager};
use super::tcp_proxy::{self, TcpProxy};
use crate::core;
use crate::ctx::Ctx;
use crate::extensions::{
    CONNECTION_LIMIT, HTTP_CONNECTION_MANAGER, NETWORK_RBAC, SNI_DFP, TCP_PROXY,
};
use crate::path::Path;
use crate::tls::{self, DownstreamTls};
use envoy_types::pb::envoy::config::listener::v3 as pb;
use envoy_types::pb::envoy::extensions::filters::network::connection_limit::v3::ConnectionLimit as ConnectionLimitProto;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager as HcmProto;
use envoy_types::pb::envoy::extensions::filters::network::rbac::v3::Rbac as RbacProto;
use envoy_types::pb::envoy::extensions::filters::network::sni_dynamic_forward_proxy::v3::FilterConfig as SniDfpProto;
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::TcpProxy as TcpProxyProto;
use std::sync::Arc;

/// The transport protocol a filter chain matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportProtocol {
    /// Plaintext.
    RawBuffer,
    /// TLS (detected from the ClientHello).
    Tls,
}

/// `filter_chain_match`: which connections a chain takes. Empty fields match anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterChainMatch {
    /// SNI names, lower-cased: exact, or `*.suffix` wildcards.
    pub server_names: Vec<String>,
    /// Transport protocol, if constrained.
    pub transport_protocol: Option<TransportProtocol>,
    /// ALPN protocols offered by the client (any of them).
    pub application_protocols: Vec<String>,
}

/// A validated filter chain.
#[derive(Debug, Clone)]
pub struct FilterChain {
    /// The chain's name (may be empty).
    pub name: String,
    /// Which connections it takes.
    pub filter_chain_match: FilterChainMatch,
    /// TLS termination; `None` = plaintext.
    pub tls: Option<Arc<DownstreamTls>>,
    /// `transport_socket_connect_timeout`: how long the chain's transport
    /// socket (the TLS handshake) may take once the chain is chosen before
    /// the connection is closed. `None` (absent or zero, as in Envoy) waits
    /// without limit; a plaintext chain connects at once, so it never fires.
    pub transport_socket_connect_timeout: Option<std::time::Duration>,
    /// `connection_limit` filters before the terminal one, in config order.
    pub connection_limits: Vec<Arc<super::connection_limit::ConnectionLimit>>,
    /// `rbac` network filters before the terminal one, in config order.
    pub network_rbacs: Vec<Arc<super::network_rbac::NetworkRbac>>,
    /// `envoy.filters.network.sni_dynamic_forward_proxy` before the TCP proxy:
    /// the SNI resolved (after the RBAC and connection-limit filters) before
    /// the TCP proxy connects.
    pub sni_dfp: Option<Arc<super::sni_dfp::SniDynamicForwardProxy>>,
    /// The chain's terminal network filter.
    pub network: NetworkFilter,
    /// Where the network filter's config sits in its listener
    /// (`filter_chains[0].filters[0].typed_config`), for messages that refer back to it.
    pub hcm_config_path: String,
}

/// The terminal network filter of a chain.
#[derive(Debug, Clone)]
pub enum NetworkFilter {
    /// `envoy.filters.network.http_connection_manager`.
    Http(Arc<HttpConnectionManager>),
    /// `envoy.filters.network.tcp_proxy`.
    Tcp(Arc<TcpProxy>),
}

impl FilterChain {
    /// The chain's connection manager, unless it proxies TCP.
    pub fn hcm(&self) -> Option<&Arc<HttpConnectionManager>> {
        match &self.network {
            NetworkFilter::Http(h) => Some(h),
            NetworkFilter::Tcp(_) => None,
        }
    }

    /// The chain's TCP proxy, unless it serves HTTP.
    pub fn tcp_proxy(&self) -> Option<&Arc<TcpProxy>> {
        match &self.network {
            NetworkFilter::Tcp(t) => Some(t),
            NetworkFilter::Http(_) => None,
        }
    }
}

/// Translates one `FilterChain`. `rel` is its path relative to the listener, as text.
pub(crate) fn translate(
    fc: &pb::FilterChain,
    rel: &str,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<FilterChain> {
    let filter_chain_match = fc
        .filter_chain_match
        .as_ref()
        .map(|m| chain_match(m, &path.field("filter_chain_match"), ctx))
        .unwrap_or_default();
    let tls = fc
        .transport_socket
        .as_ref()
        .and_then(|ts| tls::downstream(ts, &path.field("transport_socket"), ctx))
        .map(Arc::new);
    let transport_socket_connect_timeout = core::optional_timeout(
        fc.transport_socket_connect_timeout.as_ref(),
        None,
        &path.field("transport_socket_connect_timeout"),
        ctx,
    );
    let fp = path.field("filters");
    if fc.filters.is_empty() {
        // Envoy accepts a chain without filters (it closes every connection).
        ctx.error(
            &fp,
            "a filter chain needs an envoy.filters.network.http_connection_manager or envoy.filters.network.tcp_proxy filter",
        );
        return None;
    }
    let last = fc.filters.len() - 1;
    let mut found = None;
    let mut connection_limits = Vec::new();
    let mut network_rbacs = Vec::new();
    let mut sni_dfp = None;
    for (k, f) in fc.filters.iter().enumerate() {
        let p = fp.index(k);
        let Some(decoded) = network_filter(f, &p, ctx) else {
            continue;
        };
        if let Decoded::ConnectionLimit(m) = &decoded {
            let tp = p.field("typed_config");
            if found.is_some() || k == last {
                // Envoy: a chain ends with its terminal filter.
                ctx.unsupported(
                    &p,
                    "a connection_limit filter that is not before the terminal filter",
                );
            } else if let Some(c) = super::connection_limit::translate(m, &tp, ctx) {
                connection_limits.push(Arc::new(c));
            }
            continue;
        }
        if let Decoded::Rbac(m) = &decoded {
            let tp = p.field("typed_config");
            if found.is_some() || k == last {
                ctx.unsupported(&p, "an rbac filter that is not before the terminal filter");
            } else if let Some(r) = super::network_rbac::translate(m, &tp, ctx) {
                network_rbacs.push(Arc::new(r));
            }
            continue;
        }
        if let Decoded::SniDfp(m) = &decoded {
            let tp = p.field("typed_config");
            let before_tcp = k != last
                && matches!(
                    fc.filters[last].config_type.as_ref(),
                    Some(pb::filter::ConfigType::TypedConfig(a)) if a.type_url == TCP_PROXY
                );
            if found.is_some() || !before_tcp || sni_dfp.is_some() {
                ctx.unsupported(
                    &p,
                    "an sni_dynamic_forward_proxy filter that is not once before a terminal tcp_proxy",
                );
            } else if let Some(d) = super::sni_dfp::translate(m, &tp, ctx) {
                sni_dfp = Some(Arc::new(d));
            }
            continue;
        }
        if k != last {
            let kind = match decoded {
                Decoded::Http(_) => "envoy.filters.network.http_connection_manager",
                Decoded::Tcp(_) => "envoy.filters.network.tcp_proxy",
                // Taken above (not terminal).
                Decoded::ConnectionLimit(_) | Decoded::Rbac(_) | Decoded::SniDfp(_) => continue,
            };
            ctx.error(
                &p,
                format!(
                    "terminal filter named {} of type {kind} must be the last filter in a network filter chain",
                    f.name
                ),
            );
        }
        let tp = p.field("typed_config");
        found = match decoded {
            Decoded::Http(h) => {
                hcm::translate(&h, &tp, ctx).map(|h| (k, NetworkFilter::Http(Arc::new(h))))
            }
            Decoded::Tcp(t) => {
                tcp_proxy::translate(&t, &tp, ctx).map(|t| (k, NetworkFilter::Tcp(Arc::new(t))))
            }
            Decoded::ConnectionLimit(_) | Decoded::Rbac(_) | Decoded::SniDfp(_) => None,
        };
    }
    let (k, network) = found?;
    Some(FilterChain {
        name: fc.name.clone(),
        filter_chain_match,
        tls,
        transport_socket_connect_timeout,
        connection_limits,
        network_rbacs,
        sni_dfp,
        network,
        hcm_config_path: format!("{rel}.filters[{k}].typed_config"),
    })
}

/// A network filter's decoded config.
enum Decoded {
    Http(Box<HcmProto>),
    Tcp(Box<TcpProxyProto>),
    ConnectionLimit(Box<ConnectionLimitProto>),
    Rbac(Box<RbacProto>),
    SniDfp(Box<SniDfpProto>),
}

/// Decodes a network filter if it is a connection manager or a TCP proxy;
/// refuses any other.
fn network_filter(f: &pb::Filter, path: &Path<'_>, ctx: &mut Ctx) -> Option<Decoded> {
    use pb::filter::ConfigType;
    match &f.config_type {
        Some(ConfigType::TypedConfig(any)) if any.type_url == HTTP_CONNECTION_MANAGER => {
            core::unpack::<HcmProto>(any, &path.field("typed_config"), ctx)
                .map(|h| Decoded::Http(Box::new(h)))
        }
        Some(ConfigType::TypedConfig(any)) if any.type_url == TCP_PROXY => {
            core::unpack::<TcpProxyProto>(any, &path.field("typed_config"), ctx)
                .map(|t| Decoded::Tcp(Box::new(t)))
        }
        Some(ConfigType::TypedConfig(any)) if any.type_url == CONNECTION_LIMIT => {
            core::unpack::<ConnectionLimitProto>(any, &path.field("typed_config"), ctx)
                .map(|c| Decoded::ConnectionLimit(Box::new(c)))
        }
        Some(ConfigType::TypedConfig(any)) if any.type_url == NETWORK_RBAC => {
            core::unpack::<RbacProto>(any, &path.field("typed_config"), ctx)
                .map(|r| Decoded::Rbac(Box::new(r)))
        }
        Some(ConfigType::TypedConfig(any)) if any.type_url == SNI_DFP => {
            core::unpack::<SniDfpProto>(any, &path.field("typed_config"), ctx)
                .map(|r| Decoded::SniDfp(Box::new(r)))
        }
        Some(ConfigType::TypedConfig(any)) => {
            let name = if f.name.is_empty() {
                any.type_url.as_str()
            } else {
                f.name.as_str()
            };
            ctx.unsupported(path, format!("network filter {name}"));
            None
        }
        // Refused by the support table.
        Some(ConfigType::ConfigDiscovery(_)) => None,
        None => {
            match f.name.as_str() {
                // Its config has required fields (stat_prefix, a route source).
                "envoy.filters.network.http_connection_manager"
                | "envoy.http_connection_manager" => ctx.error(
                    &path.field("typed_config"),
                    "is required (an HttpConnectionManager)",
                ),
                // Its config has required fields (stat_prefix, a cluster).
                "envoy.filters.network.tcp_proxy" | "envoy.tcp_proxy" => {
                    ctx.error(&path.field("typed_config"), "is required (a TcpProxy)")
                }
                "" => ctx.error(path, "name or typed_config is required"),
                name => ctx.unsupported(path, format!("network filter {name}")),
            }
            None
        }
    }
}

fn chain_match(m: &pb::FilterChainMatch, path: &Path<'_>, ctx: &mut Ctx) -> FilterChainMatch {
    let sp = path.field("server_names");
    let mut server_names = Vec::with_capacity(m.server_names.len());
    for (i, name) in m.server_names.iter().enumerate() {
        let name = name.to_ascii_lowercase();
        let wildcard_ok = match name.strip_prefix("*.") {
            Some(rest) => !rest.contains('*'),
            None => !name.contains('*'),
        };
        if !wildcard_ok {
            // Envoy's wording; only `*.suffix` wildcards exist.
            ctx.error(
                &sp.index(i),
                "partial wildcards are not supported in \"server_names\"",
            );
            continue;
        }
        if name.is_empty() {
            ctx.error(&sp.index(i), "must not be empty");
            continue;
        }
        server_names.push(name);
    }
    let transport_protocol = match m.transport_protocol.as_str() {
        "" => None,
        "raw_buffer" => Some(TransportProtocol::RawBuffer),
        "tls" => Some(TransportProtocol::Tls),
        other => {
            ctx.unsupported(
                &path.field("transport_protocol"),
                format!("transport protocol \"{other}\" (only raw_buffer and tls)"),
            );
            None
        }
    };
    FilterChainMatch {
        server_names,
        transport_protocol,
        application_protocols: m.application_protocols.clone(),
    }
}

/// Envoy refuses two chains with equal matches, and two whose matches overlap
/// (both would take some connection). Reports at the later chain.
pub(crate) fn check_duplicates(chains: &[pb::FilterChain], path: &Path<'_>, ctx: &mut Ctx) {
    let empty = pb::FilterChainMatch::default();
    let matches: Vec<&pb::FilterChainMatch> = chains
        .iter()
        .map(|c| c.filter_chain_match.as_ref().unwrap_or(&empty))
        .collect();
    let keys: Vec<Vec<(String, &str, &str)>> = matches.iter().map(|m| expand(m)).collect();
    for i in 1..chains.len() {
        let p = path.index(i);
        let at = if chains[i].filter_chain_match.is_some() {
            p.field("filter_chain_match")
        } else {
            p
        };
        if let Some(j) = (0..i).find(|&j| matches[j] == matches[i]) {
            ctx.error(
                &at,
                format!(
                    "multiple filter chains with the same matching rules are defined (also filter_chains[{j}])"
                ),
            );
        } else if let Some(j) = (0..i).find(|&j| keys[i].iter().any(|k| keys[j].contains(k))) {
            ctx.error(
                &at,
                format!(
                    "multiple filter chains with overlapping matching rules are defined (overlaps filter_chains[{j}])"
                ),
            );
        }
    }
}

/// Every (server name, transport protocol, ALPN) combination a match takes.
fn expand(m: &pb::FilterChainMatch) -> Vec<(String, &str, &str)> {
    let names: Vec<String> = if m.server_names.is_empty() {
        vec![String::new()]
    } else {
        m.server_names
            .iter()
            .map(|s| s.to_ascii_lowercase())
            .collect()
    };
    let alpns: Vec<&str> = if m.application_protocols.is_empty() {
        vec![""]
    } else {
        m.application_protocols.iter().map(String::as_str).collect()
    };
    let mut out = Vec::with_capacity(names.len() * alpns.len());
    for n in &names {
        for a in &alpns {
            out.push((n.clone(), m.transport_protocol.as_str(), *a));
        }
    }
    out
}
