//! `retry_priority` `envoy.retry_priorities.previous_priorities`: every
//! `update_frequency` attempts, retries leave out the priorities the attempts
//! so far went to, by a priority load rebuilt from the other levels' health
//! (Envoy's `PreviousPrioritiesRetryPriority`, quirks included: the excluded
//! levels are never let back in; once every level is excluded the count of
//! attempts restarts and the cluster's own load is used).

/// One request's state of the plugin.
#[derive(Debug, Clone)]
pub struct PreviousPriorities {
    /// `update_frequency`.
    frequency: usize,
    /// Per level, whether retries leave it out.
    excluded: Vec<bool>,
    /// Where the attempts counted start in the list of tried hosts (a reset
    /// moves it to the end).
    since: usize,
    /// The load last built (per level, percent), used between updates.
    last: Option<Vec<u32>>,
}

impl PreviousPriorities {
    /// The plugin with `update_frequency` (above 0).
    pub fn new(frequency: u32) -> Self {
        Self {
            frequency: frequency.max(1) as usize,
            excluded: Vec::new(),
            since: 0,
            last: None,
        }
    }

    /// The priority load for the next retry (`None`: the cluster's own),
    /// given every attempt's level so far (`None`: a host no longer in the
    /// set) and each level's health now.
    pub fn load(&mut self, attempted: &[Option<usize>], health: &[u32]) -> Option<Vec<u32>> {
        let counted = attempted.get(self.since..).unwrap_or_default();
        if counted.len() < self.frequency {
            return None;
        }
        if counted.len() % self.frequency != 0 {
            return self.last.clone();
        }
        if self.excluded.len() < health.len() {
            self.excluded.resize(health.len(), false);
        }
        for p in counted.iter().flatten() {
            if let Some(e) = self.excluded.get_mut(*p) {
                *e = true;
            }
        }
        let adjusted: Vec<u32> = health
            .iter()
            .zip(&self.excluded)
            .map(|(h, excluded)| if *excluded { 0 } else { *h })
            .collect();
        let total = adjusted.iter().sum::<u32>().min(100);
        if total == 0 {
            // Envoy clears its attempted hosts but (a copy in its loop) not
            // the exclusions, so the availability stays 0: the original load.
            self.since = attempted.len();
            return None;
        }
        let mut load = vec![0u32; adjusted.len()];
        let mut left = 100u32;
        // Envoy's loop: as much as each level's share allows, in order; the
        // rounding remainder goes round again to the first levels.
        while left != 0 {
            for (l, h) in load.iter_mut().zip(&adjusted) {
                let delta = left.min(h * 100 / total);
                *l += delta;
                left -= delta;
            }
        }
        self.last = Some(load.clone());
        Some(load)
    }
}

/// The level a roll in `0..100` falls in under `load` (cumulative shares).
pub fn priority_for(load: &[u32], roll: u32) -> usize {
    let mut end = 0;
    for (i, l) in load.iter().enumerate() {
        end += l;
        if roll < end {
            return i;
        }
    }
    load.len().saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_out_tried_levels_every_update_frequency_attempts() {
        let health = [100, 100, 100];
        let mut p = PreviousPriorities::new(1);
        // One attempt to P0: the retry goes to P1 and P2 only.
        assert_eq!(p.load(&[Some(0)], &health), Some(vec![0, 100, 0]));
        assert_eq!(p.load(&[Some(0), Some(1)], &health), Some(vec![0, 0, 100]));
        let mut p = PreviousPriorities::new(2);
        assert_eq!(p.load(&[Some(0)], &health), None);
        assert_eq!(p.load(&[Some(0), Some(0)], &health), Some(vec![0, 100, 0]));
        // Between updates the last load holds.
        assert_eq!(
            p.load(&[Some(0), Some(0), Some(1)], &health),
            Some(vec![0, 100, 0])
        );
    }

    #[test]
    fn shares_follow_health_and_all_excluded_falls_back() {
        let mut p = PreviousPriorities::new(1);
        // P1 at 30 % health, P2 at 40 %: 30/70 and 40/70 of the load.
        assert_eq!(p.load(&[Some(0)], &[100, 30, 40]), Some(vec![0, 43, 57]));
        let mut p = PreviousPriorities::new(1);
        assert_eq!(p.load(&[Some(0)], &[100]), None);
        // The count restarted: the next single attempt is below... a multiple again.
        assert_eq!(p.load(&[Some(0), Some(0)], &[100]), None);
        assert_eq!(priority_for(&[0, 43, 57], 42), 1);
        assert_eq!(priority_for(&[0, 43, 57], 43), 2);
        assert_eq!(priority_for(&[0, 100], 0), 1);
    }
}
