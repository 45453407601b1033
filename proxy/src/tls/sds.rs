//! SDS secret providers, and the TLS contexts built from them.
//!
//! A [`SecretProvider`] holds one secret (a certificate or a validation
//! context) named with an `sds_config`, as Envoy's `SdsApi` does: shared by
//! every context that names the same secret over the same source (the
//! [`Registry`] keys them by kind, source and name), updated by the xDS wiring
//! (`crate::xds::sds`: a file source, its own gRPC stream or ADS), and read
//! lock-free. Contexts that name SDS secrets ([`DynamicServer`],
//! [`DynamicUpstream`]) are rebuilt on the main thread when one of their
//! secrets changes, and the result is swapped in with one store: a handshake
//! loads the context in force (no lock) and keeps it for its connection, so an
//! open connection is untouched by a rotation and the next handshake gets the
//! new secret. A context whose secrets have not arrived has nothing built:
//! its handshakes fail as Envoy's do before SDS supplies the secret.

use crate::tls::ChainTls;
use arc_swap::{ArcSwap, ArcSwapOption};
use courier_config::config_source::ConfigSource;
use courier_config::tls::sds::{SecretResource, SecretValue, resolve_validation};
use courier_config::tls::{
    CertificateValidation, CommonTls, DownstreamTls, SdsSecret, SecretKind, TlsCertificate,
    UpstreamTls,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::SystemTime;
use tokio::sync::watch;

/// Envoy's failure reason for a handshake whose context has no secret yet
/// (`NotReadySslSocket`).
pub const NOT_READY: &str = "TLS error: Secret is not supplied by SDS";

/// Something rebuilt when a secret it uses changes.
pub trait SecretWatcher: Send + Sync {
    /// A secret changed (or arrived): rebuild from the providers' values.
    fn secret_changed(&self);
}

/// Counters of one secret's subscription (Envoy's `sds.<name>.*`).
#[derive(Debug, Default)]
pub struct SdsCounters {
    /// Updates received (accepted or not).
    pub update_attempt: AtomicU64,
    /// Updates accepted.
    pub update_success: AtomicU64,
    /// Updates rejected.
    pub update_rejected: AtomicU64,
    /// When the last update was accepted, in ms since the epoch.
    pub update_time: AtomicU64,
    /// The xxHash64 of the last accepted version_info.
    pub version: AtomicU64,
    /// The initial fetch timed out.
    pub init_fetch_timeout: AtomicU64,
    /// A rotated file could not be read or did not make a valid secret.
    pub key_rotation_failed: AtomicU64,
}

/// One SDS secret (see the module docs).
pub struct SecretProvider {
    /// What it holds.
    pub kind: SecretKind,
    /// The secret's name.
    pub name: String,
    /// Where it comes from.
    pub source: ConfigSource,
    value: ArcSwapOption<SecretResource>,
    /// The version_info the value came with, and when it was applied.
    meta: ArcSwap<(String, SystemTime)>,
    /// Set at the first answer (accepted or rejected) or when the initial
    /// fetch timed out: what warming waits for.
    initialized: AtomicBool,
    changed: watch::Sender<u64>,
    /// Contexts to rebuild on a change (written on the main thread, rarely).
    watchers: ArcSwap<Vec<Weak<dyn SecretWatcher>>>,
    /// Its stats (per provider, so shared by every context using it).
    pub counters: SdsCounters,
    /// What keeps its subscription running (dropped with the provider).
    subscription: ArcSwapOption<Box<dyn std::any::Any + Send + Sync>>,
    /// Its own xDS client's handle (file and gRPC sources): its update stats.
    pub handle: OnceLock<courier_xds::XdsHandle>,
}

impl std::fmt::Debug for SecretProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretProvider")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("ready", &self.value.load().is_some())
            .finish_non_exhaustive()
    }
}

impl SecretProvider {
    fn new(kind: SecretKind, secret: &SdsSecret) -> Self {
        Self {
            kind,
            name: secret.name.clone(),
            source: secret.source.clone(),
            value: ArcSwapOption::empty(),
            meta: ArcSwap::from_pointee(("uninitialized".to_string(), SystemTime::now())),
            initialized: AtomicBool::new(false),
            changed: watch::channel(0).0,
            watchers: ArcSwap::from_pointee(Vec::new()),
            counters: SdsCounters::default(),
            subscription: ArcSwapOption::empty(),
            handle: OnceLock::new(),
        }
    }

