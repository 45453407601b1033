//! SDS: feeds the secret providers of `crate::tls::sds`.
//!
//! Each provider with a file or gRPC source gets its own xDS client (a
//! `path_config_source` file watched for replacement, or its own
//! `SecretDiscoveryService` stream to the named cluster, ACKed and NACKed as
//! every stream), subscribed to its one secret, as Envoy's `SdsApi` has its
//! own subscription. Providers over ADS share the bootstrap's ADS stream: the
//! main client carries the `Secret` type with their names. A secret must be
//! the one asked for (name and kind) or it is NACKed and the secret in force
//! stays. The files a secret's data sources read (`filename`) are watched too,
//! so a rotated certificate, key or CA applies without a new resource (as
//! Envoy's watch on their directories does, Kubernetes' symlink swap
//! included).
//!
//! Warming: a provider is initialized at its first answer, accepted or not,
//! or at its source's `initial_fetch_timeout` (`sds.<name>.init_fetch_timeout`
//! counts that), as Envoy's `SdsApi` init target.

use crate::tls::sds::{SecretProvider, registry};
use courier_config::config_source::ConfigSourceKind;
use courier_config::resource::Resource;
use courier_config::tls::sds::{SecretResource, check_secret};
use courier_xds::from_config::{self, Resolve};
use courier_xds::{
    Client, ClientConfig, Interest, ResourceType, Source, Update, Verdict, XdsHandle,
};
use envoy_types::pb::envoy::config::core::v3::Node;
use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, OnceLock, Weak};

/// The main client's handle, when the bootstrap has ADS (providers over ADS
/// subscribe through it).
static ADS: OnceLock<XdsHandle> = OnceLock::new();

/// Aborts a task when dropped (kept by the provider it feeds).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the subscriptions of every provider queued so far, and of every
/// one queued later (LDS listeners and CDS clusters naming new secrets).
/// Call within the main thread's runtime.
pub fn spawn(resolve: Arc<dyn Resolve + Send + Sync>, node: Node, ads: Option<XdsHandle>) {
    if let Some(h) = ads {
        let _ = ADS.set(h);
    }
    let mut queued = registry().subscribe();
    start_pending(&resolve, &node);
    tokio::spawn(async move {
        while queued.changed().await.is_ok() {
            start_pending(&resolve, &node);
        }
    });
}

fn start_pending(resolve: &Arc<dyn Resolve + Send + Sync>, node: &Node) {
    let mut ads_changed = false;
    for p in registry().take_pending() {
        if p.subscribed() {
            continue;
        }
        match &p.source.kind {
            ConfigSourceKind::Ads => {
                ads_changed = true;
                let timer = tokio::spawn(initial_timeout(Arc::downgrade(&p), None));
                p.set_subscription(Box::new(AbortOnDrop(timer.abort_handle())));
            }
            _ => start_own(&p, resolve.as_ref(), node),
        }
    }
    if ads_changed {
        set_ads_interest();
    }
}

/// The names of the live ADS providers, as the main client's `Secret` interest.
fn set_ads_interest() {
    let Some(handle) = ADS.get() else {
        for p in registry().all() {
            if p.source.kind == ConfigSourceKind::Ads {
                tracing::warn!(secret = %p.name, "SDS over ADS without dynamic_resources.ads_config");
                p.mark_initialized();
            }
        }
        return;
    };
    let names: BTreeSet<String> = registry()
        .all()
        .into_iter()
        .filter(|p| p.source.kind == ConfigSourceKind::Ads)
        .map(|p| p.name.clone())
        .collect();
    if *handle.interest(ResourceType::Secret) != Interest::Names(names.clone()) {
        handle.set_interest(ResourceType::Secret, Interest::Names(names));
    }
}

/// Applies `Secret` resources from ADS to the providers over ADS naming them.
pub(super) fn apply_ads(u: &Update) -> Verdict {
    let mut verdict = Verdict::accept();
    let providers: Vec<Arc<SecretProvider>> = registry()
        .all()
        .into_iter()
        .filter(|p| p.source.kind == ConfigSourceKind::Ads)
        .collect();
    for up in &u.upserts {
        let Resource::Secret(secret) = &*up.resource else {
            continue;
        };
        let mut problems = Vec::new();
        for p in providers.iter().filter(|p| p.name == up.name) {
            p.counters
                .update_attempt
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match check_secret(secret, &p.name, p.kind) {
                Ok(()) => {
                    p.set(Arc::clone(secret), &u.version_info);
                    start_file_watch(p, None);
                }
                Err(e) => {
                    p.counters
                        .update_rejected
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    p.mark_initialized();
                    problems.extend(e);
                }
            }
        }
        if !problems.is_empty() {
            verdict
                .rejected
                .push((up.name.clone(), problems.join("; ")));
        }
    }
    verdict
}

