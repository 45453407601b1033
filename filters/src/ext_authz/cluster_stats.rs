//! ext_authz's counters in the route's cluster scope: Envoy also counts each check's
//! outcome under `cluster.<route's target cluster>.ext_authz.[<stat_prefix>.]<name>`
//! (`ok`, `denied`, `error`, `failure_mode_allowed`; not `disabled`), creating each
//! counter on first use.

use arc_swap::ArcSwap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many cluster names a filter counts for (route configs come and go over RDS; past
/// this, new names are not counted).
const MAX_CLUSTERS: usize = 1024;

/// One cluster's ext_authz counters.
#[derive(Debug, Default)]
pub struct ClusterAuthzStats {
    /// Checks that allowed the request.
    pub ok: AtomicU64,
    /// Checks that denied it.
    pub denied: AtomicU64,
    /// Checks that failed.
    pub error: AtomicU64,
    /// Failed checks let through by `failure_mode_allow`.
    pub failure_mode_allowed: AtomicU64,
}

type Entries = Vec<(Box<str>, Arc<ClusterAuthzStats>)>;

/// The counters per cluster name, an entry added on a cluster's first check: read
/// without a lock on every check, copied on the rare insert.
#[derive(Debug)]
pub struct PerCluster(ArcSwap<Entries>);

impl Default for PerCluster {
    fn default() -> Self {
        Self(ArcSwap::from_pointee(Vec::new()))
    }
}

impl PerCluster {
    /// Adds one to the counter `which` picks of `cluster`.
    pub fn count(&self, cluster: &str, which: fn(&ClusterAuthzStats) -> &AtomicU64) {
        if let Some((_, s)) = self.0.load().iter().find(|(n, _)| &**n == cluster) {
            which(s).fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.0.rcu(|entries| {
            if entries.len() >= MAX_CLUSTERS || entries.iter().any(|(n, _)| &**n == cluster) {
                return Arc::clone(entries);
            }
            let mut more = Entries::clone(entries);
            more.push((cluster.into(), Arc::default()));
            Arc::new(more)
        });
        if let Some((_, s)) = self.0.load().iter().find(|(n, _)| &**n == cluster) {
            which(s).fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Calls `f` with each counted cluster's name and counters.
    pub fn each(&self, mut f: impl FnMut(&str, &ClusterAuthzStats)) {
        for (name, s) in self.0.load().iter() {
            f(name, s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_cluster_name_created_on_first_use() {
        let p = PerCluster::default();
        p.count("a", |s| &s.ok);
        p.count("b", |s| &s.denied);
        p.count("a", |s| &s.ok);
        let mut seen = Vec::new();
        p.each(|n, s| {
            seen.push((
                n.to_string(),
                s.ok.load(Ordering::Relaxed),
                s.denied.load(Ordering::Relaxed),
            ))
        });
        assert_eq!(seen, [("a".to_string(), 2, 0), ("b".to_string(), 0, 1)]);
    }
}
