//! Translates the 1 000-cluster, 10 000-route bootstrap: a target for profilers
//! (`valgrind --tool=callgrind`, `perf stat`), where criterion's loop is in the way.
//! `TRANSLATIONS=N` repeats the translation (default 1), so two runs under
//! `perf stat -e task-clock` give the CPU time of one translation by difference,
//! which other load on the machine does not inflate the way it does wall time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_benches::bootstrap_json;
use courier_config::envoy_types::pb::envoy::config::bootstrap::v3::Bootstrap;

fn main() {
    let json = bootstrap_json(1_000, 10_000);
    let dynamic =
        courier_config::load::dynamic_from_json(json, "envoy.config.bootstrap.v3.Bootstrap")
            .unwrap();
    let typed: Bootstrap = courier_config::load::typed_from_dynamic(&dynamic).unwrap();
    let n: usize = std::env::var("TRANSLATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut kept = Vec::with_capacity(n);
    for _ in 0..n {
        let mut ctx = courier_config::Ctx::new();
        let b = courier_config::bootstrap::translate(std::hint::black_box(&typed), &mut ctx);
        assert!(!ctx.has_errors());
        kept.push(b);
    }
    let clusters: usize = kept.iter().map(|b| b.clusters.len()).sum();
    println!("{n} translations, {clusters} clusters in all");
}
