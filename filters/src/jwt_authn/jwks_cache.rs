//! Remote JWKS: the fetcher the proxy provides and the per-provider cache in front of it.
//!
//! The request path only loads an `ArcSwap` snapshot. A request that finds no fresh key set
//! starts (or joins) one fetch: concurrent requests share it through a `OnceCell` in the
//! current generation, so a burst of requests costs one fetch. A fetched set stays in use
//! for `cache_duration`; a failed fetch answers the requests that waited on it and the next
//! request tries again.

use arc_swap::ArcSwap;
use bytes::Bytes;
use courier_config::filters::http_uri::HttpUri;
use courier_config::filters::jwt_authn::{Jwks, RemoteJwks, parse_jwks};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

type Fetched = Result<(Arc<Jwks>, Instant), ()>;

#[derive(Debug, Default)]
struct Generation {
    cell: OnceCell<Fetched>,
}

/// One provider's remote key set.
#[derive(Debug)]
pub struct RemoteKeys {
    config: RemoteJwks,
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

impl RemoteKeys {
    /// An empty cache for `config`.
    pub fn new(config: RemoteJwks) -> Self {
        Self {
            config,
            current: ArcSwap::from_pointee(Generation::default()),
        }
    }

    /// The key set if fresh; never waits.
    pub fn lookup(&self) -> Lookup {
        match self.current.load().cell.get() {
            Some(Ok((jwks, expires))) if Instant::now() < *expires => Lookup::Fresh(jwks.clone()),
            _ => Lookup::NeedFetch,
        }
    }

    /// One fetch, retried per `retry_policy` with exponential back-off (base interval
    /// doubling, capped at the max interval). A 200 with an unusable document counts as a
    /// failure, as in Envoy.
    async fn fetch_with_retries(&self, fetcher: &dyn JwksFetcher) -> Result<Jwks, String> {
        let (retries, base, max) = match &self.config.retry_policy {
            Some(r) => (r.num_retries, r.base_interval, r.max_interval),
            None => (0, std::time::Duration::ZERO, std::time::Duration::ZERO),
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
    /// when the fetch failed.
    pub async fn fetch(&self, fetcher: &dyn JwksFetcher, stats: &FetchStats) -> Option<Arc<Jwks>> {
        let generation = {
            let current = self.current.load_full();
            let stale = match current.cell.get() {
                None => false,
                Some(Ok((_, expires))) => Instant::now() >= *expires,
                Some(Err(())) => true,
            };
            if stale {
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
                let outcome = self.fetch_with_retries(fetcher).await;
                match outcome {
                    Ok(jwks) => {
                        stats.success.fetch_add(1, Ordering::Relaxed);
                        Ok((Arc::new(jwks), Instant::now() + self.config.cache_duration))
                    }
                    Err(_) => {
                        stats.failed.fetch_add(1, Ordering::Relaxed);
                        Err(())
                    }
                }
            })
            .await;
        result.as_ref().ok().map(|(jwks, _)| jwks.clone())
    }
}
