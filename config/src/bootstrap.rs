//! The bootstrap: node, admin, static and dynamic resources; and the checks that
//! span resources (unique names, routes that name existing clusters).

use crate::cluster::{self, Cluster};
use crate::config_source::{self, ApiConfigSource, ConfigSource};
use crate::core::{self, Address, MetadataMap};
use crate::ctx::Ctx;
use crate::listener::{self, Listener, access_log::AccessLog};
use crate::path::Path;
use crate::support::{ALL, Support};
use envoy_types::pb::envoy::config::bootstrap::v3 as pb;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Fields of the bootstrap messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.config.bootstrap.v3.Bootstrap",
        &[
            "node",
            "static_resources",
            "dynamic_resources",
            "admin",
            "overload_manager",
            "layered_runtime",
            "cluster_manager",
            "bootstrap_extensions",
            "deferred_stat_options",
            "default_regex_engine",
            "application_log_config",
            "stats_config",
            "tracing",
            "stats_sinks",
            "stats_flush_interval",
            "stats_eviction_interval",
        ],
    ),
    (
        "envoy.config.bootstrap.v3.Bootstrap.ApplicationLogConfig",
        &["log_format"],
    ),
    (
        "envoy.config.bootstrap.v3.Bootstrap.ApplicationLogConfig.LogFormat",
        &["json_format", "text_format"],
    ),
    (
        "envoy.config.bootstrap.v3.Bootstrap.DeferredStatOptions",
        &["enable_deferred_creation_stats"],
    ),
    ("envoy.extensions.regex_engines.v3.GoogleRE2", &[]),
    (
        "envoy.extensions.bootstrap.internal_listener.v3.InternalListener",
        &["buffer_size_kb"],
    ),
    (
        "envoy.config.bootstrap.v3.ClusterManager",
        &[
            "outlier_detection",
            "enable_deferred_cluster_creation",
            "local_cluster_name",
            "load_stats_config",
        ],
    ),
    (
        "envoy.config.bootstrap.v3.ClusterManager.OutlierDetection",
        &["event_log_path"],
    ),
    (
        "envoy.config.bootstrap.v3.Bootstrap.StaticResources",
        &["listeners", "clusters", "secrets"],
    ),
    (
        "envoy.config.bootstrap.v3.Bootstrap.DynamicResources",
        &["lds_config", "cds_config", "ads_config"],
    ),
    (
        "envoy.config.bootstrap.v3.Admin",
        &["access_log", "access_log_path", "address", "profile_path"],
    ),
    ("envoy.config.core.v3.BuildVersion", ALL),
];

/// The node identity courier presents to control planes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    /// `node.id` (or `--service-node`).
    pub id: String,
    /// `node.cluster` (or `--service-cluster`).
    pub cluster: String,
    /// `node.metadata`, as JSON.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// `node.locality` (region, zone, sub_zone).
    pub locality: Option<(String, String, String)>,
    /// `node.user_agent_name`.
    pub user_agent_name: String,
}

/// The admin endpoint.
#[derive(Debug, Clone)]
pub struct Admin {
    /// Where admin listens: a TCP address or a Unix domain socket.
    pub address: Address,
    /// Access logs of admin requests (`access_log`, or the deprecated `access_log_path`).
    pub access_log: Vec<AccessLog>,
    /// `profile_path`: where `/cpuprofiler` would write its profile. courier,
    /// like an Envoy built without gperftools (the 1.40 release), has no CPU
    /// profiler: `/cpuprofiler?enable=y` answers that it failed to start.
    pub profile_path: String,
}

/// Dynamic resources: where LDS and CDS come from, and the ADS stream.
#[derive(Debug, Clone)]
pub struct DynamicResources {
    /// Listener discovery.
    pub lds_config: Option<ConfigSource>,
    /// Cluster discovery.
    pub cds_config: Option<ConfigSource>,
    /// The aggregated stream used by every source that says `ads: {}`.
    pub ads_config: Option<ApiConfigSource>,
}

