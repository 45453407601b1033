//! The HTTP filter chains (jwt_authn, RBAC) of every connection manager, built once at
//! start-up and shared by all workers, and the per-request glue to `courier-filters`.

use courier_config::Bootstrap;
use courier_config::route::{RouteConfig, VirtualHost};
use courier_filters::build::FilterStats;
use courier_filters::{ConnFacts, FilterChain, SelectedRoute, TlsFacts};
use std::sync::Arc;

/// The filter chain of each connection manager, by listener index then filter chain
/// (`filter_chain::chain_at` order, the default chain last), like `WorkerStats::hcm`.
#[derive(Debug, Default)]
pub struct HttpFilters {
    chains: Vec<Vec<Arc<FilterChain>>>,
    /// Every chain's filter counters (not rendered yet).
    pub stats: Vec<FilterStats>,
}

impl HttpFilters {
    /// Builds the chains of every listener. Remote JWKS has no fetcher here: serve_check
    /// refuses it before this runs.
    pub fn build(bootstrap: &Bootstrap) -> Result<Self, String> {
        let mut out = Self::default();
        for l in &bootstrap.listeners {
            let mut chains = Vec::new();
            for fc in l.all_filter_chains() {
                let (chain, stats) =
                    courier_filters::build_chain(&fc.http_connection_manager.http_filters, None)
                        .map_err(|e| format!("listener {}: {e}", l.name))?;
                out.stats.extend(stats);
                chains.push(Arc::new(chain));
            }
            out.chains.push(chains);
        }
        Ok(out)
    }

    /// The chain of a listener's filter chain; `None` when it has no filter to run (or
    /// the index is unknown).
    pub fn chain(&self, listener: usize, chain: usize) -> Option<Arc<FilterChain>> {
        self.chains
            .get(listener)
            .and_then(|c| c.get(chain))
            .filter(|c| !c.is_empty())
            .map(Arc::clone)
    }
}

/// What filters know of a connection. The peer certificate is not extracted yet
/// (serve_check refuses RBAC `authenticated` principals).
pub fn conn_facts(
    peer: std::net::SocketAddr,
    local: std::net::SocketAddr,
    tls: bool,
    sni: Option<&str>,
) -> ConnFacts {
    ConnFacts {
        peer,
        source: peer,
        local,
        tls: tls.then(|| TlsFacts {
            sni: sni.map(str::to_string),
            peer_cert: None,
        }),
    }
}

/// The per-filter configs (route, virtual host, route configuration; weighted-cluster
/// levels are refused by serve_check) and metadata of a selected route.
pub fn selected_route<'a>(
    rc: &'a RouteConfig,
    vhost: &'a VirtualHost,
    route: &'a courier_config::route::Route,
) -> SelectedRoute<'a> {
    SelectedRoute {
        per_filter: [
            None,
            Some(&route.typed_per_filter_config),
            Some(&vhost.typed_per_filter_config),
            Some(&rc.typed_per_filter_config),
        ],
        metadata: Some(&route.metadata),
    }
}
