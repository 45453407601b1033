//! Wires the xDS client (courier-xds) into the data plane: CDS and EDS into the
//! cluster manager ([`cds`]: clusters published with one `ArcSwap` store, EDS
//! hosts in each cluster's `ArcSwap<HostSet>`) and RDS for connection managers
//! with `rds` (a new snapshot sharing every unchanged part, swapped in with one
//! store; workers pick it up at their next request), and LDS into the listener
//! registry ([`lds`]: listeners built, warmed until their routes arrive, then
//! published to the workers, which bind, swap or close sockets). Runs on the
//! main thread.

mod cds;
mod dump;
mod lds;
pub mod sds;

use crate::upstream::ClusterManager;
use arc_swap::ArcSwap;
use courier_config::Bootstrap;
use courier_config::cluster::Discovery;
use courier_config::config_source::{ConfigSource, ConfigSourceKind};
use courier_config::listener::hcm::RouteSpecifier;
use courier_config::resource::Resource;
use courier_config::snapshot::Snapshot;
use courier_xds::from_config::{self, Resolve};
use courier_xds::{
    Client, ClientConfig, Connector, Consumer, Interest, ResourceType, RestTransport, Source,
    Update, Verdict, XdsError,
};
pub use dump::merge_dump;
use envoy_types::pb::envoy::config::core::v3::Node;
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::Channel;

/// How often `path_config_source` files are checked for a change.
const FILE_POLL: Duration = Duration::from_millis(200);

/// Applies accepted CDS, EDS, RDS, LDS and RTDS updates to the running data plane.
struct Apply {
    snapshot: Arc<ArcSwap<Snapshot>>,
    cds: Arc<cds::Cds>,
    lds: Arc<lds::Lds>,
    runtime: Arc<crate::admin::runtime::RuntimeAdmin>,
}

/// An update of at least this many resources hands the memory its decode
/// leaves free back to the system (a handful of changes leaves little).
const LARGE_UPDATE: usize = 100;

impl Consumer for Apply {
    fn apply(&self, u: &Update) -> Verdict {
        if u.upserts.len() + u.removed.len() >= LARGE_UPDATE {
            crate::heap_trim::release_soon();
        }
        match u.type_ {
            ResourceType::Endpoints => self.cds.endpoints(u),
            ResourceType::Cluster => self.cds.clusters(u),
            ResourceType::RouteConfig => {
                let verdict = self.routes(u);
                // Listeners waiting for these routes may go into force.
                self.lds.routes_changed();
                verdict
            }
            ResourceType::Listener => self.lds.listeners(u),
            ResourceType::Secret => sds::apply_ads(u),
            ResourceType::Runtime => {
                // Checked key by key when translated: what arrives here applies.
                let upserts = u
                    .upserts
                    .iter()
                    .filter_map(|up| match &*up.resource {
                        Resource::Runtime(r) => Some((up.name.clone(), r.values.clone())),
                        _ => None,
                    })
                    .collect();
                self.runtime.rtds_update(upserts, &u.removed);
                Verdict::accept()
            }
        }
    }
}

impl Apply {
    /// A new snapshot with the changed route configurations; everything else is
    /// shared with the one in force.
    fn routes(&self, u: &Update) -> Verdict {
        let mut verdict = Verdict::accept();
        let current = self.snapshot.load_full();
        let mut next = Snapshot::clone(&current);
        for up in &u.upserts {
            let Resource::RouteConfig(rc) = &*up.resource else {
                continue;
            };
            let mut problems = Vec::new();
            crate::serve_check::routes(rc, "", &mut problems);
            if problems.is_empty() {
                next.route_configs.insert(
                    up.name.clone(),
                    Arc::new(courier_config::route::RouteConfig::clone(rc)),
                );
            } else {
                // Paths are relative to the resource: drop the empty root's dot.
                let problems: Vec<&str> = problems
                    .iter()
                    .map(|p| p.strip_prefix('.').unwrap_or(p))
                    .collect();
                verdict
                    .rejected
                    .push((up.name.clone(), problems.join("; ")));
            }
        }
        for name in &u.removed {
            next.route_configs.remove(name);
        }
        next.version = current.version + 1;
        self.snapshot.store(Arc::new(next));
        verdict
    }
}

