//! LDS applied to the listener registry: listeners added, changed and removed
//! over xDS. A listener is checked and built (TLS, HTTP filters, address) on
//! arrival; one naming RDS route configurations not in force yet, or whose
//! filters have start-up work (remote JWKS `async_fetch`), warms until they
//! arrive and it is done (or its RDS source's `initial_fetch_timeout`), while
//! the version in force, if any, keeps serving. Runs on the main thread.

use crate::accept::listeners::{ActiveListener, Dynamic, Parts, Registry};
use crate::filter_chain::HttpFilters;
use crate::tls::ServerConfigs;
use crate::upstream::client::ClusterClient;
use arc_swap::{ArcSwap, ArcSwapOption};
use courier_config::config_source::ConfigSourceKind;
use courier_config::listener::Listener;
use courier_config::listener::hcm::RouteSpecifier;
use courier_config::resource::Resource;
use courier_config::snapshot::Snapshot;
use courier_xds::{Interest, ResourceType, Update, Upsert, Verdict, XdsHandle};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The listener side of the xDS consumer.
pub(super) struct Lds {
    registry: Arc<Registry>,
    snapshot: Arc<ArcSwap<Snapshot>>,
    client: ClusterClient,
    /// Bootstrap listeners: LDS does not replace or remove them.
    static_names: HashSet<String>,
    /// Route configurations the bootstrap's listeners name.
    static_rds: BTreeSet<String>,
    /// The config sources that deliver RDS (streams are set up at start).
    rds_kinds: Vec<ConfigSourceKind>,
    /// Main-thread state. `apply` and the warming timers run on the same
    /// current-thread runtime and never hold it across an await, so `try_lock`
    /// always succeeds there.
    state: tokio::sync::Mutex<State>,
    /// Set once the client runs (RDS interest follows the listeners).
    pub(super) handle: ArcSwapOption<XdsHandle>,
}

#[derive(Default)]
struct State {
    /// Listeners waiting for their route configurations or their filters'
    /// start-up work, by name.
    warming: HashMap<String, Warming>,
    /// The RDS names last subscribed (a subscription is sent only on change:
    /// each one makes streams and file sources re-request).
    rds_interest: Option<BTreeSet<String>>,
}

struct Warming {
    active: Arc<ActiveListener>,
    /// Whether the filters' start-up work (remote JWKS fetches) is done.
    inited: bool,
}

/// The filters' start-up work of `active`, owning what it needs.
type Init = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>;

fn init_of(active: &Arc<ActiveListener>) -> Init {
    let filters = Arc::clone(&active.http_filters);
    let tls = Arc::clone(&active.tls);
    Box::pin(async move {
        let ok = filters.init_all().await;
        // Its SDS secrets' first answers (or their initial_fetch_timeout).
        tls.warmed().await;
        ok
    })
}

/// The RDS names of `l`'s connection managers, with the longest
/// `initial_fetch_timeout` of their sources (`None`: wait for ever, or no RDS).
fn rds_of(l: &Listener) -> (BTreeSet<String>, Option<Duration>) {
    let mut names = BTreeSet::new();
    let mut timeout = Some(Duration::ZERO);
    for fc in l.all_filter_chains() {
        if let Some(RouteSpecifier::Rds {
            route_config_name,
            config_source,
        }) = fc.hcm().map(|h| &h.route_specifier)
        {
            names.insert(route_config_name.clone());
            timeout = match (timeout, config_source.initial_fetch_timeout) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
        }
    }
    // Without RDS nothing bounds the wait (the filters' fetches have their own
    // timeouts).
    if names.is_empty() {
        timeout = None;
    }
    (names, timeout)
}

impl Lds {
    pub(super) fn new(
        registry: Arc<Registry>,
        snapshot: Arc<ArcSwap<Snapshot>>,
        client: ClusterClient,
        static_names: HashSet<String>,
        static_rds: BTreeSet<String>,
        rds_kinds: Vec<ConfigSourceKind>,
    ) -> Self {
        Self {
            registry,
            snapshot,
            client,
            static_names,
            static_rds: static_rds.clone(),
            rds_kinds,
            // The client starts with the bootstrap's names.
            state: tokio::sync::Mutex::new(State {
                rds_interest: Some(static_rds),
                ..State::default()
            }),
            handle: ArcSwapOption::empty(),
        }
    }

