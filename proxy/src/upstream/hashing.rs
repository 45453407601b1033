//! Consistent-hashing tables: Envoy's ketama ring (RING_HASH) and Maglev
//! table (MAGLEV), built from a priority level's hosts when its host set is
//! built (never per request), then looked up lock-free by a request's hash.
//! Construction follows Envoy's entry for entry (host keys, normalised
//! weights, seeds, order), so a hash picks the host Envoy picks.

use super::host::Host;
use courier_config::cluster::{LbPolicy, Maglev, RingHash, RingHashFunction};
use std::sync::Arc;

/// libstdc++'s `std::hash<std::string>` seed, Envoy's `STD_HASH_SEED`.
const STD_HASH_SEED: u64 = 0xc70f_6907;

/// xxHash64 of `bytes` with `seed`.
pub fn xxhash64(bytes: &[u8], seed: u64) -> u64 {
    xxhash_rust::xxh64::xxh64(bytes, seed)
}

/// Envoy's 64-bit MurmurHash2 (libstdc++'s `_Hash_bytes` on 64-bit targets).
pub fn murmur_hash2(key: &[u8], seed: u64) -> u64 {
    const MUL: u64 = 0xc6a4_a793_5bd1_e995;
    let shift_mix = |v: u64| v ^ (v >> 47);
    let len = key.len() as u64;
    let mut hash = seed ^ len.wrapping_mul(MUL);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        let data = shift_mix(u64::from_le_bytes(b).wrapping_mul(MUL)).wrapping_mul(MUL);
        hash ^= data;
        hash = hash.wrapping_mul(MUL);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        // Little-endian load of the 1..7 trailing bytes.
        let data = rest
            .iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        hash ^= data;
        hash = hash.wrapping_mul(MUL);
    }
    hash = shift_mix(hash).wrapping_mul(MUL);
    shift_mix(hash)
}

/// Envoy's `hashKey`: the host's `envoy.lb` metadata `hash_key`, else its
/// hostname (with `use_hostname_for_hashing`) or its address as text.
fn host_key(h: &Host, use_hostname: bool) -> &str {
    match h.hash_key() {
        Some(k) if !k.is_empty() => k,
        _ if use_hostname => h.hostname(),
        _ => h.address_text(),
    }
}

/// A table's entries: host index (into the level's list) and normalised
/// weight, with the smallest and largest weight.
type Normalized = (Vec<(u32, f64)>, f64, f64);

/// Envoy's `normalizeHostWeights` and `normalizeLocalityWeights`: each host's
/// share of the whole. `groups` (locality-weighted balancing): consecutive
/// runs of `hosts`, each with its locality's weight; a host's share is its
/// share of its locality's host weight times its locality's share of the
/// locality weights, and hosts of a locality of weight 0 are left out.
fn normalized(hosts: &[Arc<Host>], groups: Option<&[(usize, u32)]>) -> Option<Normalized> {
    let one = [(hosts.len(), 1u32)];
    let groups = groups.filter(|g| !g.is_empty()).unwrap_or(&one);
    let locality_sum: u64 = groups.iter().map(|g| u64::from(g.1)).sum();
    if locality_sum == 0 || locality_sum > u64::from(u32::MAX) {
        return None;
    }
    let (mut min, mut max) = (1.0f64, 0.0f64);
    let mut out = Vec::with_capacity(hosts.len());
    let mut start = 0usize;
    for &(len, lw) in groups {
        let end = (start + len).min(hosts.len());
        let group = hosts.get(start..end).unwrap_or_default();
        let first = start;
        start = end;
        if lw == 0 {
            continue;
        }
        let share = f64::from(lw) / locality_sum as f64;
        let sum: u64 = group.iter().map(|h| u64::from(h.weight)).sum();
        if sum > u64::from(u32::MAX) {
            return None;
        }
        for (i, h) in group.iter().enumerate() {
            let w = f64::from(h.weight) * share / sum as f64;
            min = min.min(w);
            max = max.max(w);
            out.push(((first + i) as u32, w));
        }
    }
    Some((out, min, max))
}

/// A level's lookup table: ring or Maglev, over the level's host list (the
/// healthy one, or every host in panic); entries are indexes into that list.
#[derive(Debug)]
pub enum HashTable {
    /// A ketama ring: (hash, host index), sorted by hash.
    Ring(Box<[(u64, u32)]>),
    /// A Maglev table: host index per slot (table size slots).
    Maglev(Box<[u32]>),
}

impl HashTable {
    /// The table of `policy` over `hosts` (grouped by locality as `groups`
    /// says, with locality-weighted balancing); `None` for a policy that does
    /// not hash.
    pub fn build(
        hosts: &[Arc<Host>],
        groups: Option<&[(usize, u32)]>,
        policy: &LbPolicy,
    ) -> Option<Self> {
        let entries = normalized(hosts, groups);
        match policy {
            LbPolicy::RingHash(r) => Some(Self::Ring(ring(hosts, entries, r))),
            LbPolicy::Maglev(m) => Some(Self::Maglev(maglev(hosts, entries, m))),
            _ => None,
        }
    }

    /// The index of the host for `hash` on pick `attempt` (0 for the first;
    /// later ones are a retry host predicate's re-picks, moved as Envoy moves
    /// them); `None` when the table is empty.
    pub fn choose(&self, hash: u64, attempt: u32) -> Option<usize> {
        match self {
            Self::Ring(ring) => ring_choose(ring, hash, attempt),
            Self::Maglev(table) => {
                if table.is_empty() {
                    return None;
                }
                let mut h = hash;
                if attempt > 0 {
                    h ^= (u64::MAX - u64::from(attempt)).wrapping_add(1);
                }
                table
                    .get((h % table.len() as u64) as usize)
                    .map(|&i| i as usize)
            }
        }
    }
}

