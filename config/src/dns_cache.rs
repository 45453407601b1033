//! `DnsCacheConfig`: the DNS cache the dynamic forward proxy cluster, HTTP
//! filter and SNI network filter share by name.
//!
//! Envoy keeps one cache per name for the whole process and refuses a second
//! config that names the same cache with other settings; [`translate`] does the
//! same within one translation (the bootstrap, or one xDS resource). The
//! fields courier does not implement are refused by their absence from
//! [`SUPPORT`].

use crate::cluster::DnsLookupFamily;
use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::cluster::v3::cluster::DnsLookupFamily as F;
use envoy_types::pb::envoy::extensions::common::dynamic_forward_proxy::v3::DnsCacheConfig as Proto;
use std::time::Duration;

/// Envoy's default `dns_refresh_rate` for the cache (60 s).
pub const DEFAULT_REFRESH_RATE: Duration = Duration::from_secs(60);
/// Envoy's default `host_ttl` (5 min).
pub const DEFAULT_HOST_TTL: Duration = Duration::from_secs(300);
/// Envoy's default `max_hosts`.
pub const DEFAULT_MAX_HOSTS: u32 = 1024;
/// Envoy's default `dns_cache_circuit_breaker.max_pending_requests`.
pub const DEFAULT_MAX_PENDING: u32 = 1024;

/// A validated `DnsCacheConfig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsCacheConfig {
    /// `name`: caches with the same name are one cache.
    pub name: String,
    /// `dns_lookup_family` (default AUTO).
    pub lookup_family: DnsLookupFamily,
    /// `dns_refresh_rate`: how often a cached host is resolved again (default 60 s).
    pub refresh_rate: Duration,
    /// `host_ttl`: a host not used for this long leaves the cache (default 5 min).
    pub host_ttl: Duration,
    /// `max_hosts`: hosts the cache holds at most (default 1024).
    pub max_hosts: u32,
    /// `dns_cache_circuit_breaker.max_pending_requests`: requests that may
    /// wait on resolutions at once (default 1024).
    pub max_pending_requests: u32,
}

/// Translates a `DnsCacheConfig`; fields courier does not implement are refused.
pub fn translate(p: &Proto, path: &Path<'_>, ctx: &mut Ctx) -> Option<DnsCacheConfig> {
    let errors = ctx.error_count();
    if p.name.is_empty() {
        ctx.error(&path.field("name"), "must not be empty");
    }
    let name = F::try_from(p.dns_lookup_family)
        .ok()
        .map(|f| f.as_str_name());
    let lookup_family = crate::cluster::lookup_family(
        name,
        p.dns_lookup_family,
        &path.field("dns_lookup_family"),
        ctx,
    );
    let refresh_rate = match p.dns_refresh_rate.as_ref() {
        None => DEFAULT_REFRESH_RATE,
        Some(d) => match core::duration(d, &path.field("dns_refresh_rate"), ctx) {
            Some(d) if d >= Duration::from_millis(1) => d,
            Some(_) => {
                ctx.error(&path.field("dns_refresh_rate"), "must be at least 1ms");
                DEFAULT_REFRESH_RATE
            }
            None => DEFAULT_REFRESH_RATE,
        },
    };
    let host_ttl = match p.host_ttl.as_ref() {
        None => DEFAULT_HOST_TTL,
        Some(d) => match core::duration(d, &path.field("host_ttl"), ctx) {
            Some(d) if !d.is_zero() => d,
            Some(_) => {
                ctx.error(&path.field("host_ttl"), "must be greater than 0s");
                DEFAULT_HOST_TTL
            }
            None => DEFAULT_HOST_TTL,
        },
    };
    let max_hosts = core::u32_or(p.max_hosts.as_ref(), DEFAULT_MAX_HOSTS);
    if max_hosts == 0 {
        ctx.error(&path.field("max_hosts"), "must be greater than 0");
    }
    let max_pending_requests = p
        .dns_cache_circuit_breaker
        .as_ref()
        .map_or(DEFAULT_MAX_PENDING, |c| {
            core::u32_or(c.max_pending_requests.as_ref(), DEFAULT_MAX_PENDING)
        });
    let config = DnsCacheConfig {
        name: p.name.clone(),
        lookup_family,
        refresh_rate,
        host_ttl,
        max_hosts,
        max_pending_requests,
    };
    if ctx.error_count() != errors {
        return None;
    }
    if !ctx.remember_dns_cache(&config) {
        // Envoy's wording.
        ctx.error(
            path,
            format!(
                "config specified DNS cache '{}' with different settings",
                config.name
            ),
        );
        return None;
    }
    Some(config)
}

/// The fields courier implements (the others are refused where set).
pub(crate) const SUPPORT: &[crate::support::Support] = &[
    (
        "envoy.extensions.common.dynamic_forward_proxy.v3.DnsCacheConfig",
        &[
            "name",
            "dns_lookup_family",
            "dns_refresh_rate",
            "host_ttl",
            "max_hosts",
            "dns_cache_circuit_breaker",
        ],
    ),
    (
        "envoy.extensions.common.dynamic_forward_proxy.v3.DnsCacheCircuitBreakers",
        crate::support::ALL,
    ),
];
