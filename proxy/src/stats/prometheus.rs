//! `/stats/prometheus`: Envoy's Prometheus text output. Each stat's name goes
//! through the bootstrap's tag producer (`stats_config.stats_tags` and Envoy's
//! default extractors): the tag-extracted name, sanitised and prefixed
//! `envoy_`, is the metric family; the tags are its labels, in extraction
//! order. Families are written counters first, then gauges, then histograms,
//! each family sorted by name with its series sorted by their full stat name,
//! as Envoy writes them.
//! This runs when admin is scraped, never on the request path.

use super::Sample;
use super::histogram::format_g32;
use super::histograms::HistSample;
use super::names::StatNames;
use courier_config::stats::Tag;
use std::collections::BTreeMap;

/// Whether a stat is a gauge. courier's stats are plain numbers; these are
/// the names Envoy keeps as gauges among those courier emits.
pub fn is_gauge(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    last.ends_with("_active")
        || last.ends_with("_buffered")
        || last.starts_with("membership_")
        || last.starts_with("remaining_")
        || last.ends_with("_open")
        || matches!(
            last,
            "version"
                | "connected_state"
                | "num_keys"
                | "num_layers"
                | "admin_overrides_active"
                | "ejections_active"
                | "max_host_weight"
                | "live"
                | "state"
                | "concurrency"
                | "uptime"
                | "total_listeners_warming"
                | "total_listeners_draining"
                | "total_filter_chains_draining"
                | "pressure"
                | "scale_percent"
                | "active"
                | "active_connections"
                | "warming_clusters"
        )
}

/// A metric family's name: `envoy_` and the tag-extracted name with every
/// character outside `[a-zA-Z0-9_]` made `_` (Envoy's `sanitizeName`).
pub fn metric_name(tag_extracted: &str) -> String {
    format!("envoy_{}", sanitize_name(tag_extracted))
}

fn sanitize_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Labels as Envoy writes them: `name="value"` joined with `,`; names
/// sanitised, values with `\`, newline and `"` escaped.
pub fn labels(tags: &[Tag]) -> String {
    let mut out = String::new();
    for (i, t) in tags.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&sanitize_name(&t.name));
        out.push_str("=\"");
        for c in t.value.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '"' => out.push_str("\\\""),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out
}

/// One family's series: (full stat name's tokens for ordering, labels, value).
type Series<'a> = Vec<(Vec<&'a str>, &'a str, u64)>;

/// Renders samples (already filtered by the stats matcher) in Prometheus text form.
pub fn render(samples: &[Sample], names: &StatNames) -> String {
    let resolved = names.resolve(samples);
    let mut counters: BTreeMap<&str, Series<'_>> = BTreeMap::new();
    let mut gauges: BTreeMap<&str, Series<'_>> = BTreeMap::new();
    for ((name, value), r) in samples.iter().zip(&resolved) {
        let family = if r.gauge { &mut gauges } else { &mut counters };
        family.entry(r.tag_extracted.as_str()).or_default().push((
            name.split('.').collect(),
            r.labels.as_str(),
            *value,
        ));
    }
    let mut out = String::new();
    for (kind, families) in [("counter", counters), ("gauge", gauges)] {
        for (extracted, mut series) in families {
            let family = metric_name(extracted);
            out.push_str(&format!("# TYPE {family} {kind}\n"));
            series.sort();
            for (_, labels, value) in series {
                out.push_str(&format!("{family}{{{labels}}} {value}\n"));
            }
        }
    }
    out
}

/// Renders histograms (already filtered) as Prometheus histogram families:
/// cumulative `_bucket` lines for the stat's bucket bounds and `+Inf`, then
/// `_sum` (Envoy's approximation, as `%.32g`) and `_count`.
pub fn render_histograms(hists: &[HistSample], names: &StatNames) -> String {
    let as_samples: Vec<Sample> = hists.iter().map(|(n, _)| (n.clone(), 0)).collect();
    let resolved = names.resolve_part(&as_samples);
    type HistSeries<'a> = Vec<(Vec<&'a str>, &'a str, &'a HistSample)>;
    let mut families: BTreeMap<&str, HistSeries<'_>> = BTreeMap::new();
    for (h, r) in hists.iter().zip(&resolved) {
        families.entry(r.tag_extracted.as_str()).or_default().push((
            h.0.split('.').collect(),
            r.labels.as_str(),
            h,
        ));
    }
    let mut out = String::new();
    for (extracted, mut series) in families {
        let family = metric_name(extracted);
        out.push_str(&format!("# TYPE {family} histogram\n"));
        series.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, labels, (name, snap)) in series {
            let sep = if labels.is_empty() { "" } else { "," };
            for b in names.buckets(name) {
                out.push_str(&format!(
                    "{family}_bucket{{{labels}{sep}le=\"{b}\"}} {}\n",
                    snap.count_below(*b)
                ));
            }
            let count = snap.count();
            out.push_str(&format!(
                "{family}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}\n"
            ));
            out.push_str(&format!(
                "{family}_sum{{{labels}}} {}\n",
                format_g32(snap.sum())
            ));
            out.push_str(&format!("{family}_count{{{labels}}} {count}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_labels_from_the_tag_producer() {
        let samples = vec![
            ("cluster.echo.upstream_rq_200".to_string(), 2),
            ("http.ingress.downstream_cx_active".to_string(), 1),
            ("listener.admin.downstream_cx_total".to_string(), 4),
            ("cluster.a-b.upstream_cx_total".to_string(), 3),
        ];
        let text = render(&samples, &StatNames::new(Default::default()));
        for line in [
            "# TYPE envoy_cluster_upstream_rq counter",
            "envoy_cluster_upstream_rq{envoy_response_code=\"200\",envoy_cluster_name=\"echo\"} 2",
            "envoy_cluster_upstream_cx_total{envoy_cluster_name=\"a-b\"} 3",
            "envoy_listener_admin_downstream_cx_total{} 4",
            "# TYPE envoy_http_downstream_cx_active gauge",
            "envoy_http_downstream_cx_active{envoy_http_conn_manager_prefix=\"ingress\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        // Counters come before gauges.
        let counter = text
            .find("# TYPE envoy_listener_admin")
            .unwrap_or(usize::MAX);
        let gauge = text
            .find("# TYPE envoy_http_downstream_cx_active")
            .unwrap_or(0);
        assert!(counter < gauge, "{text}");
    }

    #[test]
    fn label_values_escaped_and_names_sanitised() {
        let t = vec![Tag {
            name: "a.b-c".into(),
            value: "x\"y\\z\n".into(),
        }];
        assert_eq!(labels(&t), "a_b_c=\"x\\\"y\\\\z\\n\"");
        assert_eq!(
            metric_name("cluster.xds-grpc.upstream_rq"),
            "envoy_cluster_xds_grpc_upstream_rq"
        );
    }
}