/// A validated, translated bootstrap.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    /// Node identity.
    pub node: Node,
    /// Admin endpoint, if configured.
    pub admin: Option<Admin>,
    /// Static listeners, in config order.
    pub listeners: Vec<Arc<Listener>>,
    /// Static clusters, in config order.
    pub clusters: Vec<Arc<Cluster>>,
    /// Dynamic resources, if configured.
    pub dynamic_resources: Option<DynamicResources>,
    /// The overload manager, if configured.
    pub overload_manager: Option<crate::overload::OverloadManager>,
    /// `layered_runtime`: its layers and the keys courier reads from them.
    pub runtime: crate::runtime::Runtime,
    /// `cluster_manager.outlier_detection.event_log_path`: where outlier
    /// ejection and unejection events are appended as JSON lines.
    pub outlier_event_log_path: Option<String>,
    /// `cluster_manager.load_stats_config` is set without a gRPC service or
    /// cluster to report to: valid (`--mode validate` accepts it, as Envoy's),
    /// but serving stops at start-up with Envoy's warning and exit status 0, as
    /// Envoy 1.40 does when it cannot create the load reporter.
    pub load_stats_skipped: bool,
    /// `cluster_manager.local_cluster_name`: the static cluster of the proxy's
    /// own fleet, by whose zones the other clusters route (zone-aware routing).
    pub local_cluster_name: Option<String>,
    /// `deferred_stat_options.enable_deferred_creation_stats`: a cluster's
    /// traffic stats (`cluster.<name>.upstream_*`) exist from its first use
    /// on, not from its creation.
    pub deferred_cluster_stats: bool,
    /// `application_log_config.log_format`: the spdlog pattern courier's own
    /// log lines are rendered with once the bootstrap is loaded (a
    /// `json_format` struct is its JSON text with the flags inside).
    pub application_log_format: Option<String>,
    /// `stats_config`: tag extraction and which stats exist.
    pub stats: Arc<crate::stats::StatsConfig>,
    /// `tracing.http`: the tracer of connection managers whose `tracing` names
    /// no provider.
    pub tracing: Option<crate::tracing::Provider>,
    /// `stats_sinks`: where counters and gauges go on every flush.
    pub stats_sinks: Vec<crate::stats::sinks::StatsSink>,
    /// `stats_flush_interval` (5 s when unset).
    pub stats_flush_interval: std::time::Duration,
}