/// A type that follows another (endpoints of CDS clusters, routes of LDS
/// listeners) comes over ADS when the bootstrap has ADS: its stream is set up
/// at start, once, with the leading type's `initial_fetch_timeout`.
fn follow_over_ads(
    bootstrap: &Bootstrap,
    sources: &mut Vec<(ResourceType, ConfigSource)>,
    t: ResourceType,
    leading: &ConfigSource,
) {
    let has_ads = bootstrap
        .dynamic_resources
        .as_ref()
        .is_some_and(|d| d.ads_config.is_some());
    if has_ads
        && !sources
            .iter()
            .any(|(k, s)| *k == t && s.kind == ConfigSourceKind::Ads)
    {
        sources.push((
            t,
            ConfigSource {
                kind: ConfigSourceKind::Ads,
                initial_fetch_timeout: leading.initial_fetch_timeout,
            },
        ));
    }
}

/// The config source kinds that deliver `t`.
fn config_sources_of(
    kinds: &[(ResourceType, ConfigSourceKind)],
    t: ResourceType,
) -> Vec<ConfigSourceKind> {
    kinds
        .iter()
        .filter(|(k, _)| *k == t)
        .map(|(_, kind)| kind.clone())
        .collect()
}

/// A gRPC channel to `cluster` (one of its current hosts, over its TLS if it has
/// one), as the xDS streams dial it: for courier's other long-lived streams.
pub(crate) async fn grpc_channel(
    clusters: &Arc<ClusterManager>,
    cluster: &str,
) -> Result<Channel, XdsError> {
    ClusterConnector {
        clusters: Arc::clone(clusters),
        cluster: cluster.to_string(),
    }
    .connect()
    .await
}

/// Reaches `envoy_grpc` clusters through their current hosts: HTTP/2, over the
/// cluster's TLS (its `transport_socket`) when it has one.
struct Clusters(Arc<ClusterManager>);

struct ClusterConnector {
    clusters: Arc<ClusterManager>,
    cluster: String,
}

impl Connector for ClusterConnector {
    fn connect(&self) -> Pin<Box<dyn Future<Output = Result<Channel, XdsError>> + Send + '_>> {
        Box::pin(async move {
            let no_host = || XdsError::Connect(format!("cluster {} has no host", self.cluster));
            let cluster = self.clusters.get(&self.cluster).ok_or_else(no_host)?;
            let (addr, socket, pipe) = {
                // A random host per attempt: a reconnect may try another one.
                let hosts = cluster.hosts();
                let n = hosts.hosts().count();
                let pick = fastrand::usize(..n.max(1));
                hosts
                    .hosts()
                    .nth(pick)
                    .map(|h| (h.address, h.socket, h.pipe_path().map(str::to_string)))
            }
            .ok_or_else(no_host)?;
            // The cluster's connect timeout and HTTP/2 keepalive (tonic's
            // channel is hyper's client: see upstream::keepalive for how its
            // PINGs differ from Envoy's).
            let endpoint = |uri: String| -> Result<tonic::transport::Endpoint, XdsError> {
                let mut e = tonic::transport::Endpoint::from_shared(uri)
                    .map_err(|e| XdsError::Connect(e.to_string()))?
                    .connect_timeout(cluster.config.connect_timeout);
                let k = cluster.config.http.http2.keepalive;
                if let Some((k, every)) =
                    k.and_then(|k| Some((k, crate::upstream::keepalive::interval(&k)?)))
                {
                    e = e
                        .http2_keep_alive_interval(every)
                        .keep_alive_timeout(k.timeout)
                        .keep_alive_while_idle(true);
                }
                Ok(e)
            };
            if let Some(path) = pipe {
                // A pipe host (Istio's agent on `/tmp/XDS`): plaintext HTTP/2
                // over its Unix socket.
                if cluster.sockets.tls(socket).is_some() {
                    return Err(XdsError::Connect(format!(
                        "{path}: TLS to a pipe host is not served"
                    )));
                }
                return endpoint(format!("http://{}", self.cluster))?
                    .connect_with_connector(UnixDial { path: path.clone() })
                    .await
                    .map_err(|e| XdsError::Connect(format!("{path}: {e}")));
            }
            let Some(tls) = cluster.sockets.tls(socket).cloned() else {
                return endpoint(format!("http://{addr}"))?
                    .connect()
                    .await
                    .map_err(|e| XdsError::Connect(format!("{addr}: {e}")));
            };
            // The URI only names the authority; the connector dials `addr`.
            endpoint(format!("http://{}", self.cluster))?
                .connect_with_connector(TlsDial { addr, tls })
                .await
                .map_err(|e| XdsError::Connect(format!("{addr} (TLS): {e}")))
        })
    }
}

