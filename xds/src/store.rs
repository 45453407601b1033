//! What is in force per type: versions and resources, for `/config_dump` and for
//! the versions a reconnecting stream reports.

use crate::resource_type::ResourceType;
use arc_swap::ArcSwap;
use courier_config::resource::Resource;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

/// One resource in force.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its version (Delta per-resource version, or the SotW version_info it came in).
    pub version: String,
    /// Hash of its encoded bytes: an unchanged SotW resource is not re-applied.
    pub digest: u64,
    /// When it was applied.
    pub last_updated: SystemTime,
    /// The translated resource.
    pub resource: Arc<Resource>,
}

/// The state of one type.
#[derive(Debug, Clone, Default)]
pub struct TypeState {
    /// The last version_info accepted in full (ACKed); empty before the first.
    pub version_info: String,
    /// When the type last changed.
    pub last_updated: Option<SystemTime>,
    /// Resources in force, by name.
    pub resources: BTreeMap<String, Arc<Entry>>,
    /// The error_detail of the last NACK, if the last response was rejected in part.
    pub last_error: Option<String>,
}

/// Per-type state, read lock-free (admin) and written by the client only.
#[derive(Debug, Default)]
pub struct Store {
    types: [ArcSwap<TypeState>; 4],
}

impl Store {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current state of `t`.
    pub fn get(&self, t: ResourceType) -> Arc<TypeState> {
        self.types[t.index()].load_full()
    }

    /// `name -> version` of `t`'s resources (Delta `initial_resource_versions`).
    pub fn versions(&self, t: ResourceType) -> HashMap<String, String> {
        self.get(t)
            .resources
            .iter()
            .map(|(k, e)| (k.clone(), e.version.clone()))
            .collect()
    }

    /// Changes `t`'s state; concurrent writers (a stream applying, the consumer
    /// narrowing its interest) retry on conflict instead of losing a write.
    pub(crate) fn update(&self, t: ResourceType, mut f: impl FnMut(&mut TypeState)) {
        self.types[t.index()].rcu(|cur| {
            let mut next = TypeState::clone(cur);
            f(&mut next);
            next
        });
    }
}