/// Translates a bootstrap, checking every field and every cross-reference.
pub fn translate(bs: &pb::Bootstrap, ctx: &mut Ctx) -> Bootstrap {
    let root = Path::ROOT;
    let node = bs.node.as_ref().map(node).unwrap_or_default();
    let sr = root.field("static_resources");
    let empty = pb::bootstrap::StaticResources::default();
    let statics = bs.static_resources.as_ref().unwrap_or(&empty);

    // The runtime first: its `re2.max_program_size.*` keys bound every regex
    // the rest of the bootstrap compiles (Envoy reads its static layers before
    // it builds anything from the config).
    let runtime = bs
        .layered_runtime
        .as_ref()
        .map(|r| crate::runtime::translate(r, &root.field("layered_runtime"), ctx))
        .unwrap_or_default();
    ctx.set_re2_limits(runtime.re2_limits);
    bootstrap_extensions(
        &bs.bootstrap_extensions,
        &root.field("bootstrap_extensions"),
        ctx,
    );
    // SDS subscriptions identify the node (Envoy refuses them without one).
    let (id_given, cluster_given) = ctx.node_overrides();
    ctx.set_node_complete(
        (id_given || !node.id.is_empty()) && (cluster_given || !node.cluster.is_empty()),
    );
    // Secrets first: clusters' and listeners' TLS contexts may name them.
    let secrets = crate::tls::secrets::translate(&statics.secrets, &sr.field("secrets"), ctx);
    ctx.set_static_secrets(Arc::new(secrets));
    // Clusters next: listeners' routes and filters refer to them.
    let cp = sr.field("clusters");
    let mut clusters = Vec::with_capacity(statics.clusters.len());
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, c) in statics.clusters.iter().enumerate() {
        let path = cp.index(i);
        if let Some(first) = seen.insert(c.name.as_str(), i) {
            ctx.error(
                &path.field("name"),
                format!(
                    "duplicate cluster name '{}' (also static_resources.clusters[{first}])",
                    c.name
                ),
            );
        }
        if let Some(c) = cluster::translate(c, &path, ctx) {
            clusters.push(Arc::new(c));
        }
    }
    let names: HashSet<String> = statics.clusters.iter().map(|c| c.name.clone()).collect();
    ctx.set_static_clusters(Arc::new(names));

    let lp = sr.field("listeners");
    let mut listeners = Vec::with_capacity(statics.listeners.len());
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, l) in statics.listeners.iter().enumerate() {
        let path = lp.index(i);
        if !l.name.is_empty()
            && let Some(first) = seen.insert(l.name.as_str(), i)
        {
            ctx.error(
                &path.field("name"),
                format!(
                    "duplicate listener name '{}' (also static_resources.listeners[{first}])",
                    l.name
                ),
            );
        }
        if let Some(l) = listener::translate(l, &path, ctx) {
            listeners.push((i, Arc::new(l)));
        }
    }
    check_listener_addresses(&listeners, &lp, ctx);
    let listeners: Vec<Arc<Listener>> = listeners.into_iter().map(|(_, l)| l).collect();

    let admin = bs
        .admin
        .as_ref()
        .and_then(|a| admin(a, &root.field("admin"), ctx));
    let dynamic_resources = bs
        .dynamic_resources
        .as_ref()
        .map(|d| dynamic_resources(d, &root.field("dynamic_resources"), ctx));
    let overload_manager = bs
        .overload_manager
        .as_ref()
        .map(|o| crate::overload::translate(o, &root.field("overload_manager"), ctx));
    // An empty path, as in Envoy, means no event log.
    let outlier_event_log_path = bs
        .cluster_manager
        .as_ref()
        .and_then(|cm| cm.outlier_detection.as_ref())
        .map(|o| o.event_log_path.clone())
        .filter(|p| !p.is_empty());
    let tracing = bs
        .tracing
        .as_ref()
        .and_then(|t| crate::tracing::bootstrap(t, &root.field("tracing"), ctx));
    let local_cluster_name = bs
        .cluster_manager
        .as_ref()
        .map(|cm| cm.local_cluster_name.as_str())
        .filter(|n| !n.is_empty())
        .map(str::to_string);
    if let Some(name) = &local_cluster_name {
        local_cluster(name, statics, &root, ctx);
    }
    let load_stats_skipped = bs
        .cluster_manager
        .as_ref()
        .and_then(|cm| cm.load_stats_config.as_ref())
        .is_some_and(|l| load_stats(l, &root.field("cluster_manager.load_stats_config"), ctx));
    if let Some(e) = &bs.default_regex_engine {
        default_regex_engine(e, &root.field("default_regex_engine"), ctx);
    }
    let application_log_format = bs
        .application_log_config
        .as_ref()
        .and_then(|a| application_log_format(a, &root.field("application_log_config"), ctx));
    // `cluster_manager.enable_deferred_cluster_creation` (in the support table)
    // asks that a worker's part of a cluster be made at its first use: courier's
    // workers create their connection pools for a cluster's host when a request
    // first goes to it, and hold nothing else per cluster, so that is its way.
    let stats = bs
        .stats_config
        .as_ref()
        .map(|s| crate::stats::translate(s, &root.field("stats_config"), ctx))
        .unwrap_or_default();
    let stats_flush_interval = crate::stats::sinks::flush_interval(
        bs.stats_flush_interval.as_ref(),
        &root.field("stats_flush_interval"),
        ctx,
    );
    crate::stats::sinks::check_eviction_interval(
        bs.stats_eviction.as_ref(),
        stats_flush_interval,
        &root.field("stats_eviction_interval"),
        ctx,
    );
    Bootstrap {
        stats: Arc::new(stats),
        tracing,
        stats_sinks: crate::stats::sinks::translate(
            &bs.stats_sinks,
            &root.field("stats_sinks"),
            ctx,
        ),
        stats_flush_interval,
        node,
        admin,
        listeners,
        clusters,
        dynamic_resources,
        overload_manager,
        runtime,
        outlier_event_log_path,
        load_stats_skipped,
        local_cluster_name,
        deferred_cluster_stats: bs
            .deferred_stat_options
            .as_ref()
            .is_some_and(|d| d.enable_deferred_creation_stats),
        application_log_format,
    }
}

