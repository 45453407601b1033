//! The detector's `interval` sweep: unejects hosts whose time is up, swaps the
//! success-rate buckets, runs the success-rate and failure-percentage analyses,
//! and decays the ejection multiplier of hosts that stayed healthy.

use super::detector::Detector;
use super::{Evidence, HostOutlier, Kind};
use crate::upstream::UpstreamCluster;
use crate::upstream::host::Host;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// One sweep; returns whether any host's ejection changed.
pub(super) fn sweep(cluster: &UpstreamCluster, d: &Detector) -> bool {
    let set = cluster.hosts.load_full();
    let hosts: Vec<&Arc<Host>> = set.hosts().collect();
    let now = d.now_ms();
    let c = &d.config;
    let (base, max) = (
        c.base_ejection_time.as_millis() as u64,
        c.max_ejection_time.as_millis() as u64,
    );
    let mut changed = false;
    for h in &hosts {
        let o = &h.outlier;
        if !o.ejected() {
            continue;
        }
        let k = u64::from(o.multiplier.load(Ordering::Relaxed));
        let lasts = (base * k).min(max) + o.jitter_ms.load(Ordering::Relaxed);
        if now.saturating_sub(o.ejected_at.load(Ordering::Relaxed)) >= lasts {
            d.uneject(&cluster.config.name, h);
            changed = true;
        }
    }
    // This interval's volumes (taken, so the next interval starts at zero).
    let take = |o: &HostOutlier| {
        (
            o.ext_total.swap(0, Ordering::Relaxed),
            o.ext_success.swap(0, Ordering::Relaxed),
            o.local_total.swap(0, Ordering::Relaxed),
            o.local_success.swap(0, Ordering::Relaxed),
        )
    };
    let volumes: Vec<_> = hosts.iter().map(|h| take(&h.outlier)).collect();
    let external: Vec<(u64, u64)> = volumes.iter().map(|v| (v.0, v.1)).collect();
    let local: Vec<(u64, u64)> = volumes.iter().map(|v| (v.2, v.3)).collect();
    let name = &cluster.config.name;
    changed |= success_rate(d, name, &hosts, &external, Kind::SuccessRate);
    changed |= failure_percentage(d, name, &hosts, &external, Kind::FailurePercentage);
    if c.split_external_local_origin_errors {
        changed |= success_rate(d, name, &hosts, &local, Kind::LocalOriginSuccessRate);
        changed |= failure_percentage(d, name, &hosts, &local, Kind::LocalOriginFailurePercentage);
    }
    // A host healthy for a whole interval since its last ejection: one step less.
    let interval = c.interval.as_millis() as u64;
    for h in &hosts {
        let o = &h.outlier;
        let k = o.multiplier.load(Ordering::Relaxed);
        if !o.ejected() && k > 0 && now >= o.unejected_at.load(Ordering::Relaxed) + interval {
            o.multiplier.store(k - 1, Ordering::Relaxed);
        }
    }
    changed
}

/// Success rates (percent) of the non-ejected hosts with at least `volume` requests.
fn rates(hosts: &[&Arc<Host>], volumes: &[(u64, u64)], volume: u32) -> Vec<(usize, f64)> {
    hosts
        .iter()
        .zip(volumes)
        .enumerate()
        .filter(|(_, (h, (total, _)))| !h.outlier.ejected() && *total >= u64::from(volume.max(1)))
        .map(|(i, (_, (total, ok)))| (i, 100.0 * *ok as f64 / *total as f64))
        .collect()
}

fn success_rate(
    d: &Detector,
    cluster: &str,
    hosts: &[&Arc<Host>],
    volumes: &[(u64, u64)],
    kind: Kind,
) -> bool {
    let c = &d.config;
    let r = rates(hosts, volumes, c.success_rate_request_volume);
    if r.is_empty() || r.len() < c.success_rate_minimum_hosts as usize {
        return false;
    }
    let n = r.len() as f64;
    let mean = r.iter().map(|(_, v)| v).sum::<f64>() / n;
    let variance = r.iter().map(|(_, v)| (v - mean).powi(2)).sum::<f64>() / n;
    let threshold = mean - c.success_rate_stdev_factor * variance.sqrt();
    let mut changed = false;
    for (i, rate) in r {
        if rate < threshold
            && let Some(h) = hosts.get(i)
        {
            d.detected(kind);
            let evidence = Evidence::SuccessRate {
                host: rate,
                average: mean,
                threshold,
            };
            changed |= d.eject(cluster, h, kind, evidence, hosts.len());
        }
    }
    changed
}

fn failure_percentage(
    d: &Detector,
    cluster: &str,
    hosts: &[&Arc<Host>],
    volumes: &[(u64, u64)],
    kind: Kind,
) -> bool {
    let c = &d.config;
    let r = rates(hosts, volumes, c.failure_percentage_request_volume);
    if r.is_empty() || r.len() < c.failure_percentage_minimum_hosts as usize {
        return false;
    }
    let mut changed = false;
    for (i, rate) in r {
        if 100.0 - rate >= f64::from(c.failure_percentage_threshold)
            && let Some(h) = hosts.get(i)
            && !h.outlier.ejected()
        {
            d.detected(kind);
            let evidence = Evidence::FailurePercentage { host: rate };
            changed |= d.eject(cluster, h, kind, evidence, hosts.len());
        }
    }
    changed
}
