//! The `Snapshot`: every listener, route config and cluster at one version.
//!
//! The main thread builds a new snapshot per accepted update, sharing (`Arc`)
//! every unchanged part with the previous one, and publishes it with one store;
//! workers read it lock-free. A request uses one snapshot from start to end.

use crate::bootstrap::Bootstrap;
use crate::cluster::Cluster;
use crate::listener::Listener;
use crate::route::RouteConfig;
use std::collections::HashMap;
use std::sync::Arc;

/// All config in force at one version.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Increases by one with every published update.
    pub version: u64,
    /// Listeners, in config order.
    pub listeners: Vec<Arc<Listener>>,
    /// Clusters by name.
    pub clusters: HashMap<String, Arc<Cluster>>,
    /// Route configurations delivered by RDS, by name (inline ones live in their listener).
    pub route_configs: HashMap<String, Arc<RouteConfig>>,
}

impl Snapshot {
    /// The first snapshot: the bootstrap's static resources.
    pub fn from_bootstrap(bootstrap: &Bootstrap) -> Self {
        Self {
            version: 1,
            listeners: bootstrap.listeners.clone(),
            clusters: bootstrap
                .clusters
                .iter()
                .map(|c| (c.name.clone(), Arc::clone(c)))
                .collect(),
            route_configs: HashMap::new(),
        }
    }

    /// The cluster named `name`, if present.
    pub fn cluster(&self, name: &str) -> Option<&Arc<Cluster>> {
        self.clusters.get(name)
    }
}
