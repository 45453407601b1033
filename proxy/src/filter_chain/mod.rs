//! The HTTP filter chains (jwt_authn, RBAC) of every connection manager, built once at
//! start-up and shared by all workers, and the per-request glue to `courier-filters`.

pub mod body;
pub(crate) mod call_retry;
pub mod ext_authz_client;
pub mod jwks_fetch;
pub mod rls_client;

use crate::filter_chain::ext_authz_client::ClusterAuthz;
use crate::filter_chain::jwks_fetch::ClusterJwksFetcher;
use crate::filter_chain::rls_client::ClusterRls;
use crate::stats::Sample;
use crate::tls::DownstreamStream;
use crate::upstream::client::ClusterClient;
use courier_config::Bootstrap;
use courier_config::listener::Listener;
use courier_config::route::{Action, ClusterSpecifier, RouteConfig, VirtualHost};
use courier_filters::build::FilterStats;
use courier_filters::ext_authz::AuthzTransport;
use courier_filters::jwt_authn::jwks_cache::JwksFetcher;
use courier_filters::ratelimit::RateLimitTransport;
use courier_filters::{ConnFacts, FilterChain, SelectedRoute, TlsFacts};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The filter chain of each connection manager, by listener index then filter chain
/// (`filter_chain::chain_at` order, the default chain last), like `WorkerStats::hcm`.
#[derive(Debug, Default)]
pub struct HttpFilters {
    chains: Vec<Vec<Arc<FilterChain>>>,
    /// Every chain's filter counters, with the chain's (listener row, chain) and the
    /// HCM's stat prefix. One set per filter, shared by all workers (relaxed
    /// atomics, not per worker).
    stats: Vec<((usize, usize), String, FilterStats)>,
}

impl HttpFilters {
    /// Builds the chains of every listener; remote JWKS are fetched through `client`.
    pub fn build(bootstrap: &Bootstrap, client: &ClusterClient) -> Result<Self, String> {
        Self::build_listeners(bootstrap.listeners.iter().map(AsRef::as_ref), client)
    }

