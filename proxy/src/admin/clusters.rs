//! `/clusters`: every cluster's circuit-breaker thresholds and, per host, its
//! stats and health, in Envoy's text form (`cluster::host:port::stat::value`) or
//! as JSON (`?format=json`, Envoy's `Clusters` message).

use crate::upstream::ClusterManager;
use crate::upstream::host::Host;
use std::fmt::Write;
use std::sync::atomic::Ordering;

/// A host's stats as `/clusters` names them, in Envoy's (alphabetical)
/// order: (name, value, is a gauge).
fn host_stats(h: &Host) -> [(&'static str, u64, bool); 9] {
    // A host never used has no counters yet: zeros.
    let read = |c: fn(&crate::upstream::host::HostStats) -> &std::sync::atomic::AtomicU64| {
        h.stats.get().map_or(0, |s| c(s).load(Ordering::Relaxed))
    };
    [
        ("cx_active", read(|s| &s.cx_active), true),
        ("cx_connect_fail", read(|s| &s.cx_connect_fail), false),
        ("cx_total", read(|s| &s.cx_total), false),
        ("rq_active", h.active_requests(), true),
        ("rq_error", read(|s| &s.rq_error), false),
        ("rq_pending_active", read(|s| &s.rq_pending_active), true),
        ("rq_success", read(|s| &s.rq_success), false),
        ("rq_timeout", read(|s| &s.rq_timeout), false),
        ("rq_total", read(|s| &s.rq_total), false),
    ]
}

/// Every host of the cluster with its priority.
fn hosts(c: &crate::upstream::UpstreamCluster) -> Vec<(usize, std::sync::Arc<Host>)> {
    let set = c.hosts();
    set.priorities
        .iter()
        .enumerate()
        .flat_map(|(p, level)| {
            level
                .all()
                .iter()
                .map(move |h| (p, std::sync::Arc::clone(h)))
        })
        .collect()
}

/// The text form.
pub fn text(clusters: &ClusterManager) -> String {
    let mut out = String::new();
    let mut sorted = clusters.clusters();
    sorted.sort_by(|a, b| a.config.name.cmp(&b.config.name));
    for c in sorted {
        let name = &c.config.name;
        let _ = writeln!(out, "{name}::observability_name::{}", c.config.stat_name());
        for (priority, t) in [
            ("default_priority", &c.config.circuit_breakers.default),
            ("high_priority", &c.config.circuit_breakers.high),
        ] {
            for (k, v) in [
                ("max_connections", t.max_connections),
                ("max_pending_requests", t.max_pending_requests),
                ("max_requests", t.max_requests),
                ("max_retries", t.max_retries),
            ] {
                let _ = writeln!(out, "{name}::{priority}::{k}::{v}");
            }
        }
        // Clusters that came over CDS have no per-worker stat slot.
        let api = c.stat_slot.is_none();
        let _ = writeln!(out, "{name}::added_via_api::{api}");
        for (priority, h) in hosts(&c) {
            let addr = h.address_text();
            for (stat, v, _) in host_stats(&h) {
                let _ = writeln!(out, "{name}::{addr}::{stat}::{v}");
            }
            let _ = writeln!(out, "{name}::{addr}::hostname::{}", h.hostname());
            let health = if h.healthy {
                "healthy"
            } else {
                "/failed_eds_health"
            };
            let _ = writeln!(out, "{name}::{addr}::health_flags::{health}");
            let _ = writeln!(out, "{name}::{addr}::weight::{}", h.weight);
            let l = h.locality.as_deref();
            let _ = writeln!(
                out,
                "{name}::{addr}::region::{}",
                l.map_or("", |l| &l.region)
            );
            let _ = writeln!(out, "{name}::{addr}::zone::{}", l.map_or("", |l| &l.zone));
            let _ = writeln!(
                out,
                "{name}::{addr}::sub_zone::{}",
                l.map_or("", |l| &l.sub_zone)
            );
            // courier has no canary hosts (`envoy.lb` `canary` metadata is not read).
            let _ = writeln!(out, "{name}::{addr}::canary::false");
            let _ = writeln!(out, "{name}::{addr}::priority::{priority}");
            let _ = writeln!(out, "{name}::{addr}::success_rate::-1");
            let _ = writeln!(out, "{name}::{addr}::local_origin_success_rate::-1");
        }
    }
    out
}

/// The JSON form (proto3 JSON: 64-bit values as strings, zero values left out).
pub fn json(clusters: &ClusterManager) -> serde_json::Value {
    use serde_json::json;
    let mut sorted = clusters.clusters();
    sorted.sort_by(|a, b| a.config.name.cmp(&b.config.name));
    let statuses: Vec<serde_json::Value> = sorted
        .into_iter()
        .map(|c| {
            let host_statuses: Vec<serde_json::Value> = hosts(&c)
                .into_iter()
                .map(|(priority, h)| {
                    let stats: Vec<serde_json::Value> = host_stats(&h)
                        .into_iter()
                        .map(|(name, v, gauge)| {
                            let mut s = json!({ "name": name });
                            if v > 0 {
                                s["value"] = json!(v.to_string());
                            }
                            if gauge {
                                s["type"] = json!("GAUGE");
                            }
                            s
                        })
                        .collect();
                    // A pipe host as Envoy prints it: its path, no mode.
                    let address = match h.pipe_path() {
                        Some(path) => json!({"pipe": {"path": path}}),
                        None => json!({"socket_address": {
                            "address": h.address.ip().to_string(),
                            "port_value": h.address.port(),
                        }}),
                    };
                    let mut status = json!({
                        "address": address,
                        "stats": stats,
                        "health_status": {
                            "eds_health_status": if h.healthy { "HEALTHY" } else { "UNHEALTHY" },
                        },
                        "weight": h.weight,
                        "locality": {},
                    });
                    if !h.hostname().is_empty() {
                        status["hostname"] = json!(h.hostname());
                    }
                    if priority > 0 {
                        status["priority"] = json!(priority);
                    }
                    status
                })
                .collect();
            json!({
                "name": c.config.name,
                "observability_name": c.config.stat_name(),
                "host_statuses": host_statuses,
            })
        })
        .collect();
    json!({ "cluster_statuses": statuses })
}
