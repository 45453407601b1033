//! The dynamic forward proxy clusters in force, by name (Envoy's
//! `DFPClusterStore`): the HTTP filter resolves hosts only for routes to one
//! of them, on the port their transport socket implies.

use super::cache::DnsCache;
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// What the HTTP filter needs of a dynamic forward proxy cluster.
#[derive(Debug, Clone)]
pub struct DynamicCluster {
    /// Its DNS cache.
    pub cache: Arc<DnsCache>,
    /// The port of a host named without one: 443 when the cluster's socket
    /// is TLS, else 80 (as Envoy's `implementsSecureTransport`).
    pub default_port: u16,
}

static CLUSTERS: LazyLock<ArcSwap<HashMap<String, DynamicCluster>>> =
    LazyLock::new(|| ArcSwap::from_pointee(HashMap::new()));

/// Puts cluster `name` in force (replacing an earlier version).
pub fn register(name: &str, cluster: DynamicCluster) {
    CLUSTERS.rcu(|clusters| {
        let mut next = HashMap::clone(clusters);
        next.insert(name.to_string(), cluster.clone());
        next
    });
}

/// Takes cluster `name` out of force (it was removed, or is no longer a
/// dynamic forward proxy cluster).
pub fn unregister(name: &str) {
    if CLUSTERS.load().contains_key(name) {
        CLUSTERS.rcu(|clusters| {
            let mut next = HashMap::clone(clusters);
            next.remove(name);
            next
        });
    }
}

/// The dynamic forward proxy cluster `name`, if it is one.
pub fn find(name: &str) -> Option<DynamicCluster> {
    CLUSTERS.load().get(name).cloned()
}
