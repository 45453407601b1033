//! The consistent-hashing balancers: RING_HASH and MAGLEV, in their `lb_policy`
//! forms (`ring_hash_lb_config`, `maglev_lb_config`, with
//! `common_lb_config.consistent_hashing_lb_config`) and their typed
//! `load_balancing_policy` forms (`RingHash`, `Maglev`).

use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::cluster::v3 as pb;
use envoy_types::pb::envoy::extensions::load_balancing_policies::common::v3 as common;
use envoy_types::pb::envoy::extensions::load_balancing_policies::maglev::v3::Maglev as MaglevProto;
use envoy_types::pb::envoy::extensions::load_balancing_policies::ring_hash::v3::{
    RingHash as RingHashProto, ring_hash,
};
use envoy_types::pb::google::protobuf::{UInt32Value, UInt64Value};

/// Envoy's default `minimum_ring_size`.
pub const DEFAULT_MIN_RING_SIZE: u64 = 1024;
/// Envoy's default (and largest) `maximum_ring_size`.
pub const DEFAULT_MAX_RING_SIZE: u64 = 8 * 1024 * 1024;
/// Envoy's default Maglev `table_size`.
pub const DEFAULT_TABLE_SIZE: u64 = 65537;
/// The largest Maglev `table_size` Envoy accepts (PGV `lte`).
const MAX_TABLE_SIZE: u64 = 5_000_011;

/// The hash a ring places its hosts' entries with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingHashFunction {
    /// xxHash64, seed 0 (the default).
    XxHash,
    /// 64-bit MurmurHash2 as libstdc++'s `std::hash<std::string>`.
    MurmurHash2,
}

/// A ring-hash balancer's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingHash {
    /// `minimum_ring_size` (default 1024).
    pub min_ring_size: u64,
    /// `maximum_ring_size` (default 8M).
    pub max_ring_size: u64,
    /// `hash_function`.
    pub hash_function: RingHashFunction,
    /// `use_hostname_for_hashing`: a host's key is its hostname, not its address.
    pub use_hostname_for_hashing: bool,
}

/// A Maglev balancer's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maglev {
    /// `table_size` (a prime; default 65537).
    pub table_size: u64,
    /// `use_hostname_for_hashing`.
    pub use_hostname_for_hashing: bool,
}

/// `hash_balance_factor` (bounded loads) is not implemented: refused when set.
fn refuse_balance_factor(f: Option<&UInt32Value>, path: &Path<'_>, ctx: &mut Ctx) {
    if f.is_some() {
        ctx.unsupported(path, "hash_balance_factor (bounded load)");
    }
}

/// `consistent_hashing_lb_config` (common or typed): `use_hostname_for_hashing`.
fn consistent(c: &common::ConsistentHashingLbConfig, path: &Path<'_>, ctx: &mut Ctx) -> bool {
    refuse_balance_factor(
        c.hash_balance_factor.as_ref(),
        &path.field("hash_balance_factor"),
        ctx,
    );
    if !c.hash_policy.is_empty() {
        ctx.unsupported(&path.field("hash_policy"), "a cluster-level hash_policy");
    }
    c.use_hostname_for_hashing
}

/// The legacy `common_lb_config.consistent_hashing_lb_config`.
fn common_consistent(c: &pb::Cluster, path: &Path<'_>, ctx: &mut Ctx) -> bool {
    let Some(chc) = c
        .common_lb_config
        .as_ref()
        .and_then(|common| common.consistent_hashing_lb_config.as_ref())
    else {
        return false;
    };
    let p = path.field("common_lb_config.consistent_hashing_lb_config");
    refuse_balance_factor(
        chc.hash_balance_factor.as_ref(),
        &p.field("hash_balance_factor"),
        ctx,
    );
    chc.use_hostname_for_hashing
}