    /// The secret in force, if any arrived.
    pub fn value(&self) -> Option<Arc<SecretResource>> {
        self.value.load_full()
    }

    /// The version_info of the value in force and when it was applied.
    pub fn meta(&self) -> (String, SystemTime) {
        let m = self.meta.load();
        (m.0.clone(), m.1)
    }

    /// Puts `secret` (already checked against this provider's name and
    /// kind) in force and rebuilds every context using it.
    pub fn set(&self, secret: Arc<SecretResource>, version_info: &str) {
        self.value.store(Some(secret));
        self.meta
            .store(Arc::new((version_info.to_string(), SystemTime::now())));
        let c = &self.counters;
        c.update_success.fetch_add(1, Ordering::Relaxed);
        c.update_time.store(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            Ordering::Relaxed,
        );
        c.version.store(
            xxhash_rust::xxh64::xxh64(version_info.as_bytes(), 0),
            Ordering::Relaxed,
        );
        self.notify();
        self.mark_initialized();
    }

    /// Rebuilds every context using this secret.
    fn notify(&self) {
        let live: Vec<Arc<dyn SecretWatcher>> = self
            .watchers
            .load()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for w in live {
            w.secret_changed();
        }
        self.changed.send_modify(|g| *g += 1);
    }

    /// The initial fetch is over (an answer came, or its timeout passed).
    pub fn mark_initialized(&self) {
        if !self.initialized.swap(true, Ordering::AcqRel) {
            self.changed.send_modify(|g| *g += 1);
        }
    }

    /// Whether the initial fetch is over.
    pub fn initialized(&self) -> bool {
        self.initialized.load(Ordering::Acquire)
    }

    /// Waits until the initial fetch is over.
    pub async fn warmed(&self) {
        let mut rx = self.changed.subscribe();
        while !self.initialized() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    fn watch(&self, w: Weak<dyn SecretWatcher>) {
        self.watchers.rcu(|list| {
            let mut next: Vec<Weak<dyn SecretWatcher>> = list
                .iter()
                .filter(|w| w.strong_count() > 0)
                .cloned()
                .collect();
            next.push(w.clone());
            next
        });
    }

    /// Keeps `subscription` (the task or client feeding this provider) for
    /// as long as the provider lives.
    pub fn set_subscription(&self, subscription: Box<dyn std::any::Any + Send + Sync>) {
        self.subscription.store(Some(Arc::new(subscription)));
    }

    /// Whether a subscription feeds it.
    pub fn subscribed(&self) -> bool {
        self.subscription.load().is_some()
    }
}

/// What identifies a provider: Envoy keys dynamic secrets by the hash of
/// their config source and their name, per kind.
#[derive(Debug, Clone, PartialEq)]
struct Key {
    kind: SecretKind,
    name: String,
    source: ConfigSource,
}

/// Every provider alive, by kind, source and name; new ones wait in a queue
/// until the xDS wiring starts their subscriptions. Written when contexts
/// are built (the main thread), read lock-free.
#[derive(Default)]
pub struct Registry {
    providers: ArcSwap<Vec<(Key, Weak<SecretProvider>)>>,
    pending: ArcSwap<Vec<Arc<SecretProvider>>>,
    /// Ticks when a provider is queued.
    queued: OnceLock<watch::Sender<u64>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

/// The process's registry.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

impl Registry {
    /// The provider of `secret` of `kind`: the live one with the same name
    /// and source, or a new one (queued for its subscription).
    pub fn provider(&self, kind: SecretKind, secret: &SdsSecret) -> Arc<SecretProvider> {
        let key = Key {
            kind,
            name: secret.name.clone(),
            source: secret.source.clone(),
        };
        loop {
            let current = self.providers.load_full();
            if let Some(p) = current
                .iter()
                .find(|(k, _)| *k == key)
                .and_then(|(_, p)| p.upgrade())
            {
                return p;
            }
            let p = Arc::new(SecretProvider::new(kind, secret));
            let mut next: Vec<(Key, Weak<SecretProvider>)> = current
                .iter()
                .filter(|(_, p)| p.strong_count() > 0)
                .cloned()
                .collect();
            next.push((key.clone(), Arc::downgrade(&p)));
            let prev = self.providers.compare_and_swap(&current, Arc::new(next));
            if !Arc::ptr_eq(&prev, &current) {
                // Another context added one meanwhile: look again.
                continue;
            }
            self.pending.rcu(|pending| {
                let mut next = Vec::clone(pending);
                next.push(Arc::clone(&p));
                next
            });
            self.queued_tx().send_modify(|g| *g += 1);
            return p;
        }
    }