    /// Applies accepted listeners and removals; rejects listeners this data
    /// plane cannot run (with the field path), the others apply.
    pub(super) fn listeners(self: &Arc<Self>, u: &Update) -> Verdict {
        let Ok(mut st) = self.state.try_lock() else {
            return busy(u);
        };
        let mut verdict = Verdict::accept();
        let mut ready = Vec::new();
        for up in &u.upserts {
            let Resource::Listener(l) = &*up.resource else {
                continue;
            };
            match self.prepare(l, up) {
                Ok(active) => {
                    // A newer version replaces one still warming.
                    st.warming.remove(&l.name);
                    let (names, timeout) = rds_of(l);
                    // Start-up work that is done at once (no remote fetch)
                    // does not make the listener warm.
                    let mut init = init_of(&active);
                    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                    let inited = init.as_mut().poll(&mut cx).is_ready();
                    if inited && !self.missing(&names) {
                        ready.push(active);
                        continue;
                    }
                    st.warming.insert(
                        l.name.clone(),
                        Warming {
                            active: Arc::clone(&active),
                            inited,
                        },
                    );
                    if !inited {
                        self.spawn_init(Arc::clone(&active), init);
                    }
                    self.warm_timeout(active, timeout);
                }
                Err(why) => verdict.rejected.push((up.name.clone(), why)),
            }
        }
        let mut removed = Vec::new();
        for name in &u.removed {
            if self.static_names.contains(name) {
                continue;
            }
            st.warming.remove(name);
            if self.registry.get(name).is_some() {
                removed.push(name.clone());
            }
        }
        self.registry.publish(ready, &removed);
        self.publish_warming(&st);
        self.set_rds_interest(&mut st);
        verdict
    }

    /// Route configurations changed: warming listeners whose routes are all
    /// in force now go into force.
    pub(super) fn routes_changed(&self) {
        let Ok(mut st) = self.state.try_lock() else {
            return;
        };
        self.publish_warmed(&mut st);
    }

    /// Puts warming listeners that are ready (start-up work done, routes in
    /// force) into force.
    fn publish_warmed(&self, st: &mut State) {
        let warmed: Vec<String> = st
            .warming
            .iter()
            .filter(|(_, w)| w.inited && !self.missing(&rds_of(&w.active.config).0))
            .map(|(n, _)| n.clone())
            .collect();
        if warmed.is_empty() {
            return;
        }
        let ready = warmed
            .iter()
            .filter_map(|n| st.warming.remove(n))
            .map(|w| w.active)
            .collect();
        self.registry.publish(ready, &[]);
        self.publish_warming(st);
    }

