//! Translates the 1 000-cluster, 10 000-route bootstrap once: a target for
//! profilers (`valgrind --tool=callgrind`), where criterion's loop is in the way.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_benches::bootstrap_json;
use courier_config::envoy_types::pb::envoy::config::bootstrap::v3::Bootstrap;

fn main() {
    let json = bootstrap_json(1_000, 10_000);
    let dynamic =
        courier_config::load::dynamic_from_json(json, "envoy.config.bootstrap.v3.Bootstrap")
            .unwrap();
    let typed: Bootstrap = courier_config::load::typed_from_dynamic(&dynamic).unwrap();
    let mut ctx = courier_config::Ctx::new();
    let b = courier_config::bootstrap::translate(std::hint::black_box(&typed), &mut ctx);
    assert!(!ctx.has_errors());
    println!(
        "{} listeners, {} clusters",
        b.listeners.len(),
        b.clusters.len()
    );
}
