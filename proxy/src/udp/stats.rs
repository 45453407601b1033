//! The UDP proxy's stats, Envoy's names: `udp.<stat_prefix>.*` (one set per
//! stat prefix, shared by the listeners that name it, as Envoy's scopes are),
//! `cluster.<name>.udp.*` (made when a session first goes to the cluster, as
//! Envoy makes them when its filter attaches to the cluster) and
//! `listener.<address>.udp.downstream_rx_datagram_dropped`.
//!
//! Sets are made once and kept for the life of the process (listeners and
//! clusters come and go over xDS; their counters stay, as Envoy's named stats
//! do). Sessions hold their sets and add with relaxed atomics; the registry is
//! looked up only to make a session, never per datagram, and changed with a
//! compare-and-swap (the main thread and the worker serving UDP both add).

use crate::stats::{Counter, Sample};
use arc_swap::ArcSwap;
use std::sync::{Arc, OnceLock};

/// `udp.<stat_prefix>.*`.
#[derive(Debug, Default)]
pub struct UdpStats {
    /// `downstream_sess_no_route`: datagrams whose route names no cluster in force.
    pub no_route: Counter,
    /// `downstream_sess_rx_bytes`: bytes of datagrams from downstream peers.
    pub rx_bytes: Counter,
    /// `downstream_sess_rx_datagrams`.
    pub rx_datagrams: Counter,
    /// `downstream_sess_rx_errors`: reads of the listener's socket that failed.
    pub rx_errors: Counter,
    /// `downstream_sess_total`: sessions made.
    pub sess_total: Counter,
    /// `downstream_sess_tx_bytes`: bytes sent back to downstream peers.
    pub tx_bytes: Counter,
    /// `downstream_sess_tx_datagrams`.
    pub tx_datagrams: Counter,
    /// `downstream_sess_tx_errors`: sends to downstream peers that failed.
    pub tx_errors: Counter,
    /// `idle_timeout`: sessions ended by their idle timeout.
    pub idle_timeout: Counter,
    /// `downstream_sess_active` (a gauge).
    pub sess_active: Counter,
}

impl UdpStats {
    fn values(&self) -> [(&'static str, u64); 11] {
        [
            ("downstream_sess_active", self.sess_active.get()),
            ("downstream_sess_no_route", self.no_route.get()),
            ("downstream_sess_rx_bytes", self.rx_bytes.get()),
            ("downstream_sess_rx_datagrams", self.rx_datagrams.get()),
            ("downstream_sess_rx_errors", self.rx_errors.get()),
            ("downstream_sess_total", self.sess_total.get()),
            ("downstream_sess_tx_bytes", self.tx_bytes.get()),
            ("downstream_sess_tx_datagrams", self.tx_datagrams.get()),
            ("downstream_sess_tx_errors", self.tx_errors.get()),
            ("idle_timeout", self.idle_timeout.get()),
            // Session filters are refused by the config: never missing here.
            ("session_filter_config_missing", 0),
        ]
    }

    fn reset(&self) {
        for c in [
            &self.no_route,
            &self.rx_bytes,
            &self.rx_datagrams,
            &self.rx_errors,
            &self.sess_total,
            &self.tx_bytes,
            &self.tx_datagrams,
            &self.tx_errors,
            &self.idle_timeout,
        ] {
            c.reset();
        }
    }
}

/// `cluster.<name>.udp.*`.
#[derive(Debug, Default)]
pub struct UdpClusterStats {
    /// `sess_rx_datagrams`: datagrams read from the cluster's hosts.
    pub rx_datagrams: Counter,
    /// `sess_rx_errors`: reads from a host that failed.
    pub rx_errors: Counter,
    /// `sess_tx_datagrams`: datagrams sent to the cluster's hosts.
    pub tx_datagrams: Counter,
    /// `sess_tx_errors`: sends to a host that failed.
    pub tx_errors: Counter,
}

impl UdpClusterStats {
    fn values(&self) -> [(&'static str, u64); 8] {
        [
            ("sess_rx_datagrams", self.rx_datagrams.get()),
            // Envoy counts the kernel's receive-queue drops here
            // (`SO_RXQ_OVFL`), which courier does not read: always zero.
            ("sess_rx_datagrams_dropped", 0),
            ("sess_rx_errors", self.rx_errors.get()),
            // HTTP tunneling is refused by the config: these stay zero.
            ("sess_tunnel_buffer_overflow", 0),
            ("sess_tunnel_failure", 0),
            ("sess_tunnel_success", 0),
            ("sess_tx_datagrams", self.tx_datagrams.get()),
            ("sess_tx_errors", self.tx_errors.get()),
        ]
    }

    fn reset(&self) {
        for c in [
            &self.rx_datagrams,
            &self.rx_errors,
            &self.tx_datagrams,
            &self.tx_errors,
        ] {
            c.reset();
        }
    }
}

/// `listener.<address>.udp.*`.
#[derive(Debug, Default)]
pub struct UdpListenerStats {
    /// `downstream_rx_datagram_dropped`: datagrams longer than the listener's
    /// `max_rx_datagram_size`, dropped as Envoy drops a truncated read.
    pub rx_datagram_dropped: Counter,
}

type Table<T> = ArcSwap<Vec<(String, Arc<T>)>>;

fn prefixes() -> &'static Table<UdpStats> {
    static T: OnceLock<Table<UdpStats>> = OnceLock::new();
    T.get_or_init(Table::default)
}

fn clusters() -> &'static Table<UdpClusterStats> {
    static T: OnceLock<Table<UdpClusterStats>> = OnceLock::new();
    T.get_or_init(Table::default)
}

