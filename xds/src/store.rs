//! What is in force per type: versions and resources, for `/config_dump` and for
//! the versions a reconnecting stream reports.

use crate::resource_type::ResourceType;
use arc_swap::ArcSwap;
use courier_config::resource::Resource;
use envoy_types::pb::google::protobuf::Any;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;
use tokio::sync::watch;

/// One resource in force.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its version (Delta per-resource version, or the SotW version_info it came in).
    pub version: String,
    /// Hash of its encoded bytes: an unchanged SotW resource is not re-applied.
    pub digest: u64,
    /// When it was applied.
    pub last_updated: SystemTime,
    /// The translated resource, for the types that keep it
    /// ([`ResourceType::keeps_translation`]; [`Store::resource`] gives it for
    /// every type).
    pub resource: Option<Arc<Resource>>,
    /// The resource's bytes as received (`/config_dump`); its type URL is its
    /// type's, not kept per resource. Shared: a State-of-the-World response
    /// resending it unchanged gives its entry a new version, not a new copy.
    pub raw: Arc<[u8]>,
}

impl Entry {
    /// The resource as received, as an `Any` of type `t`.
    pub fn any(&self, t: ResourceType) -> Any {
        Any {
            type_url: t.type_url(),
            value: self.raw.to_vec(),
        }
    }
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

/// Update stats of one type (Envoy's `update_attempt`, `update_success`,
/// `update_rejected` counters and `update_time`, `version` gauges).
#[derive(Debug, Default)]
pub struct Counters {
    /// Responses (or file reads) received.
    pub update_attempt: AtomicU64,
    /// Accepted in full.
    pub update_success: AtomicU64,
    /// Rejected, in whole or in part.
    pub update_rejected: AtomicU64,
    /// When the last update was accepted, in ms since the epoch.
    pub update_time: AtomicU64,
    /// The xxHash64 of the last accepted version_info, as Envoy's gauge.
    pub version: AtomicU64,
}

impl Counters {
    /// `(name, value)` of each stat.
    pub fn samples(&self) -> [(&'static str, u64); 5] {
        [
            (
                "update_attempt",
                self.update_attempt.load(Ordering::Relaxed),
            ),
            (
                "update_success",
                self.update_success.load(Ordering::Relaxed),
            ),
            (
                "update_rejected",
                self.update_rejected.load(Ordering::Relaxed),
            ),
            ("update_time", self.update_time.load(Ordering::Relaxed)),
            ("version", self.version.load(Ordering::Relaxed)),
        ]
    }
}

/// Per-type state, read lock-free (admin) and written by the client only.
#[derive(Debug)]
pub struct Store {
    types: [ArcSwap<TypeState>; 6],
    counters: [Counters; 6],
    /// Ticks on every change (waiters for the initial fetch).
    changed: watch::Sender<u64>,
}

impl Default for Store {
    fn default() -> Self {
        Self {
            types: Default::default(),
            counters: Default::default(),
            changed: watch::channel(0).0,
        }
    }
}

impl Store {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The update counters of `t`.
    pub fn counters(&self, t: ResourceType) -> &Counters {
        &self.counters[t.index()]
    }

    /// A receiver that sees every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Counts one update of `t`: `accepted` carries the version_info it was
    /// accepted at, `None` for a rejection.
    pub(crate) fn count(&self, t: ResourceType, accepted: Option<&str>) {
        let c = &self.counters[t.index()];
        c.update_attempt.fetch_add(1, Ordering::Relaxed);
        match accepted {
            Some(version_info) => {
                c.update_success.fetch_add(1, Ordering::Relaxed);
                let now = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                c.update_time.store(now, Ordering::Relaxed);
                c.version.store(
                    xxhash_rust::xxh64::xxh64(version_info.as_bytes(), 0),
                    Ordering::Relaxed,
                );
            }
            None => {
                c.update_rejected.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The current state of `t`.
    pub fn get(&self, t: ResourceType) -> Arc<TypeState> {
        self.types[t.index()].load_full()
    }

    /// The translation of `t`'s resource `name` in force: the kept one, or
    /// (for types that do not keep it) translated again from its bytes.
    pub fn resource(&self, t: ResourceType, name: &str) -> Option<Arc<Resource>> {
        let st = self.get(t);
        let e = st.resources.get(name)?;
        if let Some(r) = &e.resource {
            return Some(Arc::clone(r));
        }
        let mut ctx = courier_config::Ctx::new();
        let r = courier_config::resource::translate(&e.any(t), &mut ctx)?;
        ctx.finish(()).ok()?;
        Some(Arc::new(r))
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
        self.changed.send_modify(|g| *g += 1);
    }
}
