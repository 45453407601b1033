//! CDS and EDS applied to the cluster manager: clusters added, updated and
//! removed over xDS (each published with one `ArcSwap` store, so workers see
//! the new set at their next request), and EDS clusters warming until their
//! first ClusterLoadAssignment (or their source's `initial_fetch_timeout`).
//! Runs on the main thread (the xDS client's runtime).

use crate::upstream::{self, ClusterManager, UpstreamCluster};
use arc_swap::ArcSwapOption;
use courier_config::cluster::Discovery;
use courier_config::config_source::ConfigSourceKind;
use courier_config::resource::Resource;
use courier_xds::{Interest, ResourceType, Update, Verdict, XdsHandle};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// The cluster side of the xDS consumer.
pub(super) struct Cds {
    clusters: Arc<ClusterManager>,
    /// Main-thread state. `apply` and the warming timers run on the same
    /// current-thread runtime and never hold it across an await, so `try_lock`
    /// always succeeds there.
    state: tokio::sync::Mutex<State>,
    /// Set once the client runs (EDS interest follows the EDS clusters).
    pub(super) handle: ArcSwapOption<XdsHandle>,
    /// Bootstrap clusters: CDS does not replace or remove them (as Envoy).
    static_names: HashSet<String>,
    /// EDS service -> the bootstrap clusters that use it.
    static_eds: HashMap<String, Vec<String>>,
    /// The config sources that deliver EDS (streams are set up at start).
    eds_kinds: Vec<ConfigSourceKind>,
    /// CDS's own source (what `self: {}` means in a cluster's `eds_config`).
    cds_kind: Option<ConfigSourceKind>,
}

#[derive(Default)]
struct State {
    /// EDS service -> dynamic clusters using it (in force or warming), sorted:
    /// nearly always one, so a vector (a tree node per service cost 280 bytes
    /// a cluster).
    eds: HashMap<String, Vec<String>>,
    /// Dynamic EDS cluster -> its service.
    service_of: HashMap<String, String>,
    /// EDS clusters waiting for their first assignment.
    warming: HashMap<String, Arc<UpstreamCluster>>,
}

impl Cds {
    pub(super) fn new(
        clusters: Arc<ClusterManager>,
        static_names: HashSet<String>,
        static_eds: HashMap<String, Vec<String>>,
        eds_kinds: Vec<ConfigSourceKind>,
        cds_kind: Option<ConfigSourceKind>,
    ) -> Self {
        Self {
            clusters,
            state: tokio::sync::Mutex::new(State::default()),
            handle: ArcSwapOption::empty(),
            static_names,
            static_eds,
            eds_kinds,
            cds_kind,
        }
    }

    /// The EDS names wanted at start.
    pub(super) fn initial_eds_interest(&self) -> BTreeSet<String> {
        self.static_eds.keys().cloned().collect()
    }

    /// Applies accepted ClusterLoadAssignments: in-force clusters get their new
    /// hosts; warming ones get them and go into force.
    pub(super) fn endpoints(&self, u: &Update) -> Verdict {
        let Ok(mut st) = self.state.try_lock() else {
            return busy(u);
        };
        let mut warmed = Vec::new();
        let mut verdict = Verdict::accept();
        for up in &u.upserts {
            if let Resource::LoadAssignment(la) = &*up.resource {
                let users = self.users(&st, &up.name);
                // The local cluster's fleet is priority 0 only (Envoy NACKs).
                if let Some(local) = self.clusters.local_cluster_name()
                    && users.iter().any(|c| c == local)
                    && let Some(why) = upstream::zone::local_assignment_error(la, local)
                {
                    verdict.rejected.push((up.name.clone(), why));
                    continue;
                }
                for c in users {
                    match st.warming.remove(&c) {
                        Some(w) => {
                            upstream::set_eds_hosts(&w, Some(la));
                            warmed.push(w);
                        }
                        None => {
                            self.clusters.set_eds_hosts(&c, Some(la));
                        }
                    }
                }
            }
        }
        self.publish(warmed, &[]);
        self.publish_warming(&st);
        for name in &u.removed {
            for c in self.users(&st, name) {
                self.clusters.set_eds_hosts(&c, None);
            }
        }
        verdict
    }

