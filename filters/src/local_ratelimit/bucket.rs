//! A lock-free token bucket shared by every worker, refilled continuously: Envoy 1.40's
//! `AtomicTokenBucketImpl`. The state is one atomic, the time at which the bucket was (or
//! would have been) empty: the tokens are `min(max, (now - that time) * rate)`, so refills
//! need no timer and a consume is one compare-and-swap.

use courier_config::filters::local_ratelimit::TokenBucket as Spec;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::time::Instant;

/// One bucket.
#[derive(Debug)]
pub struct Bucket {
    /// Capacity.
    max_tokens: f64,
    /// Tokens per second (`tokens_per_fill / fill_interval`).
    fill_rate: f64,
    /// `shadow_mode`: a request this bucket limits is let through.
    shadow: bool,
    /// The clock's zero for `empty_at`.
    origin: Instant,
    /// Seconds since `origin` (an `f64`'s bits) at which the bucket was empty.
    empty_at: AtomicU64,
}

impl Bucket {
    /// A full bucket for `spec`.
    pub fn new(spec: &Spec, shadow: bool) -> Self {
        let fill_rate = f64::from(spec.tokens_per_fill) / spec.fill_interval.as_secs_f64();
        let max_tokens = f64::from(spec.max_tokens);
        let origin = Instant::now();
        Self {
            max_tokens,
            fill_rate,
            shadow,
            origin,
            // Full at creation: empty `max / rate` seconds ago.
            empty_at: AtomicU64::new((-max_tokens / fill_rate).to_bits()),
        }
    }

    fn now(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    /// Takes one token; false when there is none.
    pub fn consume(&self) -> bool {
        let now = self.now();
        let mut old = self.empty_at.load(Ordering::Relaxed);
        loop {
            let tokens = ((now - f64::from_bits(old)) * self.fill_rate).min(self.max_tokens);
            if tokens < 1.0 {
                return false;
            }
            let new = now - (tokens - 1.0) / self.fill_rate;
            match self.empty_at.compare_exchange_weak(
                old,
                new.to_bits(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(current) => old = current,
            }
        }
    }

    /// The tokens now (fractional).
    fn tokens(&self) -> f64 {
        let empty_at = f64::from_bits(self.empty_at.load(Ordering::Relaxed));
        ((self.now() - empty_at) * self.fill_rate).min(self.max_tokens)
    }

    /// `x-ratelimit-limit`: the capacity.
    pub fn max_tokens(&self) -> u64 {
        self.max_tokens as u64
    }

    /// `x-ratelimit-remaining`: whole tokens left.
    pub fn remaining(&self) -> u64 {
        self.tokens().max(0.0) as u64
    }

    /// `x-ratelimit-reset`: whole seconds until the next token (0 while one is there), as
    /// Envoy computes it (milliseconds to the next token, divided down to seconds).
    pub fn reset_seconds(&self) -> u64 {
        let tokens = self.tokens();
        if tokens >= 1.0 {
            return 0;
        }
        let ms = ((1.0 - tokens) / self.fill_rate * 1000.0).ceil() as u64;
        ms / 1000
    }

    /// Tokens per second (the strictest matched descriptor is consumed first).
    pub fn fill_rate(&self) -> f64 {
        self.fill_rate
    }

    /// Whether the bucket is in shadow mode.
    pub fn shadow(&self) -> bool {
        self.shadow
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn drains_then_refills_with_time() {
        let b = Bucket::new(
            &Spec {
                max_tokens: 2,
                tokens_per_fill: 1,
                fill_interval: Duration::from_secs(1),
            },
            false,
        );
        assert_eq!(b.remaining(), 2);
        assert!(b.consume() && b.consume());
        assert!(!b.consume());
        assert_eq!((b.remaining(), b.max_tokens()), (0, 2));
        assert_eq!(b.reset_seconds(), 1);
        tokio::time::advance(Duration::from_millis(600)).await;
        assert!(!b.consume());
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(b.consume());
        // Never above capacity, however long it rests.
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(b.remaining(), 2);
    }
}
