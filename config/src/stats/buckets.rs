//! `stats_config.histogram_bucket_settings`: the bucket bounds of each
//! histogram, chosen by its full stat name (the first rule whose matcher
//! matches wins; else Envoy's default buckets). Worked out when admin lists
//! a histogram, never when a value is recorded.

use crate::ctx::Ctx;
use crate::matcher::{self, StringMatcher};
use crate::path::Path;
use envoy_types::pb::envoy::config::metrics::v3 as pb;

/// Envoy's default bucket bounds (`HistogramSettingsImpl::defaultBuckets`).
pub const DEFAULT_BUCKETS: &[f64] = &[
    0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0,
    60000.0, 300000.0, 600000.0, 1800000.0, 3600000.0,
];

/// The bucket rules, in configuration order.
#[derive(Debug, Default)]
pub struct HistogramBuckets {
    rules: Vec<(StringMatcher, Vec<f64>)>,
}

impl HistogramBuckets {
    /// The bucket bounds (ascending) of the histogram named `stat_name`.
    pub fn for_stat(&self, stat_name: &str) -> &[f64] {
        self.rules
            .iter()
            .find(|(m, _)| m.matches(stat_name))
            .map_or(DEFAULT_BUCKETS, |(_, b)| b.as_slice())
    }
}

/// Translates the rules with Envoy's proto checks: a matcher is required,
/// bounds are positive and unique (their order does not matter: they are
/// sorted), `bins` is in (0, 46082].
pub(super) fn translate(
    settings: &[pb::HistogramBucketSettings],
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> HistogramBuckets {
    let mut rules = Vec::new();
    for (i, s) in settings.iter().enumerate() {
        let sp = path.index(i);
        let bp = sp.field("buckets");
        let mut ok = true;
        for (j, b) in s.buckets.iter().enumerate() {
            // `!(b > 0)` also catches NaN.
            if b.is_nan() || *b <= 0.0 {
                ctx.error(&bp.index(j), "value must be greater than 0");
                ok = false;
            } else if s.buckets[..j].contains(b) {
                ctx.error(&bp.index(j), "repeated value must contain unique items");
                ok = false;
            }
        }
        if let Some(bins) = &s.bins
            && !(1..=46082).contains(&bins.value)
        {
            ctx.error(&sp.field("bins"), "value must be inside range (0, 46082]");
            ok = false;
        }
        let Some(m) = &s.r#match else {
            ctx.error(&sp.field("match"), "value is required");
            continue;
        };
        let Some(m) = matcher::string_matcher(m, &sp.field("match"), ctx) else {
            continue;
        };
        if ok {
            let mut buckets = s.buckets.clone();
            buckets.sort_by(f64::total_cmp);
            rules.push((m, buckets));
        }
    }
    HistogramBuckets { rules }
}