/// Dials a pipe host (a Unix domain socket) for a gRPC channel.
#[derive(Clone)]
struct UnixDial {
    path: String,
}

type UnixIo = hyper_util::rt::TokioIo<tokio::net::UnixStream>;

impl tonic::codegen::Service<http::Uri> for UnixDial {
    type Response = UnixIo;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<UnixIo>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        let path = self.path.clone();
        Box::pin(async move {
            let s = crate::upstream::pool::connect_unix(&path).await?;
            Ok(hyper_util::rt::TokioIo::new(s))
        })
    }
}

/// Dials one host of a TLS cluster for a gRPC channel: TCP, then the
/// cluster's TLS handshake (its SNI, server validation and client certificate).
#[derive(Clone)]
struct TlsDial {
    addr: std::net::SocketAddr,
    tls: crate::upstream::tls::UpstreamTlsContext,
}

type TlsIo = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

impl tonic::codegen::Service<http::Uri> for TlsDial {
    type Response = TlsIo;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<TlsIo>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        let dial = self.clone();
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect(dial.addr).await?;
            tcp.set_nodelay(true)?;
            let tls = dial.tls.handshake(tcp, dial.addr, None, "").await?;
            Ok(hyper_util::rt::TokioIo::new(tls))
        })
    }
}

impl Resolve for Clusters {
    fn grpc_cluster(&self, cluster: &str, _authority: Option<&str>) -> Option<Arc<dyn Connector>> {
        self.0.get(cluster)?;
        Some(Arc::new(ClusterConnector {
            clusters: Arc::clone(&self.0),
            cluster: cluster.to_string(),
        }))
    }

    fn rest_cluster(&self, cluster: &str) -> Option<Arc<dyn RestTransport>> {
        self.0.get(cluster)?;
        Some(Arc::new(RestCluster {
            client: crate::upstream::client::ClusterClient::new(Arc::clone(&self.0)),
            cluster: cluster.to_string(),
        }))
    }
}

/// REST-JSON polls through the cluster's load balancer and pool.
struct RestCluster {
    client: crate::upstream::client::ClusterClient,
    cluster: String,
}

