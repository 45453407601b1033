//! Building an HCM's filter chain from its validated `http_filters`.

use crate::api_key_auth::{ApiKeyAuthFilter, ApiKeyAuthStats};
use crate::basic_auth::{BasicAuthFilter, BasicAuthStats};
use crate::chain::{ChainEntry, FilterChain};
use crate::compressor::{CompressorFilter, CompressorStats};
use crate::csrf::{CsrfFilter, CsrfStats};
use crate::ext_authz::cluster_stats::PerCluster;
use crate::ext_authz::{AuthzTransport, ExtAuthzFilter, ExtAuthzStats};
use crate::ext_proc::{ExtProcFilter, ExtProcStats};
use crate::fault::{FaultFilter, FaultStats};
use crate::grpc::counters::GrpcCounters;
use crate::grpc::stats::GrpcStatsFilter;
use crate::grpc::web::GrpcWebFilter;
use crate::jwt_authn::jwks_cache::FetchStats;
use crate::jwt_authn::jwks_cache::JwksFetcher;
use crate::jwt_authn::{JwtAuthnFilter, JwtStats};
use crate::local_ratelimit::{LocalRateLimitFilter, StatsByPrefix};
use crate::per_worker::PerWorker;
use crate::ratelimit::{RateLimitHttpFilter, RateLimitTransport};
use crate::rbac::{RbacFilter, RbacStats};
use courier_config::filters::{HttpFilter as FilterConfig, HttpFilterConfig};
use std::sync::Arc;

/// A filter's counters, for the proxy's stats rendering.
#[derive(Debug, Clone)]
pub enum FilterStats {
    /// jwt_authn: `jwt_authn.[<stat_prefix>.]...`.
    JwtAuthn {
        /// `stat_prefix` (empty = none).
        stat_prefix: String,
        /// The counters, per worker.
        stats: Arc<PerWorker<JwtStats>>,
        /// Remote JWKS fetches.
        fetch: Arc<FetchStats>,
    },
    /// rbac: `rbac.<rules_stat_prefix>...`, shadow under `<shadow_rules_stat_prefix>`.
    Rbac {
        /// `rules_stat_prefix`, verbatim.
        rules_stat_prefix: String,
        /// `shadow_rules_stat_prefix`, verbatim.
        shadow_rules_stat_prefix: String,
        /// The counters, per worker.
        stats: Arc<PerWorker<RbacStats>>,
    },
    /// ext_authz: `ext_authz.[<stat_prefix>.]...`.
    ExtAuthz {
        /// `stat_prefix` (empty = none).
        stat_prefix: String,
        /// The counters, per worker.
        stats: Arc<PerWorker<ExtAuthzStats>>,
        /// The outcomes per route target cluster.
        clusters: Arc<PerCluster>,
    },
    /// compressor: `compressor.<library name>.<library>.[response.]...`.
    Compressor {
        /// `compressor_library.name`.
        library_name: String,
        /// `gzip`, `brotli` or `zstd`.
        library: &'static str,
        /// `response_direction_config` is set: the direction's counters are under
        /// `response.`.
        response_direction_set: bool,
        /// The counters, per worker.
        stats: Arc<PerWorker<CompressorStats>>,
    },
    /// local_ratelimit: `<stat_prefix>.http_local_rate_limit.<name>` for each stat prefix
    /// the filter and its per-route configs use.
    LocalRateLimit {
        /// The counters by prefix.
        stats: Arc<StatsByPrefix>,
    },
    /// fault: `http.<hcm prefix>.fault.<name>`.
    Fault {
        /// The counters, per worker.
        stats: Arc<PerWorker<FaultStats>>,
        /// `active_faults`.
        active: Arc<std::sync::atomic::AtomicU64>,
    },
    /// csrf: `http.<hcm prefix>.csrf.<name>`.
    Csrf {
        /// The counters, per worker.
        stats: Arc<PerWorker<CsrfStats>>,
    },
    /// credential_injector: `http.<hcm prefix>.credential_injector.<name>`.
    CredentialInjector {
        /// The counters.
        stats: Arc<crate::credential_injector::CredentialStats>,
    },
    /// basic_auth: `http.<hcm prefix>.basic_auth.<name>`.
    BasicAuth {
        /// The counters, per worker.
        stats: Arc<PerWorker<BasicAuthStats>>,
    },
    /// ext_proc: `http.<hcm prefix>.ext_proc.[<stat_prefix>.]<name>`.
    ExtProc {
        /// `stat_prefix` (empty = none).
        stat_prefix: String,
        /// The counters, per worker.
        stats: Arc<PerWorker<ExtProcStats>>,
    },
    /// api_key_auth: `http.<hcm prefix>.api_key_auth.<name>`.
    ApiKeyAuth {
        /// The counters, per worker.
        stats: Arc<PerWorker<ApiKeyAuthStats>>,
    },
    /// grpc_web and grpc_stats: `cluster.<route cluster>.<grpc-web|grpc>[.<service>.<method>].<name>`.
    Grpc {
        /// The counters by name prefix.
        counters: Arc<GrpcCounters>,
    },
    /// oauth2: `<hcm stat prefix><stat_prefix>.<name>` per stat prefix in use.
    OAuth2 {
        /// The counters by `stat_prefix`.
        stats: Arc<crate::oauth2::StatsByPrefix>,
    },
    /// ratelimit: `cluster.<route cluster>.ratelimit.<name>` (`denied` is `over_limit`).
    RateLimit {
        /// The outcomes per route cluster.
        clusters: Arc<PerCluster>,
    },
}