    fn queued_tx(&self) -> &watch::Sender<u64> {
        self.queued.get_or_init(|| watch::channel(0).0)
    }

    /// Providers created since the last call (their subscriptions to start).
    pub fn take_pending(&self) -> Vec<Arc<SecretProvider>> {
        Vec::clone(&self.pending.swap(Arc::new(Vec::new())))
    }

    /// A receiver that sees every queued provider.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.queued_tx().subscribe()
    }

    /// Every live provider.
    pub fn all(&self) -> Vec<Arc<SecretProvider>> {
        self.providers
            .load()
            .iter()
            .filter_map(|(_, p)| p.upgrade())
            .collect()
    }
}

/// The providers a context's SDS references resolve to.
#[derive(Debug)]
pub struct ContextSecrets {
    /// Certificate providers, each with the number of static certificates before it.
    certificates: Vec<(usize, Arc<SecretProvider>)>,
    validation: Option<Arc<SecretProvider>>,
}

impl ContextSecrets {
    /// The providers of `common`'s SDS references; `None` when it has none.
    pub fn of(common: &CommonTls) -> Option<Self> {
        let sds = common.sds.as_ref()?;
        let r = registry();
        Some(Self {
            certificates: sds
                .certificates
                .iter()
                .map(|(at, s)| (*at, r.provider(SecretKind::Certificate, s)))
                .collect(),
            validation: sds
                .validation
                .as_ref()
                .map(|v| r.provider(SecretKind::Validation, &v.secret)),
        })
    }

    /// Every provider.
    pub fn providers(&self) -> impl Iterator<Item = &Arc<SecretProvider>> {
        self.certificates
            .iter()
            .map(|(_, p)| p)
            .chain(self.validation.iter())
    }

    /// Waits until every provider's initial fetch is over (warming).
    pub async fn warmed(&self) {
        for p in self.providers() {
            p.warmed().await;
        }
    }

    /// The certificates and validation context of `common` with the secrets
    /// in force: `None` while not ready (as Envoy's `isReady`: some
    /// certificate when the context names certificates, and the validation
    /// context when it names one); `Err` when the secrets make no valid
    /// context.
    fn resolve(
        &self,
        statics: &[TlsCertificate],
        common: &CommonTls,
    ) -> Option<Result<Resolved, String>> {
        let mut certificates = Vec::with_capacity(statics.len() + self.certificates.len());
        let mut next = 0;
        for (at, p) in &self.certificates {
            while next < *at && next < statics.len() {
                certificates.push(statics[next].clone());
                next += 1;
            }
            if let Some(v) = p.value()
                && let SecretValue::Certificate(c) = &v.value
            {
                certificates.push(c.clone());
            }
        }
        certificates.extend(statics[next.min(statics.len())..].iter().cloned());
        if !self.certificates.is_empty() && certificates.is_empty() {
            return None;
        }
        let validation = match (&self.validation, common.sds.as_ref()) {
            (Some(p), Some(sds)) => {
                let v = p.value()?;
                let SecretValue::Validation(fields) = &v.value else {
                    return None;
                };
                let default = sds.validation.as_ref().and_then(|v| v.default.as_ref());
                match resolve_validation(default, fields) {
                    Ok(v) => v,
                    Err(e) => return Some(Err(e)),
                }
            }
            _ => common.validation.clone(),
        };
        Some(Ok((certificates, validation)))
    }

    fn watch(&self, w: Weak<dyn SecretWatcher>) {
        for p in self.providers() {
            p.watch(w.clone());
        }
    }
}

/// A context's certificates and validation with its secrets in force.
type Resolved = (Vec<TlsCertificate>, Option<CertificateValidation>);

/// Builds an upstream context from its resolved config.
type BuildUpstream<T> = Box<dyn Fn(&UpstreamTls) -> Result<T, String> + Send + Sync>;

/// A downstream TLS context with SDS secrets (see the module docs).
#[derive(Debug)]
pub struct DynamicServer {
    config: Arc<DownstreamTls>,
    secrets: ContextSecrets,
    built: ArcSwapOption<ChainTls>,
}

impl DynamicServer {
    /// The context of `config` (which names SDS secrets), built at once from
    /// the secrets already in force and again whenever one changes.
    pub fn new(config: Arc<DownstreamTls>) -> Option<Arc<Self>> {
        let secrets = ContextSecrets::of(&config.common)?;
        let me = Arc::new(Self {
            config,
            secrets,
            built: ArcSwapOption::empty(),
        });
        let weak: Weak<dyn SecretWatcher> =
            Arc::downgrade(&(Arc::clone(&me) as Arc<dyn SecretWatcher>));
        me.secrets.watch(weak);
        me.secret_changed();
        Some(me)
    }

