//! Which resources of each type the consumer wants.

use crate::resource_type::ResourceType;
use arc_swap::ArcSwap;
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::watch;

/// The subscription of one type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interest {
    /// Everything the server has (LDS, CDS).
    Wildcard,
    /// These names (RDS, EDS); empty = nothing.
    Names(BTreeSet<String>),
}

impl Interest {
    /// Whether `name` is wanted.
    pub fn wants(&self, name: &str) -> bool {
        match self {
            Interest::Wildcard => true,
            Interest::Names(n) => n.contains(name),
        }
    }

    /// Whether nothing is wanted (no request is sent for such a type).
    pub fn is_empty(&self) -> bool {
        matches!(self, Interest::Names(n) if n.is_empty())
    }

    /// The names for a request (`resource_names`, Delta subscribe); empty for wildcard.
    pub fn names(&self) -> Vec<String> {
        match self {
            Interest::Wildcard => Vec::new(),
            Interest::Names(n) => n.iter().cloned().collect(),
        }
    }

    /// The default: wildcard for LDS/CDS, nothing for RDS/EDS.
    pub fn default_for(t: ResourceType) -> Self {
        if t.is_wildcard() {
            Interest::Wildcard
        } else {
            Interest::Names(BTreeSet::new())
        }
    }
}

/// Interest of every type, with a change signal the streams wait on.
#[derive(Debug)]
pub(crate) struct Interests {
    types: [ArcSwap<Interest>; 6],
    changed: watch::Sender<u64>,
}

impl Interests {
    pub(crate) fn new() -> Self {
        let types = ResourceType::ALL.map(|t| ArcSwap::from_pointee(Interest::default_for(t)));
        // ALL is in index order, so types[i] belongs to the type with index i.
        Self {
            types,
            changed: watch::channel(0).0,
        }
    }

    pub(crate) fn get(&self, t: ResourceType) -> Arc<Interest> {
        self.types[t.index()].load_full()
    }

    /// Sets `t`'s interest; returns the previous one.
    pub(crate) fn set(&self, t: ResourceType, interest: Interest) -> Arc<Interest> {
        let old = self.types[t.index()].swap(Arc::new(interest));
        self.changed.send_modify(|g| *g += 1);
        old
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}
