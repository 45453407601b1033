//! The connection limit network filter: each filter config (a chain's, in
//! one listener version) counts its open connections across the workers; a
//! connection over `max_connections` is closed (after `delay`), as Envoy's
//! `ConnectionLimitFilter` does. Stats `connection_limit.<stat_prefix>.
//! {limited_connections, active_connections}` (the gauge counts a refused
//! connection until it is closed, as Envoy's).

use crate::stats::{Counter, Sample};
use arc_swap::ArcSwap;
use courier_config::listener::connection_limit::ConnectionLimit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The counters of one stat prefix.
#[derive(Debug, Default)]
pub struct Stats {
    /// `limited_connections`: connections closed over the limit.
    pub limited: Counter,
    /// `active_connections` (a gauge).
    pub active: Counter,
}

type Table = ArcSwap<Vec<(String, Arc<Stats>)>>;

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(Table::default)
}

fn register(prefix: &str) -> Arc<Stats> {
    let t = table();
    if let Some((_, s)) = t.load().iter().find(|(p, _)| p == prefix) {
        return Arc::clone(s);
    }
    let stats = Arc::new(Stats::default());
    let mut next = Vec::clone(&t.load());
    next.push((prefix.to_string(), Arc::clone(&stats)));
    t.store(Arc::new(next));
    stats
}

/// Every `connection_limit.*` sample.
pub fn samples(out: &mut Vec<Sample>) {
    for (prefix, s) in table().load().iter() {
        out.push((
            format!("connection_limit.{prefix}.active_connections"),
            s.active.get(),
        ));
        out.push((
            format!("connection_limit.{prefix}.limited_connections"),
            s.limited.get(),
        ));
    }
}

/// Zeroes the counters (`/reset_counters`); the gauge keeps its value.
pub fn reset_counters() {
    for (_, s) in table().load().iter() {
        s.limited.reset();
    }
}

/// One filter config's state, shared by the workers.
#[derive(Debug)]
pub struct Limiter {
    config: Arc<ConnectionLimit>,
    stats: Arc<Stats>,
    open: AtomicU64,
}

impl Limiter {
    /// The state of `config` (made by the main thread as it builds a listener).
    pub fn new(config: Arc<ConnectionLimit>) -> Arc<Self> {
        Arc::new(Self {
            stats: register(&config.stat_prefix),
            config,
            open: AtomicU64::new(0),
        })
    }

    /// Counts a new connection: its guard (held until it closes) and whether
    /// it is within the limit; `Err` carries how long to hold it first.
    pub fn admit(self: &Arc<Self>) -> (Held, Result<(), Option<std::time::Duration>>) {
        self.stats.active.inc();
        let within = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < self.config.max_connections).then_some(n + 1)
            })
            .is_ok();
        if !within {
            self.stats.limited.inc();
            // Envoy counts the refused one too until its close.
            self.open.fetch_add(1, Ordering::AcqRel);
        }
        let held = Held(Arc::clone(self));
        (
            held,
            if within {
                Ok(())
            } else {
                Err(self.config.delay)
            },
        )
    }
}

/// A connection counted by a [`Limiter`] until dropped.
#[derive(Debug)]
pub struct Held(Arc<Limiter>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.stats.active.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_refuses_and_frees() {
        let l = Limiter::new(Arc::new(ConnectionLimit {
            stat_prefix: "unit".into(),
            max_connections: 2,
            delay: None,
        }));
        let (a, ra) = l.admit();
        let (b, rb) = l.admit();
        let (c, rc) = l.admit();
        assert!(ra.is_ok() && rb.is_ok());
        assert_eq!(rc, Err(None));
        assert_eq!((l.stats.active.get(), l.stats.limited.get()), (3, 1));
        drop(c);
        drop(a);
        let (_d, rd) = l.admit();
        assert!(rd.is_ok());
        assert_eq!(l.stats.active.get(), 2);
        drop(b);
    }
}
