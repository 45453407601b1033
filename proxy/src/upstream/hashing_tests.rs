//! Ring and Maglev construction against values worked out from Envoy's
//! algorithm, and the hash functions against Envoy's own test vectors.

use super::*;
use courier_config::cluster::{LbPolicy, Maglev, RingHash, RingHashFunction};
use std::net::SocketAddr;

fn hosts(ports: &[(u16, u32)]) -> Vec<Arc<Host>> {
    ports
        .iter()
        .map(|&(p, w)| {
            Arc::new(Host::new(
                SocketAddr::from(([127, 0, 0, 1], p)),
                String::new(),
                w,
                true,
            ))
        })
        .collect()
}

fn ring_cfg(min: u64, max: u64, f: RingHashFunction) -> RingHash {
    RingHash {
        min_ring_size: min,
        max_ring_size: max,
        hash_function: f,
        use_hostname_for_hashing: false,
    }
}

#[test]
fn hash_functions_match_envoys_vectors() {
    // Envoy's test/common/common/hash_test.cc.
    assert_eq!(xxhash64(b"foo", 0), 3728699739546630719);
    assert_eq!(xxhash64(b"foo\nbar", 0), 8917841378505826757);
    assert_eq!(xxhash64(b"", 0), 17241709254077376921);
    assert_eq!(murmur_hash2(b"foo", STD_HASH_SEED), 9631199822919835226);
    assert_eq!(murmur_hash2(b"bar", STD_HASH_SEED), 11474628671133349555);
    assert_eq!(
        murmur_hash2(b"foo\nbar", STD_HASH_SEED),
        16306510975912980159
    );
    assert_eq!(murmur_hash2(b"lyft", STD_HASH_SEED), 12847078931730529320);
    assert_eq!(murmur_hash2(b"", STD_HASH_SEED), 6142509188972423790);
}

#[test]
fn ring_entries_are_envoys_keys() {
    // Two equal hosts, minimum ring 4: scale = ceil(0.5 x 4) / 0.5 = 4, two
    // entries each, keyed "<address>_<n>".
    let hs = hosts(&[(80, 1), (81, 1)]);
    let r = ring(
        &hs,
        normalized(&hs, None),
        &ring_cfg(4, 100, RingHashFunction::XxHash),
    );
    let mut expect: Vec<(u64, u32)> = vec![
        (xxhash64(b"127.0.0.1:80_0", 0), 0),
        (xxhash64(b"127.0.0.1:80_1", 0), 0),
        (xxhash64(b"127.0.0.1:81_0", 0), 1),
        (xxhash64(b"127.0.0.1:81_1", 0), 1),
    ];
    expect.sort();
    assert_eq!(&*r, &expect[..]);
    let m = ring(
        &hs,
        normalized(&hs, None),
        &ring_cfg(4, 100, RingHashFunction::MurmurHash2),
    );
    assert!(
        m.iter()
            .any(|e| e.0 == murmur_hash2(b"127.0.0.1:81_1", STD_HASH_SEED))
    );
    // A lookup takes the first entry at or after the hash, wrapping around.
    for (i, &(h, host)) in r.iter().enumerate() {
        assert_eq!(ring_choose(&r, h, 0), Some(host as usize));
        assert_eq!(ring_choose(&r, h - 1, 0), Some(host as usize));
        let next = r[(i + 1) % r.len()].1 as usize;
        assert_eq!(ring_choose(&r, h, 1), Some(next));
    }
    let last = r.last().unwrap().0;
    if last < u64::MAX {
        assert_eq!(ring_choose(&r, last + 1, 0), Some(r[0].1 as usize));
    }
}

#[test]
fn ring_weights_and_sizes_follow_envoy() {
    // Weights 1:3, minimum 1024: the light host gets ceil(0.25 x 1024) =
    // 256 entries, scale 1024, the heavy one 768.
    let hs = hosts(&[(80, 1), (81, 3)]);
    let r = ring(
        &hs,
        normalized(&hs, None),
        &ring_cfg(1024, 8 << 20, RingHashFunction::XxHash),
    );
    assert_eq!(r.len(), 1024);
    assert_eq!(r.iter().filter(|e| e.1 == 0).count(), 256);
    // The maximum caps the scale: 3 hosts, max 10 -> entries at running sums
    // 10/3, 20/3, 10: 4, 3 and 3.
    let hs = hosts(&[(80, 1), (81, 1), (82, 1)]);
    let r = ring(
        &hs,
        normalized(&hs, None),
        &ring_cfg(1024, 10, RingHashFunction::XxHash),
    );
    let count = |i| r.iter().filter(|e| e.1 == i).count();
    assert_eq!((count(0), count(1), count(2)), (4, 3, 3));
    assert!(
        ring(
            &[],
            normalized(&[], None),
            &ring_cfg(4, 8, RingHashFunction::XxHash)
        )
        .is_empty()
    );
}