    /// Tells the cluster manager which clusters warm (`/config_dump`'s
    /// `dynamic_warming_clusters`).
    fn publish_warming(&self, st: &State) {
        self.clusters
            .set_warming(st.warming.keys().cloned().collect());
    }

    /// Applies accepted clusters and removals; rejects clusters this data
    /// plane cannot run (with the field path), the others apply.
    pub(super) fn clusters(self: &Arc<Self>, u: &Update) -> Verdict {
        let Ok(mut st) = self.state.try_lock() else {
            return busy(u);
        };
        let mut verdict = Verdict::accept();
        let mut ready = Vec::new();
        let mut timers = Vec::new();
        for up in &u.upserts {
            let Resource::Cluster(c) = &*up.resource else {
                continue;
            };
            match self.upsert(&mut st, c, &mut timers) {
                Ok(Some(c)) => ready.push(c),
                Ok(None) => {}
                Err(why) => verdict.rejected.push((up.name.clone(), why)),
            }
        }
        let mut removed = Vec::new();
        for name in &u.removed {
            if self.static_names.contains(name) {
                continue;
            }
            st.warming.remove(name);
            forget_service(&mut st, name);
            removed.push(name.clone());
        }
        // One new cluster set for the whole response.
        self.publish(ready, &removed);
        self.publish_warming(&st);
        self.set_eds_interest(&st);
        self.spawn_warming_timers(timers);
        verdict
    }

    /// Puts each warming cluster in force without endpoints once its
    /// `initial_fetch_timeout` passes (unless its assignment or a newer
    /// version came first). One task per distinct timeout of the response,
    /// not one per cluster: a task costs ≈ 400 bytes, and a response of
    /// thousands of EDS clusters would hold thousands for 15 s.
    fn spawn_warming_timers(self: &Arc<Self>, mut timers: Vec<(Duration, Arc<UpstreamCluster>)>) {
        timers.sort_by_key(|(t, _)| *t);
        for group in timers.chunk_by(|a, b| a.0 == b.0) {
            let Some(&(t, _)) = group.first() else {
                continue;
            };
            let due: Vec<Arc<UpstreamCluster>> = group.iter().map(|(_, c)| Arc::clone(c)).collect();
            let me = Arc::clone(self);
            tokio::spawn(async move {
                tokio::time::sleep(t).await;
                let mut st = me.state.lock().await;
                let mut timed_out = Vec::new();
                for prepared in due {
                    let name = &prepared.config.name;
                    if st
                        .warming
                        .get(name)
                        .is_some_and(|w| Arc::ptr_eq(w, &prepared))
                    {
                        st.warming.remove(name);
                        tracing::warn!(cluster = %name, "EDS initial fetch timed out; cluster in force without endpoints");
                        timed_out.push(prepared);
                    }
                }
                if !timed_out.is_empty() {
                    me.publish(timed_out, &[]);
                    me.publish_warming(&st);
                }
            });
        }
    }

