//! The overload manager's `envoy.overload_actions.shrink_heap`: hands the
//! memory the allocator holds free back to the system, as Envoy asks
//! tcmalloc to. glibc keeps freed memory in its arenas (a thread's arena is
//! returned only from its top), so after a burst of requests whose memory is
//! freed around a few long-lived allocations the resident set stays at the
//! peak, and the heap monitor would keep shedding load that is already gone.
//! Also what the allocator holds allocated, for the heap monitor.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// HTTP/1.1 codecs ended by parks (crate::codec::h1), all workers.
static PARKS: AtomicU64 = AtomicU64::new(0);

/// Parks since the last release that make another worth it: each frees
/// about 16 KiB (hyper's read and write buffers, its dispatcher), so 64 are
/// about 1 MiB.
const PARKS_PER_RELEASE: u64 = 64;

/// How often the parks are looked at.
const PARKS_CHECK_EVERY: Duration = Duration::from_secs(1);

/// While connections keep parking, how often memory is released at most: a
/// release walks every free chunk of every arena (one `madvise` each) with
/// the arena locked, so under steady parking it is paced as Envoy's
/// `shrink_heap` is.
const RELEASE_AT_MOST_EVERY: Duration = Duration::from_secs(10);

/// An idle connection parked: its codec's memory is free.
pub fn note_park() {
    PARKS.fetch_add(1, Ordering::Relaxed);
    #[cfg(test)]
    TEST_PARKS.with(|p| p.set(p.get() + 1));
}

#[cfg(test)]
thread_local! {
    /// Parks on this thread (a test's current-thread runtime).
    static TEST_PARKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Parks on this thread so far.
#[cfg(test)]
pub fn test_parks() -> u64 {
    TEST_PARKS.with(std::cell::Cell::get)
}

/// Releases free memory after connections park: the codec buffers parked
/// connections free sit between the allocations of live ones, where glibc
/// keeps them resident; returned, an idle connection costs what it holds,
/// not the peak it once had. Released once a burst of parks is over (a
/// second without one: a pool of clients gone idle), or every
/// [`RELEASE_AT_MOST_EVERY`] while connections keep parking. The walk runs on
/// a blocking thread.
pub async fn release_after_parks() {
    let mut released_at = PARKS.load(Ordering::Relaxed);
    let mut last_seen = released_at;
    let mut last_release = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(PARKS_CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let parks = PARKS.load(Ordering::Relaxed);
        let burst_over = parks == last_seen;
        last_seen = parks;
        let due = burst_over || last_release.elapsed() >= RELEASE_AT_MOST_EVERY;
        if parks.wrapping_sub(released_at) >= PARKS_PER_RELEASE && due {
            released_at = parks;
            let started = tokio::time::Instant::now();
            let _ = tokio::task::spawn_blocking(release_free_memory).await;
            last_release = tokio::time::Instant::now();
            // 10 000 parked connections (≈ 230 MB heap): ≈ 30 ms.
            tracing::debug!(
                parks,
                took_us = (last_release - started).as_micros() as u64,
                "free memory released after parks"
            );
        }
    }
}

/// Whether a release is already scheduled ([`release_soon`]).
static SCHEDULED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Large updates so far ([`release_soon`] waits until they stop coming).
static UPDATES: AtomicU64 = AtomicU64::new(0);

/// At most this many waits for a quiet moment (updates arriving back to back
/// for good still get a release every few seconds).
const QUIET_TRIES: u32 = 10;

/// How long after a large config update its transient memory (the decoded
/// response, the replaced resources) has been freed: the release waits that
/// long, and updates within it share one release.
const AFTER_UPDATE: std::time::Duration = std::time::Duration::from_millis(200);

/// Releases free memory shortly, on the calling runtime: after a large xDS
/// update, whose decode and the resources it replaces leave the main thread's
/// arena full of holes (≈ 1.8 KiB a cluster for a response of 1 000 clusters
/// and their assignments, held for good otherwise). One release at a time.
pub fn release_soon() {
    UPDATES.fetch_add(1, Ordering::AcqRel);
    if SCHEDULED.swap(true, Ordering::AcqRel) {
        return;
    }
    tokio::spawn(async {
        // Wait for a quiet moment: a CDS response is followed by its EDS one
        // (and both by their ACKs), and the release should come after the last.
        for _ in 0..QUIET_TRIES {
            let seen = UPDATES.load(Ordering::Acquire);
            tokio::time::sleep(AFTER_UPDATE).await;
            if UPDATES.load(Ordering::Acquire) == seen {
                break;
            }
        }
        SCHEDULED.store(false, Ordering::Release);
        // The walk locks each arena in turn (milliseconds for a large heap):
        // off the runtime's thread, which also serves admin and xDS.
        let _ = tokio::task::spawn_blocking(release_free_memory).await;
    });
}

/// Asks glibc to return every arena's free pages; whether anything came back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn release_free_memory() -> bool {
    // SAFETY: `malloc_trim` takes no pointers and has no caller-side
    // invariants; glibc locks each arena while it walks it.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Bytes the program holds allocated (glibc's `mallinfo2`: in use in every
/// arena plus mmapped blocks), Envoy's `totalCurrentlyAllocated` that the
/// fixed_heap monitor reads under `fixed_heap_use_allocated`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn allocated_bytes() -> Option<u64> {
    // SAFETY: `mallinfo2` takes no arguments and returns a plain struct;
    // glibc locks each arena while it sums it.
    let info = unsafe { libc::mallinfo2() };
    Some((info.uordblks + info.hblkhd) as u64)
}

/// Other allocators: not known.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn allocated_bytes() -> Option<u64> {
    None
}

/// Other allocators return freed memory themselves: nothing to do.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() -> bool {
    false
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    #![allow(clippy::unwrap_used)]

    fn resident() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        kb * 1024
    }

    #[test]
    fn allocated_bytes_count_what_is_allocated_not_what_is_resident() {
        // 256 MiB zeroed (calloc'd pages, never touched: not resident).
        let before = super::allocated_bytes().unwrap();
        let rss_before = resident();
        let block = vec![0u8; 256 << 20];
        let during = super::allocated_bytes().unwrap();
        let rss_during = resident();
        drop(block);
        let after = super::allocated_bytes().unwrap();
        assert!(during >= before + (256 << 20), "{before} -> {during}");
        assert!(after + (200 << 20) < during, "{during} -> {after}");
        assert!(
            rss_during < rss_before + (64 << 20),
            "{rss_before} -> {rss_during}"
        );
    }

    #[test]
    fn freed_memory_between_live_blocks_is_returned() {
        // On a thread of its own (its own arena): 256 MiB in 4 KiB blocks, one
        // in 32 kept, the rest freed. glibc keeps the freed pages resident
        // (none is at the arena's top); released, they leave.
        let (before, after) = std::thread::spawn(|| {
            let mut blocks: Vec<Vec<u8>> = (0..65_536).map(|i| vec![i as u8; 4096]).collect();
            let kept: Vec<Vec<u8>> = blocks.iter_mut().step_by(32).map(std::mem::take).collect();
            drop(blocks);
            let before = resident();
            assert!(super::release_free_memory());
            let after = resident();
            drop(kept);
            (before, after)
        })
        .join()
        .unwrap();
        assert!(
            before > after + (128 << 20),
            "resident {before} before, {after} after"
        );
    }
}