/// `cluster_manager.load_stats_config`: whether it has nowhere to report (no
/// gRPC service, no cluster), which Envoy validates but cannot serve with (it
/// warns "API configs must have either a gRPC service or a cluster name
/// defined" and shuts down). A reporter with somewhere to report is refused:
/// courier has no LRS client.
fn load_stats(
    l: &envoy_types::pb::envoy::config::core::v3::ApiConfigSource,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> bool {
    if l.grpc_services.is_empty() && l.cluster_names.is_empty() {
        return true;
    }
    ctx.unsupported(path, "load reporting (LRS) to a server");
    false
}

/// `cluster_manager.local_cluster_name` must name a static cluster (Envoy's
/// words when it does not), whose endpoints are all of priority 0: zone-aware
/// routing reads the local fleet from one level.
fn local_cluster(
    name: &str,
    statics: &pb::bootstrap::StaticResources,
    root: &Path<'_>,
    ctx: &mut Ctx,
) {
    let Some((i, c)) = statics
        .clusters
        .iter()
        .enumerate()
        .find(|(_, c)| c.name == name)
    else {
        ctx.error(
            &root.field("cluster_manager").field("local_cluster_name"),
            format!("local cluster '{name}' must be defined"),
        );
        return;
    };
    let Some(la) = &c.load_assignment else {
        return;
    };
    let sr = root.field("static_resources");
    let cs = sr.field("clusters");
    let c = cs.index(i);
    let lp = c.field("load_assignment");
    let ep = lp.field("endpoints");
    for (j, l) in la.endpoints.iter().enumerate() {
        if l.priority != 0 {
            ctx.error(
                &ep.index(j).field("priority"),
                format!("Unexpected non-zero priority for local cluster '{name}'."),
            );
        }
    }
}

/// Protobuf's numbers are doubles; Envoy prints an integral one without a
/// fraction (`5`, not `5.0`).
fn integral_numbers(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15) {
                *v = serde_json::Value::from(f as i64);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(integral_numbers),
        serde_json::Value::Object(map) => map.values_mut().for_each(integral_numbers),
        _ => {}
    }
}

