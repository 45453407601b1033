//! The dynamic forward proxy cluster's hosts: each request's host name
//! (`:authority` after the route's host rewrite, or the TLS SNI of a TCP
//! proxy connection) resolved through the shared DNS cache, as Envoy 1.40's
//! cluster does itself when no filter resolved it first (the request waits,
//! on its own task). One host object per cached name, so its stats and
//! request counts carry over from request to request.

use super::host::Host;
use arc_swap::ArcSwap;
use courier_config::cluster::DynamicForwardProxy;
use courier_filters::dynamic_forward_proxy::cache::{self, Answer, DnsCache};
use courier_filters::dynamic_forward_proxy::store::{self, DynamicCluster};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// A dynamic forward proxy cluster's hosts.
#[derive(Debug)]
pub struct DynamicHosts {
    cache: Arc<DnsCache>,
    /// 443 when the cluster's socket is TLS, else 80.
    default_port: u16,
    /// Host objects by `name:port`, each for the address it was made for.
    hosts: ArcSwap<FxHashMap<String, Arc<Host>>>,
}

impl DynamicHosts {
    /// The hosts of cluster `name`, registered for the HTTP filter to find.
    pub fn new(name: &str, config: &DynamicForwardProxy, secure: bool) -> Self {
        let cache = DnsCache::get(&config.cache);
        let default_port = if secure { 443 } else { 80 };
        store::register(
            name,
            DynamicCluster {
                cache: Arc::clone(&cache),
                default_port,
            },
        );
        Self {
            cache,
            default_port,
            hosts: ArcSwap::default(),
        }
    }

    /// The host for `authority` (`port` in place of the default when the
    /// authority has none), resolving it first if the cache has not; `None`
    /// when it does not resolve (Envoy: no healthy upstream).
    pub async fn host(&self, authority: &str, port: Option<u16>) -> Option<Arc<Host>> {
        let default_port = port.unwrap_or(self.default_port);
        let key = cache::normalize(authority, default_port)?;
        let answer = match self.cache.cached(authority, default_port) {
            Some(e) if !matches!(*e.answer(), Answer::Pending) => e.answer(),
            _ => self.cache.resolve(authority, default_port).await.ok()??,
        };
        let Answer::Resolved(addrs) = &*answer else {
            return None;
        };
        let addr = *addrs.first()?;
        if let Some(h) = self.hosts.load().get(&key)
            && h.address == addr
        {
            return Some(Arc::clone(h));
        }
        // A new name, or a new address for it: rare, so a new table.
        // Envoy's logical host is named `name:port`.
        let host = Arc::new(Host::new(addr, key.clone(), 1, true));
        self.hosts.rcu(|hosts| {
            let mut next = FxHashMap::clone(hosts);
            // Names the cache let go of leave with the next new one.
            // (Looked at without marking them used, which would keep them.)
            next.retain(|k, _| self.cache.contains(k) || *k == key);
            next.insert(key.clone(), Arc::clone(&host));
            next
        });
        Some(host)
    }

    /// Takes cluster `name` out of the HTTP filter's view.
    pub fn unregister(name: &str) {
        store::unregister(name);
    }
}
