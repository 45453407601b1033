//! The overload manager's `envoy.overload_actions.shrink_heap`: hands the
//! memory the allocator holds free back to the system, as Envoy asks
//! tcmalloc to. glibc keeps freed memory in its arenas (a thread's arena is
//! returned only from its top), so after a burst of requests whose memory is
//! freed around a few long-lived allocations the resident set stays at the
//! peak, and the heap monitor would keep shedding load that is already gone.

/// Whether a release is already scheduled ([`release_soon`]).
static SCHEDULED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Large updates so far ([`release_soon`] waits until they stop coming).
static UPDATES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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
    use std::sync::atomic::Ordering;
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
