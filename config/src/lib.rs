//! courier's configuration: Envoy v3 bootstrap and xDS resources, read through the
//! proto3 JSON mapping against Envoy's own descriptors, validated field by field,
//! and translated into plain, immutable, precompiled Rust types.
//!
//! One translation serves both the bootstrap and xDS: [`load_bootstrap`] for files
//! and [`resource::translate`] for resources that arrive as `Any`s. A field
//! courier does not implement is an error naming its path, never ignored.

// Deprecated v3 fields are still valid Envoy config and keep their meaning
// (a cluster-level `http2_protocol_options`, `exact_match` in header matchers, ...),
// so this crate reads them on purpose.
#![allow(deprecated)]

pub mod bootstrap;
pub mod cel;
pub mod cluster;
pub mod config_source;
pub mod core;
mod ctx;
pub mod descriptors;
pub mod dns_cache;
mod error;
pub mod extensions;
pub mod filters;
pub mod format;
pub mod listener;
pub mod load;
pub mod matcher;
mod matcher_list;
mod normalize;
pub mod overload;
mod path;
pub mod re2_program;
pub mod resource;
pub mod route;
pub mod runtime;
pub mod snapshot;
pub mod stats;
mod support;
pub mod tls;
pub mod tracing;

pub use bootstrap::Bootstrap;
pub use ctx::Ctx;
/// The Envoy API types courier reads (re-exported so callers use the same version).
pub use envoy_types;
pub use error::{ConfigError, FieldError};
pub use path::Path;

use envoy_types::pb::envoy::config::bootstrap::v3::Bootstrap as BootstrapProto;
use prost::Name;
use std::path::PathBuf;

/// What to load: Envoy's `-c`, `--config-yaml`, `--service-node`, `--service-cluster`
/// and `--service-zone`.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// `-c / --config-path`: a YAML or JSON bootstrap file.
    pub config_path: Option<PathBuf>,
    /// `--config-yaml`: a YAML bootstrap merged over the file (proto merge: scalars
    /// replace, messages merge, lists append), as Envoy does.
    pub config_yaml: Option<String>,
    /// `--service-node`: overrides `node.id`.
    pub service_node: Option<String>,
    /// `--service-cluster`: overrides `node.cluster`.
    pub service_cluster: Option<String>,
    /// `--service-zone`: overrides `node.locality.zone` (the proxy's own zone,
    /// for zone-aware routing).
    pub service_zone: Option<String>,
}

/// Loads, validates and translates a bootstrap, reporting every error found.
pub fn load_bootstrap(opts: &LoadOptions) -> Result<Bootstrap, ConfigError> {
    let proto = load_bootstrap_proto(opts)?;
    let mut ctx = Ctx::new();
    ctx.set_node_overrides(
        opts.service_node.as_ref().is_some_and(|s| !s.is_empty()),
        opts.service_cluster.as_ref().is_some_and(|s| !s.is_empty()),
    );
    let mut bootstrap = bootstrap_from_proto(&proto, &mut ctx);
    resource::check_path_sources(&bootstrap, &mut ctx);
    if let Some(id) = &opts.service_node {
        bootstrap.node.id.clone_from(id);
    }
    if let Some(cluster) = &opts.service_cluster {
        bootstrap.node.cluster.clone_from(cluster);
    }
    // As Envoy: a non-empty zone sets the node's locality (made if absent).
    if let Some(zone) = opts.service_zone.as_ref().filter(|z| !z.is_empty()) {
        bootstrap
            .node
            .locality
            .get_or_insert_with(Default::default)
            .1 = zone.clone();
    }
    ctx.finish(bootstrap)
}

/// Reads the bootstrap proto from the file and/or `--config-yaml`, merged, without translating it.
pub fn load_bootstrap_proto(
    opts: &LoadOptions,
) -> Result<prost_reflect::DynamicMessage, ConfigError> {
    let full_name = BootstrapProto::full_name();
    let mut base = match &opts.config_path {
        Some(path) => load::dynamic_from_file(path, &full_name)?,
        None => match &opts.config_yaml {
            Some(_) => load::dynamic_from_json(serde_json::json!({}), &full_name)?,
            None => {
                return Err(ConfigError::single(
                    "",
                    "no configuration: give -c/--config-path or --config-yaml",
                ));
            }
        },
    };
    if let Some(yaml) = &opts.config_yaml {
        let overlay = load::parse_text(yaml, load::Format::Yaml)
            .and_then(|v| load::dynamic_from_json(v, &full_name))
            .map_err(|mut e| {
                for err in &mut e.errors {
                    err.message = format!("{} (in --config-yaml)", err.message);
                }
                e
            })?;
        // Proto MergeFrom semantics, exactly as Envoy applies --config-yaml.
        prost::Message::merge(
            &mut base,
            prost::Message::encode_to_vec(&overlay).as_slice(),
        )
        .map_err(|e| ConfigError::single("", format!("merging --config-yaml: {e}")))?;
    }
    Ok(base)
}

/// Validates and translates a bootstrap already read as a dynamic message.
pub fn bootstrap_from_proto(proto: &prost_reflect::DynamicMessage, ctx: &mut Ctx) -> Bootstrap {
    support::check(proto, &Path::ROOT, ctx);
    match load::typed_from_dynamic::<BootstrapProto>(proto) {
        Ok(typed) => bootstrap::translate(&typed, ctx),
        Err(e) => {
            ctx.extend(&Path::ROOT, e);
            bootstrap::translate(&BootstrapProto::default(), ctx)
        }
    }
}

/// Loads a bootstrap from YAML or JSON text (tests and tools; the CLI uses [`load_bootstrap`]).
pub fn bootstrap_from_str(text: &str, format: load::Format) -> Result<Bootstrap, ConfigError> {
    let value = load::parse_text(text, format)?;
    let proto = load::dynamic_from_json(value, &BootstrapProto::full_name())?;
    let mut ctx = Ctx::new();
    let bootstrap = bootstrap_from_proto(&proto, &mut ctx);
    resource::check_path_sources(&bootstrap, &mut ctx);
    ctx.finish(bootstrap)
}
