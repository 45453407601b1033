//! Virtual-host stats, as Envoy's router keeps them beside the cluster's: a
//! route with a `stat_prefix` counts under `vhost.<host>.route.<prefix>.*`,
//! and a virtual host with `virtual_clusters` under
//! `vhost.<host>.vcluster.<cluster>.*` (`other` for requests none matches):
//! `upstream_rq_total` per attempt sent, `upstream_rq_<code>`,
//! `upstream_rq_<class>xx` and `upstream_rq_completed` per response charged,
//! the retry counters and `upstream_rq_timeout` (the route timeout).
//!
//! The counters are shared by the workers (relaxed atomics, as the internal
//! cluster counters) in a table by host and name: a route config's are made
//! when admin first lists it or at the first request that needs them, and
//! stay, as Envoy's named stats do. Only routes and hosts that configure them
//! look anything up.

use super::{Counter, Sample};
use arc_swap::ArcSwap;
use courier_config::route::RouteConfig;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// One route's or virtual cluster's counters.
#[derive(Debug, Default)]
pub struct UpstreamStats {
    /// `upstream_rq_total`.
    pub rq_total: Counter,
    /// `upstream_rq_<code>`, made at the first response (100..=599).
    rq_code: OnceLock<Box<[Counter]>>,
    /// `upstream_rq_1xx` .. `upstream_rq_5xx`.
    rq_xx: [Counter; 5],
    /// `upstream_rq_completed`.
    completed: Counter,
    /// `upstream_rq_retry`.
    pub retry: Counter,
    /// `upstream_rq_retry_success`.
    pub retry_success: Counter,
    /// `upstream_rq_retry_overflow`.
    pub retry_overflow: Counter,
    /// `upstream_rq_retry_limit_exceeded`.
    pub retry_limit_exceeded: Counter,
    /// `upstream_rq_timeout`.
    pub timeout: Counter,
}

impl UpstreamStats {
    /// Charges a response code (an attempt's, or the local reply charged for it).
    pub fn response(&self, status: u16) {
        let codes = self
            .rq_code
            .get_or_init(|| (100..600).map(|_| Counter::default()).collect());
        if let Some(c) = codes.get(usize::from(status).wrapping_sub(100)) {
            c.inc();
        }
        if let Some(c) = self.rq_xx.get(usize::from(status / 100).wrapping_sub(1)) {
            c.inc();
        }
        self.completed.inc();
    }

    fn samples(&self, base: &str, out: &mut Vec<Sample>) {
        let mut add = |name: &str, v: u64| out.push((format!("{base}.{name}"), v));
        // Always listed, as Envoy creates them with the route config.
        add("upstream_rq_retry", self.retry.get());
        add(
            "upstream_rq_retry_limit_exceeded",
            self.retry_limit_exceeded.get(),
        );
        add("upstream_rq_retry_overflow", self.retry_overflow.get());
        add("upstream_rq_retry_success", self.retry_success.get());
        add("upstream_rq_timeout", self.timeout.get());
        add("upstream_rq_total", self.rq_total.get());
        // Listed once used.
        if self.completed.get() > 0 {
            add("upstream_rq_completed", self.completed.get());
        }
        for (i, n) in self.rq_code.get().into_iter().flatten().enumerate() {
            if n.get() > 0 {
                add(&format!("upstream_rq_{}", i + 100), n.get());
            }
        }
        for (i, n) in self.rq_xx.iter().enumerate() {
            if n.get() > 0 {
                add(&format!("upstream_rq_{}xx", i + 1), n.get());
            }
        }
    }

    fn reset(&self) {
        for c in [
            &self.rq_total,
            &self.completed,
            &self.retry,
            &self.retry_success,
            &self.retry_overflow,
            &self.retry_limit_exceeded,
            &self.timeout,
        ] {
            c.reset();
        }
        self.rq_code
            .get()
            .into_iter()
            .flatten()
            .chain(&self.rq_xx)
            .for_each(Counter::reset);
    }
}

/// A virtual host's counters: routes by stat prefix, virtual clusters by name.
#[derive(Debug, Default, Clone)]
struct Host {
    routes: HashMap<String, Arc<UpstreamStats>>,
    vclusters: HashMap<String, Arc<UpstreamStats>>,
}

type Table = ArcSwap<HashMap<String, Host>>;

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(Table::default)
}

/// Which of a host's groups.
#[derive(Debug, Clone, Copy)]
enum Group {
    Route,
    VCluster,
}

fn group(h: &Host, g: Group) -> &HashMap<String, Arc<UpstreamStats>> {
    match g {
        Group::Route => &h.routes,
        Group::VCluster => &h.vclusters,
    }
}