/// Gives `p` its own client (file or gRPC source).
fn start_own(p: &Arc<SecretProvider>, resolve: &dyn Resolve, node: &Node) {
    let source =
        match from_config::source(&p.source, ResourceType::Secret, resolve, super::FILE_POLL) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(secret = %p.name, "SDS source cannot be used: {e}");
                p.mark_initialized();
                return;
            }
        };
    if matches!(source, Source::Ads) {
        return;
    }
    let weak = Arc::downgrade(p);
    let consumer = move |u: &Update| -> Verdict {
        let mut verdict = Verdict::accept();
        let Some(p) = weak.upgrade() else {
            return verdict;
        };
        for up in &u.upserts {
            let Resource::Secret(secret) = &*up.resource else {
                continue;
            };
            match check_secret(secret, &p.name, p.kind) {
                Ok(()) => p.set(Arc::clone(secret), &u.version_info),
                Err(e) => verdict.rejected.push((up.name.clone(), e.join("; "))),
            }
        }
        verdict
    };
    let client = Client::start(
        ClientConfig {
            node: node.clone(),
            ads: None,
            sources: vec![(ResourceType::Secret, source)],
            interest: vec![(
                ResourceType::Secret,
                Interest::Names(BTreeSet::from([p.name.clone()])),
            )],
            ..Default::default()
        },
        Arc::new(consumer),
    );
    let handle = client.handle();
    let _ = p.handle.set(handle.clone());
    let timer = tokio::spawn(initial_timeout(Arc::downgrade(p), Some(handle.clone())));
    let files = tokio::spawn(watch_files(Arc::downgrade(p), Some(handle)));
    p.set_subscription(Box::new((
        client,
        AbortOnDrop(timer.abort_handle()),
        AbortOnDrop(files.abort_handle()),
    )));
}

/// Marks `p` initialized at its first answer (accepted or rejected: Envoy's
/// init target is ready either way) or at its `initial_fetch_timeout`.
async fn initial_timeout(p: Weak<SecretProvider>, handle: Option<XdsHandle>) {
    let Some(timeout) = p.upgrade().map(|p| p.source.initial_fetch_timeout) else {
        return;
    };
    let answered = async {
        match &handle {
            Some(h) => {
                let mut changed = h.store().subscribe();
                loop {
                    let attempts = h
                        .store()
                        .counters(ResourceType::Secret)
                        .update_attempt
                        .load(std::sync::atomic::Ordering::Relaxed);
                    if attempts > 0 {
                        return;
                    }
                    if changed.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }
            // Over ADS: `set` and rejections mark it.
            None => std::future::pending::<()>().await,
        }
    };
    let done = match timeout {
        Some(t) => tokio::time::timeout(t, answered).await.is_ok(),
        None => {
            answered.await;
            true
        }
    };
    let Some(p) = p.upgrade() else { return };
    if !done && !p.initialized() {
        p.counters
            .init_fetch_timeout
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(secret = %p.name, "SDS initial fetch timed out; TLS contexts using it fail their handshakes until it arrives");
    }
    p.mark_initialized();
}

/// Over ADS, the file watch starts with the first secret (no handle to read
/// raw bytes from: the secret in force is re-read from its files).
fn start_file_watch(p: &Arc<SecretProvider>, handle: Option<XdsHandle>) {
    if p.handle.get().is_some() {
        return;
    }
    let task = tokio::spawn(watch_files(Arc::downgrade(p), handle));
    // Replaces the ADS initial timer: the provider is initialized now.
    p.set_subscription(Box::new(AbortOnDrop(task.abort_handle())));
}

/// Device, inode, length and modification time of a file.
type Stamp = (u64, u64, u64, i64, i64);

/// What identifies one version of a file (followed through symlinks, so a
/// Kubernetes `..data` swap is a change).
fn stamp(path: &str) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.len(), m.mtime(), m.mtime_nsec()))
}

