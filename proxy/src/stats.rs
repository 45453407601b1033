//! Stats: counters per worker, written only by their worker (relaxed atomics, so
//! no contention), summed across workers when admin is scraped. Names follow Envoy.

pub mod edge;
pub mod h2_floods;
pub mod histogram;
pub mod histograms;
pub mod names;
pub mod prometheus;
pub mod trace;
pub mod upstream_rq;
pub mod vhost;

use arc_swap::ArcSwap;
pub use edge::EdgeStats;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A counter written by one worker.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// A counter at zero (for statics).
    pub const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }

    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Subtracts one (for gauges).
    pub fn dec(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    /// Adds `n`.
    pub fn add(&self, n: u64) {
        if n > 0 {
            self.0.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Subtracts `n` (for gauges).
    pub fn sub(&self, n: u64) {
        if n > 0 {
            self.0.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Back to zero (`/reset_counters`; gauges are never reset).
    pub fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// The connection manager's stats of one listener's HCM (`http.<stat_prefix>.*`).
#[derive(Debug, Default)]
pub struct HcmStats {
    /// `downstream_cx_total`.
    pub cx_total: Counter,
    /// `downstream_cx_active` (a gauge).
    pub cx_active: Counter,
    /// `downstream_rq_total`.
    pub rq_total: Counter,
    /// `downstream_rq_1xx` .. `downstream_rq_5xx`.
    pub rq_xx: [Counter; 5],
    /// `no_route`.
    pub no_route: Counter,
    /// `rq_direct_response`.
    pub rq_direct_response: Counter,
    /// `rq_redirect`.
    pub rq_redirect: Counter,
    /// `downstream_rq_ws_on_non_ws_route`: upgrades refused because neither
    /// the route nor the connection manager enables their type.
    pub ws_on_non_ws_route: Counter,
    /// Edge protections (`downstream_rq_overload_close`, path normalisation, underscores).
    pub edge: EdgeStats,
    /// Tracing decisions (`tracing.*`).
    pub tracing: trace::TracingStats,
    /// `downstream_rq_time`: ms from a request's arrival to its response's
    /// end (recorded by the response body's tracker).
    pub rq_time: histogram::Histogram,
    /// `downstream_cx_length_ms`: ms from a connection's accept to its end.
    pub cx_length_ms: histogram::Histogram,
}

impl HcmStats {
    /// Counts a response by status class.
    pub fn response(&self, status: u16) {
        if let Some(c) = self.rq_xx.get(usize::from(status / 100).wrapping_sub(1)) {
            c.inc();
        }
    }
}

/// A cluster's stats on one worker (`cluster.<name>.*`).
#[derive(Debug)]
pub struct ClusterStats {
    /// `upstream_rq_total`: requests attached to an upstream connection.
    pub rq_total: Counter,
    /// `upstream_rq_<code>` for codes 100..=599 (index `code - 100`), allocated
    /// at the first response (4 KiB: most of a cluster's memory otherwise, and
    /// a cluster known over CDS may never be used). Set once; a worker racing
    /// another one's first response waits for that allocation only.
    rq_code: std::sync::OnceLock<Box<[Counter]>>,
    /// `upstream_rq_1xx` .. `upstream_rq_5xx`.
    rq_xx: [Counter; 5],
    /// `upstream_cx_total`: connections opened (or attempted).
    pub cx_total: Counter,
    /// `upstream_cx_connect_fail`.
    pub cx_connect_fail: Counter,
    /// `upstream_cx_connect_timeout`.
    pub cx_connect_timeout: Counter,
    /// `upstream_cx_none_healthy`: requests that found no healthy host.
    pub cx_none_healthy: Counter,
    /// `upstream_rq_timeout`: requests that hit the route timeout.
    pub rq_timeout: Counter,
    /// `upstream_rq_per_try_timeout`.
    pub rq_per_try_timeout: Counter,
    /// `upstream_rq_per_try_idle_timeout`.
    pub rq_per_try_idle_timeout: Counter,
    /// `upstream_rq_max_duration_reached`: streams the cluster's
    /// `max_stream_duration` ended.
    pub rq_max_duration_reached: Counter,
    /// `upstream_rq_retry`: retries started.
    pub rq_retry: Counter,
    /// `upstream_rq_retry_success`: requests that succeeded after a retry.
    pub rq_retry_success: Counter,
    /// `upstream_rq_retry_overflow`: retries refused by the circuit breaker or budget.
    pub rq_retry_overflow: Counter,
    /// `upstream_rq_retry_limit_exceeded`: retriable failures with no retry left.
    pub rq_retry_limit_exceeded: Counter,
    /// `upstream_rq_retry_backoff_exponential`: retries that waited the
    /// jittered exponential back-off.
    pub rq_retry_backoff_exponential: Counter,
    /// `upstream_rq_retry_backoff_ratelimited`: retries that waited what the
    /// upstream asked for in a reset header.
    pub rq_retry_backoff_ratelimited: Counter,
    /// `upstream_rq_pending_overflow`: requests refused by a circuit breaker.
    pub rq_pending_overflow: Counter,
    /// `upstream_cx_overflow`: connections refused by `max_connections`.
    pub cx_overflow: Counter,
    /// `upstream_cx_pool_overflow`: requests refused by `max_connection_pools`.
    pub cx_pool_overflow: Counter,
    /// `upstream_cx_connect_attempts_exceeded`: TCP proxy connections that
    /// gave up after `max_connect_attempts` failed connects.
    pub cx_connect_attempts_exceeded: Counter,
    /// The cluster's histograms (shared with the responses that record
    /// into them when they end).
    pub hist: Arc<histograms::ClusterHistograms>,
}

impl Default for ClusterStats {
    fn default() -> Self {
        Self {
            rq_total: Counter::default(),
            rq_code: std::sync::OnceLock::new(),
            rq_xx: Default::default(),
            cx_total: Counter::default(),
            cx_connect_fail: Counter::default(),
            cx_connect_timeout: Counter::default(),
            cx_none_healthy: Counter::default(),
            rq_timeout: Counter::default(),
            rq_per_try_timeout: Counter::default(),
            rq_per_try_idle_timeout: Counter::default(),
            rq_max_duration_reached: Counter::default(),
            rq_retry: Counter::default(),
            rq_retry_success: Counter::default(),
            rq_retry_overflow: Counter::default(),
            rq_retry_limit_exceeded: Counter::default(),
            rq_retry_backoff_exponential: Counter::default(),
            rq_retry_backoff_ratelimited: Counter::default(),
            rq_pending_overflow: Counter::default(),
            cx_overflow: Counter::default(),
            cx_pool_overflow: Counter::default(),
            cx_connect_attempts_exceeded: Counter::default(),
            hist: Arc::default(),
        }
    }
}

impl ClusterStats {
    fn resilience_counters(&self) -> [&Counter; 12] {
        [
            &self.rq_per_try_timeout,
            &self.rq_per_try_idle_timeout,
            &self.rq_max_duration_reached,
            &self.rq_retry,
            &self.rq_retry_success,
            &self.rq_retry_overflow,
            &self.rq_retry_limit_exceeded,
            &self.rq_retry_backoff_exponential,
            &self.rq_retry_backoff_ratelimited,
            &self.rq_pending_overflow,
            &self.cx_overflow,
            &self.cx_pool_overflow,
        ]
    }

    /// Retry and circuit-breaker counters by Envoy name.
    fn resilience(&self) -> [(&'static str, u64); 12] {
        [
            ("upstream_rq_per_try_timeout", self.rq_per_try_timeout.get()),
            (
                "upstream_rq_per_try_idle_timeout",
                self.rq_per_try_idle_timeout.get(),
            ),
            (
                "upstream_rq_max_duration_reached",
                self.rq_max_duration_reached.get(),
            ),
            ("upstream_rq_retry", self.rq_retry.get()),
            ("upstream_rq_retry_success", self.rq_retry_success.get()),
            ("upstream_rq_retry_overflow", self.rq_retry_overflow.get()),
            (
                "upstream_rq_retry_limit_exceeded",
                self.rq_retry_limit_exceeded.get(),
            ),
            (
                "upstream_rq_retry_backoff_exponential",
                self.rq_retry_backoff_exponential.get(),
            ),
            (
                "upstream_rq_retry_backoff_ratelimited",
                self.rq_retry_backoff_ratelimited.get(),
            ),
            (
                "upstream_rq_pending_overflow",
                self.rq_pending_overflow.get(),
            ),
            ("upstream_cx_overflow", self.cx_overflow.get()),
            ("upstream_cx_pool_overflow", self.cx_pool_overflow.get()),
        ]
    }

    /// Charges a response code (from the upstream, or a local failure Envoy charges
    /// to the cluster: 503 on connect failure, 504 on timeout).
    pub fn response(&self, status: u16) {
        let codes = self
            .rq_code
            .get_or_init(|| (100..600).map(|_| Counter::default()).collect());
        if let Some(c) = codes.get(usize::from(status).wrapping_sub(100)) {
            c.inc();
        }
        if let Some(c) = self.rq_xx.get(usize::from(status / 100).wrapping_sub(1)) {
            c.inc();
        }
    }
}

/// A listener's connection counts on one worker: `listener.<address>.*` summed
/// over workers, and `listener.<address>.worker_<n>.*` per worker, as in Envoy.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// `downstream_cx_total`: connections accepted.
    pub cx_total: Counter,
    /// `downstream_cx_active` (a gauge).
    pub cx_active: Counter,
    /// `downstream_cx_overflow`: refused at the listener's `connection_limit`.
    pub cx_overflow: Counter,
    /// `downstream_global_cx_overflow`: refused at `global_downstream_max_connections`.
    pub global_cx_overflow: Counter,
    /// `downstream_cx_overload_reject`: refused by `stop_accepting_connections`.
    pub cx_overload_reject: Counter,
    /// `downstream_cx_transport_socket_connect_timeout`: closed because the
    /// TLS handshake outlasted the chain's `transport_socket_connect_timeout`.
    pub cx_transport_socket_connect_timeout: Counter,
    /// `downstream_cx_length_ms`: ms from a connection's accept to its close.
    pub cx_length_ms: histogram::Histogram,
}

/// A listener's configured address as Envoy writes it in stat names
/// (`127.0.0.1_10000`, `[__1]_10000`: `:` is not allowed in a stat name). It
/// is the address in the config, not the bound one: a listener on port 0
/// counts under `127.0.0.1_0`, as in Envoy.
pub fn listener_stat_name(addr: &courier_config::core::Address) -> String {
    addr.to_string().replace(':', "_")
}

/// One worker's stats: one [`ListenerStats`] per listener address and one
/// [`HcmStats`] per connection manager stat prefix, each in a slot the listener
/// registry (main thread) hands out and never takes back (listeners come and go
/// over LDS; their counters stay, as Envoy's named stats do), and one
/// [`ClusterStats`] per cluster, by the cluster manager's index.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// By slot, with the listener address's stat name. Only the main thread
    /// appends (one store per new address); workers load it per connection.
    pub listener_cx: ArcSwap<Vec<(String, Arc<ListenerStats>)>>,
    /// By slot, with the connection manager's stat prefix (chains sharing a
    /// prefix share their counters, as in Envoy).
    pub listeners: ArcSwap<Vec<(String, Arc<HcmStats>)>>,
    /// Per cluster, with its stat name.
    pub clusters: Vec<(String, Arc<ClusterStats>)>,
}

impl WorkerStats {
    /// A listener's connection counts (detached ones for an unknown slot).
    pub fn listener(&self, slot: usize) -> Arc<ListenerStats> {
        self.listener_cx
            .load()
            .get(slot)
            .map(|(_, s)| Arc::clone(s))
            .unwrap_or_default()
    }

    /// The stats of a connection manager (detached ones for an unknown slot).
    pub fn hcm(&self, slot: usize) -> Arc<HcmStats> {
        self.listeners
            .load()
            .get(slot)
            .map(|(_, s)| Arc::clone(s))
            .unwrap_or_default()
    }
}

/// A stat name and its value summed over workers.
pub type Sample = (String, u64);

/// Sums every worker's stats into Envoy-named samples, sorted by name.
pub fn collect(workers: &[Arc<WorkerStats>]) -> Vec<Sample> {
    let mut out: std::collections::BTreeMap<String, u64> = Default::default();
    for (index, w) in workers.iter().enumerate() {
        for (addr, s) in w.listener_cx.load().iter() {
            // The worker's index is its position: the server creates them in order.
            for scope in [
                format!("listener.{addr}"),
                format!("listener.{addr}.worker_{index}"),
            ] {
                let mut add =
                    |name: &str, v: u64| *out.entry(format!("{scope}.{name}")).or_default() += v;
                add("downstream_cx_total", s.cx_total.get());
                add("downstream_cx_active", s.cx_active.get());
                add("downstream_cx_overflow", s.cx_overflow.get());
                add("downstream_global_cx_overflow", s.global_cx_overflow.get());
                add("downstream_cx_overload_reject", s.cx_overload_reject.get());
                add(
                    "downstream_cx_transport_socket_connect_timeout",
                    s.cx_transport_socket_connect_timeout.get(),
                );
            }
        }
        for (prefix, s) in w.listeners.load().iter() {
            let mut add =
                |name: &str, v: u64| *out.entry(format!("http.{prefix}.{name}")).or_default() += v;
            add("downstream_cx_total", s.cx_total.get());
            add("downstream_cx_active", s.cx_active.get());
            add("downstream_rq_total", s.rq_total.get());
            for (i, c) in s.rq_xx.iter().enumerate() {
                add(&format!("downstream_rq_{}xx", i + 1), c.get());
            }
            add("no_route", s.no_route.get());
            add("rq_direct_response", s.rq_direct_response.get());
            add("rq_redirect", s.rq_redirect.get());
            add(
                "downstream_rq_ws_on_non_ws_route",
                s.ws_on_non_ws_route.get(),
            );
            for (stat, v) in s.edge.samples() {
                add(stat, v);
            }
            for (stat, v) in s.tracing.samples() {
                add(stat, v);
            }
        }
        for (name, c) in &w.clusters {
            cluster_values(c, &mut |stat, v| {
                *out.entry(format!("cluster.{name}.{stat}")).or_default() += v;
            });
        }
    }
    out.extend(crate::overload::get().samples());
    out.extend(h2_floods::samples());
    out.extend(trace::otel_samples());
    out.into_iter().collect()
}

/// The `cluster.<name>.*` samples of one cluster's counters (clusters added over
/// CDS count in one set shared by the workers).
pub fn cluster_samples(name: &str, c: &ClusterStats, out: &mut Vec<Sample>) {
    cluster_values(c, &mut |stat, v| {
        out.push((format!("cluster.{name}.{stat}"), v))
    });
}

fn cluster_values(c: &ClusterStats, add: &mut dyn FnMut(&str, u64)) {
    add("upstream_rq_total", c.rq_total.get());
    add("upstream_cx_total", c.cx_total.get());
    add("upstream_cx_connect_fail", c.cx_connect_fail.get());
    add("upstream_cx_connect_timeout", c.cx_connect_timeout.get());
    add("upstream_cx_none_healthy", c.cx_none_healthy.get());
    add("upstream_rq_timeout", c.rq_timeout.get());
    add(
        "upstream_cx_connect_attempts_exceeded",
        c.cx_connect_attempts_exceeded.get(),
    );
    for (stat, v) in c.resilience() {
        add(stat, v);
    }
    // Per-code stats exist once used, as in Envoy.
    for (i, n) in c.rq_code.get().into_iter().flatten().enumerate() {
        if n.get() > 0 {
            add(&format!("upstream_rq_{}", i + 100), n.get());
        }
    }
    for (i, n) in c.rq_xx.iter().enumerate() {
        if n.get() > 0 {
            add(&format!("upstream_rq_{}xx", i + 1), n.get());
        }
    }
}

/// Zeroes every counter of every worker (`/reset_counters`); gauges
/// (`downstream_cx_active`) keep their values, as in Envoy.
pub fn reset_counters(workers: &[Arc<WorkerStats>]) {
    for w in workers {
        for (_, s) in w.listeners.load().iter() {
            let counters = [&s.cx_total, &s.rq_total, &s.no_route, &s.rq_direct_response];
            counters.into_iter().for_each(Counter::reset);
            s.rq_redirect.reset();
            s.ws_on_non_ws_route.reset();
            s.rq_xx.iter().for_each(Counter::reset);
            s.tracing.counters().into_iter().for_each(Counter::reset);
        }
        for (_, c) in &w.clusters {
            let counters = [
                &c.rq_total,
                &c.cx_total,
                &c.cx_connect_fail,
                &c.cx_connect_timeout,
                &c.cx_none_healthy,
                &c.rq_timeout,
                &c.cx_connect_attempts_exceeded,
            ];
            counters.into_iter().for_each(Counter::reset);
            c.resilience_counters().into_iter().for_each(Counter::reset);
            c.rq_code
                .get()
                .into_iter()
                .flatten()
                .for_each(Counter::reset);
            c.rq_xx.iter().for_each(Counter::reset);
        }
    }
    trace::reset_otel();
}

/// Renders samples in Envoy's `/stats` text form (`name: value`).
pub fn render_text(samples: &[Sample]) -> String {
    let mut s = String::new();
    for (name, v) in samples {
        s.push_str(name);
        s.push_str(": ");
        s.push_str(&v.to_string());
        s.push('\n');
    }
    s
}

/// Samples in Envoy's `/stats?format=json` form
/// (`{"stats":[{"name":…,"value":…},…]}`).
pub fn json_value(samples: &[Sample]) -> serde_json::Value {
    let stats: Vec<serde_json::Value> = samples
        .iter()
        .map(|(name, value)| serde_json::json!({ "name": name, "value": value }))
        .collect();
    serde_json::json!({ "stats": stats })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_workers_and_renders_envoy_names() {
        let mk = || {
            let s = Arc::new(HcmStats::default());
            Arc::new(WorkerStats {
                listener_cx: ArcSwap::from_pointee(vec![("127.0.0.1_80".into(), Arc::default())]),
                listeners: ArcSwap::from_pointee(vec![("ingress".into(), s)]),
                clusters: vec![("echo".into(), Arc::new(ClusterStats::default()))],
            })
        };
        let (a, b) = (mk(), mk());
        a.hcm(0).rq_total.inc();
        b.hcm(0).rq_total.inc();
        a.listener(0).cx_total.inc();
        b.listener(0).cx_total.inc();
        b.listener(0).cx_total.inc();
        b.hcm(0).response(204);
        a.clusters[0].1.rq_total.inc();
        a.clusters[0].1.response(200);
        b.clusters[0].1.response(200);
        let samples = collect(&[a, b]);
        let text = render_text(&samples);
        assert!(
            text.contains("http.ingress.downstream_rq_total: 2\n"),
            "{text}"
        );
        assert!(
            text.contains("http.ingress.downstream_rq_2xx: 1\n"),
            "{text}"
        );
        for line in [
            "listener.127.0.0.1_80.downstream_cx_total: 3\n",
            "listener.127.0.0.1_80.worker_0.downstream_cx_total: 1\n",
            "listener.127.0.0.1_80.worker_1.downstream_cx_total: 2\n",
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
        let prom = prometheus::render(&samples, &names::StatNames::new(Default::default()));
        assert!(
            prom.contains(
                "envoy_http_downstream_rq_total{envoy_http_conn_manager_prefix=\"ingress\"} 2\n"
            ),
            "{prom}"
        );
        assert!(prom.contains(
            "envoy_http_downstream_rq_xx{envoy_response_code_class=\"2\",envoy_http_conn_manager_prefix=\"ingress\"} 1\n"
        ), "{prom}");
        assert!(text.contains("cluster.echo.upstream_rq_200: 2\n"), "{text}");
        assert!(!text.contains("upstream_rq_404"), "{text}");
        for line in [
            "envoy_cluster_upstream_rq_total{envoy_cluster_name=\"echo\"} 1\n",
            "envoy_cluster_upstream_rq{envoy_response_code=\"200\",envoy_cluster_name=\"echo\"} 2\n",
            "envoy_cluster_upstream_rq_xx{envoy_response_code_class=\"2\",envoy_cluster_name=\"echo\"} 2\n",
        ] {
            assert!(prom.contains(line), "{line} missing in {prom}");
        }
        // One TYPE line per family.
        assert_eq!(
            prom.matches("# TYPE envoy_cluster_upstream_rq counter")
                .count(),
            1
        );
    }
}