/// Envoy's ring: `scale` entries per unit of normalised weight, so the
/// lightest host gets `ceil(min_w x minimum_ring_size)` of them (capped at
/// `maximum_ring_size` in all), keyed `<host key>_<n>`.
fn ring(hosts: &[Arc<Host>], entries: Option<Normalized>, cfg: &RingHash) -> Box<[(u64, u32)]> {
    let Some((weights, min_w, _)) = entries.filter(|e| !e.0.is_empty()) else {
        return Box::default();
    };
    let scale = ((min_w * cfg.min_ring_size as f64).ceil() / min_w).min(cfg.max_ring_size as f64);
    let mut ring = Vec::with_capacity(scale.ceil() as usize);
    let (mut current, mut target) = (0.0f64, 0.0f64);
    let mut key = String::new();
    for &(i, w) in &weights {
        let Some(h) = hosts.get(i as usize) else {
            continue;
        };
        key.clear();
        key.push_str(host_key(h, cfg.use_hostname_for_hashing));
        key.push('_');
        let base = key.len();
        target += scale * w;
        let mut n: u64 = 0;
        while current < target {
            key.truncate(base);
            key.push_str(&n.to_string());
            let hash = match cfg.hash_function {
                RingHashFunction::MurmurHash2 => murmur_hash2(key.as_bytes(), STD_HASH_SEED),
                RingHashFunction::XxHash => xxhash64(key.as_bytes(), 0),
            };
            ring.push((hash, i));
            n += 1;
            current += 1.0;
        }
    }
    ring.sort_by_key(|e| e.0);
    ring.into_boxed_slice()
}

/// Envoy's ketama lookup (signed bounds, as in its port): the first entry
/// whose hash is at least `h`, wrapping to the first; a re-pick moves
/// `attempt` entries on.
fn ring_choose(ring: &[(u64, u32)], h: u64, attempt: u32) -> Option<usize> {
    if ring.is_empty() {
        return None;
    }
    let n = ring.len() as i64;
    let (mut low, mut high) = (0i64, n);
    let mut mid;
    loop {
        mid = (low + high) / 2;
        if mid == n {
            mid = 0;
            break;
        }
        let midval = ring.get(mid as usize)?.0;
        let before = if mid == 0 {
            0
        } else {
            ring.get(mid as usize - 1)?.0
        };
        if h <= midval && h > before {
            break;
        }
        if midval < h {
            low = mid + 1;
        } else {
            high = mid - 1;
        }
        if low > high {
            mid = 0;
            break;
        }
    }
    if attempt > 0 {
        mid = (mid + i64::from(attempt)) % n;
    }
    ring.get(mid as usize).map(|e| e.1 as usize)
}

/// Envoy's Maglev table (the paper's listing 1, weighted): hosts in order of
/// their key, each with an offset and skip from its key's xxHash64 (seeds 0
/// and 1); a host whose weight is `max / k` takes a slot every `k` rounds.
fn maglev(hosts: &[Arc<Host>], entries: Option<Normalized>, cfg: &Maglev) -> Box<[u32]> {
    let Some((weights, _, max_w)) = entries.filter(|e| !e.0.is_empty()) else {
        return Box::default();
    };
    let size = cfg.table_size;
    if size < 2 {
        return Box::default();
    }
    struct Entry {
        host: u32,
        offset: u64,
        skip: u64,
        weight: f64,
        target: f64,
        next: u64,
    }
    let mut order: Vec<(&str, u32, f64)> = weights
        .iter()
        .filter_map(|&(i, w)| {
            let h = hosts.get(i as usize)?;
            Some((host_key(h, cfg.use_hostname_for_hashing), i, w))
        })
        .collect();
    order.sort_by(|a, b| a.0.cmp(b.0).then(a.1.cmp(&b.1)));
    let mut entries: Vec<Entry> = order
        .into_iter()
        .map(|(key, i, weight)| Entry {
            host: i,
            offset: xxhash64(key.as_bytes(), 0) % size,
            skip: xxhash64(key.as_bytes(), 1) % (size - 1) + 1,
            weight,
            target: 0.0,
            next: 0,
        })
        .collect();
    const EMPTY: u32 = u32::MAX;
    let mut table = vec![EMPTY; size as usize];
    let mut filled: u64 = 0;
    let mut iteration: u32 = 1;
    while filled < size {
        let before = filled;
        for e in entries.iter_mut() {
            if filled >= size {
                break;
            }
            if f64::from(iteration) * e.weight < e.target {
                continue;
            }
            e.target += max_w;
            let mut c = (e.offset + e.skip * e.next) % size;
            while table.get(c as usize).is_some_and(|&s| s != EMPTY) {
                e.next += 1;
                c = (e.offset + e.skip * e.next) % size;
            }
            if let Some(slot) = table.get_mut(c as usize) {
                *slot = e.host;
            }
            e.next += 1;
            filled += 1;
        }
        if filled == before && iteration == u32::MAX {
            // Cannot happen with positive weights; never loop forever.
            return Box::default();
        }
        iteration = iteration.wrapping_add(1);
    }
    table.into_boxed_slice()
}

#[cfg(test)]
#[path = "hashing_tests.rs"]
mod tests;