/// `application_log_config`: the log format as one spdlog pattern. A
/// `json_format` struct becomes its compact JSON text (keys in sorted order;
/// Envoy prints them in its map's order), each string value a pattern; as in
/// Envoy, `%v` and `%_` (which would break the JSON) are refused there.
fn application_log_format(
    a: &pb::bootstrap::ApplicationLogConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<String> {
    use pb::bootstrap::application_log_config::log_format::LogFormat;
    let fp = path.field("log_format");
    match a.log_format.as_ref()?.log_format.as_ref() {
        Some(LogFormat::TextFormat(t)) => Some(t.clone()),
        Some(LogFormat::JsonFormat(s)) => {
            let mut value = serde_json::Value::Object(core::struct_to_json(s));
            integral_numbers(&mut value);
            let json = value.to_string();
            for flag in ["%v", "%_"] {
                if json.contains(flag) {
                    ctx.error(
                        &fp.field("json_format"),
                        format!("Usage of {flag} is unavailable for JSON log formats"),
                    );
                    return None;
                }
            }
            Some(json)
        }
        None => {
            ctx.error(&fp, "one of json_format or text_format is required");
            None
        }
    }
}

/// `default_regex_engine`: Envoy has one engine, Google RE2, and so does
/// courier's config (RE2's syntax, linear-time matching, through the `regex`
/// crate); any other engine is refused.
fn default_regex_engine(
    e: &envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) {
    use envoy_types::pb::envoy::extensions::regex_engines::v3::GoogleRe2;
    let tp = path.field("typed_config");
    match e.typed_config.as_ref() {
        Some(any) if any.type_url == crate::extensions::GOOGLE_RE2 => {
            // Its fields are checked by the support table (it has none).
            let _ = core::unpack::<GoogleRe2>(any, &tp, ctx);
        }
        Some(any) => ctx.unsupported(&tp, format!("regex engine {}", any.type_url)),
        None => ctx.error(&tp, "is required"),
    }
}

fn node(n: &envoy_types::pb::envoy::config::core::v3::Node) -> Node {
    Node {
        id: n.id.clone(),
        cluster: n.cluster.clone(),
        metadata: n
            .metadata
            .as_ref()
            .map(core::struct_to_json)
            .unwrap_or_default(),
        locality: n
            .locality
            .as_ref()
            .map(|l| (l.region.clone(), l.zone.clone(), l.sub_zone.clone())),
        user_agent_name: n.user_agent_name.clone(),
    }
}

/// Two listeners may not bind the same address and port (port 0 excepted);
/// a TCP and a UDP listener may (Envoy Gateway puts a TCPRoute and a UDPRoute
/// on one port).
fn check_listener_addresses(listeners: &[(usize, Arc<Listener>)], path: &Path<'_>, ctx: &mut Ctx) {
    let mut seen: HashMap<(String, u16, bool), usize> = HashMap::new();
    // Each listener comes with its index in the config (some may have failed).
    for &(index, ref l) in listeners {
        // A pipe is keyed by its path (port 0 never repeats as a TCP one does).
        let key = match &l.address {
            Address::Socket(sa) if sa.port == 0 => continue,
            Address::Socket(sa) => (sa.host.clone(), sa.port, l.udp.is_some()),
            Address::Pipe(p) => (p.path.clone(), 0, false),
        };
        if let Some(first) = seen.insert(key, index) {
            ctx.error(
                &path.index(index).field("address"),
                format!(
                    "address {} is already used by static_resources.listeners[{first}]",
                    l.address
                ),
            );
        }
    }
}

fn admin(a: &pb::Admin, path: &Path<'_>, ctx: &mut Ctx) -> Option<Admin> {
    let address = match a.address.as_ref() {
        Some(addr) => core::address(Some(addr), &path.field("address"), ctx)?,
        // Envoy starts no admin endpoint without an address.
        None => return None,
    };
    let mut access_log =
        listener::access_log::translate_all(&a.access_log, &path.field("access_log"), ctx);
    #[allow(deprecated)]
    if !a.access_log_path.is_empty() {
        access_log.push(AccessLog::file(&a.access_log_path));
    }
    Some(Admin {
        address,
        access_log,
        profile_path: a.profile_path.clone(),
    })
}

fn dynamic_resources(
    d: &pb::bootstrap::DynamicResources,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> DynamicResources {
    let ads_config = d
        .ads_config
        .as_ref()
        .and_then(|a| config_source::api_config_source(a, &path.field("ads_config"), ctx));
    let mut source = |cs: Option<&envoy_types::pb::envoy::config::core::v3::ConfigSource>,
                      name: &'static str| {
        let p = path.field(name);
        let cs = config_source::translate(cs?, &p, ctx)?;
        if matches!(cs.kind, config_source::ConfigSourceKind::Ads) && ads_config.is_none() {
            ctx.error(
                &p.field("ads"),
                "uses ADS but dynamic_resources.ads_config is not set",
            );
        }
        Some(cs)
    };
    let lds_config = source(d.lds_config.as_ref(), "lds_config");
    let cds_config = source(d.cds_config.as_ref(), "cds_config");
    DynamicResources {
        lds_config,
        cds_config,
        ads_config,
    }
}

/// Metadata helper re-exported for modules that translate `metadata` fields.
pub type Metadata = MetadataMap;

/// `bootstrap_extensions`. The internal-listener extension is accepted: it
/// only makes internal listeners possible, and courier refuses every internal
/// address (a listener's or an endpoint's) where it is configured, so with
/// courier it has nothing to act on. Other extensions are refused by name.
fn bootstrap_extensions(
    list: &[envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig],
    path: &Path<'_>,
    ctx: &mut Ctx,
) {
    use envoy_types::pb::envoy::extensions::bootstrap::internal_listener::v3::InternalListener;
    for (i, e) in list.iter().enumerate() {
        let p = path.index(i);
        let tp = p.field("typed_config");
        match e.typed_config.as_ref() {
            Some(any) if any.type_url == crate::extensions::INTERNAL_LISTENER => {
                let Some(il) = core::unpack::<InternalListener>(any, &tp, ctx) else {
                    continue;
                };
                // Envoy's bounds (PGV: 1 to 8192 KiB).
                if let Some(kb) = il.buffer_size_kb.map(|v| v.value)
                    && !(1..=8192).contains(&kb)
                {
                    ctx.error(
                        &tp.field("buffer_size_kb"),
                        format!("must be between 1 and 8192, found {kb}"),
                    );
                }
            }
            _ => ctx.unsupported(&p, format!("bootstrap extension {}", e.name)),
        }
    }
}

#[cfg(test)]
#[path = "bootstrap_tests.rs"]
mod tests;
