//! The main thread: resolves listener addresses, starts the workers, runs admin,
//! waits for a signal (or `/quitquitquit`), then drains the workers and returns.

use crate::accept::listeners::{Parts, Registry};
use crate::filter_chain::HttpFilters;
use crate::request::phase::Phase;
use crate::stats::{ClusterStats, WorkerStats};
use crate::tls::ServerConfigs;
use crate::upstream::ClusterManager;
use crate::worker::{self, WorkerSetup};
use crate::{ServeOptions, admin};
use arc_swap::ArcSwap;
use courier_config::Bootstrap;
use courier_config::snapshot::Snapshot;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::SystemTime;
use tokio::sync::{Notify, watch};

/// Server life cycle, as `/ready` and `/server_info` report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Starting: workers are binding.
    Initializing = 0,
    /// Serving.
    Live = 1,
    /// Shutting down: listeners closed, connections draining.
    Draining = 2,
}

/// What the main thread shares with admin.
#[derive(Debug)]
pub struct Shared {
    state: AtomicU8,
    /// When the server started.
    pub started: SystemTime,
    /// Every worker's stats.
    pub stats: Vec<Arc<WorkerStats>>,
    /// The HTTP filter chains (their counters are shared by the workers).
    pub http_filters: Arc<HttpFilters>,
    /// The listeners in force (static and LDS).
    pub listeners: Arc<Registry>,
    /// Woken by `/quitquitquit`.
    pub quit: Notify,
    /// Worker count.
    pub concurrency: usize,
    /// The workers' phase (`/drain_listeners`, shutdown).
    pub phase: watch::Sender<Phase>,
    /// The upstream clusters (`/clusters`).
    pub clusters: Arc<ClusterManager>,
    /// The bootstrap's part of `/config_dump`.
    pub bootstrap_dump: Option<serde_json::Value>,
    /// Changes the log level (`/logging`).
    pub log_control: Option<crate::LogControl>,
    /// Admin's own access logs.
    pub admin_logs: Arc<[courier_config::listener::access_log::AccessLog]>,
    /// The xDS client, when some xDS source is configured (stats, `/config_dump`).
    pub xds: Option<courier_xds::XdsHandle>,
    /// The runtime's layers (`/runtime`, `/runtime_modify`).
    pub runtime: Arc<crate::admin::runtime::RuntimeAdmin>,
    /// With `deferred_stat_options`, which clusters' traffic stats exist.
    pub deferred_stats: Option<crate::admin::deferred_stats::DeferredStats>,
    /// `stats_config` applied to stat names: which stats exist, their
    /// Prometheus names and tags.
    pub stat_names: crate::stats::names::StatNames,
    /// The config snapshot in force (what admin lists of it).
    pub snapshot: Arc<ArcSwap<Snapshot>>,
}

impl Shared {
    /// The current state.
    pub fn state(&self) -> State {
        match self.state.load(Ordering::Acquire) {
            0 => State::Initializing,
            1 => State::Live,
            _ => State::Draining,
        }
    }

    fn set_state(&self, s: State) {
        self.state.store(s as u8, Ordering::Release);
    }
}

