//! The dynamic forward proxy's DNS cache (Envoy's `DnsCacheImpl`): one per
//! `DnsCacheConfig.name` in the process, shared by the clusters and filters
//! that name it.
//!
//! A host (`name:port`) is resolved once, by its first request, with the
//! system resolver (`getaddrinfo` on tokio's blocking pool, so never on a
//! worker's thread); the requests that ask meanwhile wait for that one
//! answer. Its task then resolves it again every `dns_refresh_rate` (keeping
//! the last good answer when a refresh fails) and drops it once no request
//! has used it for `host_ttl`. A lookup of a cached host takes no lock: the
//! table and each host's answer are swapped whole.

use arc_swap::ArcSwap;
use courier_config::dns_cache::DnsCacheConfig;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use tokio::sync::Notify;
use tokio::time::Instant;

/// A host's resolution state.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Its first resolution has not finished.
    Pending,
    /// Its addresses, in the lookup family's preference (the first is used).
    Resolved(Arc<[SocketAddr]>),
    /// Its resolution failed; the resolver's reason, spaces replaced by `_`
    /// (`%RESPONSE_CODE_DETAILS%` text).
    Failed(Arc<str>),
}

/// One cached host.
#[derive(Debug)]
pub struct HostEntry {
    /// The host name (an IPv6 literal without its brackets).
    pub host: String,
    /// The port.
    pub port: u16,
    answer: ArcSwap<Answer>,
    resolved: Notify,
    /// Milliseconds since the cache's start at its last use.
    last_used: AtomicU64,
}

impl HostEntry {
    /// The current answer.
    pub fn answer(&self) -> Arc<Answer> {
        self.answer.load_full()
    }
}

/// Why a host could not be looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// `max_hosts` hosts are cached already.
    #[error("DNS cache overflow")]
    Overflow,
    /// `dns_cache_circuit_breaker.max_pending_requests` requests wait already.
    #[error("dynamic forward proxy pending request overflow")]
    PendingOverflow,
}

/// A named DNS cache.
#[derive(Debug)]
pub struct DnsCache {
    config: DnsCacheConfig,
    /// Changed (a new host, an expired one) by read-copy-update: rare, and
    /// never on a lookup of a cached host.
    hosts: ArcSwap<HashMap<String, Arc<HostEntry>>>,
    pending: AtomicU32,
    epoch: Instant,
}

/// The caches by name.
static CACHES: LazyLock<ArcSwap<HashMap<String, Arc<DnsCache>>>> =
    LazyLock::new(|| ArcSwap::from_pointee(HashMap::new()));

impl DnsCache {
    /// The process's cache named by `config` (made on first use). A config of
    /// the same name with other settings gets a cache of its own (the
    /// translation refuses two in one config, as Envoy does).
    pub fn get(config: &DnsCacheConfig) -> Arc<DnsCache> {
        let same = |c: &Arc<DnsCache>| c.config == *config;
        if let Some(c) = CACHES.load().get(&config.name).filter(|c| same(c)) {
            return Arc::clone(c);
        }
        let fresh = Arc::new(DnsCache {
            config: config.clone(),
            hosts: ArcSwap::from_pointee(HashMap::new()),
            pending: AtomicU32::new(0),
            epoch: Instant::now(),
        });
        // Another thread may have made it meanwhile: its cache is the one.
        let caches = CACHES.rcu(|caches| {
            if caches.get(&config.name).is_some_and(same) {
                return Arc::clone(caches);
            }
            let mut next = HashMap::clone(caches);
            next.insert(config.name.clone(), Arc::clone(&fresh));
            Arc::new(next)
        });
        match caches.get(&config.name).filter(|c| same(c)) {
            Some(c) => Arc::clone(c),
            None => fresh,
        }
    }

