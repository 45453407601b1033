//! The gRPC HTTP filters Envoy Gateway puts on every GRPCRoute listener:
//! `envoy.filters.http.grpc_web` (`envoy.extensions.filters.http.grpc_web.v3.GrpcWeb`,
//! a message without fields) and `envoy.filters.http.grpc_stats`
//! (`envoy.extensions.filters.http.grpc_stats.v3.FilterConfig`).
//!
//! `enable_upstream_stats` is refused with its path by the field walker: its only stat,
//! the per-stream `upstream_rq_time` histogram, is not kept.

use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::extensions::filters::http::grpc_stats::v3 as pb;
use pb::filter_config::PerMethodStatSpecifier;

/// Fields courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    ("envoy.extensions.filters.http.grpc_web.v3.GrpcWeb", &[]),
    (
        "envoy.extensions.filters.http.grpc_stats.v3.FilterConfig",
        &[
            "emit_filter_state",
            "replace_dots_in_grpc_service_name",
            "stats_for_all_methods",
            "individual_method_stats_allowlist",
        ],
    ),
    ("envoy.config.core.v3.GrpcMethodList", &["services"]),
    (
        "envoy.config.core.v3.GrpcMethodList.Service",
        &["name", "method_names"],
    ),
];

/// Which gRPC methods get stats of their own (`cluster.<c>.grpc.<service>.<method>.*`);
/// the others are counted without the method (`cluster.<c>.grpc.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MethodStats {
    /// `stats_for_all_methods: true`: every method (its service's dots replaced by `_`
    /// when `replace_dots`).
    All {
        /// `replace_dots_in_grpc_service_name`.
        replace_dots: bool,
    },
    /// `individual_method_stats_allowlist` (empty, also for `stats_for_all_methods:
    /// false` or neither set, Envoy 1.40's default): these `(service, method)` pairs.
    Allowlist(Vec<(String, String)>),
}

/// A validated grpc_stats `FilterConfig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcStats {
    /// `emit_filter_state`: the request's message counts are kept as its filter state
    /// `envoy.filters.http.grpc_stats`.
    pub emit_filter_state: bool,
    /// Which methods are named in the stats.
    pub methods: MethodStats,
}

/// Translates a grpc_stats `FilterConfig`.
pub fn translate_stats(m: &pb::FilterConfig, path: &Path<'_>, ctx: &mut Ctx) -> Option<GrpcStats> {
    let _ = (path, ctx);
    let methods = match &m.per_method_stat_specifier {
        Some(PerMethodStatSpecifier::StatsForAllMethods(b)) if b.value => MethodStats::All {
            replace_dots: m.replace_dots_in_grpc_service_name,
        },
        Some(PerMethodStatSpecifier::IndividualMethodStatsAllowlist(l)) => MethodStats::Allowlist(
            l.services
                .iter()
                .flat_map(|s| s.method_names.iter().map(|n| (s.name.clone(), n.clone())))
                .collect(),
        ),
        _ => MethodStats::Allowlist(Vec::new()),
    };
    Some(GrpcStats {
        emit_filter_state: m.emit_filter_state,
        methods,
    })
}

#[cfg(test)]
mod tests {
    use super::{GrpcStats, MethodStats};
    use crate::filters::HttpFilterConfig;
    use crate::filters::test_util::{errors, filter};

    const STATS: &str = "name: envoy.filters.http.grpc_stats\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.grpc_stats.v3.FilterConfig\n";

    fn stats(extra: &str) -> GrpcStats {
        let f = filter(&format!("{STATS}{extra}")).unwrap();
        let HttpFilterConfig::GrpcStats(s) = f.config else {
            panic!("grpc_stats")
        };
        *s
    }

    #[test]
    fn grpc_web_envoy_gateway_config() {
        let f = filter("name: envoy.filters.http.grpc_web\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.grpc_web.v3.GrpcWeb\n").unwrap();
        assert!(matches!(f.config, HttpFilterConfig::GrpcWeb));
    }

    #[test]
    fn grpc_stats_fields() {
        assert_eq!(
            stats("  emitFilterState: true\n  statsForAllMethods: true\n"),
            GrpcStats {
                emit_filter_state: true,
                methods: MethodStats::All {
                    replace_dots: false
                }
            }
        );
        assert_eq!(
            stats("  stats_for_all_methods: true\n  replace_dots_in_grpc_service_name: true\n")
                .methods,
            MethodStats::All { replace_dots: true }
        );
        // Neither set: Envoy 1.40 names no method.
        assert_eq!(stats("").methods, MethodStats::Allowlist(vec![]));
        assert_eq!(
            stats("  stats_for_all_methods: false\n").methods,
            MethodStats::Allowlist(vec![])
        );
        assert_eq!(
            stats("  individual_method_stats_allowlist: {services: [{name: a.B, method_names: [M, Get]}]}\n").methods,
            MethodStats::Allowlist(vec![
                ("a.B".into(), "M".into()),
                ("a.B".into(), "Get".into())
            ])
        );
    }

    #[test]
    fn upstream_stats_refused_with_path() {
        let e = errors(filter(&format!("{STATS}  enable_upstream_stats: true\n")));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("typed_config.enable_upstream_stats:"),
            "{e:?}"
        );
    }
}