/// Polls the files the secret in force reads; when one changes, translates
/// the secret again and puts it in force (`key_rotation_failed` when that
/// fails: the secret in force stays).
async fn watch_files(p: Weak<SecretProvider>, handle: Option<XdsHandle>) {
    let mut seen: Vec<(String, Option<Stamp>)> = Vec::new();
    let mut current: Option<Arc<SecretResource>> = None;
    loop {
        tokio::time::sleep(super::FILE_POLL).await;
        let Some(provider) = p.upgrade() else { return };
        let Some(value) = provider.value() else {
            continue;
        };
        if !current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &value)) {
            // A new secret: watch its files from here.
            seen = value.files.iter().map(|f| (f.clone(), stamp(f))).collect();
            current = Some(value);
            continue;
        }
        let now: Vec<_> = seen.iter().map(|(f, _)| (f.clone(), stamp(f))).collect();
        if now == seen {
            continue;
        }
        seen = now;
        match reload(&provider, &value, handle.as_ref()) {
            Ok(fresh) => {
                let fresh = Arc::new(fresh);
                let (version, _) = provider.meta();
                tracing::info!(secret = %provider.name, "SDS: files of the secret changed; reloaded");
                provider.set(Arc::clone(&fresh), &version);
                current = Some(fresh);
            }
            Err(e) => {
                provider
                    .counters
                    .key_rotation_failed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(secret = %provider.name, "SDS: rotated files not loaded: {e}");
            }
        }
    }
}

/// The secret translated again: from the resource in force in `handle`'s
/// store, or (over ADS) from the secret in force with its files re-read.
fn reload(
    p: &SecretProvider,
    value: &SecretResource,
    handle: Option<&XdsHandle>,
) -> Result<SecretResource, String> {
    let any = match handle {
        Some(h) => {
            let st = h.store().get(ResourceType::Secret);
            let e = st
                .resources
                .get(&p.name)
                .ok_or_else(|| "no resource in force".to_string())?;
            e.any(ResourceType::Secret)
        }
        None => {
            let st = ADS
                .get()
                .map(|h| h.store().get(ResourceType::Secret))
                .ok_or_else(|| "no ADS client".to_string())?;
            let e = st
                .resources
                .get(&value.name)
                .ok_or_else(|| "no resource in force".to_string())?;
            e.any(ResourceType::Secret)
        }
    };
    let mut ctx = courier_config::Ctx::new();
    let r = courier_config::resource::translate(&any, &mut ctx);
    ctx.finish(()).map_err(|e| e.to_string())?;
    let Some(Resource::Secret(s)) = r else {
        return Err("not a secret".into());
    };
    check_secret(&s, &p.name, p.kind).map_err(|e| e.join("; "))?;
    Ok(SecretResource::clone(&s))
}

/// `sds.<name>.*` stats, summed over the providers of one name (Envoy's
/// providers of one name share the scope).
pub fn samples(out: &mut Vec<crate::stats::Sample>) {
    use std::collections::BTreeMap;
    use std::sync::atomic::Ordering::Relaxed;
    let mut by_name: BTreeMap<String, BTreeMap<&'static str, u64>> = BTreeMap::new();
    for p in registry().all() {
        let stats = by_name.entry(p.name.clone()).or_default();
        let c = &p.counters;
        let own: [(&'static str, u64); 5] = match p.handle.get() {
            Some(h) => h.store().counters(ResourceType::Secret).samples(),
            None => [
                ("update_attempt", c.update_attempt.load(Relaxed)),
                ("update_success", c.update_success.load(Relaxed)),
                ("update_rejected", c.update_rejected.load(Relaxed)),
                ("update_time", c.update_time.load(Relaxed)),
                ("version", c.version.load(Relaxed)),
            ],
        };
        for (k, v) in own {
            let e = stats.entry(k).or_default();
            // Times and versions are gauges: the latest wins.
            if matches!(k, "update_time" | "version") {
                *e = (*e).max(v);
            } else {
                *e += v;
            }
        }
        *stats.entry("init_fetch_timeout").or_default() += c.init_fetch_timeout.load(Relaxed);
        *stats.entry("key_rotation_failed").or_default() += c.key_rotation_failed.load(Relaxed);
        // Envoy counts connection failures of its stream here.
        stats.entry("update_failure").or_default();
    }
    for (name, stats) in by_name {
        for (k, v) in stats {
            out.push((format!("sds.{name}.{k}"), v));
        }
    }
}

/// Waits until every provider alive now has had its initial fetch.
pub async fn warmed() {
    for p in registry().all() {
        p.warmed().await;
    }
}