impl RestTransport for RestCluster {
    fn post(
        &self,
        path: &'static str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, XdsError>> + Send + '_>> {
        Box::pin(async move {
            let req = http::Request::post(path)
                .header(http::header::HOST, self.cluster.as_str())
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(bytes::Bytes::from(body))
                .map_err(|e| XdsError::Connect(e.to_string()))?;
            let resp = self
                .client
                .send(&self.cluster, req, timeout)
                .await
                .map_err(|e| XdsError::Connect(e.to_string()))?;
            match resp.status() {
                // Envoy treats 304 as "no change".
                http::StatusCode::NOT_MODIFIED => Ok(Vec::new()),
                s if s.is_success() => Ok(resp.into_body().to_vec()),
                s => Err(XdsError::Connect(format!("REST poll answered {s}"))),
            }
        })
    }
}

/// The running xDS client.
pub struct Xds {
    /// Dropping it stops every stream.
    pub client: Client,
    /// How long `/ready` waits for the initial resources (`None`: for ever).
    pub initial_fetch_timeout: Option<Duration>,
}

/// Starts the xDS client when the bootstrap has LDS, CDS, EDS clusters or RDS
/// connection managers; `None` when it has none. Call within the main thread's runtime.
pub fn start(
    bootstrap: &Bootstrap,
    snapshot: &Arc<ArcSwap<Snapshot>>,
    clusters: &Arc<ClusterManager>,
    registry: &Arc<crate::accept::listeners::Registry>,
    runtime: &Arc<crate::admin::runtime::RuntimeAdmin>,
) -> Result<Option<Xds>, String> {
    let resolve = Clusters(Arc::clone(clusters));
    let mut sources: Vec<(ResourceType, ConfigSource)> = Vec::new();
    let mut eds: HashMap<String, Vec<String>> = HashMap::new();
    for c in &bootstrap.clusters {
        if let Discovery::Eds {
            config,
            service_name,
        } = &c.discovery
        {
            eds.entry(service_name.clone())
                .or_default()
                .push(c.name.clone());
            sources.push((ResourceType::Endpoints, ConfigSource::clone(config)));
        }
    }
    let mut rds = BTreeSet::new();
    for l in &bootstrap.listeners {
        for fc in l.all_filter_chains() {
            if let Some(RouteSpecifier::Rds {
                config_source,
                route_config_name,
            }) = fc.hcm().map(|h| &h.route_specifier)
            {
                rds.insert(route_config_name.clone());
                sources.push((ResourceType::RouteConfig, config_source.clone()));
            }
        }
    }
    let cds_config = bootstrap
        .dynamic_resources
        .as_ref()
        .and_then(|d| d.cds_config.clone());
    if let Some(cs) = &cds_config {
        sources.push((ResourceType::Cluster, cs.clone()));
        // Clusters arriving over CDS get their endpoints over ADS when the
        // bootstrap has it (streams are set up here, once).
        follow_over_ads(bootstrap, &mut sources, ResourceType::Endpoints, cs);
    }
    let lds_config = bootstrap
        .dynamic_resources
        .as_ref()
        .and_then(|d| d.lds_config.clone());
    if let Some(ls) = &lds_config {
        sources.push((ResourceType::Listener, ls.clone()));
        // Listeners arriving over LDS get their routes over ADS likewise.
        follow_over_ads(bootstrap, &mut sources, ResourceType::RouteConfig, ls);
    }
    // Each RTDS layer subscribes to its `Runtime` resource by name. `/ready`
    // waits for the first RTDS answer (whatever it says) as for the other
    // types' initial fetch; static listeners serve meanwhile with the static
    // layers' values (Envoy starts its workers after initialization).
    let rtds: BTreeSet<String> = bootstrap
        .runtime
        .rtds_layers()
        .map(|(name, source)| {
            sources.push((ResourceType::Runtime, source.clone()));
            name.to_string()
        })
        .collect();
    // Secrets over ADS (the providers' names, now and as contexts naming
    // new ones come) ride the ADS stream whenever the bootstrap has one.
    let has_ads = bootstrap
        .dynamic_resources
        .as_ref()
        .is_some_and(|d| d.ads_config.is_some());
    let ads_secrets: Vec<Arc<crate::tls::sds::SecretProvider>> = crate::tls::sds::registry()
        .all()
        .into_iter()
        .filter(|p| p.source.kind == ConfigSourceKind::Ads)
        .collect();
    if has_ads {
        sources.push((
            ResourceType::Secret,
            ConfigSource {
                kind: ConfigSourceKind::Ads,
                initial_fetch_timeout: ads_secrets
                    .iter()
                    .map(|p| p.source.initial_fetch_timeout)
                    .try_fold(Duration::ZERO, |acc, t| t.map(|t| acc.max(t)))
                    .map(|t| t.max(courier_config::config_source::DEFAULT_INITIAL_FETCH_TIMEOUT)),
            },
        ));
    }
    let sds_names: BTreeSet<String> = ads_secrets.iter().map(|p| p.name.clone()).collect();
    if sources.is_empty() {
        return Ok(None);
    }
    // One stream per distinct source and type (clusters sharing ADS share it).
    let mut distinct: Vec<(ResourceType, ConfigSource)> = Vec::new();
    for s in sources {
        if !distinct.contains(&s) {
            distinct.push(s);
        }
    }
    // Envoy bounds each source's wait; one wait for all takes the longest.
    let initial_fetch_timeout = distinct
        .iter()
        .map(|(_, cs)| cs.initial_fetch_timeout)
        .try_fold(Duration::ZERO, |acc, t| t.map(|t| acc.max(t)));
    let mut config = ClientConfig {
        node: Node {
            id: bootstrap.node.id.clone(),
            cluster: bootstrap.node.cluster.clone(),
            user_agent_name: "courier".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    if let Some(ads) = bootstrap
        .dynamic_resources
        .as_ref()
        .and_then(|d| d.ads_config.as_ref())
    {
        config.ads =
            Some(from_config::grpc_source(ads, &resolve).map_err(|e| format!("ads_config: {e}"))?);
    }
    let distinct_kinds: Vec<(ResourceType, ConfigSourceKind)> = distinct
        .iter()
        .map(|(t, cs)| (*t, cs.kind.clone()))
        .collect();
    for (t, cs) in distinct {
        let source = from_config::source(&cs, t, &resolve, FILE_POLL)?;
        if matches!(source, Source::Ads) && config.ads.is_none() {
            return Err(format!(
                "{t}: ads config source without dynamic_resources.ads_config"
            ));
        }
        config.sources.push((t, source));
    }
    let eds_kinds = config_sources_of(&distinct_kinds, ResourceType::Endpoints);
    let cds = Arc::new(cds::Cds::new(
        Arc::clone(clusters),
        bootstrap.clusters.iter().map(|c| c.name.clone()).collect(),
        eds,
        eds_kinds,
        cds_config.map(|c| c.kind),
    ));
    config.interest = vec![
        (
            ResourceType::Endpoints,
            Interest::Names(cds.initial_eds_interest()),
        ),
        (ResourceType::RouteConfig, Interest::Names(rds.clone())),
        (ResourceType::Runtime, Interest::Names(rtds)),
        (ResourceType::Secret, Interest::Names(sds_names)),
    ];
    let lds = Arc::new(lds::Lds::new(
        Arc::clone(registry),
        Arc::clone(snapshot),
        crate::upstream::client::ClusterClient::new(Arc::clone(clusters)),
        bootstrap.listeners.iter().map(|l| l.name.clone()).collect(),
        rds.clone(),
        config_sources_of(&distinct_kinds, ResourceType::RouteConfig),
    ));
    let consumer = Apply {
        snapshot: Arc::clone(snapshot),
        cds: Arc::clone(&cds),
        lds: Arc::clone(&lds),
        runtime: Arc::clone(runtime),
    };
    let client = Client::start(config, Arc::new(consumer));
    cds.handle.store(Some(Arc::new(client.handle())));
    lds.handle.store(Some(Arc::new(client.handle())));
    Ok(Some(Xds {
        client,
        initial_fetch_timeout,
    }))
}

/// Starts SDS: the subscriptions of the secret providers the bootstrap's
/// listeners and clusters made, and of those later contexts make
/// ([`sds::spawn`]). Call within the main thread's runtime, after [`start`].
pub fn start_sds(bootstrap: &Bootstrap, clusters: &Arc<ClusterManager>, xds: Option<&Xds>) {
    let has_ads = bootstrap
        .dynamic_resources
        .as_ref()
        .is_some_and(|d| d.ads_config.is_some());
    sds::spawn(
        Arc::new(Clusters(Arc::clone(clusters))),
        Node {
            id: bootstrap.node.id.clone(),
            cluster: bootstrap.node.cluster.clone(),
            user_agent_name: "courier".into(),
            ..Default::default()
        },
        xds.filter(|_| has_ads).map(|x| x.client.handle()),
    );
}

/// The client's stats: `control_plane.connected_state`, and per type
/// `update_attempt`, `update_success`, `update_rejected` (CDS and LDS under
/// Envoy's `cluster_manager.cds.` and `listener_manager.lds.`; EDS and RDS,
/// which Envoy counts per cluster and per route config, summed under
/// `cluster_manager.eds.` and `http.rds.`; RTDS under `runtime.`, where Envoy
/// counts every RTDS layer's subscription too).
pub fn samples(handle: &courier_xds::XdsHandle, out: &mut Vec<crate::stats::Sample>) {
    out.push((
        "control_plane.connected_state".into(),
        u64::from(handle.connected()),
    ));
    for t in ResourceType::ALL {
        let scope = match t {
            ResourceType::Cluster => "cluster_manager.cds",
            ResourceType::Listener => "listener_manager.lds",
            ResourceType::Endpoints => "cluster_manager.eds",
            ResourceType::RouteConfig => "http.rds",
            ResourceType::Runtime => "runtime",
            // Per secret: `sds::samples`.
            ResourceType::Secret => continue,
        };
        if !handle.delivers(t) {
            continue;
        }
        for (name, v) in handle.store().counters(t).samples() {
            out.push((format!("{scope}.{name}"), v));
        }
    }
}
