//! Proto → model translation of a large bootstrap: 1 000 clusters, 10 000 routes.
//! Target: under 50 ms (see benches/README.md).

// A test (or benchmark setup) that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_benches::bootstrap_json;
use courier_config::envoy_types::pb::envoy::config::bootstrap::v3::Bootstrap;
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

fn translate(c: &mut Criterion) {
    let json = bootstrap_json(1_000, 10_000);
    let dynamic =
        courier_config::load::dynamic_from_json(json, "envoy.config.bootstrap.v3.Bootstrap")
            .expect("valid bootstrap");
    let typed: Bootstrap = courier_config::load::typed_from_dynamic(&dynamic).expect("typed");
    let mut group = c.benchmark_group("config");
    group.sample_size(20);
    group.bench_function("translate_1000_clusters_10000_routes", |b| {
        b.iter(|| {
            let mut ctx = courier_config::Ctx::new();
            let bootstrap = courier_config::bootstrap::translate(black_box(&typed), &mut ctx);
            assert!(!ctx.has_errors());
            bootstrap
        })
    });
    group.bench_function("check_and_translate_1000_clusters_10000_routes", |b| {
        b.iter(|| {
            let mut ctx = courier_config::Ctx::new();
            let bootstrap = courier_config::bootstrap_from_proto(black_box(&dynamic), &mut ctx);
            assert!(!ctx.has_errors());
            bootstrap
        })
    });
    group.finish();
}

criterion_group!(benches, translate);
criterion_main!(benches);
