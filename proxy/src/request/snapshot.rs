//! A worker's own handle on the config in force.
//!
//! A request holds the snapshot it started with to its end, so it takes a
//! reference. Cloning the process-wide `Arc<Snapshot>` for that would write its
//! reference count — one cache line every worker writes on every request.
//! Instead each worker wraps the snapshot in an `Arc` of its own, once per
//! config version, and its requests count references on that: no line is
//! shared between workers on the request path.

use arc_swap::ArcSwap;
use courier_config::snapshot::Snapshot;
use std::sync::Arc;

/// One worker's view of the config in force; see the module docs.
#[derive(Debug)]
pub struct WorkerSnapshot {
    /// What the main thread publishes.
    global: Arc<ArcSwap<Snapshot>>,
    /// The version this worker last saw, in this worker's own `Arc`.
    #[allow(clippy::redundant_allocation)]
    local: ArcSwap<Arc<Snapshot>>,
}

impl WorkerSnapshot {
    /// A worker's handle on `global`.
    pub fn new(global: Arc<ArcSwap<Snapshot>>) -> Self {
        let local = ArcSwap::from_pointee(global.load_full());
        Self { global, local }
    }

    /// The snapshot in force, referenced through this worker's own `Arc`
    /// (renewed when the main thread has published another version).
    // The outer `Arc` is the point: its count is this worker's alone.
    #[allow(clippy::redundant_allocation)]
    pub fn load(&self) -> Arc<Arc<Snapshot>> {
        let local = self.local.load_full();
        let global = self.global.load();
        if Arc::ptr_eq(&*local, &*global) {
            return local;
        }
        let fresh = Arc::new(arc_swap::Guard::into_inner(global));
        self.local.store(Arc::clone(&fresh));
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_share_the_workers_reference_until_a_new_version() {
        let global = Arc::new(ArcSwap::from_pointee(Snapshot::default()));
        let w = WorkerSnapshot::new(Arc::clone(&global));
        let (a, b) = (w.load(), w.load());
        // One worker-owned wrapper; the process-wide count is not touched per load.
        assert!(Arc::ptr_eq(&a, &b));
        let shared = Arc::strong_count(&global.load_full()) - 1;
        let _more: Vec<_> = (0..10).map(|_| w.load()).collect();
        assert_eq!(Arc::strong_count(&global.load_full()) - 1, shared);
        // A new version is seen by the next load.
        let mut next = Snapshot::clone(&global.load());
        next.version += 1;
        global.store(Arc::new(next));
        let c = w.load();
        assert_eq!(c.version, a.version + 1);
        assert!(!Arc::ptr_eq(&a, &c));
        // The request that started before it keeps its version.
        assert_eq!(a.version + 1, c.version);
    }
}