    /// Builds the chains of `listeners` (row `i` for the `i`th).
    pub fn build_listeners<'a>(
        listeners: impl IntoIterator<Item = &'a Listener>,
        client: &ClusterClient,
    ) -> Result<Self, String> {
        let mut out = Self::default();
        let fetcher: Arc<dyn JwksFetcher> = Arc::new(ClusterJwksFetcher(client.clone()));
        let authz: Arc<dyn AuthzTransport> = Arc::new(ClusterAuthz(client.clone()));
        let rls: Arc<dyn RateLimitTransport> = Arc::new(ClusterRls(client.clone()));
        for (row, l) in listeners.into_iter().enumerate() {
            let mut chains = Vec::new();
            for (index, fc) in l.all_filter_chains().enumerate() {
                // A TCP proxy chain keeps its place with an empty chain.
                let (filters, prefix) = fc
                    .hcm()
                    .map_or((&[][..], ""), |h| (&h.http_filters[..], &h.stat_prefix[..]));
                let (chain, stats) = courier_filters::build_chain_full(
                    filters,
                    Some(Arc::clone(&fetcher)),
                    Some(Arc::clone(&authz)),
                    Some(Arc::clone(&rls)),
                )
                .map_err(|e| format!("listener {}: {e}", l.name))?;
                out.stats.extend(
                    stats
                        .into_iter()
                        .map(|s| ((row, index), prefix.to_string(), s)),
                );
                chains.push(Arc::new(chain));
            }
            out.chains.push(chains);
        }
        Ok(out)
    }

    /// Puts chain `from` of `other` (row, chain) in place of chain `at` of this
    /// table, with its counters: a filter chain a listener update leaves
    /// unchanged keeps its filters (their JWKS caches) and counters.
    pub fn keep_chain(&mut self, at: (usize, usize), other: &HttpFilters, from: (usize, usize)) {
        let Some(chain) = other.chains.get(from.0).and_then(|r| r.get(from.1)) else {
            return;
        };
        let Some(slot) = self.chains.get_mut(at.0).and_then(|r| r.get_mut(at.1)) else {
            return;
        };
        *slot = Arc::clone(chain);
        self.stats.retain(|(c, _, _)| *c != at);
        self.stats.extend(
            other
                .stats
                .iter()
                .filter(|(c, _, _)| *c == from)
                .map(|(_, prefix, s)| (at, prefix.clone(), s.clone())),
        );
    }

    /// Runs every chain's start-up work (remote JWKS `async_fetch` without
    /// `fast_listener`) one after the other; whether all of it succeeded. An LDS
    /// listener warms until it is done, as Envoy's init manager holds it.
    pub async fn init_all(&self) -> bool {
        let mut ok = true;
        for chain in self.chains.iter().flatten() {
            ok &= chain.init().await;
        }
        ok
    }

    /// Spawns the chains' background work (JWKS refreshes) on the current
    /// runtime, for a listener added at run time; the handles stop it.
    pub fn spawn_background(&self) -> Vec<tokio::task::AbortHandle> {
        self.chains
            .iter()
            .flatten()
            .map(|chain| {
                let background = Arc::clone(chain);
                tokio::spawn(async move { background.background().await }).abort_handle()
            })
            .collect()
    }

    /// Starts the filters' work on the main thread's `runtime`: background work (JWKS
    /// refreshes) is spawned there, and start-up work the listeners wait for (a first
    /// `async_fetch` without `fast_listener`) runs to completion before this returns, as
    /// Envoy's init manager holds its listeners. A failed start-up fetch does not stop
    /// the listeners (Envoy marks the init target ready either way).
    pub fn start(&self, runtime: &tokio::runtime::Runtime) {
        for chain in self.chains.iter().flatten() {
            let background = Arc::clone(chain);
            runtime.spawn(async move { background.background().await });
        }
        // The chains' start-up fetches run side by side, as Envoy's init targets.
        let mut inits: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = bool> + '_>>> = self
            .chains
            .iter()
            .flatten()
            .map(|c| Box::pin(c.init()) as _)
            .collect();
        let mut failed = false;
        runtime.block_on(std::future::poll_fn(|cx| {
            inits.retain_mut(|f| match f.as_mut().poll(cx) {
                std::task::Poll::Ready(ok) => {
                    failed |= !ok;
                    false
                }
                std::task::Poll::Pending => true,
            });
            if inits.is_empty() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        }));
        if failed {
            tracing::warn!("a filter's start-up work failed (remote JWKS fetch)");
        }
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

    /// The filters' counters under Envoy's names (`http.<hcm prefix>.jwt_authn.…`,
    /// `http.<hcm prefix>.rbac.<rules_stat_prefix>…`), each summed over the
    /// workers' copies, added to `out`.
    pub fn samples(&self, out: &mut Vec<Sample>) {
        self.for_each_counter(&mut |name, copies| out.push((name, sum(copies))));
        // ext_authz per route cluster: filters of several connection managers count into
        // the same cluster's counter, as in Envoy (one stat in the cluster's scope); Envoy
        // creates each on first use, so a counter never counted is absent.
        let mut by_cluster = std::collections::BTreeMap::<String, u64>::new();
        self.for_each_cluster_counter(&mut |name, c| {
            *by_cluster.entry(name).or_default() += c.load(Ordering::Relaxed);
        });
        out.extend(by_cluster.into_iter().filter(|(_, v)| *v != 0));
    }

    /// Zeroes the filters' counters (`/reset_counters`).
    pub fn reset_counters(&self) {
        self.for_each_counter(&mut |_, copies| {
            copies.iter().for_each(|c| c.store(0, Ordering::Relaxed));
        });
        self.for_each_cluster_counter(&mut |_, c| c.store(0, Ordering::Relaxed));
    }

    /// The counters in the route cluster's scope: ext_authz's
    /// `cluster.<route cluster>.ext_authz.[<stat_prefix>.]<name>`, ratelimit's and the gRPC
    /// filters' `cluster.<route cluster>.<grpc|grpc-web>.…`.
    fn for_each_cluster_counter(&self, add: &mut dyn FnMut(String, &AtomicU64)) {
        for (_, _, s) in &self.stats {
            if let FilterStats::Grpc { counters } = s {
                counters.each(|name, c| add(name, c));
            }
            if let FilterStats::RateLimit { clusters } = s {
                clusters.each(|cluster, c| {
                    add(format!("cluster.{cluster}.ratelimit.ok"), &c.ok);
                    add(format!("cluster.{cluster}.ratelimit.over_limit"), &c.denied);
                    add(format!("cluster.{cluster}.ratelimit.error"), &c.error);
                    add(
                        format!("cluster.{cluster}.ratelimit.failure_mode_allowed"),
                        &c.failure_mode_allowed,
                    );
                });
            }
            if let FilterStats::ExtAuthz {
                stat_prefix,
                clusters,
                ..
            } = s
            {
                let p = if stat_prefix.is_empty() {
                    "ext_authz.".to_string()
                } else {
                    format!("ext_authz.{stat_prefix}.")
                };
                clusters.each(|cluster, c| {
                    add(format!("cluster.{cluster}.{p}ok"), &c.ok);
                    add(format!("cluster.{cluster}.{p}denied"), &c.denied);
                    add(format!("cluster.{cluster}.{p}error"), &c.error);
                    add(
                        format!("cluster.{cluster}.{p}failure_mode_allowed"),
                        &c.failure_mode_allowed,
                    );
                });
            }
        }
    }

    /// Each filter counter by its Envoy name, with its copies (one per worker,
    /// or one for counters kept once).
    fn for_each_counter(&self, add: &mut dyn FnMut(String, &[&AtomicU64])) {
        for (_, hcm, s) in &self.stats {
            match s {
                FilterStats::JwtAuthn {
                    stat_prefix,
                    stats,
                    fetch,
                } => {
                    let p = if stat_prefix.is_empty() {
                        format!("http.{hcm}.jwt_authn.")
                    } else {
                        format!("http.{hcm}.jwt_authn.{stat_prefix}.")
                    };
                    add(format!("{p}allowed"), &stats.each(|s| &s.allowed));
                    add(format!("{p}denied"), &stats.each(|s| &s.denied));
                    add(
                        format!("{p}cors_preflight_bypassed"),
                        &stats.each(|s| &s.cors_preflight_bypassed),
                    );
                    add(
                        format!("{p}jwt_cache_hit"),
                        &stats.each(|s| &s.jwt_cache_hit),
                    );
                    add(
                        format!("{p}jwt_cache_miss"),
                        &stats.each(|s| &s.jwt_cache_miss),
                    );
                    add(format!("{p}jwks_fetch_success"), &[&fetch.success]);
                    add(format!("{p}jwks_fetch_failed"), &[&fetch.failed]);
                }
                FilterStats::ExtAuthz {
                    stat_prefix, stats, ..
                } => {
                    let p = if stat_prefix.is_empty() {
                        format!("http.{hcm}.ext_authz.")
                    } else {
                        format!("http.{hcm}.ext_authz.{stat_prefix}.")
                    };
                    add(format!("{p}ok"), &stats.each(|s| &s.ok));
                    add(format!("{p}denied"), &stats.each(|s| &s.denied));
                    add(format!("{p}error"), &stats.each(|s| &s.error));
                    add(
                        format!("{p}failure_mode_allowed"),
                        &stats.each(|s| &s.failure_mode_allowed),
                    );
                    add(format!("{p}disabled"), &stats.each(|s| &s.disabled));
                }
                FilterStats::Compressor {
                    library_name,
                    library,
                    response_direction_set,
                    stats,
                } => {
                    // Envoy's names: the direction's counters under `response.` only when
                    // `response_direction_config` is set; the `accept-encoding` ones beside.
                    let p = format!("http.{hcm}.compressor.{library_name}.{library}.");
                    let d = if *response_direction_set {
                        format!("{p}response.")
                    } else {
                        p.clone()
                    };
                    add(format!("{d}compressed"), &stats.each(|s| &s.compressed));
                    add(
                        format!("{d}not_compressed"),
                        &stats.each(|s| &s.not_compressed),
                    );
                    add(
                        format!("{d}total_uncompressed_bytes"),
                        &stats.each(|s| &s.total_uncompressed_bytes),
                    );
                    add(
                        format!("{d}total_compressed_bytes"),
                        &stats.each(|s| &s.total_compressed_bytes),
                    );
                    add(
                        format!("{d}content_length_too_small"),
                        &stats.each(|s| &s.content_length_too_small),
                    );
                    for (name, field) in [
                        ("no_accept_header", compressor_field::NO_ACCEPT),
                        ("header_identity", compressor_field::IDENTITY),
                        ("header_compressor_used", compressor_field::USED),
                        (
                            "header_compressor_overshadowed",
                            compressor_field::OVERSHADOWED,
                        ),
                        ("header_wildcard", compressor_field::WILDCARD),
                        ("header_not_valid", compressor_field::NOT_VALID),
                        ("not_compressed_etag", compressor_field::ETAG),
                    ] {
                        add(format!("{p}{name}"), &stats.each(field));
                    }
                    for (name, field) in [
                        ("compressed", compressor_field::REQUEST_COMPRESSED),
                        ("not_compressed", compressor_field::REQUEST_NOT_COMPRESSED),
                        (
                            "total_uncompressed_bytes",
                            compressor_field::REQUEST_UNCOMPRESSED,
                        ),
                        (
                            "total_compressed_bytes",
                            compressor_field::REQUEST_COMPRESSED_BYTES,
                        ),
                        (
                            "content_length_too_small",
                            compressor_field::REQUEST_TOO_SMALL,
                        ),
                    ] {
                        add(format!("{p}request.{name}"), &stats.each(field));
                    }
                }
                // Counted in the route cluster's scope (for_each_cluster_counter).
                FilterStats::RateLimit { .. } | FilterStats::Grpc { .. } => {}
                FilterStats::Fault { stats, active } => {
                    let p = format!("http.{hcm}.fault.");
                    add(format!("{p}active_faults"), &[&**active]);
                    add(
                        format!("{p}aborts_injected"),
                        &stats.each(|s| &s.aborts_injected),
                    );
                    add(
                        format!("{p}delays_injected"),
                        &stats.each(|s| &s.delays_injected),
                    );
                    add(
                        format!("{p}faults_overflow"),
                        &stats.each(|s| &s.faults_overflow),
                    );
                    add(
                        format!("{p}response_rl_injected"),
                        &stats.each(|s| &s.response_rl_injected),
                    );
                }
                FilterStats::Csrf { stats } => {
                    let p = format!("http.{hcm}.csrf.");
                    add(
                        format!("{p}missing_source_origin"),
                        &stats.each(|s| &s.missing_source_origin),
                    );
                    add(
                        format!("{p}request_invalid"),
                        &stats.each(|s| &s.request_invalid),
                    );
                    add(
                        format!("{p}request_valid"),
                        &stats.each(|s| &s.request_valid),
                    );
                }
                FilterStats::OAuth2 { stats } => {
                    for ((under_hcm, prefix), s) in stats.all() {
                        let mut p = if under_hcm {
                            format!("http.{hcm}.")
                        } else {
                            String::new()
                        };
                        if !prefix.is_empty() {
                            p.push_str(&prefix);
                            p.push('.');
                        }
                        for (name, c) in courier_filters::oauth2::COUNTER_NAMES.iter().zip(s.all())
                        {
                            add(format!("{p}{name}"), &[c]);
                        }
                    }
                }
                FilterStats::CredentialInjector { stats } => {
                    let p = format!("http.{hcm}.credential_injector.");
                    add(format!("{p}injected"), &[&stats.injected]);
                    add(format!("{p}failed"), &[&stats.failed]);
                    add(format!("{p}already_exists"), &[&stats.already_exists]);
                }
                FilterStats::BasicAuth { stats } => {
                    let p = format!("http.{hcm}.basic_auth.");
                    add(format!("{p}allowed"), &stats.each(|s| &s.allowed));
                    add(format!("{p}denied"), &stats.each(|s| &s.denied));
                }
                FilterStats::ExtProc { stat_prefix, stats } => {
                    let p = if stat_prefix.is_empty() {
                        format!("http.{hcm}.ext_proc.")
                    } else {
                        format!("http.{hcm}.ext_proc.{stat_prefix}.")
                    };
                    for (i, name) in courier_filters::ext_proc::COUNTER_NAMES.iter().enumerate() {
                        add(format!("{p}{name}"), &stats.each(|s| &s.counters[i]));
                    }
                }
                FilterStats::ApiKeyAuth { stats } => {
                    let p = format!("http.{hcm}.api_key_auth.");
                    add(format!("{p}allowed"), &stats.each(|s| &s.allowed));
                    add(format!("{p}forbidden"), &stats.each(|s| &s.forbidden));
                    add(format!("{p}unauthorized"), &stats.each(|s| &s.unauthorized));
                }
                FilterStats::LocalRateLimit { stats } => {
                    // Envoy roots these at the filter's stat prefix (no `http.<hcm>.`).
                    for (prefix, s) in stats.all() {
                        let p = format!("{prefix}.http_local_rate_limit.");
                        add(format!("{p}enabled"), &s.each(|s| &s.enabled));
                        add(format!("{p}enforced"), &s.each(|s| &s.enforced));
                        add(format!("{p}rate_limited"), &s.each(|s| &s.rate_limited));
                        add(format!("{p}ok"), &s.each(|s| &s.ok));
                        add(format!("{p}shadow_mode"), &s.each(|s| &s.shadow_mode));
                    }
                }
                FilterStats::Rbac {
                    rules_stat_prefix,
                    shadow_rules_stat_prefix,
                    stats,
                } => {
                    let p = format!("http.{hcm}.rbac.{rules_stat_prefix}");
                    let shadow = format!("http.{hcm}.rbac.{shadow_rules_stat_prefix}");
                    add(format!("{p}allowed"), &stats.each(|s| &s.allowed));
                    add(format!("{p}denied"), &stats.each(|s| &s.denied));
                    add(
                        format!("{shadow}shadow_allowed"),
                        &stats.each(|s| &s.shadow_allowed),
                    );
                    add(
                        format!("{shadow}shadow_denied"),
                        &stats.each(|s| &s.shadow_denied),
                    );
                    // Envoy creates these on first use: absent until counted.
                    let mut lazy = vec![
                        ("logged".to_string(), stats.each(|s| &s.logged)),
                        ("not_logged".to_string(), stats.each(|s| &s.not_logged)),
                    ];
                    let policies = stats.get(0).per_policy.iter().enumerate();
                    for (i, policy) in policies {
                        let name = &policy.name;
                        let copies = |f: fn(&courier_filters::rbac::PolicyStats) -> &AtomicU64| {
                            stats
                                .iter()
                                .filter_map(|s| s.per_policy.get(i).map(f))
                                .collect::<Vec<_>>()
                        };
                        lazy.push((format!("policy.{name}.allowed"), copies(|p| &p.allowed)));
                        lazy.push((format!("policy.{name}.denied"), copies(|p| &p.denied)));
                    }
                    for (name, copies) in lazy {
                        if sum(&copies) != 0 {
                            add(format!("{p}{name}"), &copies);
                        }
                    }
                }
            }
        }
    }
}

