//! Remote JWKS: the fetcher the proxy provides and the per-provider cache in front of it.
//!
//! The request path only loads an `ArcSwap` snapshot. A request that finds no fresh key set
//! starts (or joins) one fetch: concurrent requests share it through a `OnceCell` in the
//! current generation, so a burst of requests costs one fetch. A fetched set stays in use
//! for `cache_duration`; a failed fetch answers the requests that waited on it and the next
//! request tries again. With `async_fetch`, [`RemoteKeys::refresh_loop`] (run by the proxy
//! off the request path) refetches before expiry, so requests keep the last good set
//! meanwhile.

use arc_swap::{ArcSwap, ArcSwapOption};
use bytes::Bytes;
use courier_config::filters::http_uri::HttpUri;
use courier_config::filters::jwt_authn::{Jwks, RemoteJwks, parse_jwks};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// A pending JWKS fetch.
pub type FetchFuture<'a> = Pin<Box<dyn Future<Output = Result<Bytes, String>> + Send + 'a>>;

/// Fetches a JWKS document over HTTP through a cluster. The proxy implements this with its
/// upstream (cluster `uri.cluster`, `:authority` `uri.host`, path `uri.path`, timeout
/// `uri.timeout`); it answers the body of a 200 response and an error for anything else
/// (non-200, timeout, unknown cluster, connect failure).
pub trait JwksFetcher: Send + Sync {
    /// Fetches `uri`.
    fn fetch<'a>(&'a self, uri: &'a HttpUri) -> FetchFuture<'a>;
}

/// Fetch counters (`jwks_fetch_success` / `jwks_fetch_failed`), shared by a filter's providers.
#[derive(Debug, Default)]
pub struct FetchStats {
    /// Fetches that returned a usable JWKS.
    pub success: AtomicU64,
    /// Fetches that failed or returned an unusable document.
    pub failed: AtomicU64,
}

/// A fetch's outcome: the key set, or `None` when it failed.
type Fetched = Option<Arc<Jwks>>;

#[derive(Debug, Default)]
struct Generation {
    cell: OnceCell<Fetched>,
}

/// The last good key set and when it expires.
#[derive(Debug)]
struct Cached {
    jwks: Arc<Jwks>,
    expires: Instant,
}

/// One provider's remote key set.
#[derive(Debug)]
pub struct RemoteKeys {
    config: RemoteJwks,
    /// The last good set; kept apart from the fetch under way so a background refresh
    /// does not hide it from requests while it runs.
    keys: ArcSwapOption<Cached>,
    /// The fetch under way, or the last one finished.
    current: ArcSwap<Generation>,
}

/// What the cache holds right now.
#[derive(Debug)]
pub enum Lookup {
    /// A fresh key set.
    Fresh(Arc<Jwks>),
    /// No fresh key set: [`RemoteKeys::fetch`] must run.
    NeedFetch,
}

/// Envoy refreshes an `async_fetch` JWKS this long before it expires, so requests never
/// wait for it.
const REFETCH_BEFORE_EXPIRY: Duration = Duration::from_secs(5);

impl RemoteKeys {
    /// An empty cache for `config`.
    pub fn new(config: RemoteJwks) -> Self {
        Self {
            config,
            keys: ArcSwapOption::empty(),
            current: ArcSwap::from_pointee(Generation::default()),
        }
    }

    /// Whether the key set is fetched in the background (`async_fetch`).
    pub fn async_fetch(&self) -> bool {
        self.config.async_fetch.is_some()
    }

    /// The key set if fresh; never waits.
    pub fn lookup(&self) -> Lookup {
        match self.fresh() {
            Some(jwks) => Lookup::Fresh(jwks),
            None => Lookup::NeedFetch,
        }
    }

    fn fresh(&self) -> Option<Arc<Jwks>> {
        self.keys
            .load()
            .as_ref()
            .filter(|c| Instant::now() < c.expires)
            .map(|c| Arc::clone(&c.jwks))
    }