/// Runs the server until shutdown.
pub fn run(bootstrap: Bootstrap, opts: &ServeOptions) -> Result<(), String> {
    // Before any worker serves: the codec reads it per connection.
    crate::codec::h1_check::set_reject_fragment(bootstrap.runtime.reject_path_with_fragment);
    crate::overload::set_use_allocated(bootstrap.runtime.fixed_heap_use_allocated);
    crate::upstream::zone::set_runtime(
        bootstrap.runtime.zone_routing_enabled,
        bootstrap.runtime.zone_min_cluster_size,
    );
    crate::trace::export::set_flush(
        bootstrap.runtime.otel_min_flush_spans,
        bootstrap.runtime.otel_flush_interval_ms,
    );
    crate::trace::set_node(
        &bootstrap.node.id,
        bootstrap
            .node
            .locality
            .as_ref()
            .map_or("", |l| l.1.as_str()),
    );
    crate::trace::set_default_provider(bootstrap.tracing.clone());
    crate::trace::zipkin::set_local(&bootstrap.node.cluster);
    crate::access_log::otel::set_node(
        &bootstrap.node.id,
        &bootstrap.node.cluster,
        bootstrap
            .node
            .locality
            .as_ref()
            .map_or("", |l| l.1.as_str()),
    );
    crate::access_log::grpc_als::set_node(courier_node(&bootstrap));
    courier_filters::health_check::set_local_cluster(&bootstrap.node.cluster);
    crate::trace::zipkin_export::set_runtime(bootstrap.runtime.zipkin);
    // A tracer's stats exist once a connection manager uses it, as Envoy creates
    // its driver then.
    for l in &bootstrap.listeners {
        for t in l
            .filter_chains
            .iter()
            .filter_map(|fc| fc.hcm().and_then(|h| h.tracing.as_ref()))
        {
            match crate::trace::provider_of(t) {
                Some(courier_config::tracing::Provider::OpenTelemetry(_)) => {
                    crate::trace::export::configured()
                }
                Some(courier_config::tracing::Provider::Zipkin(_)) => {
                    crate::trace::zipkin_export::configured()
                }
                Some(courier_config::tracing::Provider::Datadog(_)) => {
                    crate::trace::datadog_export::configured()
                }
                None => {}
            }
        }
    }
    let snapshot = Arc::new(ArcSwap::from_pointee(Snapshot::from_bootstrap(&bootstrap)));
    // Certificates and keys are checked here, before any socket is bound.
    let tls = Arc::new(ServerConfigs::build(
        bootstrap.listeners.iter().map(AsRef::as_ref),
    )?);
    let zone = bootstrap.local_cluster_name.as_ref().map(|name| {
        Arc::new(crate::upstream::zone::ZoneContext::new(
            name.clone(),
            bootstrap
                .node
                .locality
                .as_ref()
                .map(
                    |(region, zone, sub_zone)| courier_config::cluster::Locality {
                        region: region.clone(),
                        zone: zone.clone(),
                        sub_zone: sub_zone.clone(),
                    },
                ),
        ))
    });
    let mut clusters = ClusterManager::with_zone(&snapshot.load(), zone)?;
    if bootstrap.load_stats_skipped {
        // Envoy 1.40 fails to create the load reporter once the primary
        // clusters are up, logs this, and shuts down cleanly (exit 0); its
        // validate mode accepts the config. courier does the same.
        tracing::warn!(
            "Skipping initialization of secondary cluster: API configs must have either a gRPC service or a cluster name defined (load_stats_config)"
        );
        tracing::info!("shutting down server instance");
        return Ok(());
    }
    if let Some(path) = &bootstrap.outlier_event_log_path {
        clusters.set_outlier_event_log(crate::upstream::outlier::EventLog::open(path)?);
    }
    let clusters = Arc::new(clusters);
    check_access_logs(&bootstrap)?;
    // The main thread's runtime: xDS, filters' start-up work, admin, DNS, outlier
    // detection and health checks run on it.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("main runtime: {e}"))?;
    // Every worker's stats; listener and connection manager slots are added
    // by the registry as listeners come.
    let stats: Vec<Arc<WorkerStats>> = (0..opts.workers)
        .map(|_| {
            Arc::new(WorkerStats {
                clusters: clusters
                    .clusters()
                    .iter()
                    .map(|c| {
                        (
                            c.config.stat_name().to_string(),
                            Arc::new(ClusterStats::default()),
                        )
                    })
                    .collect(),
                ..WorkerStats::default()
            })
        })
        .collect();
    let registry = Arc::new(Registry::new(stats.clone(), Arc::clone(&snapshot)));
    // The runtime's layers: RTDS updates and `/runtime_modify` change them.
    let runtime_layers = Arc::new(crate::admin::runtime::RuntimeAdmin::new(&bootstrap.runtime));
    // xDS resources are checked against the bootstrap runtime's RE2 program-size
    // thresholds until RTDS or `/runtime_modify` changes them.
    courier_config::re2_program::set_process_limits(bootstrap.runtime.re2_limits);
    // EDS, RDS, CDS, LDS and RTDS (their streams run once the main loop below runs).
    let xds = {
        let _enter = runtime.enter();
        crate::xds::start(&bootstrap, &snapshot, &clusters, &registry, &runtime_layers)?
    };
    // SDS: the secrets the listeners' and clusters' TLS contexts name (their
    // streams and file watches run once the main loop below runs).
    let sds = !crate::tls::sds::registry().all().is_empty();
    {
        let _enter = runtime.enter();
        crate::xds::start_sds(&bootstrap, &clusters, xds.as_ref());
    }

    // One chain per connection manager, shared by every worker (the filters' caches are
    // lock-free).
    let http_filters = Arc::new(HttpFilters::build(
        &bootstrap,
        &crate::upstream::client::ClusterClient::new(Arc::clone(&clusters)),
    )?);
    // Filters' start-up and background work (jwt_authn `async_fetch`) runs on the main
    // thread's runtime, off the workers, as on Envoy's main thread.
    http_filters.start(&runtime);
    // Connection limits and overload actions, read by every worker.
    crate::overload::init(&bootstrap);
    // Static listeners go through the registry as LDS ones do; port 0 is
    // resolved once here, and the reserving sockets live as long as the listener.
    let mut statics = Vec::with_capacity(bootstrap.listeners.len());
    for (i, l) in bootstrap.listeners.iter().enumerate() {
        let built = registry
            .build(Parts {
                config: Arc::clone(l),
                tls: Arc::clone(&tls),
                http_filters: (Arc::clone(&http_filters), i),
                background: Vec::new(),
                dynamic: None,
            })
            .map_err(|e| format!("listener {}: {e}", l.name))?;
        statics.push(built);
    }
    registry.publish(statics, &[]);
    let (shutdown_tx, shutdown_rx) = watch::channel(Phase::Serving);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut handles = Vec::with_capacity(opts.workers);
    for (index, worker_stats) in stats.iter().enumerate() {
        let setup = WorkerSetup {
            index,
            listeners: registry.subscribe(),
            snapshot: Arc::clone(&snapshot),
            stats: Arc::clone(worker_stats),
            clusters: Arc::clone(&clusters),
            shutdown: shutdown_rx.clone(),
            drain_time: opts.drain_time,
            ready: ready_tx.clone(),
        };
        let handle = std::thread::Builder::new()
            .name(format!("courier-worker-{index}"))
            .spawn(move || worker::run(setup))
            .map_err(|e| format!("starting worker {index}: {e}"))?;
        handles.push(handle);
    }
    drop(ready_tx);
    for _ in 0..opts.workers {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = shutdown_tx.send(Phase::Shutdown);
                return Err(e);
            }
            Err(_) => return Err("a worker stopped while starting".into()),
        }
    }

    // With xDS or SDS, `/ready` says LIVE once the initial resources and
    // secrets are in (or timed out).
    let initial = if xds.is_some() || sds {
        State::Initializing
    } else {
        State::Live
    };
    let shared = Arc::new(Shared {
        state: AtomicU8::new(initial as u8),
        xds: xds.as_ref().map(|x| x.client.handle()),
        started: SystemTime::now(),
        stats,
        http_filters,
        listeners: Arc::clone(&registry),
        quit: Notify::new(),
        concurrency: opts.workers,
        phase: shutdown_tx,
        clusters: Arc::clone(&clusters),
        bootstrap_dump: opts.bootstrap_dump.clone(),
        log_control: opts.log_control.clone(),
        admin_logs: bootstrap
            .admin
            .as_ref()
            .map(|a| a.access_log.clone())
            .unwrap_or_default()
            .into(),
        runtime: runtime_layers,
        deferred_stats: bootstrap
            .deferred_cluster_stats
            .then(crate::admin::deferred_stats::DeferredStats::default),
        stat_names: crate::stats::names::StatNames::new(Arc::clone(&bootstrap.stats)),
        snapshot: Arc::clone(&snapshot),
    });
    for l in &registry.current().listeners {
        tracing::info!(listener = %l.name(), addr = %l.address, "listening");
    }
    // The config is loaded: the decoded descriptors (several MB) go until xDS
    // needs them, and the memory loading took goes back to the system.
    courier_config::descriptors::release();
    crate::heap_trim::release_free_memory();

    runtime.block_on(async {
        clusters.spawn_dns_refresh();
        crate::overload::spawn_monitor(&bootstrap);
        tokio::spawn(crate::heap_trim::release_after_parks());
        crate::upstream::outlier::spawn(&clusters, clusters.outlier_event_log());
        crate::upstream::health_check::spawn(&clusters);
        {
            let shared = Arc::clone(&shared);
            crate::admin::sinks::spawn(
                bootstrap.stats_sinks.clone(),
                bootstrap.stats_flush_interval,
                courier_node(&bootstrap),
                Arc::clone(&clusters),
                Arc::clone(&bootstrap.stats),
                move || crate::admin::samples(&shared),
            );
        }
        if xds.is_some() || sds {
            let xds_wait = xds
                .as_ref()
                .map(|x| (x.client.handle(), x.initial_fetch_timeout));
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                if let Some((handle, timeout)) = xds_wait {
                    // The initial resources, then the listeners they brought
                    // warm (routes, secrets, filters' start-up fetches),
                    // within one timeout.
                    let initial = async {
                        let fetched = handle.initial_fetch(None).await;
                        shared.listeners.warmed().await;
                        fetched
                    };
                    let done = match timeout {
                        Some(t) => tokio::time::timeout(t, initial).await.unwrap_or(false),
                        None => initial.await,
                    };
                    if !done {
                        tracing::warn!("xDS initial fetch timed out; serving what arrived");
                    }
                }
                // The secrets, each within its own source's
                // `initial_fetch_timeout` (Envoy's SDS init targets).
                crate::xds::sds::warmed().await;
                if shared.state() == State::Initializing {
                    shared.set_state(State::Live);
                }
            });
        }
        if let Some(a) = &bootstrap.admin {
            let bound = admin::spawn(&a.address, Arc::clone(&shared)).await?;
            tracing::info!(%bound, "admin listening");
            if let Some(path) = &opts.admin_address_path {
                std::fs::write(path, &bound)
                    .map_err(|e| format!("--admin-address-path {}: {e}", path.display()))?;
            }
        }
        wait_for_shutdown(&shared).await;
        Ok::<(), String>(())
    })?;

    shared.set_state(State::Draining);
    tracing::info!(drain_time = ?opts.drain_time, "draining");
    shared.phase.send_replace(Phase::Shutdown);
    for h in handles {
        let _ = h.join();
    }
    drop(registry);
    // Admin's access log lines, buffered on this thread, and every line the
    // workers handed over, written before the process exits.
    crate::access_log::writer::flush_and_wait();
    Ok(())
}