    /// Runs the filters' start-up work of warming `active`, then puts it in
    /// force if its routes are there (Envoy's init manager: a failed fetch
    /// does not hold the listener either).
    fn spawn_init(self: &Arc<Self>, active: Arc<ActiveListener>, init: Init) {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            if !init.await {
                tracing::warn!(listener = %active.name(), "a filter's start-up work failed (remote JWKS fetch)");
            }
            let mut st = me.state.lock().await;
            if let Some(w) = st.warming.get_mut(active.name())
                && Arc::ptr_eq(&w.active, &active)
            {
                w.inited = true;
                me.publish_warmed(&mut st);
            }
        });
    }

    /// Whether some of `names` has no route configuration in force.
    fn missing(&self, names: &BTreeSet<String>) -> bool {
        let snap = self.snapshot.load();
        names.iter().any(|n| !snap.route_configs.contains_key(n))
    }

    /// Puts a warming listener in force at `timeout` if its routes have not
    /// arrived by then (as Envoy: it then serves without them).
    fn warm_timeout(self: &Arc<Self>, active: Arc<ActiveListener>, timeout: Option<Duration>) {
        let Some(t) = timeout else {
            return;
        };
        let me = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(t).await;
            let mut st = me.state.lock().await;
            let name = active.name().to_string();
            if st
                .warming
                .get(&name)
                .is_some_and(|w| Arc::ptr_eq(&w.active, &active))
            {
                st.warming.remove(&name);
                tracing::warn!(listener = %name, "listener warming timed out (RDS initial fetch); in force without what it waited for");
                me.registry.publish(vec![active], &[]);
                me.publish_warming(&st);
            }
        });
    }

    fn publish_warming(&self, st: &State) {
        self.registry
            .set_warming(st.warming.values().map(|w| Arc::clone(&w.active)).collect());
    }

    /// RDS interest: the bootstrap's names and those of every LDS listener in
    /// force or warming.
    fn set_rds_interest(&self, st: &mut State) {
        let Some(handle) = self.handle.load_full() else {
            return;
        };
        let mut names = self.static_rds.clone();
        for l in &self.registry.current().listeners {
            if l.dynamic.is_some() {
                names.extend(rds_of(&l.config).0);
            }
        }
        for w in st.warming.values() {
            names.extend(rds_of(&w.active.config).0);
        }
        if st.rds_interest.as_ref() == Some(&names) {
            return;
        }
        st.rds_interest = Some(names.clone());
        handle.set_interest(ResourceType::RouteConfig, Interest::Names(names));
    }

    /// Checks and builds listener `l`.
    fn prepare(&self, l: &Listener, up: &Upsert) -> Result<Arc<ActiveListener>, String> {
        if self.static_names.contains(&l.name) {
            return Err("a static listener of the same name is in force".into());
        }
        let mut problems = Vec::new();
        crate::serve_check::listener(l, "", &mut problems);
        for fc in l.all_filter_chains() {
            if let Some(RouteSpecifier::Rds { config_source, .. }) =
                fc.hcm().map(|h| &h.route_specifier)
                && !self.rds_kinds.contains(&config_source.kind)
            {
                problems.push(format!(
                    "{}.rds.config_source: an RDS source not in the bootstrap is not served yet",
                    fc.hcm_config_path
                ));
            }
            for log in crate::l4::chain_access_logs(fc) {
                if let courier_config::listener::access_log::Sink::File(path) = &log.sink
                    && let Err(e) = crate::access_log::writer::open(path)
                {
                    problems.push(format!("{}.access_log: {path}: {e}", fc.hcm_config_path));
                }
            }
        }
        for (i, log) in l.access_log.iter().enumerate() {
            if let courier_config::listener::access_log::Sink::File(path) = &log.sink
                && let Err(e) = crate::access_log::writer::open(path)
            {
                problems.push(format!("access_log[{i}]: {path}: {e}"));
            }
        }
        if !problems.is_empty() {
            let problems: Vec<&str> = problems
                .iter()
                .map(|p| p.strip_prefix('.').unwrap_or(p))
                .collect();
            return Err(problems.join("; "));
        }
        let tls = ServerConfigs::build(std::iter::once(l))?;
        let mut filters = HttpFilters::build_listeners(std::iter::once(l), &self.client)?;
        // Chains the version in force has unchanged keep their filters (caches,
        // counters), as their connections do.
        if let Some(old) = self.registry.get(&l.name)
            && let Some(d) = &old.dynamic
            && let Some(kept) = crate::accept::listeners::kept_chains(&d.raw, &up.raw)
        {
            for (j, i) in kept.iter().enumerate() {
                if let Some(i) = i {
                    filters.keep_chain((0, j), &old.http_filters, (old.filters_index, *i));
                }
            }
        }
        let background = filters.spawn_background();
        let aborts: Vec<tokio::task::AbortHandle> = background.clone();
        self.registry
            .build(Parts {
                config: Arc::new(l.clone()),
                tls: Arc::new(tls),
                http_filters: (Arc::new(filters), 0),
                background,
                dynamic: Some(Dynamic {
                    version_info: up.version.clone(),
                    last_updated: SystemTime::now(),
                    raw: up.raw.clone(),
                }),
            })
            .inspect_err(|_| aborts.iter().for_each(tokio::task::AbortHandle::abort))
    }
}

/// Unreachable in practice (see [`Lds::state`]): rejects rather than block.
fn busy(u: &Update) -> Verdict {
    Verdict {
        rejected: u
            .upserts
            .iter()
            .map(|up| (up.name.clone(), "listener manager busy; retry".to_string()))
            .collect(),
    }
}
