//! Envoy's proto descriptors, for reading JSON/YAML through the proto3 JSON mapping.

use arc_swap::ArcSwapOption;
use prost_reflect::{DescriptorPool, MessageDescriptor};
use std::sync::Arc;

static ENVOY_DESCRIPTORS: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/envoy_descriptors.bin"));

/// The decoded pool, while something may need it. Decoded it takes several
/// MB; a proxy with a static config needs it only to load that config, so
/// the server lets it go once serving ([`release`]) and xDS decodes it again
/// at its first resource.
static POOL: ArcSwapOption<DescriptorPool> = ArcSwapOption::const_empty();

/// The pool of the Envoy v3 messages courier reads (and their dependencies), with
/// a field-less stand-in for every other message `envoy-types` knows.
///
/// Decoded on first use (and again after [`release`]); the set is the one
/// `envoy-types` was generated from, so a `DynamicMessage` built from it
/// transcodes exactly into the typed structs. Descriptors and messages keep
/// the pool they came from alive.
pub fn pool() -> Result<DescriptorPool, String> {
    if let Some(p) = POOL.load_full() {
        return Ok((*p).clone());
    }
    let decoded = DescriptorPool::decode(ENVOY_DESCRIPTORS)
        .map_err(|e| format!("Envoy descriptor set: {e}"))?;
    // Two threads decoding at once both succeed; the first stored wins.
    let previous = POOL.compare_and_swap(
        &None::<Arc<DescriptorPool>>,
        Some(Arc::new(decoded.clone())),
    );
    Ok(previous.as_ref().map_or(decoded, |p| (**p).clone()))
}

/// Lets the decoded pool go: its memory is freed once no descriptor or
/// message made from it is left. The next [`pool`] call decodes it again.
pub fn release() {
    POOL.store(None);
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
