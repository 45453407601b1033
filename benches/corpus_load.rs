//! Load time of the largest control-plane corpus case courier loads (issue 17):
//! read, parse (JSON), support walk and translation, as `courier --mode
//! validate` and start-up do. The corpus is `$COURIER_CP_CORPUS` (normally
//! `../shared/control-plane-corpus`); without it the benchmark says so and
//! measures nothing.

// A benchmark setup that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_config::{LoadOptions, load_bootstrap};
use criterion::{Criterion, criterion_group, criterion_main};
use std::path::{Path, PathBuf};

/// Every case file under `dir`, largest first.
fn cases_by_size(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    // Bounded by the corpus: each folder is read once.
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                out.push((e.metadata().map(|m| m.len()).unwrap_or(0), p));
            }
        }
    }
    out.sort_by_key(|(size, _)| std::cmp::Reverse(*size));
    out
}

fn options(path: &Path) -> LoadOptions {
    LoadOptions {
        config_path: Some(path.to_path_buf()),
        service_node: Some("cp-corpus".into()),
        service_cluster: Some("cp-corpus".into()),
        ..Default::default()
    }
}

fn load(c: &mut Criterion) {
    let Some(dir) = std::env::var_os("COURIER_CP_CORPUS").map(PathBuf::from) else {
        eprintln!("SKIPPED: COURIER_CP_CORPUS is not set");
        return;
    };
    // The largest case that loads without the corpus' stand-in files.
    let Some((size, path)) = cases_by_size(&dir)
        .into_iter()
        .find(|(_, p)| load_bootstrap(&options(p)).is_ok())
    else {
        panic!("no corpus case loads");
    };
    let name = path
        .strip_prefix(&dir)
        .unwrap_or(&path)
        .display()
        .to_string();
    eprintln!("largest loadable case: {name} ({size} bytes)");
    let opts = options(&path);
    let mut group = c.benchmark_group("corpus");
    group.sample_size(50);
    group.bench_function("load_largest_case", |b| {
        b.iter(|| load_bootstrap(&opts).expect("loads"))
    });
    group.finish();
}

criterion_group!(benches, load);
criterion_main!(benches);
