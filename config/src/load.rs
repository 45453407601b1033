//! Reading Envoy config documents (YAML or JSON) into proto messages.
//!
//! The path is text → `serde_json::Value` → [`normalize`](crate::normalize) (the
//! lenient forms Envoy accepts, and every structural error with its path) →
//! `prost_reflect::DynamicMessage` through the proto3 JSON mapping → the typed
//! `envoy-types` message. xDS resources skip the text steps: they arrive as
//! protobuf `Any`s and enter at [`dynamic_from_typed`].

use crate::ctx::Ctx;
use crate::descriptors;
use crate::error::ConfigError;
use crate::normalize;
use crate::path::Path;
use prost_reflect::{DeserializeOptions, DynamicMessage};
use std::path::Path as FsPath;

/// The syntax of a config document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// YAML (a superset of JSON).
    Yaml,
    /// JSON.
    Json,
}

impl Format {
    /// The format Envoy infers from a file name: `.json` is JSON, `.yaml`/`.yml`
    /// YAML. Envoy also reads `.pb` and `.pb_text`, which courier refuses by name.
    pub fn for_path(path: &FsPath) -> Result<Self, ConfigError> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => Ok(Format::Json),
            Some("yaml" | "yml") => Ok(Format::Yaml),
            Some(ext @ ("pb" | "pb_text")) => Err(ConfigError::single(
                "",
                format!(
                    "{}: .{ext} bootstrap files are not supported; use YAML or JSON",
                    path.display()
                ),
            )),
            _ => Err(ConfigError::single(
                "",
                format!(
                    "{}: unsupported config file extension (expected .yaml, .yml or .json)",
                    path.display()
                ),
            )),
        }
    }
}

/// Parses YAML or JSON text into a JSON value.
pub fn parse_text(text: &str, format: Format) -> Result<serde_json::Value, ConfigError> {
    let parsed = match format {
        Format::Json => serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}")),
        Format::Yaml => serde_saphyr::from_str::<serde_json::Value>(text)
            .map_err(|e| format!("invalid YAML: {e}")),
    };
    let value = parsed.map_err(|m| ConfigError::single("", m))?;
    // An empty YAML document is an empty message, as in Envoy.
    Ok(if value.is_null() {
        serde_json::Value::Object(Default::default())
    } else {
        value
    })
}

/// Reads a JSON value as message `full_name`, with Envoy's lenient forms, reporting
/// every structural error with its path.
pub fn dynamic_from_json(
    mut value: serde_json::Value,
    full_name: &str,
) -> Result<DynamicMessage, ConfigError> {
    let desc = descriptors::message(full_name).map_err(|m| ConfigError::single("", m))?;
    let mut ctx = Ctx::new();
    normalize::message(&mut value, &desc, &Path::ROOT, &mut ctx);
    ctx.finish(())?;
    let mut track = serde_path_to_error::Track::new();
    let de = serde_path_to_error::Deserializer::new(&value, &mut track);
    DynamicMessage::deserialize_with_options(desc, de, &DeserializeOptions::new()).map_err(|e| {
        let path = track.path().to_string();
        ConfigError::single(
            if path == "." { String::new() } else { path },
            e.to_string(),
        )
    })
}

/// Converts a typed message (e.g. one decoded from an xDS `Any`) into its dynamic form,
/// for the support check.
pub fn dynamic_from_typed<M: prost::Message + prost::Name>(
    msg: &M,
) -> Result<DynamicMessage, ConfigError> {
    let desc = descriptors::message(&M::full_name()).map_err(|m| ConfigError::single("", m))?;
    DynamicMessage::decode(desc, msg.encode_to_vec().as_slice())
        .map_err(|e| ConfigError::single("", e.to_string()))
}

/// Converts a dynamic message into the typed `envoy-types` message.
pub fn typed_from_dynamic<M: prost::Message + Default>(
    msg: &DynamicMessage,
) -> Result<M, ConfigError> {
    msg.transcode_to::<M>()
        .map_err(|e| ConfigError::single("", e.to_string()))
}

/// Reads a config file as message `full_name`.
pub fn dynamic_from_file(path: &FsPath, full_name: &str) -> Result<DynamicMessage, ConfigError> {
    let format = Format::for_path(path)?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::single("", format!("cannot read {}: {e}", path.display())))?;
    dynamic_from_json(parse_text(&text, format)?, full_name)
}
