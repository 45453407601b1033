//! `tcp.<stat_prefix>.*`: the TCP proxy's stats, Envoy's names.
//!
//! One set per stat prefix (chains sharing a prefix share it, as Envoy's
//! scopes do), made by the main thread when a listener is built and kept for
//! the life of the process (listeners come and go over LDS; their counters
//! stay, as Envoy's named stats do). Workers hold the set of their chain and
//! add with relaxed atomics; nothing on the data path looks the registry up.

use crate::stats::{Counter, Sample};
use arc_swap::ArcSwap;
use std::sync::{Arc, OnceLock};

/// The stats of one `stat_prefix`.
#[derive(Debug, Default)]
pub struct TcpStats {
    /// `downstream_cx_total`.
    pub cx_total: Counter,
    /// `downstream_cx_no_route`: the cluster does not exist.
    pub cx_no_route: Counter,
    /// `downstream_cx_rx_bytes_total`: bytes read from downstream.
    pub rx_bytes_total: Counter,
    /// `downstream_cx_tx_bytes_total`: bytes written to downstream.
    pub tx_bytes_total: Counter,
    /// `downstream_cx_rx_bytes_buffered` (gauge): read from downstream, not yet
    /// written upstream.
    pub rx_bytes_buffered: Counter,
    /// `downstream_cx_tx_bytes_buffered` (gauge): read from upstream, not yet
    /// written downstream.
    pub tx_bytes_buffered: Counter,
    /// `downstream_flow_control_paused_reading_total`: downstream reads paused
    /// because upstream did not take the bytes.
    pub paused_reading: Counter,
    /// `downstream_flow_control_resumed_reading_total`.
    pub resumed_reading: Counter,
    /// `idle_timeout`: connections closed for no bytes either way.
    pub idle_timeout: Counter,
    /// `max_downstream_connection_duration`.
    pub max_duration: Counter,
    /// `upstream_flush_total`: upstream connections left to finish writing
    /// after the downstream closed.
    pub flush_total: Counter,
    /// `upstream_flush_active` (gauge).
    pub flush_active: Counter,
}

/// Counters Envoy 1.40 keeps for features courier's config refuses
/// (`check_drain_close`, the overload manager's TCP close, early data,
/// delayed connect modes): always zero here, listed so `/stats` names the
/// same set as Envoy.
const ALWAYS_ZERO: [&str; 4] = [
    "downstream_cx_drain_close",
    "downstream_cx_overload_close",
    "early_data_received_count_total",
    "route_delayed_total",
];

impl TcpStats {
    fn values(&self) -> [(&'static str, u64); 12] {
        [
            ("downstream_cx_total", self.cx_total.get()),
            ("downstream_cx_no_route", self.cx_no_route.get()),
            ("downstream_cx_rx_bytes_total", self.rx_bytes_total.get()),
            ("downstream_cx_tx_bytes_total", self.tx_bytes_total.get()),
            (
                "downstream_cx_rx_bytes_buffered",
                self.rx_bytes_buffered.get(),
            ),
            (
                "downstream_cx_tx_bytes_buffered",
                self.tx_bytes_buffered.get(),
            ),
            (
                "downstream_flow_control_paused_reading_total",
                self.paused_reading.get(),
            ),
            (
                "downstream_flow_control_resumed_reading_total",
                self.resumed_reading.get(),
            ),
            ("idle_timeout", self.idle_timeout.get()),
            (
                "max_downstream_connection_duration",
                self.max_duration.get(),
            ),
            ("upstream_flush_total", self.flush_total.get()),
            ("upstream_flush_active", self.flush_active.get()),
        ]
    }

    /// Zeroes the counters (`/reset_counters`); the gauges keep their values.
    fn reset(&self) {
        for c in [
            &self.cx_total,
            &self.cx_no_route,
            &self.rx_bytes_total,
            &self.tx_bytes_total,
            &self.paused_reading,
            &self.resumed_reading,
            &self.idle_timeout,
            &self.max_duration,
            &self.flush_total,
        ] {
            c.reset();
        }
    }
}

type Table = ArcSwap<Vec<(String, Arc<TcpStats>)>>;

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(Table::default)
}

/// The stats of `prefix`, made on first use. Called by the main thread as it
/// builds listeners (the only writer, so a load-then-store does not race).
pub fn register(prefix: &str) -> Arc<TcpStats> {
    let t = table();
    if let Some((_, s)) = t.load().iter().find(|(p, _)| p == prefix) {
        return Arc::clone(s);
    }
    let stats = Arc::new(TcpStats::default());
    let mut next = Vec::clone(&t.load());
    next.push((prefix.to_string(), Arc::clone(&stats)));
    t.store(Arc::new(next));
    stats
}

/// Every `tcp.<prefix>.*` sample.
pub fn samples(out: &mut Vec<Sample>) {
    for (prefix, s) in table().load().iter() {
        for (name, v) in s.values() {
            out.push((format!("tcp.{prefix}.{name}"), v));
        }
        for name in ALWAYS_ZERO {
            out.push((format!("tcp.{prefix}.{name}"), 0));
        }
    }
}

/// Zeroes every prefix's counters (`/reset_counters`).
pub fn reset_counters() {
    for (_, s) in table().load().iter() {
        s.reset();
    }
}
