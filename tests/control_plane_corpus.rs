//! The control-plane corpus (folder `$COURIER_CP_CORPUS`, normally
//! `../shared/control-plane-corpus`): bootstraps made from the golden outputs of
//! Envoy Gateway, Istio and Contour, with real Envoy 1.40's `--mode validate`
//! verdict per case in its `MANIFEST.tsv`.
//!
//! Every case is loaded as `courier --mode validate` loads it (from the case's
//! stand-in working directory, with `--service-node cp-corpus --service-cluster
//! cp-corpus`), and counts only when this build can also serve it (what
//! `--mode validate` checks after the config: nothing it accepts and would
//! refuse at `--mode serve`). The test prints how many of the cases Envoy accepts courier
//! loads and, for the rest, which fields refuse how many cases; it fails when
//! fewer load than [`LOADED_AT_LEAST`] (raise it as features land) or when
//! courier loads a case Envoy rejects.
//!
//! ```text
//! COURIER_CP_CORPUS=../shared/control-plane-corpus cargo test -p courier-tests --test control_plane_corpus -- --nocapture
//! ```

// A test (or benchmark setup) that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_config::{LoadOptions, load_bootstrap};
use courier_tests::TestCa;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Cases (of those Envoy accepts) courier must load: the count this
/// repository reached, so that nothing that loads stops loading.
const LOADED_AT_LEAST: usize = 200;

/// One row of `MANIFEST.tsv`.
struct Case {
    name: String,
    envoy_accepts: bool,
}

fn manifest(dir: &Path) -> Vec<Case> {
    let text = std::fs::read_to_string(dir.join("MANIFEST.tsv")).expect("MANIFEST.tsv");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            Case {
                name: cols[0].to_string(),
                envoy_accepts: cols.last() == Some(&"accept"),
            }
        })
        .collect()
}

/// The files the cases read relative to their working directory (the corpus
/// README lists them): a CA certificate and two SDS `DiscoveryResponse` files;
/// and the two SDS files Contour's bootstrap names under its
/// `--resources-dir` (Contour writes them beside the bootstrap), which
/// courier's `--mode validate` reads as Envoy's requires them to exist.
fn stand_ins(dir: &Path) {
    let ca = TestCa::new("control-plane corpus CA");
    let leaf = ca.leaf(&["xds.example.com"]);
    let certs = dir.join("standin-files/certs");
    let sds = dir.join("standin-files/sds");
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::create_dir_all(&sds).unwrap();
    std::fs::write(certs.join("ca.crt"), &ca.pem.cert).unwrap();
    let secret = |name: &str, body: serde_json::Value| {
        let mut secret = serde_json::json!({
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
            "name": name,
        });
        secret
            .as_object_mut()
            .unwrap()
            .extend(body.as_object().unwrap().clone());
        serde_json::json!({ "resources": [secret] }).to_string()
    };
    std::fs::write(
        sds.join("xds-certificate.json"),
        secret(
            "xds_certificate",
            serde_json::json!({"tls_certificate": {
                "certificate_chain": {"inline_string": leaf.cert},
                "private_key": {"inline_string": leaf.key},
            }}),
        ),
    )
    .unwrap();
    std::fs::write(
        sds.join("xds-trusted-ca.json"),
        secret(
            "xds_trusted_ca",
            serde_json::json!({"validation_context": {
                "trusted_ca": {"inline_string": ca.pem.cert},
            }}),
        ),
    )
    .unwrap();
    let contour = dir.join("resources/sds");
    std::fs::create_dir_all(&contour).unwrap();
    std::fs::write(
        contour.join("xds-tls-certificate.json"),
        secret(
            "contour_xds_tls_certificate",
            serde_json::json!({"tls_certificate": {
                "certificate_chain": {"inline_string": leaf.cert},
                "private_key": {"inline_string": leaf.key},
            }}),
        ),
    )
    .unwrap();
    std::fs::write(
        contour.join("xds-validation-context.json"),
        secret(
            "contour_xds_tls_validation_context",
            serde_json::json!({"validation_context": {
                "trusted_ca": {"inline_string": ca.pem.cert},
            }}),
        ),
    )
    .unwrap();
}

