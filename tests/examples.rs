//! Every shipped example validates in courier (with the certificates the README's
//! script generates, here written into a scratch folder).

// A test (or benchmark setup) that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_config::{LoadOptions, load_bootstrap};
use courier_tests::{workspace_root, write_test_certs};

#[test]
fn every_example_validates() {
    let dir = workspace_root().join("examples");
    let work = tempfile::tempdir().expect("tempdir");
    write_test_certs(work.path());
    // The only test in this binary: the examples read certificates relative to the
    // working directory, as Envoy does.
    std::env::set_current_dir(work.path()).expect("chdir");
    let mut names = Vec::new();
    let mut failures = Vec::new();
    for name in [
        "quickstart.yaml",
        "sidecar.yaml",
        "edge-gateway.yaml",
        "xds.yaml",
    ] {
        let result = load_bootstrap(&LoadOptions {
            config_path: Some(dir.join(name)),
            ..Default::default()
        });
        match result {
            Ok(b) => names.push((name, b.listeners.len(), b.clusters.len())),
            Err(e) => failures.push(format!("{name}:\n{e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "examples do not validate:\n{}",
        failures.join("\n\n")
    );
    // The quickstart serves something and needs nothing else running.
    assert!(
        names
            .iter()
            .any(|(n, listeners, _)| *n == "quickstart.yaml" && *listeners > 0)
    );
}