/// What filters know of a connection. `stream` is `None` where no filter runs (the
/// peer certificate is then not parsed).
pub fn conn_facts(
    peer: std::net::SocketAddr,
    local: std::net::SocketAddr,
    stream: Option<&DownstreamStream>,
    sni: Option<&str>,
) -> ConnFacts {
    ConnFacts {
        worker: 0,
        peer,
        source: peer,
        local,
        tls: stream.filter(|s| s.is_tls()).map(|s| TlsFacts {
            sni: sni.map(str::to_string),
            peer_cert: crate::tls::peer_cert(s),
        }),
    }
}

/// The per-filter configs (the weighted cluster `random` picks, route, virtual host,
/// route configuration) and metadata of a selected route. Envoy picks the weighted cluster
/// when it resolves the route, so decoder filters before the router already see the
/// picked cluster's configs; the router picks again with the same `random`.
pub fn selected_route<'a>(
    rc: &'a RouteConfig,
    vhost: &'a VirtualHost,
    route: &'a courier_config::route::Route,
    random: u64,
) -> SelectedRoute<'a> {
    // Only a route entry (not a redirect or direct response) has rate limits, its own or
    // its virtual host's, as in Envoy.
    let (rate_limits, vh_rate_limits, include_vh_rate_limits) = match &route.action {
        Action::Route(ra) => (
            &ra.rate_limits[..],
            &vhost.rate_limits[..],
            ra.include_vh_rate_limits,
        ),
        _ => (&[][..], &[][..], false),
    };
    let (weighted, cluster) = match &route.action {
        Action::Route(ra) => match &ra.cluster {
            ClusterSpecifier::Weighted(w) => {
                let c = w.pick(random);
                (
                    c.map(|c| &c.typed_per_filter_config),
                    c.map(|c| c.name.as_str()),
                )
            }
            ClusterSpecifier::Cluster(name) => (None, Some(name.as_str())),
            ClusterSpecifier::Header(_) => (None, None),
        },
        _ => (None, None),
    };
    SelectedRoute {
        per_filter: [
            weighted,
            Some(&route.typed_per_filter_config),
            Some(&vhost.typed_per_filter_config),
            Some(&rc.typed_per_filter_config),
        ],
        metadata: Some(&route.metadata),
        cluster,
        rate_limits,
        vh_rate_limits,
        include_vh_rate_limits,
    }
}