/// The field an error names, with list indices and map keys taken out
/// (`clusters[3].lb_policy` -> `clusters.lb_policy`), and its message.
fn refusal(path: &str, message: &str) -> String {
    let mut field = String::with_capacity(path.len());
    let mut depth = 0;
    for c in path.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ if depth == 0 => field.push(c),
            _ => {}
        }
    }
    let last = field.rsplit('.').next().unwrap_or(&field).to_string();
    format!("{last}: {message}")
}

#[test]
fn control_plane_corpus_loads() {
    let dir = match std::env::var_os("COURIER_CP_CORPUS") {
        Some(d) => PathBuf::from(d),
        None => {
            eprintln!("SKIPPED: COURIER_CP_CORPUS is not set");
            return;
        }
    };
    let dir = dir
        .canonicalize()
        .unwrap_or_else(|e| panic!("corpus folder {}: {e}", dir.display()));
    let cases = manifest(&dir);
    assert!(cases.len() > 100, "{} cases in the manifest", cases.len());
    // Stand-in files the cases name relative to the working directory. This is
    // the only test in this binary, so changing the directory races with nothing.
    let work = tempfile::tempdir().unwrap();
    stand_ins(work.path());
    std::env::set_current_dir(work.path()).unwrap();

    let (mut accepted, mut loaded) = (0, 0);
    let mut loaded_but_envoy_rejects = Vec::new();
    // Refusal -> the cases it refuses.
    let mut refusals: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for case in &cases {
        let file = dir.join(format!("{}.json", case.name));
        let result = load_bootstrap(&LoadOptions {
            config_path: Some(file),
            service_node: Some("cp-corpus".into()),
            service_cluster: Some("cp-corpus".into()),
            ..Default::default()
        })
        .and_then(|b| match courier::unservable(&b) {
            Ok(()) => Ok(b),
            Err(problems) => Err(courier_config::ConfigError {
                errors: problems
                    .iter()
                    .map(|p| {
                        let (path, message) = p.split_once(": ").unwrap_or(("", p));
                        courier_config::FieldError {
                            path: path.to_string(),
                            message: message.to_string(),
                        }
                    })
                    .collect(),
            }),
        });
        match (&result, case.envoy_accepts) {
            (Ok(_), true) => loaded += 1,
            (Ok(_), false) => loaded_but_envoy_rejects.push(case.name.clone()),
            (Err(e), true) => {
                let mut seen = std::collections::BTreeSet::new();
                for err in &e.errors {
                    seen.insert(refusal(&err.path, &err.message));
                }
                if std::env::var_os("COURIER_CP_CORPUS_CASES").is_some() {
                    println!("case {}: {}", case.name, Vec::from_iter(&seen).len());
                    for r in &seen {
                        println!("case {}\t{r}", case.name);
                    }
                }
                for r in seen {
                    refusals.entry(r).or_default().push(case.name.clone());
                }
            }
            (Err(_), false) => {}
        }
        accepted += usize::from(case.envoy_accepts);
    }
    let mut by_count: Vec<(&String, &Vec<String>)> = refusals.iter().collect();
    by_count.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
    println!(
        "courier loads {loaded} of the {accepted} corpus cases Envoy 1.40 accepts ({:.1} %)",
        100.0 * loaded as f64 / accepted.max(1) as f64
    );
    println!("cases\trefusal");
    for (refusal, cases) in &by_count {
        println!("{}\t{refusal}", cases.len());
    }
    assert!(
        loaded_but_envoy_rejects.is_empty(),
        "courier loads cases Envoy rejects: {loaded_but_envoy_rejects:?}"
    );
    assert!(
        loaded >= LOADED_AT_LEAST,
        "{loaded} corpus cases load, fewer than the {LOADED_AT_LEAST} that did"
    );
}
