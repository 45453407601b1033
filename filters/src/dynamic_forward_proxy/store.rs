//! The dynamic forward proxy clusters in force, by name (Envoy's
//! `DFPClusterStore`): the HTTP filter resolves hosts only for routes to one
//! of them, on the port their transport socket implies.

use super::cache::DnsCache;
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

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
static WRITER: Mutex<()> = Mutex::new(());

/// Puts cluster `name` in force (replacing an earlier version).
pub fn register(name: &str, cluster: DynamicCluster) {
    let _w = WRITER.lock().unwrap_or_else(|e| e.into_inner());
    let mut next = HashMap::clone(&CLUSTERS.load());
    next.insert(name.to_string(), cluster);
    CLUSTERS.store(Arc::new(next));
}

/// Takes cluster `name` out of force (it was removed, or is no longer a
/// dynamic forward proxy cluster).
pub fn unregister(name: &str) {
    let _w = WRITER.lock().unwrap_or_else(|e| e.into_inner());
    if CLUSTERS.load().contains_key(name) {
        let mut next = HashMap::clone(&CLUSTERS.load());
        next.remove(name);
        CLUSTERS.store(Arc::new(next));
    }
}

/// The dynamic forward proxy cluster `name`, if it is one.
pub fn find(name: &str) -> Option<DynamicCluster> {
    CLUSTERS.load().get(name).cloned()
}