/// The compressor's `accept-encoding` and request-direction counters, by field.
mod compressor_field {
    use courier_filters::compressor::CompressorStats;
    use std::sync::atomic::AtomicU64;

    type Field = fn(&CompressorStats) -> &AtomicU64;
    pub(super) const NO_ACCEPT: Field = |s| &s.no_accept_header;
    pub(super) const IDENTITY: Field = |s| &s.header_identity;
    pub(super) const USED: Field = |s| &s.header_compressor_used;
    pub(super) const OVERSHADOWED: Field = |s| &s.header_compressor_overshadowed;
    pub(super) const WILDCARD: Field = |s| &s.header_wildcard;
    pub(super) const NOT_VALID: Field = |s| &s.header_not_valid;
    pub(super) const ETAG: Field = |s| &s.not_compressed_etag;
    pub(super) const REQUEST_COMPRESSED: Field = |s| &s.request_compressed;
    pub(super) const REQUEST_NOT_COMPRESSED: Field = |s| &s.request_not_compressed;
    pub(super) const REQUEST_UNCOMPRESSED: Field = |s| &s.request_total_uncompressed_bytes;
    pub(super) const REQUEST_COMPRESSED_BYTES: Field = |s| &s.request_total_compressed_bytes;
    pub(super) const REQUEST_TOO_SMALL: Field = |s| &s.request_content_length_too_small;
}

/// The sum of a counter's copies.
fn sum(copies: &[&AtomicU64]) -> u64 {
    copies.iter().map(|c| c.load(Ordering::Relaxed)).sum()
}
