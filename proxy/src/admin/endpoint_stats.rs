//! `track_cluster_stats.per_endpoint_stats`: each host's stats of the clusters
//! that ask for them, as Envoy lists them. In `/stats` (text and JSON) they
//! follow every other stat as `cluster.<name>.endpoint.<address>.<stat>` (the
//! address with `:` made `_`); in `/stats/prometheus` they close the output as
//! `envoy_cluster_endpoint_<stat>` families labelled with the cluster, the
//! address and, when it has one, the hostname. As in Envoy they skip the stats
//! matcher and tag extraction but honour `?filter=`. Built when admin is
//! scraped, never on the request path.

use crate::upstream::ClusterManager;
use crate::upstream::host::{Host, usable};
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// One host's stat.
pub struct EndpointSample {
    /// The cluster's stat name (`alt_stat_name` or name).
    cluster: String,
    /// The host.
    host: Arc<Host>,
    /// The stat's name (`rq_total`).
    stat: &'static str,
    /// Its value.
    value: u64,
    /// Whether it is a gauge.
    gauge: bool,
}

impl EndpointSample {
    /// The name `/stats` gives it.
    pub fn name(&self) -> String {
        format!(
            "cluster.{}.endpoint.{}.{}",
            self.cluster,
            self.host.address_text().replace(':', "_"),
            self.stat
        )
    }
}

/// A host's stats in Envoy's order: counters, then gauges.
fn host_values(h: &Arc<Host>) -> [(&'static str, u64, bool); 10] {
    let s = h.stats.get();
    let read = |c: fn(&crate::upstream::host::HostStats) -> &std::sync::atomic::AtomicU64| {
        s.map_or(0, |s| c(s).load(Ordering::Relaxed))
    };
    [
        ("cx_connect_fail", read(|s| &s.cx_connect_fail), false),
        ("cx_total", read(|s| &s.cx_total), false),
        ("rq_error", read(|s| &s.rq_error), false),
        ("rq_success", read(|s| &s.rq_success), false),
        ("rq_timeout", read(|s| &s.rq_timeout), false),
        ("rq_total", read(|s| &s.rq_total), false),
        ("cx_active", read(|s| &s.cx_active), true),
        ("rq_active", h.active_requests(), true),
        ("rq_pending_active", read(|s| &s.rq_pending_active), true),
        ("healthy", u64::from(usable(h)), true),
    ]
}

/// The endpoint stats of every cluster with `per_endpoint_stats`, by cluster
/// stat name, then host (priority order), then stat; those whose `/stats`
/// name `keep` refuses are left out.
pub fn samples(clusters: &ClusterManager, keep: &dyn Fn(&str) -> bool) -> Vec<EndpointSample> {
    let mut tracked: Vec<_> = clusters
        .clusters()
        .into_iter()
        .filter(|c| c.config.per_endpoint_stats)
        .collect();
    tracked.sort_by(|a, b| a.config.stat_name().cmp(b.config.stat_name()));
    let mut out = Vec::new();
    for c in tracked {
        let set = c.hosts();
        for h in set.priorities.iter().flat_map(|level| level.all().iter()) {
            for (stat, value, gauge) in host_values(h) {
                let sample = EndpointSample {
                    cluster: c.config.stat_name().to_string(),
                    host: Arc::clone(h),
                    stat,
                    value,
                    gauge,
                };
                if keep(&sample.name()) {
                    out.push(sample);
                }
            }
        }
    }
    out
}

/// The samples as `/stats` lists them (name, value).
pub fn named(samples: &[EndpointSample]) -> impl Iterator<Item = (String, u64)> + '_ {
    samples.iter().map(|s| (s.name(), s.value))
}

/// The samples in Prometheus text form: one family per stat (counters, then
/// gauges, each sorted by name), its series in sample order.
pub fn prometheus(samples: &[EndpointSample]) -> String {
    let mut families: Vec<(bool, &'static str)> =
        samples.iter().map(|s| (s.gauge, s.stat)).collect();
    families.sort();
    families.dedup();
    let mut out = String::new();
    for (gauge, stat) in families {
        let kind = if gauge { "gauge" } else { "counter" };
        let _ = writeln!(out, "# TYPE envoy_cluster_endpoint_{stat} {kind}");
        for s in samples.iter().filter(|s| s.stat == stat) {
            let mut tags = vec![
                courier_config::stats::Tag {
                    name: "envoy_cluster_name".into(),
                    value: s.cluster.clone(),
                },
                courier_config::stats::Tag {
                    name: "envoy_endpoint_address".into(),
                    value: s.host.address_text().to_string(),
                },
            ];
            if !s.host.hostname().is_empty() {
                tags.push(courier_config::stats::Tag {
                    name: "envoy_endpoint_hostname".into(),
                    value: s.host.hostname().to_string(),
                });
            }
            let labels = crate::stats::prometheus::labels(&tags);
            let _ = writeln!(out, "envoy_cluster_endpoint_{stat}{{{labels}}} {}", s.value);
        }
    }
    out
}