    /// Its config.
    pub fn config(&self) -> &DnsCacheConfig {
        &self.config
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The cached host `authority` names (`name` or `name:port`, `port`
    /// defaulting to `default_port`), if cached; marks it used.
    pub fn cached(&self, authority: &str, default_port: u16) -> Option<Arc<HostEntry>> {
        let key = normalize(authority, default_port)?;
        let e = self.hosts.load().get(&key).cloned()?;
        e.last_used.store(self.now_ms(), Ordering::Relaxed);
        Some(e)
    }

    /// Whether it holds host `key` (`name:port`), without marking it used.
    pub fn contains(&self, key: &str) -> bool {
        self.hosts.load().contains_key(key)
    }

    /// Looks `authority` up, resolving it first when it is new (waiting
    /// without blocking the worker); `Ok(None)` for an authority that names
    /// no host (empty, or a bad port).
    pub async fn resolve(
        self: &Arc<Self>,
        authority: &str,
        default_port: u16,
    ) -> Result<Option<Arc<Answer>>, LookupError> {
        let Some(key) = normalize(authority, default_port) else {
            return Ok(None);
        };
        let entry = match self.hosts.load().get(&key) {
            Some(e) => Arc::clone(e),
            None => self.insert(&key)?,
        };
        entry.last_used.store(self.now_ms(), Ordering::Relaxed);
        let answer = entry.answer();
        if !matches!(*answer, Answer::Pending) {
            return Ok(Some(answer));
        }
        // Only waiting requests count against the circuit breaker.
        let _slot = PendingSlot::take(self)?;
        loop {
            let resolved = entry.resolved.notified();
            tokio::pin!(resolved);
            resolved.as_mut().enable();
            let answer = entry.answer();
            if !matches!(*answer, Answer::Pending) {
                return Ok(Some(answer));
            }
            resolved.await;
        }
    }

    /// Adds `key` and starts its resolution (or finds it added meanwhile).
    fn insert(self: &Arc<Self>, key: &str) -> Result<Arc<HostEntry>, LookupError> {
        let (host, port) = split(key).ok_or(LookupError::Overflow)?;
        let entry = Arc::new(HostEntry {
            host: host.to_string(),
            port,
            answer: ArcSwap::from_pointee(Answer::Pending),
            resolved: Notify::new(),
            last_used: AtomicU64::new(self.now_ms()),
        });
        let max = self.config.max_hosts as usize;
        let before = self.hosts.rcu(|hosts| {
            if hosts.contains_key(key) || hosts.len() >= max {
                return Arc::clone(hosts);
            }
            let mut next = HashMap::clone(hosts);
            next.insert(key.to_string(), Arc::clone(&entry));
            Arc::new(next)
        });
        // `rcu` gives the table it replaced: the key there means another
        // request added it first; a full table without it, an overflow.
        if let Some(e) = before.get(key) {
            return Ok(Arc::clone(e));
        }
        if before.len() >= max {
            return Err(LookupError::Overflow);
        }
        tokio::spawn(Self::keep(
            Arc::clone(self),
            key.to_string(),
            Arc::clone(&entry),
        ));
        Ok(entry)
    }

    /// A host's life in the cache: resolved now, then every refresh period
    /// until unused for `host_ttl`.
    async fn keep(cache: Arc<Self>, key: String, entry: Arc<HostEntry>) {
        loop {
            let answer = lookup(&entry.host, entry.port, &cache.config).await;
            // A failed refresh keeps the last good answer, as Envoy does.
            let keep_old = matches!(answer, Answer::Failed(_))
                && matches!(*entry.answer(), Answer::Resolved(_));
            if !keep_old {
                entry.answer.store(Arc::new(answer));
            }
            entry.resolved.notify_waiters();
            tokio::time::sleep(cache.config.refresh_rate).await;
            let idle = cache
                .now_ms()
                .saturating_sub(entry.last_used.load(Ordering::Relaxed));
            if u128::from(idle) >= cache.config.host_ttl.as_millis() {
                cache.hosts.rcu(|hosts| {
                    let mut next = HashMap::clone(hosts);
                    next.remove(&key);
                    next
                });
                return;
            }
        }
    }

    /// How many hosts it holds.
    pub fn len(&self) -> usize {
        self.hosts.load().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A waiting request's circuit-breaker slot.
struct PendingSlot<'a>(&'a DnsCache);

impl<'a> PendingSlot<'a> {
    fn take(cache: &'a DnsCache) -> Result<Self, LookupError> {
        let max = cache.config.max_pending_requests;
        cache
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .map_err(|_| LookupError::PendingOverflow)?;
        Ok(Self(cache))
    }
}

impl Drop for PendingSlot<'_> {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Resolves `host` with the system resolver, keeping the family's addresses.
async fn lookup(host: &str, port: u16, config: &DnsCacheConfig) -> Answer {
    match tokio::net::lookup_host((host, port)).await {
        Ok(addrs) => {
            let addrs = config.lookup_family.filter(addrs.collect());
            if addrs.is_empty() {
                Answer::Failed(Arc::from("no_addresses"))
            } else {
                Answer::Resolved(addrs.into())
            }
        }
        Err(e) => Answer::Failed(Arc::from(e.to_string().replace(' ', "_"))),
    }
}

/// Envoy's `normalizeHostForDfp`: `name:port`, with the default port when the
/// authority has none; `None` for an empty name or a bad port.
pub fn normalize(authority: &str, default_port: u16) -> Option<String> {
    let (host, port) = parse_authority(authority)?;
    let port = port.unwrap_or(default_port);
    Some(if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

/// Splits a normalized key into name and port.
fn split(key: &str) -> Option<(&str, u16)> {
    let (host, port) = parse_authority(key)?;
    Some((host, port?))
}

/// An authority's host (IPv6 without brackets) and port, if any.
pub fn parse_authority(authority: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        match after.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if after.is_empty() => (h, None),
            None => return None,
        }
    } else {
        match authority.rsplit_once(':') {
            // A bare IPv6 address has colons and no port.
            Some((h, _)) if h.contains(':') => (authority, None),
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok()?),
        None => None,
    };
    Some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_config::cluster::DnsLookupFamily;
    use std::time::Duration;

    fn config(name: &str) -> DnsCacheConfig {
        DnsCacheConfig {
            name: name.to_string(),
            lookup_family: DnsLookupFamily::V4Only,
            refresh_rate: Duration::from_secs(60),
            host_ttl: Duration::from_secs(300),
            max_hosts: 2,
            max_pending_requests: 1024,
        }
    }

    #[test]
    fn authorities_normalize_as_envoy() {
        assert_eq!(
            normalize("example.com", 80).as_deref(),
            Some("example.com:80")
        );
        assert_eq!(
            normalize("example.com:8080", 443).as_deref(),
            Some("example.com:8080")
        );
        assert_eq!(normalize("[::1]:9", 80).as_deref(), Some("[::1]:9"));
        assert_eq!(normalize("[::1]", 443).as_deref(), Some("[::1]:443"));
        assert_eq!(normalize("", 80), None);
        assert_eq!(normalize("a:notaport", 80), None);
    }

    #[tokio::test]
    async fn resolves_once_caches_and_overflows() {
        let cache = DnsCache::get(&config("cache-test"));
        let a = cache.resolve("localhost:7", 80).await.unwrap().unwrap();
        match &*a {
            Answer::Resolved(addrs) => {
                assert_eq!(addrs[0], "127.0.0.1:7".parse::<SocketAddr>().unwrap())
            }
            other => panic!("{other:?}"),
        }
        // The same host again is the cached answer.
        assert!(cache.cached("localhost:7", 80).is_some());
        assert_eq!(cache.len(), 1);
        let f = cache
            .resolve("nonexistent.invalid", 80)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(&*f, Answer::Failed(_)), "{f:?}");
        // max_hosts 2: a third host overflows.
        assert_eq!(
            cache.resolve("other.invalid", 80).await.unwrap_err(),
            LookupError::Overflow
        );
        // The same name and settings share the cache.
        assert!(Arc::ptr_eq(&cache, &DnsCache::get(&config("cache-test"))));
    }

    #[tokio::test(start_paused = true)]
    async fn unused_hosts_leave_after_their_ttl() {
        let mut c = config("ttl-test");
        c.refresh_rate = Duration::from_millis(100);
        c.host_ttl = Duration::from_secs(1);
        let cache = DnsCache::get(&c);
        cache.resolve("localhost:7", 80).await.unwrap().unwrap();
        assert!(cache.contains("localhost:7"));
        // Used now and then within the TTL, it stays.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(600)).await;
            assert!(cache.cached("localhost", 7).is_some());
        }
        // Then left alone for longer than the TTL, it goes.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!cache.contains("localhost:7"));
    }
}
