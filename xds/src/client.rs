//! The client: starts one task per stream and file source, and the handle the
//! consumer uses to read the store and set its interest.

use crate::apply::Shared;
use crate::backoff::Backoff;
use crate::file::FileSource;
use crate::grpc::{Connector, Rpc};
use crate::interest::{Interest, Interests};
use crate::resource_type::ResourceType;
use crate::rest::RestSource;
use crate::store::Store;
use crate::update::Consumer;
use crate::{delta, sotw};
use envoy_types::pb::envoy::config::core::v3::Node;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::task::JoinHandle;

/// A gRPC management server and how to talk to it.
#[derive(Clone)]
pub struct GrpcSource {
    /// Opens channels to it.
    pub connector: Arc<dyn Connector>,
    /// Delta (incremental) instead of State-of-the-World.
    pub delta: bool,
    /// `set_node_on_first_message_only`.
    pub node_on_first_message_only: bool,
    /// gRPC metadata sent on every stream (`initial_metadata`).
    pub initial_metadata: Vec<(String, String)>,
}

impl std::fmt::Debug for GrpcSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcSource")
            .field("delta", &self.delta)
            .field(
                "node_on_first_message_only",
                &self.node_on_first_message_only,
            )
            .finish_non_exhaustive()
    }
}

/// Where one type's resources come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// The shared ADS stream ([`ClientConfig::ads`]).
    Ads,
    /// Its own stream.
    Grpc(GrpcSource),
    /// A watched file.
    File(FileSource),
    /// REST-JSON polling.
    Rest(RestSource),
}

/// What the client fetches, and from where.
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    /// The node identity sent to management servers.
    pub node: Node,
    /// The ADS server, used by every type whose source is [`Source::Ads`].
    pub ads: Option<GrpcSource>,
    /// Sources per type (a type may have several file sources).
    pub sources: Vec<(ResourceType, Source)>,
    /// Reconnect delays.
    pub backoff: Backoff,
    /// Interest in force from the start (RDS and EDS names known at boot), so
    /// the first requests already carry them.
    pub interest: Vec<(ResourceType, Interest)>,
}

/// One gRPC stream's settings.
pub(crate) struct StreamConfig {
    pub(crate) source: GrpcSource,
    pub(crate) rpc: Rpc,
    pub(crate) types: Vec<ResourceType>,
    pub(crate) node: Node,
    pub(crate) backoff: Backoff,
}

/// The running client; dropping it stops every stream and watcher.
pub struct Client {
    handle: XdsHandle,
    tasks: Vec<JoinHandle<()>>,
}

/// What the consumer holds: the store, the interest, the connection state.
#[derive(Clone)]
pub struct XdsHandle {
    shared: Arc<Shared>,
}

impl Client {
    /// Starts the client on the current tokio runtime.
    pub fn start(config: ClientConfig, consumer: Arc<dyn Consumer>) -> Client {
        let mut types: Vec<ResourceType> = config.sources.iter().map(|(t, _)| *t).collect();
        types.sort_by_key(|t| t.index());
        types.dedup();
        let shared = Arc::new(Shared {
            types,
            store: Arc::new(Store::new()),
            interests: Interests::new(),
            consumer,
            apply_lock: tokio::sync::Mutex::new(()),
            connected: AtomicUsize::new(0),
        });
        for (t, i) in config.interest {
            shared.interests.set(t, i);
        }
        let mut tasks = Vec::new();
        let mut ads_types = Vec::new();
        for (t, source) in config.sources {
            match source {
                Source::Ads => ads_types.push(t),
                Source::Grpc(g) => tasks.push(tokio::spawn(run_stream(
                    Arc::clone(&shared),
                    StreamConfig {
                        source: g,
                        rpc: Rpc::Type(t),
                        types: vec![t],
                        node: config.node.clone(),
                        backoff: config.backoff,
                    },
                ))),
                Source::File(f) => tasks.push(tokio::spawn(f.run(Arc::clone(&shared)))),
                Source::Rest(r) => tasks.push(tokio::spawn(r.run(
                    Arc::clone(&shared),
                    t,
                    config.node.clone(),
                ))),
            }
        }
        if let Some(ads) = config.ads
            && !ads_types.is_empty()
        {
            // Subscriptions go out in make-before-break order: CDS, EDS, LDS, RDS.
            ads_types.sort_by_key(|t| t.index());
            ads_types.dedup();
            tasks.push(tokio::spawn(run_stream(
                Arc::clone(&shared),
                StreamConfig {
                    source: ads,
                    rpc: Rpc::Ads,
                    types: ads_types,
                    node: config.node,
                    backoff: config.backoff,
                },
            )));
        }
        Client {
            handle: XdsHandle { shared },
            tasks,
        }
    }