    /// The configs in force; `Err` ([`NOT_READY`]) before the secrets arrive.
    pub fn current(&self) -> Result<ChainTls, String> {
        match &*self.built.load() {
            Some(c) => Ok(ChainTls::clone(c)),
            None => Err(NOT_READY.to_string()),
        }
    }

    /// Its secrets.
    pub fn secrets(&self) -> &ContextSecrets {
        &self.secrets
    }
}

impl SecretWatcher for DynamicServer {
    fn secret_changed(&self) {
        let resolved = self
            .secrets
            .resolve(&self.config.certificates, &self.config.common);
        let result = match resolved {
            None => return,
            Some(Err(e)) => Err(e),
            Some(Ok((certificates, validation))) => {
                let mut tls = DownstreamTls::clone(&self.config);
                tls.certificates = certificates;
                tls.common.validation = validation;
                super::chain_tls(&tls)
            }
        };
        match result {
            Ok(built) => self.built.store(Some(Arc::new(built))),
            // The context in force (if any) stays, as Envoy keeps its old
            // context when a new one cannot be made.
            Err(e) => tracing::warn!("SDS: a TLS context cannot be built from its secrets: {e}"),
        }
    }
}

/// An upstream TLS context with SDS secrets: `T` is what the upstream side
/// builds from the resolved config.
pub struct DynamicUpstream<T> {
    config: UpstreamTls,
    build: BuildUpstream<T>,
    secrets: ContextSecrets,
    built: ArcSwapOption<T>,
    /// Envoy's `client_ssl_socket_factory.ssl_context_update_by_sds`.
    pub updates: AtomicU64,
    /// Envoy's `client_ssl_socket_factory.upstream_context_secrets_not_ready`.
    pub not_ready: AtomicU64,
}

impl<T> std::fmt::Debug for DynamicUpstream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicUpstream")
            .field("ready", &self.built.load().is_some())
            .finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> DynamicUpstream<T> {
    /// The context of `config` (which names SDS secrets), built with `build`
    /// at once from the secrets in force and again whenever one changes.
    pub fn new(
        config: UpstreamTls,
        build: impl Fn(&UpstreamTls) -> Result<T, String> + Send + Sync + 'static,
    ) -> Option<Arc<Self>> {
        let secrets = ContextSecrets::of(&config.common)?;
        let me = Arc::new(Self {
            config,
            build: Box::new(build),
            secrets,
            built: ArcSwapOption::empty(),
            updates: AtomicU64::new(0),
            not_ready: AtomicU64::new(0),
        });
        let weak: Weak<dyn SecretWatcher> =
            Arc::downgrade(&(Arc::clone(&me) as Arc<dyn SecretWatcher>));
        me.secrets.watch(weak);
        me.secret_changed();
        Some(me)
    }

    /// What is in force; `None` before the secrets arrive (counted).
    pub fn current(&self) -> Option<Arc<T>> {
        let built = self.built.load_full();
        if built.is_none() {
            self.not_ready.fetch_add(1, Ordering::Relaxed);
        }
        built
    }
}

impl<T: Send + Sync + 'static> SecretWatcher for DynamicUpstream<T> {
    fn secret_changed(&self) {
        let statics: Vec<TlsCertificate> = self.config.client_certificate.iter().cloned().collect();
        let result = match self.secrets.resolve(&statics, &self.config.common) {
            None => return,
            Some(Err(e)) => Err(e),
            Some(Ok((certificates, validation))) => {
                let mut tls = self.config.clone();
                tls.client_certificate = certificates.into_iter().next();
                tls.common.validation = validation;
                (self.build)(&tls)
            }
        };
        match result {
            Ok(built) => {
                self.built.store(Some(Arc::new(built)));
                self.updates.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::warn!("SDS: a TLS context cannot be built from its secrets: {e}"),
        }
    }
}
