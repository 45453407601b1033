//! Applies one response's candidates: the consumer gets the valid changes, the
//! store records what is in force, and the caller gets the NACK detail if any.

use crate::decode::Decoded;
use crate::interest::Interests;
use crate::resource_type::ResourceType;
use crate::store::{Entry, Store};
use crate::update::{Consumer, Update, Upsert};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

/// State shared by every stream and file watcher of one client.
pub(crate) struct Shared {
    pub(crate) store: Arc<Store>,
    pub(crate) interests: Interests,
    pub(crate) consumer: Arc<dyn Consumer>,
    /// Serialises applies: each builds on what the previous one left in force.
    pub(crate) apply_lock: tokio::sync::Mutex<()>,
    /// gRPC streams to management servers that are up (control_plane.connected_state).
    pub(crate) connected: AtomicUsize,
    /// The types some source delivers.
    pub(crate) types: Vec<ResourceType>,
}

/// What a response says about resources it does not carry.
pub(crate) enum Removal {
    /// SotW: the response is the complete set when the type is LDS or CDS.
    SotwSet,
    /// Delta `removed_resources`.
    Names(Vec<String>),
}

impl Shared {
    /// Applies a decoded response; `Err(detail)` when any resource was rejected.
    pub(crate) async fn apply(
        &self,
        t: ResourceType,
        version_info: &str,
        decoded: Decoded,
        removal: Removal,
    ) -> Result<(), String> {
        let _guard = self.apply_lock.lock().await;
        let interest = self.interests.get(t);
        let state = self.store.get(t);
        let mut errors = decoded.errors;
        let mut seen = HashSet::new();
        let mut upserts = Vec::new();
        let mut entries: HashMap<String, Arc<Entry>> = HashMap::new();
        let now = SystemTime::now();
        for c in decoded.candidates {
            if !seen.insert(c.name.clone()) {
                errors.push(format!("{t} '{}': duplicate resource name", c.name));
                continue;
            }
            // A resource nobody subscribed to is ignored, as Envoy does.
            if !interest.wants(&c.name) {
                continue;
            }
            let resource = match c.result {
                Ok(r) => r,
                Err(e) => {
                    errors.push(format!("{t} '{}': {e}", c.name));
                    continue;
                }
            };
            if let Some(old) = state.resources.get(&c.name)
                && old.digest == c.digest
            {
                // Unchanged bytes: nothing to apply, but remember the new version
                // (reported as initial_resource_versions on reconnect).
                if old.version != c.version {
                    let mut e = Entry::clone(old);
                    e.version = c.version;
                    entries.insert(c.name, Arc::new(e));
                }
                continue;
            }
            // `None` only for unchanged bytes, skipped above.
            let Some(resource) = resource else {
                continue;
            };
            let kept = t.keeps_translation().then(|| Arc::clone(&resource));
            entries.insert(
                c.name.clone(),
                Arc::new(Entry {
                    version: c.version.clone(),
                    digest: c.digest,
                    last_updated: now,
                    resource: kept,
                    raw: Arc::from(c.raw.value.as_slice()),
                }),
            );
            upserts.push(Upsert {
                name: c.name,
                version: c.version,
                resource,
                raw: c.raw,
            });
        }
        let removed: Vec<String> = match removal {
            Removal::SotwSet if t.is_wildcard() => state
                .resources
                .keys()
                .filter(|n| !seen.contains(*n))
                .cloned()
                .collect(),
            Removal::SotwSet => Vec::new(),
            Removal::Names(names) => names
                .into_iter()
                .filter(|n| state.resources.contains_key(n))
                .collect(),
        };
        let update = Update {
            type_: t,
            version_info: version_info.to_string(),
            upserts,
            removed,
        };
        if !update.is_empty() {
            let verdict = self.consumer.apply(&update);
            for (name, reason) in verdict.rejected {
                entries.remove(&name);
                errors.push(format!("{t} '{name}': {reason}"));
            }
        }
        let detail = (!errors.is_empty()).then(|| errors.join("\n"));
        let removed: BTreeSet<&String> = update.removed.iter().collect();
        let interest = self.interests.get(t);
        self.store.update(t, |s| {
            for name in &removed {
                s.resources.remove(*name);
            }
            for (name, e) in &entries {
                s.resources.insert(name.clone(), Arc::clone(e));
            }
            s.resources.retain(|n, _| interest.wants(n));
            if detail.is_none() {
                s.version_info = version_info.to_string();
            }
            if !update.is_empty() {
                s.last_updated = Some(now);
            }
            s.last_error = detail.clone();
        });
        self.store
            .count(t, detail.is_none().then_some(version_info));
        match detail {
            Some(d) => {
                tracing::warn!(type_ = %t, version = version_info, "xDS update rejected: {d}");
                Err(d)
            }
            None => Ok(()),
        }
    }

    /// A stream came up; the guard counts it down when the stream ends.
    pub(crate) fn stream_up(&self) -> StreamUp<'_> {
        self.connected.fetch_add(1, Ordering::Relaxed);
        StreamUp(&self.connected)
    }
}

/// Counts one connected stream for as long as it lives.
pub(crate) struct StreamUp<'a>(&'a AtomicUsize);

impl Drop for StreamUp<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
