//! Hand-written invalid configs (tests/configs/invalid): each is refused with
//! exactly the errors its `# expect:` lines give, path and message.

// A test (or benchmark setup) that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_config::{LoadOptions, load_bootstrap};
use courier_tests::invalid_cases;

#[test]
fn each_invalid_config_is_refused_with_its_exact_errors() {
    let cases = invalid_cases();
    assert!(
        cases.len() >= 30,
        "expected at least 30 invalid configs, found {}",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let result = load_bootstrap(&LoadOptions {
            config_path: Some(case.path.clone()),
            ..Default::default()
        });
        let mut got: Vec<String> = match result {
            Ok(_) => Vec::new(),
            Err(e) => e.errors.iter().map(ToString::to_string).collect(),
        };
        let mut want = case.expect.clone();
        got.sort();
        want.sort();
        if got != want {
            failures.push(format!(
                "{}:\n  expected: {want:#?}\n  courier:  {got:#?}",
                case.path.file_name().unwrap_or_default().to_string_lossy()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} invalid configs differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
