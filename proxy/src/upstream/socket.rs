//! `transport_socket_matches` on the data plane: each host's transport socket is
//! chosen once, when the host is built (as Envoy resolves it at host creation),
//! and counted in `cluster.<name>.<match>.total_match_count`.

use super::tls::UpstreamTlsContext;
use crate::stats::{Counter, Sample};
use courier_config::cluster::{
    Cluster, DEFAULT_SOCKET, Priority, ProxyProtocolVersion, SocketIndex, TransportSocketMatch,
    resolve_socket,
};

/// A cluster's transport sockets: its own (`transport_socket`) and its
/// matches', by [`SocketIndex`].
#[derive(Debug)]
pub struct Sockets {
    /// Index 0: the cluster's own; `i + 1`: match `i`. `None`: plaintext.
    tls: Box<[Option<UpstreamTlsContext>]>,
    /// `upstream_proxy_protocol` of each socket, by the same index.
    proxy_protocol: Box<[Option<ProxyProtocolVersion>]>,
    /// Whether any socket writes a PROXY header (read per request: kept).
    any_proxy_protocol: bool,
    /// Hosts built with each socket (`total_match_count`), by the same index.
    counts: Box<[Counter]>,
}

impl Sockets {
    /// Builds the TLS contexts of `config`'s sockets.
    pub fn new(config: &Cluster) -> Result<Self, String> {
        let protocol = config.http.protocol;
        let build = |tls: Option<&courier_config::tls::UpstreamTls>| {
            tls.map(|t| UpstreamTlsContext::new(t, protocol))
                .transpose()
        };
        let mut tls = vec![build(config.tls.as_deref())?];
        for (i, m) in config.transport_socket_matches.iter().enumerate() {
            tls.push(
                build(m.tls.as_deref())
                    .map_err(|e| format!("transport_socket_matches[{i}] ({}): {e}", m.name))?,
            );
        }
        let counts = tls.iter().map(|_| Counter::default()).collect();
        let proxy_protocol: Box<[_]> = std::iter::once(config.proxy_protocol)
            .chain(
                config
                    .transport_socket_matches
                    .iter()
                    .map(|m| m.proxy_protocol),
            )
            .collect();
        Ok(Self {
            tls: tls.into_boxed_slice(),
            any_proxy_protocol: proxy_protocol.iter().any(Option::is_some),
            proxy_protocol,
            counts,
        })
    }

    /// The TLS of connections over socket `socket` (`None`: plaintext).
    pub fn tls(&self, socket: SocketIndex) -> Option<&UpstreamTlsContext> {
        self.tls.get(usize::from(socket))?.as_ref()
    }

    /// The PROXY protocol header connections over socket `socket` start with.
    pub fn proxy_protocol(&self, socket: SocketIndex) -> Option<ProxyProtocolVersion> {
        *self.proxy_protocol.get(usize::from(socket))?
    }

    /// Whether any of the sockets writes a PROXY protocol header (requests
    /// then carry their downstream connection's addresses to the pool).
    pub fn any_proxy_protocol(&self) -> bool {
        self.any_proxy_protocol
    }

    /// `cluster.<name>.<match>.total_match_count` and
    /// `cluster.<name>.default.total_match_count`, as every Envoy cluster has.
    pub fn samples(&self, stat_name: &str, config: &Cluster, out: &mut Vec<Sample>) {
        let names = std::iter::once("default").chain(
            config
                .transport_socket_matches
                .iter()
                .map(|m| m.name.as_str()),
        );
        for (name, count) in names.zip(self.counts.iter()) {
            out.push((
                format!("cluster.{stat_name}.{name}.total_match_count"),
                count.get(),
            ));
        }
        // Envoy's TLS socket factories (one per socket, sharing the
        // cluster's scope): their SDS counters.
        if self.tls.iter().any(Option::is_some) {
            let (mut updates, mut not_ready) = (0, 0);
            for t in self.tls.iter().flatten() {
                let (u, n) = t.factory_counters();
                updates += u;
                not_ready += n;
            }
            let p = format!("cluster.{stat_name}.client_ssl_socket_factory");
            out.push((format!("{p}.downstream_context_secrets_not_ready"), 0));
            out.push((format!("{p}.ssl_context_update_by_sds"), updates));
            out.push((format!("{p}.upstream_context_secrets_not_ready"), not_ready));
        }
    }
}

/// What a host builder needs to give each host its socket: the cluster's
/// matches and the counters of the sockets chosen.
#[derive(Debug, Clone, Copy)]
pub struct HostSockets<'a> {
    matches: &'a [TransportSocketMatch],
    counts: &'a [Counter],
}

impl<'a> HostSockets<'a> {
    /// No matches and nothing counted.
    #[cfg(test)]
    pub const NONE: HostSockets<'static> = HostSockets {
        matches: &[],
        counts: &[],
    };

    /// The matches of `config`, counted in `sockets`.
    pub fn new(config: &'a Cluster, sockets: &'a Sockets) -> Self {
        Self {
            matches: &config.transport_socket_matches,
            counts: &sockets.counts,
        }
    }

    /// The socket of each endpoint of `level`, by its index in the level
    /// (config order over localities); empty when there are no matches.
    pub fn level(&self, level: &Priority) -> Vec<SocketIndex> {
        if self.matches.is_empty() {
            return Vec::new();
        }
        level
            .localities
            .iter()
            .flat_map(|l| {
                l.endpoints
                    .iter()
                    .map(|e| resolve_socket(self.matches, &e.metadata, &l.metadata))
            })
            .collect()
    }

    /// Endpoint `i`'s socket in a level's [`Self::level`] list.
    pub fn of(level: &[SocketIndex], i: usize) -> SocketIndex {
        level.get(i).copied().unwrap_or(DEFAULT_SOCKET)
    }

    /// Counts a host built with `socket`.
    pub fn count(&self, socket: SocketIndex) {
        if let Some(c) = self.counts.get(usize::from(socket)) {
            c.inc();
        }
    }
}

/// Every cluster's `total_match_count` samples.
pub fn samples(clusters: &super::ClusterManager, out: &mut Vec<Sample>) {
    for c in clusters.clusters() {
        c.sockets.samples(c.config.stat_name(), &c.config, out);
    }
}
