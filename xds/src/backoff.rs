//! Reconnect delays: jittered exponential backoff.

use std::time::Duration;

/// Exponential backoff with jitter (Envoy: base 500 ms, max 30 s).
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// First delay's upper bound.
    pub base: Duration,
    /// Largest delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(500),
            max: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The delay before attempt `attempt` (0-based): uniform in [ceiling/2, ceiling]
    /// with ceiling = min(max, base * 2^attempt), so clients spread out but still wait.
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self.base.as_millis().max(1) as u64;
        let max = self.max.as_millis().max(1) as u64;
        let ceiling = base.saturating_mul(1u64 << attempt.min(20)).min(max);
        Duration::from_millis(fastrand::u64(ceiling / 2..=ceiling))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_stay_capped() {
        let b = Backoff::default();
        for _ in 0..50 {
            let d0 = b.delay(0);
            assert!(d0 >= Duration::from_millis(250) && d0 <= Duration::from_millis(500));
            let d10 = b.delay(10);
            assert!(d10 >= Duration::from_secs(15) && d10 <= Duration::from_secs(30));
            assert!(b.delay(1000) <= Duration::from_secs(30));
        }
    }
}
