//! What the bootstrap's `stats_config` makes of each stat name: whether the
//! stats matcher rejects it, and its Prometheus family and labels. Envoy works
//! this out once, when it creates a stat; courier's stats are fixed slots
//! named when admin lists them, so the answer is kept per name from the first
//! listing on and the tag regexes run once per stat, not once per scrape.
//! Only admin (main thread) reads it; workers never see it.

use super::Sample;
use super::prometheus::{is_gauge, labels};
use arc_swap::ArcSwap;
use courier_config::stats::StatsConfig;
use std::collections::HashMap;
use std::sync::Arc;

/// One stat name, resolved.
#[derive(Debug)]
pub struct Resolved {
    /// The stats matcher rejects it: it does not exist.
    pub rejected: bool,
    /// The tag-extracted name (the Prometheus family, before `envoy_` and
    /// sanitising).
    pub tag_extracted: String,
    /// The Prometheus labels (`name="value",…`), in extraction order.
    pub labels: String,
    /// It is a gauge (else a counter).
    pub gauge: bool,
}

/// The resolved names, by stat name.
#[derive(Debug)]
pub struct StatNames {
    config: Arc<StatsConfig>,
    /// The names listed so far; pruned to one listing's names when it grows
    /// well past it, so the stats of removed clusters and listeners go.
    known: ArcSwap<HashMap<String, Arc<Resolved>>>,
}

impl StatNames {
    /// Names resolved with `config`.
    pub fn new(config: Arc<StatsConfig>) -> Self {
        Self {
            config,
            known: ArcSwap::default(),
        }
    }

    fn compute(&self, name: &str) -> Resolved {
        let (tag_extracted, tags) = self.config.tags.produce(name);
        Resolved {
            rejected: self.config.matcher.rejects(name),
            tag_extracted,
            labels: labels(&tags),
            gauge: is_gauge(name),
        }
    }

    /// Each sample's name resolved, in order.
    pub fn resolve(&self, samples: &[Sample]) -> Vec<Arc<Resolved>> {
        self.resolve_listing(samples, true)
    }

    /// [`Self::resolve`] for a part of a listing (the histograms): never
    /// prunes the names the rest of the listing keeps resolved.
    pub fn resolve_part(&self, samples: &[Sample]) -> Vec<Arc<Resolved>> {
        self.resolve_listing(samples, false)
    }

    fn resolve_listing(&self, samples: &[Sample], prune: bool) -> Vec<Arc<Resolved>> {
        let known = self.known.load();
        let mut fresh = false;
        let out: Vec<Arc<Resolved>> = samples
            .iter()
            .map(|(name, _)| match known.get(name) {
                Some(r) => Arc::clone(r),
                None => {
                    fresh = true;
                    Arc::new(self.compute(name))
                }
            })
            .collect();
        if fresh {
            let listed = samples
                .iter()
                .zip(&out)
                .map(|((name, _), r)| (name.clone(), Arc::clone(r)));
            let next: HashMap<String, Arc<Resolved>> =
                if prune && known.len() > 2 * samples.len() + 1024 {
                    listed.collect()
                } else {
                    let mut next = HashMap::clone(&known);
                    next.extend(listed);
                    next
                };
            self.known.store(Arc::new(next));
        }
        out
    }

    /// The bucket bounds of the histogram named `name`
    /// (`stats_config.histogram_bucket_settings`).
    pub fn buckets(&self, name: &str) -> &[f64] {
        self.config.buckets.for_stat(name)
    }

    /// Drops the samples the stats matcher rejects.
    pub fn keep_existing(&self, samples: &mut Vec<Sample>) {
        let resolved = self.resolve(samples);
        let mut rejected = resolved.iter().map(|r| r.rejected);
        samples.retain(|_| !rejected.next().unwrap_or(false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(yaml: &str) -> StatNames {
        let bs = courier_config::bootstrap_from_str(yaml, courier_config::load::Format::Yaml)
            .unwrap_or_else(|e| panic!("{e}"));
        StatNames::new(bs.stats)
    }

    #[test]
    fn rejected_stats_go_and_names_resolve_once() {
        let n = names(
            "stats_config: {stats_matcher: {exclusion_list: {patterns: [{suffix: _cx_total}]}}}",
        );
        let mut samples = vec![
            ("cluster.a.upstream_cx_total".to_string(), 1),
            ("cluster.a.upstream_rq_200".to_string(), 2),
        ];
        let first = n.resolve(&samples);
        assert!(first[0].rejected && !first[1].rejected);
        assert_eq!(first[1].tag_extracted, "cluster.upstream_rq");
        assert_eq!(
            first[1].labels,
            "envoy_response_code=\"200\",envoy_cluster_name=\"a\""
        );
        // The second listing reuses what the first worked out.
        let again = n.resolve(&samples);
        assert!(Arc::ptr_eq(&first[1], &again[1]));
        n.keep_existing(&mut samples);
        assert_eq!(samples, [("cluster.a.upstream_rq_200".to_string(), 2)]);
    }

    #[test]
    fn a_part_of_a_listing_keeps_the_rest_resolved() {
        let n = names("");
        let many: Vec<Sample> = (0..3000)
            .map(|i| (format!("cluster.c{i}.upstream_rq_total"), 0))
            .collect();
        let first = n.resolve(&many);
        // The histograms, resolved on their own after the counters.
        n.resolve_part(&[("cluster.c0.upstream_rq_time".to_string(), 0)]);
        let again = n.resolve(&many);
        assert!(Arc::ptr_eq(&first[2999], &again[2999]));
    }
}
