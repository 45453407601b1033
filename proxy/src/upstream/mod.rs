//! The upstream side: the cluster manager (clusters and their host sets), load
//! balancing and the per-worker connection pools.
//!
//! The main thread builds host sets (static endpoints, DNS answers) and publishes
//! each with one `ArcSwap` store per cluster; workers read them lock-free. Load
//! balancer cursors and connection pools are per worker.

pub mod circuit;
pub mod client;
pub mod dns;
pub mod health_check;
pub mod host;
pub mod lb;
pub mod outlier;
pub mod pool;
pub mod stream;
pub mod tls;

use arc_swap::ArcSwap;
use courier_config::cluster::{Cluster, Discovery};
use courier_config::snapshot::Snapshot;
use host::HostSet;
use std::collections::HashMap;
use std::sync::Arc;

/// One cluster as the data plane runs it.
#[derive(Debug)]
pub struct UpstreamCluster {
    /// Position in the cluster manager (indexes per-worker state and stats).
    pub index: usize,
    /// Its config.
    pub config: Arc<Cluster>,
    /// Its current hosts.
    hosts: ArcSwap<HostSet>,
    /// TLS to its hosts, when its transport socket asks for it.
    pub tls: Option<tls::UpstreamTlsContext>,
    /// Circuit breakers and retry budget (counts shared by every worker).
    pub circuit: circuit::Circuit,
    /// Outlier detection, when configured.
    pub outlier: Option<outlier::Detector>,
}

impl UpstreamCluster {
    /// The current host set.
    pub fn hosts(&self) -> arc_swap::Guard<Arc<HostSet>> {
        self.hosts.load()
    }
}

/// Every cluster of the snapshot, by name.
#[derive(Debug, Default)]
pub struct ClusterManager {
    by_name: HashMap<String, usize>,
    clusters: Vec<Arc<UpstreamCluster>>,
}

impl ClusterManager {
    /// Builds the clusters of `snapshot` (sorted by name, so indexes are stable).
    /// DNS clusters are resolved here, blocking: this runs on the main thread before
    /// the workers start, so the first requests already have hosts (Envoy likewise
    /// waits for a cluster's first resolution before it is ready). TLS client
    /// configs are built here too; an error (a client key that does not match
    /// its certificate, say) names the cluster.
    pub fn new(snapshot: &Snapshot) -> Result<Self, String> {
        let mut names: Vec<&String> = snapshot.clusters.keys().collect();
        names.sort();
        let mut by_name = HashMap::with_capacity(names.len());
        let mut clusters = Vec::with_capacity(names.len());
        for (index, name) in names.into_iter().enumerate() {
            let Some(config) = snapshot.clusters.get(name) else {
                continue;
            };
            let tls = match &config.tls {
                Some(t) => Some(
                    tls::UpstreamTlsContext::new(t, config.http.protocol)
                        .map_err(|e| format!("cluster {name}: TLS: {e}"))?,
                ),
                None => None,
            };
            let hosts = initial_hosts(config);
            by_name.insert(name.clone(), index);
            clusters.push(Arc::new(UpstreamCluster {
                index,
                config: Arc::clone(config),
                hosts: ArcSwap::from_pointee(hosts),
                tls,
                circuit: circuit::Circuit::new(config.circuit_breakers.clone()),
                outlier: config.outlier_detection.clone().map(outlier::Detector::new),
            }));
        }
        Ok(Self { by_name, clusters })
    }

    /// The cluster named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<UpstreamCluster>> {
        self.by_name.get(name).and_then(|&i| self.clusters.get(i))
    }

    /// Replaces the hosts of EDS cluster `name` with those of an accepted
    /// ClusterLoadAssignment (`None`: the assignment was removed, no hosts).
    /// Workers see the new set at their next host pick.
    pub fn set_eds_hosts(
        &self,
        name: &str,
        la: Option<&courier_config::cluster::LoadAssignment>,
    ) -> bool {
        let Some(c) = self.get(name) else {
            return false;
        };
        if !matches!(c.config.discovery, Discovery::Eds { .. }) {
            return false;
        }
        c.hosts
            .store(Arc::new(la.map(host::static_hosts).unwrap_or_default()));
        true
    }

    /// Every cluster, by index.
    pub fn clusters(&self) -> &[Arc<UpstreamCluster>] {
        &self.clusters
    }

    /// Starts re-resolving the DNS clusters every `dns_refresh_rate`, on the current
    /// (main thread's) runtime.
    pub fn spawn_dns_refresh(self: &Arc<Self>) {
        for c in &self.clusters {
            let Some((dns, logical)) = dns::dns_kind(&c.config.discovery) else {
                continue;
            };
            let Some(la) = c.config.load_assignment.clone() else {
                continue;
            };
            let (family, every) = (dns.lookup_family, dns.refresh_rate);
            let cluster = Arc::clone(c);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                // The first tick fires at once; startup already resolved.
                tick.tick().await;
                loop {
                    tick.tick().await;
                    if let Some(answers) = dns::resolve(&la, family).await {
                        let previous = cluster.hosts.load_full();
                        let set = dns::host_set(&la, &answers, logical, Some(&previous));
                        cluster.hosts.store(Arc::new(set));
                    }
                }
            });
        }
    }
}

fn initial_hosts(c: &Cluster) -> HostSet {
    let Some(la) = &c.load_assignment else {
        return HostSet::default();
    };
    match &c.discovery {
        Discovery::Static => host::static_hosts(la),
        Discovery::StrictDns(d) => {
            dns::host_set(la, &dns::resolve_blocking(la, d.lookup_family), false, None)
        }
        Discovery::LogicalDns(d) => {
            dns::host_set(la, &dns::resolve_blocking(la, d.lookup_family), true, None)
        }
        // Hosts arrive with the first ClusterLoadAssignment (crate::xds).
        Discovery::Eds { .. } => HostSet::default(),
    }
}
