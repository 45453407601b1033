//! Builds the descriptor pool courier reads Envoy configs with.
//!
//! `envoy-types` generates its Rust types from Envoy's protos and ships the
//! matching `FileDescriptorSet`, but does not export it. Rather than commit a
//! copy of that third-party file, this script finds the exact `envoy-types`
//! package cargo resolved (through `cargo metadata`, so vendored and
//! non-default registries work too), strips the source comments (halving the
//! size and the decode time) and writes the set into `OUT_DIR`.
//! `COURIER_ENVOY_DESCRIPTORS` may name the file instead.

use prost::Message;
use std::path::PathBuf;
use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-env-changed=COURIER_ENVOY_DESCRIPTORS");
    println!("cargo:rerun-if-changed=build.rs");
    let source = match std::env::var_os("COURIER_ENVOY_DESCRIPTORS") {
        Some(path) => PathBuf::from(path),
        None => find_envoy_types()
            .or_else(|e| find_in_cargo_home().ok_or(e))?
            .join("src/generated/types.bin"),
    };
    let raw = std::fs::read(&source)
        .map_err(|e| format!("reading Envoy descriptors {}: {e}", source.display()))?;
    let mut set = prost_types::FileDescriptorSet::decode(raw.as_slice())?;
    for file in &mut set.file {
        file.source_code_info = None;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("envoy_descriptors.bin");
    std::fs::write(out, set.encode_to_vec())?;
    Ok(())
}

/// The `envoy-types` version pinned in the workspace (keep in step with Cargo.toml).
const ENVOY_TYPES_VERSION: &str = "0.7.7";

/// Fallback when `cargo metadata` cannot answer (e.g. while another cargo holds
/// the lock during a resolve): the package in cargo's registry sources.
fn find_in_cargo_home() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let registries = std::fs::read_dir(home.join("registry/src")).ok()?;
    registries
        .filter_map(Result::ok)
        .map(|r| r.path().join(format!("envoy-types-{ENVOY_TYPES_VERSION}")))
        .find(|dir| dir.join("src/generated/types.bin").exists())
}

/// The directory of the `envoy-types` package in this build's resolve.
fn find_envoy_types() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("Cargo.toml");
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--manifest-path",
        ])
        .arg(&manifest)
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let packages = meta["packages"]
        .as_array()
        .ok_or("cargo metadata: no packages")?;
    for package in packages {
        if package["name"] == "envoy-types" {
            let manifest = package["manifest_path"]
                .as_str()
                .ok_or("no manifest_path")?;
            let dir = PathBuf::from(manifest);
            let dir = dir.parent().ok_or("manifest has no parent")?;
            println!(
                "cargo:rerun-if-changed={}",
                dir.join("src/generated/types.bin").display()
            );
            return Ok(dir.to_path_buf());
        }
    }
    Err("envoy-types is not in this build's dependency graph".into())
}