    /// One fetch, retried per `retry_policy` with exponential back-off (base interval
    /// doubling, capped at the max interval). A 200 with an unusable document counts as a
    /// failure, as in Envoy.
    async fn fetch_with_retries(&self, fetcher: &dyn JwksFetcher) -> Result<Jwks, String> {
        let (retries, base, max) = match &self.config.retry_policy {
            Some(r) => (r.num_retries, r.base_interval, r.max_interval),
            None => (0, Duration::ZERO, Duration::ZERO),
        };
        let mut attempt = 0u32;
        loop {
            let outcome = fetcher
                .fetch(&self.config.http_uri)
                .await
                .and_then(|body| parse_jwks(&body));
            if outcome.is_ok() || attempt >= retries {
                return outcome;
            }
            let backoff = base
                .checked_mul(1u32 << attempt.min(16))
                .unwrap_or(max)
                .min(max);
            tokio::time::sleep(backoff).await;
            attempt += 1;
        }
    }

    /// Fetches (or waits for the fetch already under way) and returns the key set; `None`
    /// when the fetch failed. A set made fresh meanwhile (by another request or the
    /// background refresh) is returned without a fetch.
    pub async fn fetch(&self, fetcher: &dyn JwksFetcher, stats: &FetchStats) -> Option<Arc<Jwks>> {
        if let Some(jwks) = self.fresh() {
            return Some(jwks);
        }
        self.fetch_now(fetcher, stats).await
    }

    /// Starts a fetch unless one is under way, and waits for it.
    async fn fetch_now(&self, fetcher: &dyn JwksFetcher, stats: &FetchStats) -> Option<Arc<Jwks>> {
        let generation = {
            let current = self.current.load_full();
            if current.cell.initialized() {
                // Replace the finished generation unless another request already did; either
                // way join whatever is current now.
                let fresh = Arc::new(Generation::default());
                let prev = self.current.compare_and_swap(&current, fresh);
                if Arc::ptr_eq(&prev, &current) {
                    self.current.load_full()
                } else {
                    Arc::clone(&prev)
                }
            } else {
                current
            }
        };
        let result = generation
            .cell
            .get_or_init(|| async {
                match self.fetch_with_retries(fetcher).await {
                    Ok(jwks) => {
                        stats.success.fetch_add(1, Ordering::Relaxed);
                        let jwks = Arc::new(jwks);
                        self.keys.store(Some(Arc::new(Cached {
                            jwks: Arc::clone(&jwks),
                            expires: Instant::now() + self.config.cache_duration,
                        })));
                        Some(jwks)
                    }
                    Err(_) => {
                        stats.failed.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                }
            })
            .await;
        result.clone()
    }

    /// `async_fetch`: keeps the key set fresh for as long as the future is polled, as
    /// Envoy's main-thread `JwksAsyncFetcher`: a first fetch (joining one under way), then
    /// a refetch 5 s before the set expires after a success (at expiry when
    /// `cache_duration` is 5 s or less) and `failed_refetch_duration` after a failure.
    /// Does nothing without `async_fetch`.
    pub async fn refresh_loop(&self, fetcher: &dyn JwksFetcher, stats: &FetchStats) {
        let Some(async_fetch) = self.config.async_fetch else {
            return;
        };
        let cache = self.config.cache_duration;
        let good = if cache > REFETCH_BEFORE_EXPIRY {
            cache - REFETCH_BEFORE_EXPIRY
        } else {
            cache
        };
        let mut ok = self.fetch(fetcher, stats).await.is_some();
        // Runs as long as the filter lives: the proxy drops the task at shutdown.
        loop {
            let wait = if ok {
                good
            } else {
                async_fetch.failed_refetch_duration
            };
            tokio::time::sleep(wait).await;
            ok = self.fetch_now(fetcher, stats).await.is_some();
        }
    }
}