fn get_or_make(vhost: &str, g: Group, name: &str) -> Arc<UpstreamStats> {
    let find = |t: &HashMap<String, Host>| {
        t.get(vhost)
            .and_then(|h| group(h, g).get(name))
            .map(Arc::clone)
    };
    if let Some(s) = find(&table().load()) {
        return s;
    }
    let fresh = Arc::new(UpstreamStats::default());
    // Workers and admin may race to make the same counters: `rcu` keeps one.
    table().rcu(|t| {
        let mut next = HashMap::clone(t);
        if find(t).is_none() {
            let h = next.entry(vhost.to_string()).or_default();
            let m = match g {
                Group::Route => &mut h.routes,
                Group::VCluster => &mut h.vclusters,
            };
            m.insert(name.to_string(), Arc::clone(&fresh));
        }
        next
    });
    find(&table().load()).unwrap_or(fresh)
}

/// The counters of route `stat_prefix` of virtual host `vhost`.
pub fn route(vhost: &str, stat_prefix: &str) -> Arc<UpstreamStats> {
    get_or_make(vhost, Group::Route, stat_prefix)
}

/// The counters of virtual cluster `name` of virtual host `vhost`.
pub fn vcluster(vhost: &str, name: &str) -> Arc<UpstreamStats> {
    get_or_make(vhost, Group::VCluster, name)
}

/// Makes the counters `rc` configures (admin lists them from its first
/// look, as Envoy from the config's load).
pub fn register(rc: &RouteConfig) {
    for vh in &rc.virtual_hosts {
        for r in &vh.routes {
            if let Some(p) = &r.stat_prefix {
                route(&vh.name, p);
            }
        }
        if !vh.virtual_clusters.is_empty() {
            for vc in &vh.virtual_clusters {
                vcluster(&vh.name, &vc.name);
            }
            vcluster(&vh.name, "other");
        }
    }
}

/// Every virtual host's samples.
pub fn samples(out: &mut Vec<Sample>) {
    for (vhost, h) in table().load().iter() {
        for (name, s) in &h.routes {
            s.samples(&format!("vhost.{vhost}.route.{name}"), out);
        }
        for (name, s) in &h.vclusters {
            s.samples(&format!("vhost.{vhost}.vcluster.{name}"), out);
        }
    }
}

/// Zeroes the counters (`/reset_counters`).
pub fn reset_counters() {
    for h in table().load().values() {
        h.routes
            .values()
            .chain(h.vclusters.values())
            .for_each(|s| s.reset());
    }
}

/// A request's upstream counters: its cluster's, and its route's and virtual
/// cluster's when it has them. Reads as the cluster's counters; what Envoy
/// also charges to the route and virtual cluster goes through its methods.
pub struct Charges<'a> {
    cluster: &'a super::ClusterStats,
    views: [Option<Arc<UpstreamStats>>; 2],
}

impl std::ops::Deref for Charges<'_> {
    type Target = super::ClusterStats;

    fn deref(&self) -> &super::ClusterStats {
        self.cluster
    }
}

impl<'a> Charges<'a> {
    /// The cluster's counters, with the route's and the virtual cluster's.
    pub fn new(
        cluster: &'a super::ClusterStats,
        route: Option<Arc<UpstreamStats>>,
        vcluster: Option<Arc<UpstreamStats>>,
    ) -> Self {
        Self {
            cluster,
            views: [route, vcluster],
        }
    }

    fn each(&self, f: impl Fn(&UpstreamStats)) {
        self.views.iter().flatten().for_each(|v| f(v));
    }

    /// An attempt attached to a connection (`upstream_rq_total`).
    pub fn attached(&self) {
        self.cluster.rq_total.inc();
        self.each(|v| v.rq_total.inc());
    }

    /// The request's final response code (the upstream's, or the local
    /// reply charged for its failure): the route's and virtual cluster's
    /// count it once, where the cluster counts every attempt's.
    pub fn settled(&self, status: u16) {
        self.each(|v| v.response(status));
    }

    /// The route timeout fired (`upstream_rq_timeout`).
    pub fn timeout(&self) {
        self.cluster.rq_timeout.inc();
        self.each(|v| v.timeout.inc());
    }

    /// A retry started (`upstream_rq_retry`).
    pub fn retry(&self) {
        self.cluster.rq_retry.inc();
        self.each(|v| v.retry.inc());
    }

    /// A request succeeded after a retry (`upstream_rq_retry_success`).
    pub fn retry_success(&self) {
        self.cluster.rq_retry_success.inc();
        self.each(|v| v.retry_success.inc());
    }

    /// A retry refused by the circuit breaker or budget.
    pub fn retry_overflow(&self) {
        self.cluster.rq_retry_overflow.inc();
        self.each(|v| v.retry_overflow.inc());
    }

    /// A retriable failure with no retry left.
    pub fn retry_limit_exceeded(&self) {
        self.cluster.rq_retry_limit_exceeded.inc();
        self.each(|v| v.retry_limit_exceeded.inc());
    }
}
