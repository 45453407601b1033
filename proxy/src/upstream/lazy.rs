//! Per-host state allocated at its first use. A cluster manager fed by EDS
//! holds tens of thousands of hosts, most of which see no request for long
//! stretches (or ever, on a given proxy); their counters, outlier state and
//! address text cost a pointer each until then.

use once_cell::race::OnceBox;

/// A `T` created (default) the first time it is written through [`Deref`];
/// readers that must not create it use [`Lazy::get`].
///
/// [`Deref`]: std::ops::Deref
#[derive(Default)]
pub struct Lazy<T>(OnceBox<T>);

impl<T> Lazy<T> {
    /// The state, if anything has created it.
    pub fn get(&self) -> Option<&T> {
        self.0.get()
    }
}

impl<T: Default> std::ops::Deref for Lazy<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // Two threads may race to create it: one box wins, the other is dropped.
        self.0.get_or_init(|| Box::new(T::default()))
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Lazy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.get() {
            Some(t) => t.fmt(f),
            None => f.write_str("(unused)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn created_by_the_first_write_only() {
        let l: Lazy<AtomicU64> = Lazy::default();
        assert!(l.get().is_none());
        l.fetch_add(2, Ordering::Relaxed);
        assert_eq!(l.get().map(|v| v.load(Ordering::Relaxed)), Some(2));
        assert_eq!(
            std::mem::size_of::<Lazy<[u64; 16]>>(),
            std::mem::size_of::<usize>()
        );
    }
}
