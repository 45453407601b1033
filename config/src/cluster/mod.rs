//! Clusters: discovery type, endpoints, load balancing, circuit breakers, outlier
//! detection, health checks, upstream HTTP and TLS.

use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::cluster::v3 as pb;
use envoy_types::pb::envoy::config::endpoint::v3 as epb;

/// Fields of the cluster messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[("envoy.config.cluster.v3.Cluster", &["name"])];

/// A validated cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Name.
    pub name: String,
}

/// A validated `ClusterLoadAssignment`.
#[derive(Debug, Clone)]
pub struct LoadAssignment {
    /// The cluster (or EDS service) it is for.
    pub cluster_name: String,
}

/// Translates a `Cluster`.
pub fn translate(c: &pb::Cluster, _path: &Path<'_>, _ctx: &mut Ctx) -> Option<Cluster> {
    Some(Cluster {
        name: c.name.clone(),
    })
}

/// Translates a `ClusterLoadAssignment` (inline `load_assignment` or an EDS resource).
pub fn load_assignment(
    cla: &epb::ClusterLoadAssignment,
    _path: &Path<'_>,
    _ctx: &mut Ctx,
) -> Option<LoadAssignment> {
    Some(LoadAssignment {
        cluster_name: cla.cluster_name.clone(),
    })
}
