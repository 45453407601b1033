//! Counters kept per worker: a filter is shared by every worker, and counters
//! that all workers increment on every request would bounce one cache line
//! between their cores. [`PerWorker`] gives each worker its own copy, on cache
//! lines of its own; admin sums the copies when it is scraped.

use std::sync::atomic::{AtomicU64, Ordering};

/// At most this many copies: more workers share copies (`worker % slots`),
/// which stays correct (the counters are atomics), only less private.
const MAX_SLOTS: usize = 64;

/// One `T` per worker ([`crate::ConnFacts::worker`] picks it).
#[derive(Debug)]
pub struct PerWorker<T> {
    slots: Box<[Slot<T>]>,
}

/// A copy on cache lines of its own (128 bytes: adjacent-line prefetch pairs
/// 64-byte lines on x86).
#[derive(Debug)]
#[repr(align(128))]
struct Slot<T>(T);

impl<T> PerWorker<T> {
    /// A copy made by `make` for each worker the machine can run at once.
    pub fn new(make: impl FnMut() -> T) -> Self {
        let n = std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .clamp(1, MAX_SLOTS);
        Self::with_slots(n, make)
    }

    /// `n` copies (at least one).
    pub fn with_slots(n: usize, mut make: impl FnMut() -> T) -> Self {
        Self {
            slots: (0..n.max(1)).map(|_| Slot(make())).collect(),
        }
    }

    /// Worker `worker`'s copy.
    pub fn get(&self, worker: usize) -> &T {
        let i = worker % self.slots.len();
        &self.slots[i].0
    }

    /// Every copy.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map(|s| &s.0)
    }

    /// The counter `field` picks, summed over the copies.
    pub fn sum(&self, field: impl Fn(&T) -> &AtomicU64) -> u64 {
        self.iter().map(|t| field(t).load(Ordering::Relaxed)).sum()
    }

    /// The counter `field` picks in each copy (to render or reset them).
    pub fn each<'a>(&'a self, field: impl Fn(&'a T) -> &'a AtomicU64) -> Vec<&'a AtomicU64> {
        self.iter().map(field).collect()
    }
}

impl<T: Default> Default for PerWorker<T> {
    fn default() -> Self {
        Self::new(T::default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_counts_in_its_own_copy_and_the_sum_is_all() {
        let p: PerWorker<AtomicU64> = PerWorker::with_slots(4, AtomicU64::default);
        for worker in 0..6 {
            p.get(worker).fetch_add(1, Ordering::Relaxed);
        }
        assert_eq!(p.sum(|c| c), 6);
        // Workers 0..4 own a copy each; 4 and 5 share those of 0 and 1.
        let per: Vec<u64> = p.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert_eq!(per, [2, 2, 1, 1]);
        // On separate cache lines.
        let a = std::ptr::from_ref(p.get(0)) as usize;
        let b = std::ptr::from_ref(p.get(1)) as usize;
        assert!(b.abs_diff(a) >= 128);
    }
}
