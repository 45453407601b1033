//! The command line, through the real binary: Envoy's flags, exit codes, and
//! `--mode validate` reporting every error with its path.

// A test (or benchmark setup) that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output};

fn courier(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(args)
        .output()
        .expect("run courier")
}

fn example(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
        .display()
        .to_string()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn version_and_help_exit_zero() {
    let v = courier(&["--version"]);
    assert!(v.status.success());
    assert!(text(&v.stdout).contains(env!("CARGO_PKG_VERSION")));
    let h = courier(&["--help"]);
    assert!(h.status.success());
    let help = text(&h.stdout);
    for flag in [
        "--config-path",
        "--config-yaml",
        "--mode",
        "--concurrency",
        "--log-level",
        "--service-node",
        "--service-cluster",
        "--drain-time-s",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}

#[test]
fn validate_accepts_the_quickstart() {
    let path = example("quickstart.yaml");
    let out = courier(&["--mode", "validate", "-c", &path]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        format!("configuration '{path}' OK")
    );
}

#[test]
fn validate_reports_every_error_with_its_path_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        r#"
static_resources:
  clusters:
  - name: a
    connect_timeout: 1s
    lb_policy: CLUSTER_PROVIDED
    bogus: 1
layered_runtime: {}
"#,
    )
    .unwrap();
    let out = courier(&["--mode", "validate", "-c", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    // Structural errors are reported first, all of them in one run.
    assert!(
        err.contains("static_resources.clusters[0].bogus: unknown field"),
        "{err}"
    );
}

#[test]
fn unknown_flag_and_bad_mode_exit_1() {
    assert_eq!(courier(&["--no-such-flag"]).status.code(), Some(1));
    assert_eq!(
        courier(&["--mode", "bogus", "-c", "x.yaml"]).status.code(),
        Some(1)
    );
    let out = courier(&["--mode", "validate"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no configuration"));
}

#[test]
fn config_yaml_alone_and_merged_over_the_file() {
    // Alone: a whole bootstrap on the command line.
    let alone = courier(&[
        "--mode",
        "validate",
        "--config-yaml",
        "admin: {address: {socket_address: {address: 127.0.0.1, port_value: 9901}}}",
    ]);
    assert!(alone.status.success(), "{}", text(&alone.stderr));
    // Merged: a field the overlay adds is validated with the file (here, made invalid).
    let merged = courier(&[
        "--mode",
        "validate",
        "-c",
        &example("quickstart.yaml"),
        "--config-yaml",
        "static_resources: {clusters: [{name: extra, lb_policy: CLUSTER_PROVIDED}]}",
    ]);
    assert_eq!(merged.status.code(), Some(1));
    let err = text(&merged.stderr);
    assert!(
        err.contains("static_resources.clusters[0].lb_policy"),
        "{err}"
    );
}