/// Envoy refuses to start when an access log file cannot be opened; so does
/// courier (each thread opens its own handle later, in append mode).
fn check_access_logs(bootstrap: &Bootstrap) -> Result<(), String> {
    use courier_config::listener::access_log::Sink;
    let hcm_logs = bootstrap
        .listeners
        .iter()
        .flat_map(|l| l.all_filter_chains())
        .flat_map(crate::l4::chain_access_logs);
    let listener_logs = bootstrap.listeners.iter().flat_map(|l| l.access_log.iter());
    let admin_logs = bootstrap.admin.iter().flat_map(|a| a.access_log.iter());
    for log in hcm_logs.chain(listener_logs).chain(admin_logs) {
        if let Sink::File(path) = &log.sink {
            crate::access_log::writer::open(path).map_err(|e| format!("access log {path}: {e}"))?;
        }
    }
    Ok(())
}

async fn wait_for_shutdown(shared: &Shared) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        shared.quit.notified().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
        _ = shared.quit.notified() => tracing::info!("quitquitquit"),
    }
}

/// The node as courier names itself to the services it streams to.
fn courier_node(bootstrap: &Bootstrap) -> envoy_types::pb::envoy::config::core::v3::Node {
    envoy_types::pb::envoy::config::core::v3::Node {
        id: bootstrap.node.id.clone(),
        cluster: bootstrap.node.cluster.clone(),
        user_agent_name: "courier".into(),
        ..Default::default()
    }
}
