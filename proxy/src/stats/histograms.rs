//! The histograms courier keeps, by Envoy name, and their listing: the
//! listener's and the connection manager's `downstream_cx_length_ms`, the
//! connection manager's `downstream_rq_time`, each cluster's
//! `upstream_rq_time` (and `external.`/`internal.` by the request's
//! `x-envoy-internal`), `upstream_cx_connect_ms`, `upstream_cx_length_ms` and, with
//! `track_cluster_stats.request_response_sizes`, the request and response
//! header and body sizes. Values are recorded by the workers (see
//! [`super::histogram`]); admin merges them when stats are listed.

use super::WorkerStats;
use super::histogram::{Histogram, Snapshot};
use std::sync::Arc;

/// A cluster's histograms on one worker (or shared, for a CDS cluster).
#[derive(Debug, Default)]
pub struct ClusterHistograms {
    /// `upstream_rq_time`: ms from sending the request to the response's end.
    pub rq_time: Histogram,
    /// `external.upstream_rq_time`: the same, requests without `x-envoy-internal: true`.
    pub external_rq_time: Histogram,
    /// `internal.upstream_rq_time`: requests with `x-envoy-internal: true`.
    pub internal_rq_time: Histogram,
    /// `upstream_cx_connect_ms`: ms to establish a connection (TLS included).
    pub cx_connect_ms: Histogram,
    /// `upstream_cx_length_ms`: ms from a pooled connection's connect to its close.
    pub cx_length_ms: Histogram,
    /// `upstream_rq_headers_size`: bytes of the request headers (names and
    /// values, pseudo-headers included).
    pub rq_headers_size: Histogram,
    /// `upstream_rq_headers_count`.
    pub rq_headers_count: Histogram,
    /// `upstream_rq_body_size`: request body bytes sent.
    pub rq_body_size: Histogram,
    /// `upstream_rs_headers_size`: bytes of the response headers.
    pub rs_headers_size: Histogram,
    /// `upstream_rs_headers_count`.
    pub rs_headers_count: Histogram,
    /// `upstream_rs_body_size`: response body bytes received.
    pub rs_body_size: Histogram,
}

impl ClusterHistograms {
    /// The histograms every cluster has, by Envoy name.
    fn timing(&self) -> [(&'static str, &Histogram); 2] {
        [
            ("upstream_cx_connect_ms", &self.cx_connect_ms),
            ("upstream_cx_length_ms", &self.cx_length_ms),
        ]
    }

    /// Those Envoy makes at their first value (the response timing stats
    /// are named when a response is charged).
    fn dynamic(&self) -> [(&'static str, &Histogram); 3] {
        [
            ("external.upstream_rq_time", &self.external_rq_time),
            ("internal.upstream_rq_time", &self.internal_rq_time),
            ("upstream_rq_time", &self.rq_time),
        ]
    }

    /// Those of `track_cluster_stats.request_response_sizes`.
    fn sizes(&self) -> [(&'static str, &Histogram); 6] {
        [
            ("upstream_rq_body_size", &self.rq_body_size),
            ("upstream_rq_headers_count", &self.rq_headers_count),
            ("upstream_rq_headers_size", &self.rq_headers_size),
            ("upstream_rs_body_size", &self.rs_body_size),
            ("upstream_rs_headers_count", &self.rs_headers_count),
            ("upstream_rs_headers_size", &self.rs_headers_size),
        ]
    }
}

/// A histogram's full stat name and its values merged over workers.
pub type HistSample = (String, Snapshot);

/// Where a cluster's histograms are: a per-worker slot, or shared (CDS).
pub type HistogramsAt = Result<usize, Arc<ClusterHistograms>>;

/// Sums into `out` (by name) the histograms of the connection managers, and
/// of the clusters `clusters` lists: (stat name, the per-worker slot or the
/// shared histograms of a CDS cluster, whether it tracks sizes).
pub fn collect(
    workers: &[Arc<WorkerStats>],
    clusters: &[(String, HistogramsAt, bool)],
) -> Vec<HistSample> {
    let mut out: std::collections::BTreeMap<String, Snapshot> = Default::default();
    for w in workers {
        for (addr, s) in w.listener_cx.load().iter() {
            s.cx_length_ms.add_to(
                out.entry(format!("listener.{addr}.downstream_cx_length_ms"))
                    .or_default(),
            );
        }
        for (prefix, s) in w.listeners.load().iter() {
            s.rq_time.add_to(
                out.entry(format!("http.{prefix}.downstream_rq_time"))
                    .or_default(),
            );
            s.cx_length_ms.add_to(
                out.entry(format!("http.{prefix}.downstream_cx_length_ms"))
                    .or_default(),
            );
        }
    }
    for (name, at, sizes) in clusters {
        let mut each = |h: &ClusterHistograms| {
            let mut add = |stat: &str, hist: &Histogram, always: bool| {
                let key = format!("cluster.{name}.{stat}");
                if always || out.contains_key(&key) || hist.snapshot().count() > 0 {
                    hist.add_to(out.entry(key).or_default());
                }
            };
            for (stat, hist) in h.timing() {
                add(stat, hist, true);
            }
            for (stat, hist) in h.dynamic() {
                add(stat, hist, false);
            }
            if *sizes {
                for (stat, hist) in h.sizes() {
                    add(stat, hist, true);
                }
            }
        };
        match at {
            Ok(slot) => {
                for w in workers {
                    if let Some((_, c)) = w.clusters.get(*slot) {
                        each(&c.hist);
                    }
                }
            }
            Err(shared) => each(shared),
        }
    }
    out.into_iter().collect()
}
