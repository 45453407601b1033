//! One config's limiter: its default bucket and descriptor buckets, and how a request's
//! descriptors pick them (Envoy's `LocalRateLimiterImpl::requestAllowed`).

use super::bucket::Bucket;
use arc_swap::ArcSwap;
use courier_config::filters::LocalRateLimit;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A request descriptor: its `(key, value)` entries.
pub type Entries = Vec<(String, String)>;

/// What the limiter decided.
#[derive(Debug)]
pub struct Outcome {
    /// The request may go on.
    pub allowed: bool,
    /// The bucket the `x-ratelimit-*` headers report: the one that limited the request, or
    /// else the strictest matched descriptor's, or else the default one.
    pub bucket: Option<Arc<Bucket>>,
}

/// A dynamic descriptor's bucket and when it was last used.
type Used = (Arc<Bucket>, Arc<AtomicU64>);

/// A wildcard descriptor: each distinct request descriptor it matches gets a bucket, the
/// least recently used ones dropped beyond `max` (Envoy's LRU of dynamic descriptors).
#[derive(Debug)]
struct Dynamic {
    entries: Entries,
    spec: courier_config::filters::local_ratelimit::TokenBucket,
    shadow: bool,
    max: usize,
    /// Copy-on-write so lookups take no lock; a new request descriptor copies the map,
    /// which is bounded by `max`.
    buckets: ArcSwap<HashMap<Entries, Used>>,
    /// A use counter standing in for recency.
    clock: AtomicU64,
}

impl Dynamic {
    fn matches(&self, request: &Entries) -> bool {
        request.len() == self.entries.len()
            && request
                .iter()
                .zip(&self.entries)
                .all(|((rk, rv), (k, v))| rk == k && (v.is_empty() || rv == v))
    }

    fn bucket(&self, request: &Entries) -> Arc<Bucket> {
        let tick = self.clock.fetch_add(1, Ordering::Relaxed);
        if let Some((b, used)) = self.buckets.load().get(request) {
            used.store(tick, Ordering::Relaxed);
            return Arc::clone(b);
        }
        let fresh = Arc::new(Bucket::new(&self.spec, self.shadow));
        let mut chosen = Arc::clone(&fresh);
        self.buckets.rcu(|map| {
            // Another worker may have added it meanwhile: use theirs.
            if let Some((b, _)) = map.get(request) {
                chosen = Arc::clone(b);
                return Arc::clone(map);
            }
            chosen = Arc::clone(&fresh);
            let mut next = HashMap::clone(map);
            next.insert(
                request.clone(),
                (Arc::clone(&fresh), Arc::new(AtomicU64::new(tick))),
            );
            while next.len() > self.max {
                let Some(oldest) = next
                    .iter()
                    .min_by_key(|(_, (_, used))| used.load(Ordering::Relaxed))
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                next.remove(&oldest);
            }
            Arc::new(next)
        });
        chosen
    }
}

/// The buckets of one `LocalRateLimit`, shared by every worker.
#[derive(Debug)]
pub struct Limiter {
    default: Option<Arc<Bucket>>,
    fixed: HashMap<Entries, Arc<Bucket>>,
    dynamic: Vec<Dynamic>,
    always_consume_default: bool,
}

impl Limiter {
    /// Full buckets for `cfg`.
    pub fn new(cfg: &LocalRateLimit) -> Self {
        let mut fixed = HashMap::new();
        let mut dynamic = Vec::new();
        for d in &cfg.descriptors {
            if d.is_dynamic() {
                dynamic.push(Dynamic {
                    entries: d.entries.clone(),
                    spec: d.token_bucket,
                    shadow: d.shadow_mode,
                    max: cfg.max_dynamic_descriptors as usize,
                    buckets: ArcSwap::from_pointee(HashMap::new()),
                    clock: AtomicU64::new(0),
                });
            } else {
                fixed.insert(
                    d.entries.clone(),
                    Arc::new(Bucket::new(&d.token_bucket, d.shadow_mode)),
                );
            }
        }
        Self {
            default: cfg
                .token_bucket
                .as_ref()
                .map(|tb| Arc::new(Bucket::new(tb, false))),
            fixed,
            dynamic,
            always_consume_default: cfg.always_consume_default_token_bucket,
        }
    }

    /// Decides a request with these descriptors: every matched descriptor's bucket, the
    /// slowest-filling first, must give a token; then the default bucket, when nothing
    /// matched or `always_consume_default_token_bucket`.
    pub fn request_allowed(&self, descriptors: &[Entries]) -> Outcome {
        let mut matched: Vec<Arc<Bucket>> = Vec::new();
        for d in descriptors {
            if let Some(b) = self.fixed.get(d) {
                matched.push(Arc::clone(b));
            } else if let Some(dynamic) = self.dynamic.iter().find(|x| x.matches(d)) {
                matched.push(dynamic.bucket(d));
            }
        }
        // Stable, as Envoy's std::sort on a handful is in practice for equal rates.
        matched.sort_by(|a, b| a.fill_rate().total_cmp(&b.fill_rate()));
        for b in &matched {
            if !b.consume() {
                return Outcome {
                    allowed: false,
                    bucket: Some(Arc::clone(b)),
                };
            }
        }
        let first = matched.into_iter().next();
        if first.is_none() || self.always_consume_default {
            let Some(default) = &self.default else {
                return Outcome {
                    allowed: true,
                    bucket: first,
                };
            };
            if !default.consume() {
                return Outcome {
                    allowed: false,
                    bucket: Some(Arc::clone(default)),
                };
            }
            return Outcome {
                allowed: true,
                bucket: Some(first.unwrap_or_else(|| Arc::clone(default))),
            };
        }
        Outcome {
            allowed: true,
            bucket: first,
        }
    }
}