    /// Checks and builds cluster `c`: `Some` when it can go into force now,
    /// `None` when it warms.
    fn upsert(
        &self,
        st: &mut State,
        c: &Arc<courier_config::cluster::Cluster>,
        timers: &mut Vec<(Duration, Arc<UpstreamCluster>)>,
    ) -> Result<Option<Arc<UpstreamCluster>>, String> {
        if self.static_names.contains(&c.name) {
            return Err("a static cluster of the same name is in force".into());
        }
        let mut problems = Vec::new();
        crate::serve_check::cluster(c, "", &mut problems);
        if !problems.is_empty() {
            let problems: Vec<&str> = problems
                .iter()
                .map(|p| p.strip_prefix('.').unwrap_or(p))
                .collect();
            return Err(problems.join("; "));
        }
        let eds = match &c.discovery {
            Discovery::Eds {
                config,
                service_name,
            } => {
                let kind = match &config.kind {
                    ConfigSourceKind::SelfSource => self.cds_kind.as_ref(),
                    k => Some(k),
                };
                if !kind.is_some_and(|k| self.eds_kinds.contains(k)) {
                    return Err("eds_cluster_config.eds_config: an EDS source not in the \
                                bootstrap is not served yet"
                        .into());
                }
                Some((service_name.clone(), config.initial_fetch_timeout))
            }
            _ => None,
        };
        let previous = self.clusters.get(&c.name);
        let prepared = self.clusters.prepare(Arc::clone(c))?;
        st.warming.remove(&c.name);
        forget_service(st, &c.name);
        let Some((service, timeout)) = eds else {
            return Ok(Some(prepared));
        };
        let users = st.eds.entry(service.clone()).or_default();
        if let Err(at) = users.binary_search(&c.name) {
            users.insert(at, c.name.clone());
        }
        st.service_of.insert(c.name.clone(), service.clone());
        // Same endpoints as the cluster in force: its hosts carried over
        // (unless the locality layout changed: `prepare` then started afresh).
        if previous.is_some_and(|p| {
            p.config.discovery == c.discovery
                && p.config.lb.locality_weighted == c.lb.locality_weighted
        }) {
            return Ok(Some(prepared));
        }
        // The assignment may already be here (another cluster uses the service).
        if let Some(la) = self.known_assignment(&service) {
            upstream::set_eds_hosts(&prepared, Some(&la));
            return Ok(Some(prepared));
        }
        st.warming.insert(c.name.clone(), Arc::clone(&prepared));
        if let Some(t) = timeout {
            timers.push((t, prepared));
        }
        Ok(None)
    }

    /// Puts `ready` in force and `removed` out (one store), and starts the new
    /// clusters' background work.
    fn publish(&self, ready: Vec<Arc<UpstreamCluster>>, removed: &[String]) {
        if ready.is_empty() && removed.is_empty() {
            return;
        }
        // Clusters that took over their predecessor's hosts keep their health.
        let kept: Vec<bool> = ready
            .iter()
            .map(|c| {
                self.clusters
                    .get(&c.config.name)
                    .is_some_and(|old| Arc::ptr_eq(&*old.hosts(), &*c.hosts()))
            })
            .collect();
        self.clusters.update(ready.clone(), removed);
        for (c, kept) in ready.iter().zip(kept) {
            upstream::spawn_dns_refresh(c);
            upstream::outlier::spawn_one(c, self.clusters.outlier_event_log());
            upstream::health_check::spawn_checks(c, !kept);
        }
    }

    /// The clusters (static and dynamic) fed by EDS service `service`.
    fn users(&self, st: &State, service: &str) -> Vec<String> {
        let mut out: Vec<String> = self.static_eds.get(service).cloned().unwrap_or_default();
        out.extend(st.eds.get(service).into_iter().flatten().cloned());
        out
    }

    fn known_assignment(&self, service: &str) -> Option<courier_config::cluster::LoadAssignment> {
        let handle = self.handle.load_full()?;
        match &*handle.store().resource(ResourceType::Endpoints, service)? {
            Resource::LoadAssignment(la) => Some(la.clone()),
            _ => None,
        }
    }

    fn set_eds_interest(&self, st: &State) {
        let Some(handle) = self.handle.load_full() else {
            return;
        };
        let mut names = self.initial_eds_interest();
        names.extend(st.eds.keys().cloned());
        handle.set_interest(ResourceType::Endpoints, Interest::Names(names));
    }
}

fn forget_service(st: &mut State, cluster: &str) {
    if let Some(service) = st.service_of.remove(cluster)
        && let Some(users) = st.eds.get_mut(&service)
    {
        users.retain(|u| u != cluster);
        if users.is_empty() {
            st.eds.remove(&service);
        }
    }
}

/// Unreachable in practice (see [`Cds::state`]): rejects rather than block.
fn busy(u: &Update) -> Verdict {
    Verdict {
        rejected: u
            .upserts
            .iter()
            .map(|up| (up.name.clone(), "cluster manager busy; retry".to_string()))
            .collect(),
    }
}