fn ring_sizes(
    min: Option<&UInt64Value>,
    max: Option<&UInt64Value>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> (u64, u64) {
    let min_ring_size = min.map_or(DEFAULT_MIN_RING_SIZE, |v| v.value);
    let max_ring_size = max.map_or(DEFAULT_MAX_RING_SIZE, |v| v.value);
    for (name, v) in [
        ("minimum_ring_size", min_ring_size),
        ("maximum_ring_size", max_ring_size),
    ] {
        if v > DEFAULT_MAX_RING_SIZE {
            // PGV `lte: 8388608`.
            ctx.error(
                &path.field(name),
                format!("must be at most {DEFAULT_MAX_RING_SIZE}, found {v}"),
            );
        }
    }
    if min_ring_size > max_ring_size {
        // Envoy's wording.
        ctx.error(
            path,
            format!(
                "ring hash: minimum_ring_size ({min_ring_size}) > maximum_ring_size ({max_ring_size})"
            ),
        );
    }
    (min_ring_size, max_ring_size)
}

fn table_size(v: Option<&UInt64Value>, path: &Path<'_>, ctx: &mut Ctx) -> u64 {
    let size = v.map_or(DEFAULT_TABLE_SIZE, |v| v.value);
    if size > MAX_TABLE_SIZE {
        ctx.error(
            path,
            format!("must be at most {MAX_TABLE_SIZE}, found {size}"),
        );
    } else if !is_prime(size) {
        // Envoy's wording.
        ctx.error(path, "The table size of maglev must be prime number");
    }
    size
}

/// Whether `n` is prime (trial division: `n` is at most 5000011).
pub fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

/// `lb_policy: RING_HASH` with `ring_hash_lb_config` (`lb_config` when it is
/// that variant) and the common consistent-hashing settings.
pub(super) fn legacy_ring_hash(
    c: &pb::Cluster,
    config: Option<&pb::cluster::RingHashLbConfig>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> RingHash {
    let p = path.field("ring_hash_lb_config");
    let (min_ring_size, max_ring_size) = ring_sizes(
        config.and_then(|r| r.minimum_ring_size.as_ref()),
        config.and_then(|r| r.maximum_ring_size.as_ref()),
        &p,
        ctx,
    );
    use pb::cluster::ring_hash_lb_config::HashFunction as F;
    let hash_function = match config.map_or(Ok(F::XxHash), |r| F::try_from(r.hash_function)) {
        Ok(F::XxHash) => RingHashFunction::XxHash,
        Ok(F::MurmurHash2) => RingHashFunction::MurmurHash2,
        Err(_) => {
            ctx.error(&p.field("hash_function"), "unknown hash function");
            RingHashFunction::XxHash
        }
    };
    RingHash {
        min_ring_size,
        max_ring_size,
        hash_function,
        use_hostname_for_hashing: common_consistent(c, path, ctx),
    }
}

/// `lb_policy: MAGLEV` with `maglev_lb_config` and the common
/// consistent-hashing settings.
pub(super) fn legacy_maglev(
    c: &pb::Cluster,
    config: Option<&pb::cluster::MaglevLbConfig>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Maglev {
    Maglev {
        table_size: table_size(
            config.and_then(|m| m.table_size.as_ref()),
            &path.field("maglev_lb_config").field("table_size"),
            ctx,
        ),
        use_hostname_for_hashing: common_consistent(c, path, ctx),
    }
}

/// The typed `RingHash` policy.
pub(super) fn typed_ring_hash(r: &RingHashProto, path: &Path<'_>, ctx: &mut Ctx) -> RingHash {
    let (min_ring_size, max_ring_size) = ring_sizes(
        r.minimum_ring_size.as_ref(),
        r.maximum_ring_size.as_ref(),
        path,
        ctx,
    );
    let hash_function = match ring_hash::HashFunction::try_from(r.hash_function) {
        Ok(ring_hash::HashFunction::DefaultHash | ring_hash::HashFunction::XxHash) => {
            RingHashFunction::XxHash
        }
        Ok(ring_hash::HashFunction::MurmurHash2) => RingHashFunction::MurmurHash2,
        Err(_) => {
            ctx.error(&path.field("hash_function"), "unknown hash function");
            RingHashFunction::XxHash
        }
    };
    // The deprecated fields apply when consistent_hashing_lb_config is absent.
    #[allow(deprecated)]
    let use_hostname_for_hashing = match &r.consistent_hashing_lb_config {
        Some(chc) => consistent(chc, &path.field("consistent_hashing_lb_config"), ctx),
        None => {
            refuse_balance_factor(
                r.hash_balance_factor.as_ref(),
                &path.field("hash_balance_factor"),
                ctx,
            );
            r.use_hostname_for_hashing
        }
    };
    RingHash {
        min_ring_size,
        max_ring_size,
        hash_function,
        use_hostname_for_hashing,
    }
}

/// The typed `Maglev` policy.
pub(super) fn typed_maglev(m: &MaglevProto, path: &Path<'_>, ctx: &mut Ctx) -> Maglev {
    Maglev {
        table_size: table_size(m.table_size.as_ref(), &path.field("table_size"), ctx),
        use_hostname_for_hashing: m
            .consistent_hashing_lb_config
            .as_ref()
            .is_some_and(|chc| consistent(chc, &path.field("consistent_hashing_lb_config"), ctx)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primes() {
        assert!(is_prime(65537));
        assert!(is_prime(5_000_011));
        assert!(is_prime(2) && is_prime(3) && is_prime(7));
        assert!(!is_prime(0) && !is_prime(1) && !is_prime(65536) && !is_prime(9));
    }
}