    /// The consumer's handle.
    pub fn handle(&self) -> XdsHandle {
        self.handle.clone()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl std::fmt::Debug for XdsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdsHandle")
            .field("types", &self.shared.types)
            .field("connected", &self.connected())
            .finish_non_exhaustive()
    }
}

impl XdsHandle {
    /// What is in force per type.
    pub fn store(&self) -> &Arc<Store> {
        &self.shared.store
    }

    /// The current interest of `t`.
    pub fn interest(&self, t: ResourceType) -> Arc<Interest> {
        self.shared.interests.get(t)
    }

    /// Sets which resources of `t` are wanted (RDS names from listeners, EDS names
    /// from EDS clusters). Resources no longer wanted leave the store; streams
    /// send the new subscription at once.
    pub fn set_interest(&self, t: ResourceType, interest: Interest) {
        let old = self.shared.interests.set(t, interest.clone());
        if *old != interest {
            self.shared
                .store
                .update(t, |s| s.resources.retain(|n, _| interest.wants(n)));
        }
    }

    /// Whether the initial fetch is complete: every type some source delivers
    /// has had a response, and every wanted name of a named type is present.
    pub fn initialized(&self) -> bool {
        self.shared.types.iter().all(|t| {
            let interest = self.shared.interests.get(*t);
            match &*interest {
                _ if t.ready_on_any_response() => {
                    self.shared
                        .store
                        .counters(*t)
                        .update_attempt
                        .load(Ordering::Relaxed)
                        > 0
                }
                Interest::Names(names) => {
                    let st = self.shared.store.get(*t);
                    names.iter().all(|n| st.resources.contains_key(n))
                }
                Interest::Wildcard => {
                    self.shared
                        .store
                        .counters(*t)
                        .update_attempt
                        .load(Ordering::Relaxed)
                        > 0
                }
            }
        })
    }

    /// Waits for [`XdsHandle::initialized`], at most `timeout` (`None`: for ever);
    /// returns whether it was reached (Envoy's `initial_fetch_timeout`).
    pub async fn initial_fetch(&self, timeout: Option<std::time::Duration>) -> bool {
        let mut changed = self.shared.store.subscribe();
        let wait = async {
            while !self.initialized() {
                if changed.changed().await.is_err() {
                    return false;
                }
            }
            true
        };
        match timeout {
            Some(t) => tokio::time::timeout(t, wait).await.unwrap_or(false),
            None => wait.await,
        }
    }

    /// Whether some source delivers `t`.
    pub fn delivers(&self, t: ResourceType) -> bool {
        self.shared.types.contains(&t)
    }

    /// Whether a gRPC stream to a management server is up.
    pub fn connected(&self) -> bool {
        self.shared.connected.load(Ordering::Relaxed) > 0
    }
}

/// Keeps one gRPC stream up: reconnects with jittered exponential backoff; the
/// config in force stays while disconnected.
async fn run_stream(shared: Arc<Shared>, cfg: StreamConfig) {
    let mut attempt: u32 = 0;
    loop {
        let mut got_response = false;
        let result = if cfg.source.delta {
            delta::session(&shared, &cfg, &mut got_response).await
        } else {
            sotw::session(&shared, &cfg, &mut got_response).await
        };
        if let Err(e) = result {
            tracing::warn!("xDS stream ended: {e}");
        }
        if got_response {
            attempt = 0;
        }
        tokio::time::sleep(cfg.backoff.delay(attempt)).await;
        attempt = attempt.saturating_add(1);
    }
}
