//! Access-log `filter`s: which finished requests (or connections) a log
//! writes a line for.
//!
//! Built: `response_flag_filter`, `header_filter`, `not_health_check_filter`,
//! `and_filter`, `or_filter` and the `extension_filter`
//! `envoy.access_loggers.extension_filters.cel` (a CEL expression over the
//! finished request's attributes; one that does not evaluate to `true`, an
//! error included, writes no line, as Envoy's). The comparison filters (`status_code_filter`,
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
            "extension_filter",
        ],
    ),
    ("envoy.config.accesslog.v3.ResponseFlagFilter", &["flags"]),
    ("envoy.config.accesslog.v3.HeaderFilter", &["header"]),
    ("envoy.config.accesslog.v3.NotHealthCheckFilter", &[]),
    ("envoy.config.accesslog.v3.AndFilter", &["filters"]),
    ("envoy.config.accesslog.v3.OrFilter", &["filters"]),
    (
        "envoy.config.accesslog.v3.ExtensionFilter",
        &["name", "typed_config"],
    ),
    (
        "envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter",
        &["expression"],
    ),
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
    /// Passes when the CEL expression evaluates to `true`.
    Cel(crate::cel::Expr),
}

// A header matcher (its regex) has no `PartialEq`; the debug form shows the
// whole filter (a regex by its pattern), so equal forms are equal filters.
impl PartialEq for LogFilter {
    fn eq(&self, other: &Self) -> bool {
        format!("{self:?}") == format!("{other:?}")
    }
}

/// What a filter reads of a finished request or connection (a CEL filter:
/// its attributes).
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
    /// The value of a CEL attribute root (`request`, `response`, ...);
    /// `None`: not known for this entry.
    fn attribute(&self, root: &str) -> Option<crate::cel::Value> {
        let _ = root;
        None
    }
}

/// A [`Subject`] as the attributes a CEL filter reads.
struct SubjectAttributes<'a>(&'a dyn Subject);

impl crate::cel::Attributes for SubjectAttributes<'_> {
    fn root(&self, root: &str) -> Option<crate::cel::Value> {
        self.0.attribute(root)
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
            LogFilter::Cel(e) => e.matches(&SubjectAttributes(s)),
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
        Some(F::ExtensionFilter(e)) => extension(e, &path.field("extension_filter"), ctx),
        // Refused by the support table at their field.
        Some(_) => None,
        None => {
            ctx.error(path, "filter_specifier is required");
            None
        }
    }
}

/// An `extension_filter`: Envoy's only one is the CEL filter.
fn extension(e: &pb::ExtensionFilter, path: &Path<'_>, ctx: &mut Ctx) -> Option<LogFilter> {
    use envoy_types::pb::envoy::extensions::access_loggers::filters::cel::v3::ExpressionFilter;
    let tp = path.field("typed_config");
    use pb::extension_filter::ConfigType;
    let Some(ConfigType::TypedConfig(any)) = &e.config_type else {
        ctx.error(&tp, "is required");
        return None;
    };
    if any.type_url != <ExpressionFilter as prost::Name>::type_url() {
        ctx.unsupported(&tp, format!("access log filter {}", any.type_url));
        return None;
    }
    let f = crate::core::unpack::<ExpressionFilter>(any, &tp, ctx)?;
    crate::cel::Expr::parse(&f.expression, &tp.field("expression"), ctx).map(LogFilter::Cel)
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
