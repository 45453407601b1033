//! Histograms in admin's stats endpoints, as Envoy lists them: in `/stats`
//! text after every other stat as `name: P0(interval,cumulative) P25(…) …`
//! (or `No recorded values`), in `?format=json` as a closing `histograms`
//! element of quantiles, in `/stats/prometheus` as histogram families. The
//! stats matcher, `?filter=` and `?usedonly` apply. courier has no stats
//! flush, so it knows no interval: interval quantiles are `nan` (`null`),
//! as in Envoy when the last flush interval recorded nothing.

use super::Shared;
use crate::stats::histogram::format_value;
use crate::stats::histograms::{self, HistSample};
use std::sync::Arc;

/// The histograms to list: those the stats matcher keeps, that `filter`
/// matches and, with `used_only`, that have values.
pub(super) fn gather(
    shared: &Shared,
    filter: Option<&regex::Regex>,
    used_only: bool,
) -> Vec<HistSample> {
    let clusters: Vec<_> = shared
        .clusters
        .clusters()
        .iter()
        .map(|c| {
            let at = c.stat_slot.ok_or_else(|| Arc::clone(&c.stats.hist));
            (
                c.config.stat_name().to_string(),
                at,
                c.config.request_response_sizes,
            )
        })
        .collect();
    let mut hists = histograms::collect(&shared.stats, &clusters);
    hists.retain(|(name, snap)| {
        filter.is_none_or(|re| re.is_match(name)) && (!used_only || snap.count() > 0)
    });
    let as_samples: Vec<crate::stats::Sample> = hists.iter().map(|(n, _)| (n.clone(), 0)).collect();
    let resolved = shared.stat_names.resolve_part(&as_samples);
    let mut rejected = resolved.iter().map(|r| r.rejected);
    hists.retain(|_| !rejected.next().unwrap_or(false));
    hists
}

/// Envoy's quantiles in percent, as it names them (`P99.5`).
const PERCENTS: [&str; 10] = [
    "0", "25", "50", "75", "90", "95", "99", "99.5", "99.9", "100",
];

/// The `/stats` text lines.
pub(super) fn text(hists: &[HistSample]) -> String {
    let mut out = String::new();
    for (name, snap) in hists {
        out.push_str(name);
        out.push_str(": ");
        if snap.count() == 0 {
            out.push_str("No recorded values\n");
            continue;
        }
        let parts: Vec<String> = PERCENTS
            .iter()
            .zip(snap.quantiles())
            .map(|(p, v)| format!("P{p}(nan,{})", format_value(v)))
            .collect();
        out.push_str(&parts.join(" "));
        out.push('\n');
    }
    out
}

/// A number as Envoy's JSON writes it: integral values without a fraction,
/// NaN as `null`.
fn number(v: f64) -> serde_json::Value {
    if v.is_nan() {
        serde_json::Value::Null
    } else if v.fract() == 0.0 && v.abs() < 9.0e15 {
        serde_json::Value::from(v as i64)
    } else {
        serde_json::Value::from(v)
    }
}

/// The closing `{"histograms": …}` element of `/stats?format=json`.
pub(super) fn json(hists: &[HistSample]) -> Option<serde_json::Value> {
    if hists.is_empty() {
        return None;
    }
    let computed: Vec<serde_json::Value> = hists
        .iter()
        .map(|(name, snap)| {
            let values: Vec<serde_json::Value> = snap
                .quantiles()
                .iter()
                .map(|v| serde_json::json!({ "cumulative": number(*v), "interval": null }))
                .collect();
            serde_json::json!({ "name": name, "values": values })
        })
        .collect();
    let supported: Vec<serde_json::Value> = PERCENTS
        .iter()
        .map(|p| serde_json::from_str(p).unwrap_or(serde_json::Value::Null))
        .collect();
    Some(serde_json::json!({
        "histograms": {
            "supported_quantiles": supported,
            "computed_quantiles": computed,
        }
    }))
}