#[test]
fn maglev_fills_by_envoys_permutations() {
    let hs = hosts(&[(81, 1), (80, 1)]);
    let size = 7;
    let t = maglev(
        &hs,
        normalized(&hs, None),
        &Maglev {
            table_size: size,
            use_hostname_for_hashing: false,
        },
    );
    // Worked by hand from the paper's listing: hosts in key order
    // (127.0.0.1:80 first), alternately taking their next free preferred slot.
    let key = |p: &str| {
        (
            xxhash64(p.as_bytes(), 0) % size,
            xxhash64(p.as_bytes(), 1) % (size - 1) + 1,
        )
    };
    let order = [("127.0.0.1:80", 1u32), ("127.0.0.1:81", 0u32)];
    let mut expect = vec![u32::MAX; size as usize];
    let mut next = [0u64; 2];
    let mut filled = 0;
    while filled < size {
        for (k, (name, host)) in order.iter().enumerate() {
            if filled == size {
                break;
            }
            let (offset, skip) = key(name);
            let mut c = (offset + skip * next[k]) % size;
            while expect[c as usize] != u32::MAX {
                next[k] += 1;
                c = (offset + skip * next[k]) % size;
            }
            expect[c as usize] = *host;
            next[k] += 1;
            filled += 1;
        }
    }
    assert_eq!(&*t, &expect[..]);
    let table = HashTable::Maglev(t);
    let h = 12345u64;
    assert_eq!(
        table.choose(h, 0),
        Some(expect[(h % size) as usize] as usize)
    );
    let moved = h ^ (u64::MAX - 2).wrapping_add(1);
    assert_eq!(
        table.choose(h, 2),
        Some(expect[(moved % size) as usize] as usize)
    );
}

#[test]
fn maglev_weights_share_the_table() {
    // Weight 1:2 over 65537 slots: about a third and two thirds.
    let hs = hosts(&[(80, 1), (81, 2)]);
    let t = maglev(
        &hs,
        normalized(&hs, None),
        &Maglev {
            table_size: 65537,
            use_hostname_for_hashing: false,
        },
    );
    let light = t.iter().filter(|&&i| i == 0).count();
    assert!((21_800..=21_900).contains(&light), "{light}");
    assert!(t.iter().all(|&i| i < 2));
}

#[test]
fn metadata_hash_key_and_hostname_replace_the_address() {
    let h = Host::new(
        SocketAddr::from(([127, 0, 0, 1], 80)),
        "web".into(),
        1,
        true,
    );
    assert_eq!(host_key(&h, false), "127.0.0.1:80");
    assert_eq!(host_key(&h, true), "web");
    let h = h.with_hash_key(Some("k1".into()));
    assert_eq!(host_key(&h, false), "k1");
    assert_eq!(host_key(&h, true), "k1");
    let built = HashTable::build(
        &[Arc::new(h)],
        None,
        &LbPolicy::RingHash(ring_cfg(2, 2, RingHashFunction::XxHash)),
    );
    let Some(HashTable::Ring(r)) = built else {
        panic!("a ring")
    };
    assert_eq!(
        r[0].0.min(r[1].0),
        xxhash64(b"k1_0", 0).min(xxhash64(b"k1_1", 0))
    );
}

#[test]
fn locality_weights_scale_host_shares() {
    // Localities of weight 1 (hosts 80, 81) and 3 (host 82), and one of
    // weight 0 (host 83, left out): shares 1/8, 1/8, 3/4.
    let hs = hosts(&[(80, 1), (81, 1), (82, 1), (83, 5)]);
    let (entries, min, max) = normalized(&hs, Some(&[(2, 1), (1, 3), (1, 0)])).unwrap();
    assert_eq!(entries, vec![(0, 0.125), (1, 0.125), (2, 0.75)]);
    assert_eq!((min, max), (0.125, 0.75));
    // Minimum ring 8: one entry per eighth.
    let r = ring(
        &hs,
        Some((entries, min, max)),
        &ring_cfg(8, 100, RingHashFunction::XxHash),
    );
    let count = |i| r.iter().filter(|e| e.1 == i).count();
    assert_eq!((count(0), count(1), count(2), count(3)), (1, 1, 6, 0));
    // Every locality of weight 0: no table.
    assert!(normalized(&hs, Some(&[(4, 0)])).is_none());
}
