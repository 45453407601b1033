//! Every config of the Envoy corpus (folder `$COURIER_ENVOY_CORPUS`, with its
//! MANIFEST.md) gives the outcome its manifest names: accepted, or refused at
//! exactly the listed paths (for ⚑ rows, either that or the named alternative; a † refusal
//! may be absent once courier serves that part).

// A test (or benchmark setup) that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_config::{LoadOptions, load_bootstrap};
use courier_tests::{parse_manifest, write_test_certs};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Refusals the manifest lists that courier has since grown to serve, beyond
/// the scope the manifest was judged against: like a † refusal, each may be
/// absent. (file, path, what now serves it.)
const SERVED_SINCE: &[(&str, &str, &str)] = &[
    (
        "double-proxy-backend.yaml",
        "static_resources.listeners[0].filter_chains[0].filters[0]",
        "envoy.filters.network.tcp_proxy",
    ),
    (
        "tls-sni.yaml",
        "static_resources.listeners[0].filter_chains[2].filters[0]",
        "envoy.filters.network.tcp_proxy",
    ),
    (
        "zipkin-front-proxy.yaml",
        "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.tracing",
        "envoy.tracers.zipkin",
    ),
];

#[test]
fn corpus_outcomes_match_the_manifest() {
    let Some(dir) = std::env::var_os("COURIER_ENVOY_CORPUS").map(PathBuf::from) else {
        eprintln!("SKIPPED: COURIER_ENVOY_CORPUS is not set");
        return;
    };
    let dir = dir
        .canonicalize()
        .unwrap_or_else(|e| panic!("corpus folder {}: {e}", dir.display()));
    let manifest =
        std::fs::read_to_string(dir.join("MANIFEST.md")).expect("MANIFEST.md in the corpus folder");
    let cases = parse_manifest(&manifest);
    assert!(
        !cases.is_empty(),
        "no rows found in {}/MANIFEST.md",
        dir.display()
    );

    // Certificates the configs read relative to the working directory. This is the
    // only test in this binary, so changing the directory races with nothing.
    let work = tempfile::tempdir().expect("tempdir");
    write_test_certs(work.path());
    std::env::set_current_dir(work.path()).expect("chdir");

    let mut failures = Vec::new();
    for case in &cases {
        let file = dir.join(&case.file);
        let result = load_bootstrap(&LoadOptions {
            config_path: Some(file.clone()),
            ..Default::default()
        });
        let got: BTreeSet<String> = match &result {
            Ok(_) => BTreeSet::new(),
            Err(e) => e.errors.iter().map(|e| e.path.clone()).collect(),
        };
        let want: BTreeSet<String> = case.refuse.iter().cloned().collect();
        let alternative: Option<BTreeSet<String>> = case
            .flag_alternative
            .as_ref()
            .map(|a| a.iter().cloned().collect());
        // A † refusal courier now serves may be missing; every other one must be there,
        // and nothing else refused.
        let mut grown: BTreeSet<&String> = case.grown.iter().collect();
        grown.extend(case.refuse.iter().filter(|p| {
            SERVED_SINCE
                .iter()
                .any(|(f, q, _)| *f == case.file && q == p)
        }));
        // A refusal at a field inside a listed one is that refusal, narrowed to
        // the part courier still lacks.
        let within = |g: &String, w: &String| {
            g == w || g.starts_with(&format!("{w}.")) || g.starts_with(&format!("{w}["))
        };
        let as_listed = got.iter().all(|g| want.iter().any(|w| within(g, w)))
            && want
                .iter()
                .filter(|w| !got.iter().any(|g| within(g, w)))
                .all(|p| grown.contains(p));
        let ok = as_listed || alternative.as_ref().is_some_and(|alt| &got == alt);
        let shown = match &result {
            Ok(_) => "accepted".to_string(),
            Err(e) => e.to_string(),
        };
        println!(
            "{}: {}",
            case.file,
            if ok { "as expected" } else { "MISMATCH" }
        );
        if !ok {
            failures.push(format!(
                "{}: expected refusal at {want:?}{}; courier said:\n{shown}",
                case.file,
                alternative
                    .map(|a| format!(" (or ⚑ {a:?})"))
                    .unwrap_or_default()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus configs differ:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}
