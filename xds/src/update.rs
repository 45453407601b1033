//! What the client hands to its consumer, and the consumer's answer.

use crate::resource_type::ResourceType;
use courier_config::resource::Resource;
use std::sync::Arc;

/// One validated resource added or changed.
#[derive(Debug, Clone)]
pub struct Upsert {
    /// The resource name.
    pub name: String,
    /// Its version: the per-resource version (Delta) or the response's version_info (SotW).
    pub version: String,
    /// The translated resource.
    pub resource: Arc<Resource>,
    /// The resource as received (LDS compares filter chains of versions with it).
    pub raw: envoy_types::pb::google::protobuf::Any,
}

/// The accepted changes of one response (or one file read), for one type.
#[derive(Debug, Clone)]
pub struct Update {
    /// The type of every resource in it.
    pub type_: ResourceType,
    /// The response's `version_info` (SotW) or `system_version_info` (Delta).
    pub version_info: String,
    /// Resources added or changed (unchanged ones are left out).
    pub upserts: Vec<Upsert>,
    /// Names removed: absent from a complete SotW set (LDS, CDS) or in Delta `removed_resources`.
    pub removed: Vec<String>,
}

impl Update {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty() && self.removed.is_empty()
    }
}

/// The consumer's answer to an [`Update`]: upserts it could not apply.
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    /// `(name, reason)` of each upsert the consumer rejected; the others are in force.
    pub rejected: Vec<(String, String)>,
}

impl Verdict {
    /// Everything applied.
    pub fn accept() -> Self {
        Self::default()
    }
}

/// Applies updates (the proxy: builds and swaps in a new snapshot).
///
/// Calls are serialised by the client, in make-before-break order within one
/// response set; `apply` runs on the client's runtime and must not block for long.
pub trait Consumer: Send + Sync + 'static {
    /// Applies `update`; removals always succeed, upserts may be rejected by name.
    fn apply(&self, update: &Update) -> Verdict;
}

impl<F> Consumer for F
where
    F: Fn(&Update) -> Verdict + Send + Sync + 'static,
{
    fn apply(&self, update: &Update) -> Verdict {
        self(update)
    }
}
