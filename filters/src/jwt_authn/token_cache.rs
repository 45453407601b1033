//! A bounded cache of tokens whose signature verified (`jwt_cache_config`), so a repeated
//! token costs a hash and a lookup instead of a parse and a signature check.
//!
//! Direct-mapped: `size` slots, a token lives in the slot its hash picks and evicts whatever
//! was there. Each slot is an `ArcSwapOption`, so lookups and inserts from every worker
//! take no lock; a hit allocates nothing.

use super::token::ParsedJwt;
use arc_swap::ArcSwapOption;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;

/// A verified token.
#[derive(Debug)]
pub struct CachedJwt {
    token: Box<str>,
    /// The parsed token (claims are re-checked on every use: time moves on and audiences
    /// differ between requirements).
    pub jwt: ParsedJwt,
}

/// The cache.
#[derive(Debug)]
pub struct TokenCache {
    slots: Box<[ArcSwapOption<CachedJwt>]>,
    max_token: usize,
    hasher: RandomState,
}

impl TokenCache {
    /// A cache of `size` tokens of at most `max_token` bytes.
    pub fn new(size: u32, max_token: u32) -> Self {
        let size = size.max(1) as usize;
        Self {
            slots: (0..size).map(|_| ArcSwapOption::empty()).collect(),
            max_token: max_token as usize,
            hasher: RandomState::new(),
        }
    }

    fn slot(&self, token: &str) -> &ArcSwapOption<CachedJwt> {
        let i = (self.hasher.hash_one(token) as usize) % self.slots.len();
        &self.slots[i]
    }

    /// The cached entry for `token`, if any.
    pub fn get(&self, token: &str) -> Option<Arc<CachedJwt>> {
        if token.len() > self.max_token {
            return None;
        }
        let entry = self.slot(token).load_full()?;
        (*entry.token == *token).then_some(entry)
    }

    /// Remembers a token whose signature verified.
    pub fn insert(&self, token: &str, jwt: ParsedJwt) -> Option<Arc<CachedJwt>> {
        if token.len() > self.max_token {
            return None;
        }
        let entry = Arc::new(CachedJwt {
            token: token.into(),
            jwt,
        });
        self.slot(token).store(Some(Arc::clone(&entry)));
        Some(entry)
    }
}