/// The chain for `filters` (in config order, the terminal router left out) and the
/// counters of its filters. `fetcher` serves jwt_authn remote JWKS. Fails on ext_authz
/// (it needs a transport: [`build_chain_with`]).
pub fn build_chain(
    filters: &[FilterConfig],
    fetcher: Option<Arc<dyn JwksFetcher>>,
) -> Result<(FilterChain, Vec<FilterStats>), String> {
    build_chain_with(filters, fetcher, None)
}

/// [`build_chain`] with `authz` carrying ext_authz checks (without one, an ext_authz filter
/// fails the build).
pub fn build_chain_with(
    filters: &[FilterConfig],
    fetcher: Option<Arc<dyn JwksFetcher>>,
    authz: Option<Arc<dyn AuthzTransport>>,
) -> Result<(FilterChain, Vec<FilterStats>), String> {
    build_chain_full(filters, fetcher, authz, None)
}

/// [`build_chain_with`] with `rls` carrying the global rate limit filter's calls (without
/// one, a ratelimit filter fails the build).
pub fn build_chain_full(
    filters: &[FilterConfig],
    fetcher: Option<Arc<dyn JwksFetcher>>,
    authz: Option<Arc<dyn AuthzTransport>>,
    rls: Option<Arc<dyn RateLimitTransport>>,
) -> Result<(FilterChain, Vec<FilterStats>), String> {
    let mut entries = Vec::new();
    let mut stats = Vec::new();
    for f in filters {
        let filter: Box<dyn crate::chain::HttpFilter> = match &f.config {
            HttpFilterConfig::Router(_) => continue,
            HttpFilterConfig::JwtAuthn(c) => {
                let filter = JwtAuthnFilter::new(Arc::new((**c).clone()), fetcher.clone());
                stats.push(FilterStats::JwtAuthn {
                    stat_prefix: c.stat_prefix.clone(),
                    stats: Arc::clone(filter.stats()),
                    fetch: Arc::clone(filter.fetch_stats()),
                });
                Box::new(filter)
            }
            HttpFilterConfig::Rbac(c) => {
                let filter = RbacFilter::new(Arc::new((**c).clone()));
                stats.push(FilterStats::Rbac {
                    rules_stat_prefix: c.rules_stat_prefix.clone(),
                    shadow_rules_stat_prefix: c.shadow_rules_stat_prefix.clone(),
                    stats: Arc::clone(filter.stats()),
                });
                Box::new(filter)
            }
            HttpFilterConfig::Compressor(c) => {
                let filter = CompressorFilter::new(Arc::new((**c).clone()));
                stats.push(FilterStats::Compressor {
                    library_name: c.library_name.clone(),
                    library: c.library.stats_prefix(),
                    response_direction_set: c.response_direction_set,
                    stats: Arc::clone(filter.stats()),
                });
                Box::new(filter)
            }
            HttpFilterConfig::LocalRateLimit(c) => {
                let filter = LocalRateLimitFilter::new(Arc::new((**c).clone()));
                stats.push(FilterStats::LocalRateLimit {
                    stats: Arc::clone(filter.stats()),
                });
                Box::new(filter)
            }
            HttpFilterConfig::Fault(c) => {
                let filter = FaultFilter::new(Arc::new((**c).clone()));
                stats.push(FilterStats::Fault {
                    stats: Arc::clone(filter.stats()),
                    active: Arc::clone(filter.active()),
                });
                Box::new(filter)
            }
            // No stats yet (Envoy's are the DNS cache's).
            HttpFilterConfig::DynamicForwardProxy(c) => {
                Box::new(crate::dynamic_forward_proxy::DynamicForwardProxyFilter::new(c))
            }
            HttpFilterConfig::Buffer(c) => Box::new(crate::buffer::BufferFilter::new(*c)),
            HttpFilterConfig::CustomResponse(c) => Box::new(
                crate::custom_response::CustomResponseFilter::new(Arc::clone(c)),
            ),
            HttpFilterConfig::HeaderMutation(c) => Box::new(
                crate::header_mutation::HeaderMutationHttpFilter::new(Arc::new((**c).clone())),
            ),
            HttpFilterConfig::Csrf(c) => {
                let filter = CsrfFilter::new(Arc::new((**c).clone()));
                stats.push(FilterStats::Csrf {
                    stats: Arc::clone(filter.stats()),
                });
                Box::new(filter)
            }
            HttpFilterConfig::CredentialInjector(c) => {
                // The config checked the header name and value.
                let Some(filter) = crate::credential_injector::CredentialFilter::new(c) else {
                    return Err(format!("credential_injector {}: invalid header", f.name));
                };
                stats.push(FilterStats::CredentialInjector {
                    stats: Arc::clone(&filter.stats),
                });
                Box::new(filter)
            }
            HttpFilterConfig::BasicAuth(c) => {
                let filter = BasicAuthFilter::new(&f.name, Arc::new((**c).clone()));
                stats.push(FilterStats::BasicAuth {
                    stats: Arc::clone(filter.stats()),
                });
                Box::new(filter)
            }
            HttpFilterConfig::ExtProc(c) => {
                let filter = ExtProcFilter::new(Arc::new((**c).clone()));
                stats.push(FilterStats::ExtProc {
                    stat_prefix: filter.stat_prefix().to_string(),
                    stats: Arc::clone(filter.stats()),
                });
                Box::new(filter)
            }
            HttpFilterConfig::ApiKeyAuth(c) => {
                let filter = ApiKeyAuthFilter::new(Arc::new((**c).clone()));
                stats.push(FilterStats::ApiKeyAuth {
                    stats: Arc::clone(filter.stats()),
                });
                Box::new(filter)
            }
            // No stats: Envoy's filter has none.
            HttpFilterConfig::HealthCheck(c) => {
                Box::new(crate::health_check::HealthCheckFilter::new((**c).clone()))
            }
            HttpFilterConfig::GrpcWeb => {
                let filter = GrpcWebFilter::new();
                stats.push(FilterStats::Grpc {
                    counters: Arc::clone(filter.counters()),
                });
                Box::new(filter)
            }
            HttpFilterConfig::GrpcStats(c) => {
                let filter = GrpcStatsFilter::new(Arc::new((**c).clone()));
                stats.push(FilterStats::Grpc {
                    counters: Arc::clone(filter.counters()),
                });
                Box::new(filter)
            }
            HttpFilterConfig::RateLimit(c) => {
                let Some(transport) = rls.clone() else {
                    return Err(format!(
                        "HTTP filter {} (ratelimit) needs a rate limit transport",
                        f.name
                    ));
                };
                let filter = RateLimitHttpFilter::new(Arc::new((**c).clone()), transport);
                stats.push(FilterStats::RateLimit {
                    clusters: Arc::clone(filter.cluster_stats()),
                });
                Box::new(filter)
            }
            HttpFilterConfig::OAuth2(c) => {
                let Some(transport) = authz.clone() else {
                    return Err(format!(
                        "HTTP filter {} (oauth2) needs a cluster transport",
                        f.name
                    ));
                };
                let filter = crate::oauth2::OAuth2Filter::new(c, transport);
                stats.push(FilterStats::OAuth2 {
                    stats: Arc::clone(filter.stats()),
                });
                Box::new(filter)
            }
            HttpFilterConfig::ExtAuthz(c) => {
                let Some(transport) = authz.clone() else {
                    return Err(format!(
                        "HTTP filter {} (ext_authz) needs an authorization transport",
                        f.name
                    ));
                };
                let filter = ExtAuthzFilter::new(&f.name, Arc::new((**c).clone()), transport);
                stats.push(FilterStats::ExtAuthz {
                    stat_prefix: c.stat_prefix.clone(),
                    stats: Arc::clone(filter.stats()),
                    clusters: Arc::clone(filter.cluster_stats()),
                });
                Box::new(filter)
            }
        };
        entries.push(ChainEntry {
            name: f.name.clone(),
            disabled: f.disabled,
            filter,
        });
    }
    Ok((FilterChain::new(entries), stats))
}
