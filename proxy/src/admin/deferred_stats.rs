//! `deferred_stat_options.enable_deferred_creation_stats`: Envoy creates a
//! cluster's traffic stats (`cluster.<name>.upstream_*`) at the cluster's first
//! use instead of with the cluster, so an unused cluster has none in `/stats`.
//! courier's counters are fixed slots, so it hides them instead, until the
//! first scrape that finds one of them non-zero; from then on they stay, as
//! Envoy's created stats do (also through `/reset_counters`).

use crate::stats::Sample;
use arc_swap::ArcSwap;
use std::collections::HashSet;
use std::sync::Arc;

/// The clusters whose traffic stats exist.
#[derive(Debug, Default)]
pub struct DeferredStats {
    /// Written by admin scrapes only (main thread, one at a time).
    used: ArcSwap<HashSet<String>>,
}

/// The cluster name of a traffic stat (`cluster.<name>.upstream_<stat>`).
fn traffic_stat_cluster(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("cluster.")?;
    let (cluster, _) = rest.rsplit_once(".upstream_")?;
    Some(cluster)
}

impl DeferredStats {
    /// Drops the traffic stats of clusters not used yet; notes the clusters
    /// that are.
    pub fn hide_unused(&self, samples: &mut Vec<Sample>) {
        let mut used = HashSet::clone(&self.used.load());
        for (name, value) in samples.iter() {
            if *value > 0
                && let Some(cluster) = traffic_stat_cluster(name)
                && !used.contains(cluster)
            {
                used.insert(cluster.to_string());
            }
        }
        samples.retain(|(name, _)| traffic_stat_cluster(name).is_none_or(|c| used.contains(c)));
        self.used.store(Arc::new(used));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn traffic_stats_appear_at_first_use_and_stay() {
        let d = super::DeferredStats::default();
        let mut s = vec![
            ("cluster.a.b.upstream_rq_total".to_string(), 0),
            ("cluster.a.b.membership_total".to_string(), 1),
            ("cluster.c.upstream_cx_total".to_string(), 2),
            ("cluster.c.upstream_rq_total".to_string(), 0),
        ];
        d.hide_unused(&mut s);
        let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "cluster.a.b.membership_total",
                "cluster.c.upstream_cx_total",
                "cluster.c.upstream_rq_total"
            ]
        );
        let mut reset = vec![("cluster.c.upstream_cx_total".to_string(), 0)];
        d.hide_unused(&mut reset);
        assert_eq!(reset.len(), 1);
    }
}
