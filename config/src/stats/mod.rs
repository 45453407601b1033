//! Bootstrap `stats_config`: the tag extractors that turn stat names into a
//! tag-extracted name and tags (`/stats/prometheus`), and the stats matcher
//! that decides which stats exist at all. Both are compiled here, once per
//! bootstrap; the proxy applies them when stats are listed, never per request.

mod buckets;
mod defaults;
mod ecma;
pub mod sinks;
mod tags;

use crate::ctx::Ctx;
use crate::matcher::{self, StringMatcher};
use crate::path::Path;
use crate::support::Support;
pub use buckets::{DEFAULT_BUCKETS, HistogramBuckets};
use envoy_types::pb::envoy::config::metrics::v3 as pb;
use tags::{Extractor, Pattern};
pub use tags::{Tag, TagProducer};

/// Fields of the stats messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.config.metrics.v3.StatsConfig",
        &[
            "stats_tags",
            "use_all_default_tags",
            "stats_matcher",
            "histogram_bucket_settings",
        ],
    ),
    (
        // `bins` only sizes Envoy's per-thread histogram at creation (its
        // values and buckets do not depend on it); courier's bins are
        // allocated a decade at a time whatever it says.
        "envoy.config.metrics.v3.HistogramBucketSettings",
        &["match", "buckets", "bins"],
    ),
    (
        "envoy.config.metrics.v3.TagSpecifier",
        &["tag_name", "regex", "fixed_value"],
    ),
    (
        "envoy.config.metrics.v3.StatsMatcher",
        &["reject_all", "inclusion_list", "exclusion_list"],
    ),
    ("envoy.type.matcher.v3.ListStringMatcher", &["patterns"]),
];

/// Which stats exist (`stats_config.stats_matcher`), judged on a stat's full name.
#[derive(Debug, Default)]
pub enum StatsMatcher {
    /// No matcher (or `reject_all: false`): every stat.
    #[default]
    All,
    /// `reject_all: true`: none.
    None,
    /// `inclusion_list`: only stats some pattern matches.
    Inclusion(Vec<StringMatcher>),
    /// `exclusion_list`: stats no pattern matches.
    Exclusion(Vec<StringMatcher>),
}

impl StatsMatcher {
    /// Whether the stat named `name` is rejected (and so does not exist).
    pub fn rejects(&self, name: &str) -> bool {
        match self {
            StatsMatcher::All => false,
            StatsMatcher::None => true,
            StatsMatcher::Inclusion(list) => !list.iter().any(|m| m.matches(name)),
            StatsMatcher::Exclusion(list) => list.iter().any(|m| m.matches(name)),
        }
    }
}

/// The compiled `stats_config`.
#[derive(Debug)]
pub struct StatsConfig {
    /// The tag extractors, in Envoy's order.
    pub tags: TagProducer,
    /// Which stats exist.
    pub matcher: StatsMatcher,
    /// Each histogram's bucket bounds (`histogram_bucket_settings`).
    pub buckets: HistogramBuckets,
}

impl Default for StatsConfig {
    /// Envoy without `stats_config`: every default extractor, every stat.
    fn default() -> Self {
        let mut tags = TagProducer::default();
        for e in defaults::extractors(None) {
            tags.add(e);
        }
        Self {
            tags,
            matcher: StatsMatcher::All,
            buckets: HistogramBuckets::default(),
        }
    }
}

/// Translates `stats_config`, with Envoy's checks and messages.
pub fn translate(sc: &pb::StatsConfig, path: &Path<'_>, ctx: &mut Ctx) -> StatsConfig {
    let mut tags = TagProducer::default();
    if sc.use_all_default_tags.as_ref().is_none_or(|v| v.value) {
        for e in defaults::extractors(None) {
            tags.add(e);
        }
    }
    let tp = path.field("stats_tags");
    for (i, spec) in sc.stats_tags.iter().enumerate() {
        for e in tag_specifier(spec, &tp.index(i), ctx) {
            tags.add(e);
        }
    }
    let matcher = sc
        .stats_matcher
        .as_ref()
        .map(|m| stats_matcher(m, &path.field("stats_matcher"), ctx))
        .unwrap_or_default();
    let buckets = buckets::translate(
        &sc.histogram_bucket_settings,
        &path.field("histogram_bucket_settings"),
        ctx,
    );
    StatsConfig {
        tags,
        matcher,
        buckets,
    }
}

/// One `stats_tags` entry: a regex, a fixed value, or (no regex) Envoy's
/// default extractors of that name.
fn tag_specifier(spec: &pb::TagSpecifier, path: &Path<'_>, ctx: &mut Ctx) -> Vec<Extractor> {
    use pb::tag_specifier::TagValue;
    let name = spec.tag_name.as_str();
    if name.is_empty() {
        ctx.error(&path.field("tag_name"), "tag_name cannot be empty");
        return Vec::new();
    }
    match &spec.tag_value {
        Some(TagValue::FixedValue(v)) => {
            vec![Extractor::new(name, Pattern::Fixed(v.clone()), "")]
        }
        Some(TagValue::Regex(re)) if !re.is_empty() => {
            let rp = path.field("regex");
            // Envoy's proto limit on the field.
            if re.len() > 1024 {
                ctx.error(&rp, "value length must be at most 1024 bytes");
                return Vec::new();
            }
            match ecma::compile(re) {
                Ok(re) => vec![Extractor::new(name, Pattern::Ecma(re), "")],
                Err(e) => {
                    ctx.error(&rp, format!("Invalid regex '{re}': {e}"));
                    Vec::new()
                }
            }
        }
        _ => {
            let found = defaults::extractors(Some(name));
            if found.is_empty() {
                ctx.error(
                    path,
                    format!(
                        "No regex specified for tag specifier and no default regex for name: '{name}'"
                    ),
                );
            }
            found
        }
    }
}

fn stats_matcher(m: &pb::StatsMatcher, path: &Path<'_>, ctx: &mut Ctx) -> StatsMatcher {
    use pb::stats_matcher::StatsMatcher as M;
    let mut list = |l: &envoy_types::pb::envoy::r#type::matcher::v3::ListStringMatcher,
                    field: &str| {
        let fp = path.field(field);
        let lp = fp.field("patterns");
        if l.patterns.is_empty() {
            ctx.error(&lp, "value must contain at least 1 item(s)");
        }
        l.patterns
            .iter()
            .enumerate()
            .filter_map(|(i, p)| matcher::string_matcher(p, &lp.index(i), ctx))
            .collect()
    };
    match &m.stats_matcher {
        Some(M::RejectAll(true)) => StatsMatcher::None,
        Some(M::RejectAll(false)) => StatsMatcher::All,
        Some(M::InclusionList(l)) => StatsMatcher::Inclusion(list(l, "inclusion_list")),
        Some(M::ExclusionList(l)) => StatsMatcher::Exclusion(list(l, "exclusion_list")),
        None => {
            ctx.error(
                path,
                "one of reject_all, inclusion_list or exclusion_list is required",
            );
            StatsMatcher::All
        }
    }
}

#[cfg(test)]
mod tests;