fn listeners() -> &'static Table<UdpListenerStats> {
    static T: OnceLock<Table<UdpListenerStats>> = OnceLock::new();
    T.get_or_init(Table::default)
}

fn get_or_make<T: Default>(table: &Table<T>, name: &str) -> Arc<T> {
    if let Some((_, s)) = table.load().iter().find(|(n, _)| n == name) {
        return Arc::clone(s);
    }
    let made = Arc::new(T::default());
    let mut out = Arc::clone(&made);
    table.rcu(|list| {
        // Another thread may have made it meanwhile: theirs is kept.
        if let Some((_, s)) = list.iter().find(|(n, _)| n == name) {
            out = Arc::clone(s);
            return Arc::clone(list);
        }
        out = Arc::clone(&made);
        let mut next = Vec::clone(list);
        next.push((name.to_string(), Arc::clone(&made)));
        Arc::new(next)
    });
    out
}

/// The `udp.<prefix>.*` set, made on first use (when a listener is built).
pub fn register(prefix: &str) -> Arc<UdpStats> {
    get_or_make(prefixes(), prefix)
}

/// The `cluster.<name>.udp.*` set, made on first use (a cluster's first session).
pub fn cluster(name: &str) -> Arc<UdpClusterStats> {
    get_or_make(clusters(), name)
}

/// The `listener.<stat name>.udp.*` set of a UDP listener's address.
pub fn listener(stat_name: &str) -> Arc<UdpListenerStats> {
    get_or_make(listeners(), stat_name)
}

/// Every UDP sample.
pub fn samples(out: &mut Vec<Sample>) {
    for (prefix, s) in prefixes().load().iter() {
        for (name, v) in s.values() {
            out.push((format!("udp.{prefix}.{name}"), v));
        }
    }
    for (cluster, s) in clusters().load().iter() {
        for (name, v) in s.values() {
            out.push((format!("cluster.{cluster}.udp.{name}"), v));
        }
    }
    for (listener, s) in listeners().load().iter() {
        out.push((
            format!("listener.{listener}.udp.downstream_rx_datagram_dropped"),
            s.rx_datagram_dropped.get(),
        ));
    }
}

/// Zeroes the counters (`/reset_counters`); the gauges keep their values.
pub fn reset_counters() {
    for (_, s) in prefixes().load().iter() {
        s.reset();
    }
    for (_, s) in clusters().load().iter() {
        s.reset();
    }
    for (_, s) in listeners().load().iter() {
        s.rx_datagram_dropped.reset();
    }
}
