//! Access-log `filter`s: which finished requests (or connections) a log
//! writes a line for.
//!
//! Built: `response_flag_filter`, `header_filter`, `not_health_check_filter`,
//! `and_filter` and `or_filter`. The comparison filters (`status_code_filter`,
//! `duration_filter`) always name a runtime key, and courier has no runtime
//! layer behind one, so they are refused with the rest by the support table.

use crate::ctx::Ctx;
use crate::matcher::{self, HeaderMatcher};
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::accesslog::v3 as pb;

/// Fields of the filter messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.config.accesslog.v3.AccessLogFilter",
        &[
            "response_flag_filter",
            "header_filter",
            "not_health_check_filter",
            "and_filter",
            "or_filter",
        ],
    ),
    ("envoy.config.accesslog.v3.ResponseFlagFilter", &["flags"]),
    ("envoy.config.accesslog.v3.HeaderFilter", &["header"]),
    ("envoy.config.accesslog.v3.NotHealthCheckFilter", &[]),
    ("envoy.config.accesslog.v3.AndFilter", &["filters"]),
    ("envoy.config.accesslog.v3.OrFilter", &["filters"]),
];

/// The short response flags `response_flag_filter` may name (Envoy's list).
const FLAGS: &[&str] = &[
    "LH", "UH", "UT", "LR", "UR", "UF", "UC", "UO", "NR", "DI", "FI", "RL", "UAEX", "RLSE", "DC",
    "URX", "SI", "IH", "DPE", "UMSDR", "RFCF", "NFCF", "DT", "UPE", "NC", "OM", "DF", "DO", "DR",
    "UDO",
];

/// A validated access-log filter.
#[derive(Debug, Clone)]
pub enum LogFilter {
    /// Passes when the entry carries one of these response flags (any flag
    /// when the list is empty).
    ResponseFlag(Vec<String>),
    /// Passes when the request headers match.
    Header(HeaderMatcher),
    /// Passes unless the request was a health check.
    NotHealthCheck,
    /// Passes when every filter passes.
    And(Vec<LogFilter>),
    /// Passes when any filter passes.
    Or(Vec<LogFilter>),
}

// A header matcher (its regex) has no `PartialEq`; the debug form shows the
// whole filter (a regex by its pattern), so equal forms are equal filters.
impl PartialEq for LogFilter {
    fn eq(&self, other: &Self) -> bool {
        format!("{self:?}") == format!("{other:?}")
    }
}

/// What a filter reads of a finished request or connection.
pub trait Subject {
    /// The response flags set, as `%RESPONSE_FLAGS%` prints them (`UF,URX`).
    fn flags(&self) -> Option<&str>;
    /// A request header's value (repeated headers joined with `,`); `None`
    /// when absent or when the entry is a connection.
    fn request_header(&self, name: &str) -> Option<String>;
    /// Whether the request was a health check (the health check filter took it).
    fn health_check(&self) -> bool {
        false
    }
}

impl LogFilter {
    /// Whether a line is written for `s`.
    pub fn passes(&self, s: &dyn Subject) -> bool {
        match self {
            LogFilter::ResponseFlag(want) => s.flags().is_some_and(|set| {
                want.is_empty() || set.split(',').any(|f| want.iter().any(|w| w == f))
            }),
            LogFilter::Header(m) => m.matches(s.request_header(&m.name).as_deref()),
            LogFilter::NotHealthCheck => !s.health_check(),
            LogFilter::And(fs) => fs.iter().all(|f| f.passes(s)),
            LogFilter::Or(fs) => fs.iter().any(|f| f.passes(s)),
        }
    }
}

/// Translates an `AccessLogFilter` (fields the support table refuses give `None`).
pub fn translate(f: &pb::AccessLogFilter, path: &Path<'_>, ctx: &mut Ctx) -> Option<LogFilter> {
    use pb::access_log_filter::FilterSpecifier as F;
    match &f.filter_specifier {
        Some(F::ResponseFlagFilter(r)) => {
            let rp = path.field("response_flag_filter");
            let fp = rp.field("flags");
            for (i, flag) in r.flags.iter().enumerate() {
                if !FLAGS.contains(&flag.as_str()) {
                    // Envoy's PGV rule (`in` Envoy's list of short flags).
                    ctx.error(
                        &fp.index(i),
                        format!("value must be in list {}", FLAGS.join(", ")),
                    );
                }
            }
            Some(LogFilter::ResponseFlag(r.flags.clone()))
        }
        Some(F::HeaderFilter(h)) => {
            let hf = path.field("header_filter");
            let hp = hf.field("header");
            let Some(m) = &h.header else {
                ctx.error(&hp, "is required");
                return None;
            };
            matcher::header_matcher(m, &hp, ctx).map(LogFilter::Header)
        }
        Some(F::NotHealthCheckFilter(_)) => Some(LogFilter::NotHealthCheck),
        Some(F::AndFilter(a)) => Some(LogFilter::And(list(
            &a.filters,
            &path.field("and_filter"),
            ctx,
        )?)),
        Some(F::OrFilter(o)) => Some(LogFilter::Or(list(
            &o.filters,
            &path.field("or_filter"),
            ctx,
        )?)),
        // Refused by the support table at their field.
        Some(_) => None,
        None => {
            ctx.error(path, "filter_specifier is required");
            None
        }
    }
}

fn list(fs: &[pb::AccessLogFilter], path: &Path<'_>, ctx: &mut Ctx) -> Option<Vec<LogFilter>> {
    let fp = path.field("filters");
    if fs.len() < 2 {
        // Envoy's PGV rule (`min_items: 2`).
        ctx.error(&fp, "value must contain at least 2 item(s)");
        return None;
    }
    let out: Vec<LogFilter> = fs
        .iter()
        .enumerate()
        .filter_map(|(i, f)| translate(f, &fp.index(i), ctx))
        .collect();
    (out.len() == fs.len()).then_some(out)
}

#[cfg(test)]
mod tests;
