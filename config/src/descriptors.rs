//! Envoy's proto descriptors, for reading JSON/YAML through the proto3 JSON mapping.

use prost_reflect::{DescriptorPool, MessageDescriptor};
use std::sync::LazyLock;

static ENVOY_DESCRIPTORS: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/envoy_descriptors.bin"));

static POOL: LazyLock<Result<DescriptorPool, String>> = LazyLock::new(|| {
    DescriptorPool::decode(ENVOY_DESCRIPTORS).map_err(|e| format!("Envoy descriptor set: {e}"))
});

/// The pool of the Envoy v3 messages courier reads (and their dependencies), with
/// a field-less stand-in for every other message `envoy-types` knows.
///
/// Decoded once per process; the set is the one `envoy-types` was generated from, so
/// a `DynamicMessage` built from it transcodes exactly into the typed structs.
pub fn pool() -> Result<&'static DescriptorPool, String> {
    POOL.as_ref().map_err(Clone::clone)
}

/// Whether `desc` is a field-less stand-in for an Envoy message courier does
/// not read (see `build.rs`): only its name is known.
pub fn is_stand_in(desc: &MessageDescriptor) -> bool {
    desc.parent_file().name().starts_with("courier-stand-in/")
}

/// The descriptor of message `full_name` (e.g. `envoy.config.cluster.v3.Cluster`).
pub fn message(full_name: &str) -> Result<MessageDescriptor, String> {
    pool()?
        .get_message_by_name(full_name)
        .ok_or_else(|| format!("message {full_name} is not in courier's Envoy descriptors"))
}

/// The message named by an `Any` type URL (`type.googleapis.com/<name>`), if known.
pub fn message_for_type_url(type_url: &str) -> Option<MessageDescriptor> {
    let name = type_url.rsplit_once('/').map_or(type_url, |(_, n)| n);
    pool().ok()?.get_message_by_name(name)
}
