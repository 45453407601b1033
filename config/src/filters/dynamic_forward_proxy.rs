//! `envoy.filters.http.dynamic_forward_proxy`: resolves a dynamic forward
//! proxy cluster's host before the router goes on, through the shared DNS
//! cache, and per route rewrites the host first.

use crate::ctx::Ctx;
use crate::dns_cache::{self, DnsCacheConfig};
use crate::path::Path;
use crate::support::{ALL, Support};
use envoy_types::pb::envoy::extensions::filters::http::dynamic_forward_proxy::v3 as pb;

/// The fields courier implements: `save_upstream_address`,
/// `allow_dynamic_host_from_filter_state` and `sub_cluster_config` are
/// refused by their absence.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.extensions.filters.http.dynamic_forward_proxy.v3.FilterConfig",
        &["dns_cache_config"],
    ),
    (
        "envoy.extensions.filters.http.dynamic_forward_proxy.v3.PerRouteConfig",
        ALL,
    ),
];

/// A validated `FilterConfig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicForwardProxy {
    /// The DNS cache hosts are resolved through (the cluster's, by name).
    pub cache: DnsCacheConfig,
}

/// A validated `PerRouteConfig`: the host the request is sent to instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRewrite {
    /// `host_rewrite_literal`.
    Literal(String),
    /// `host_rewrite_header` (lower-cased): the first value of this header,
    /// when present.
    Header(String),
}

/// Translates a `FilterConfig`.
pub fn translate(
    m: &pb::FilterConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<DynamicForwardProxy> {
    use pb::filter_config::ImplementationSpecifier as I;
    let cp = path.field("dns_cache_config");
    match &m.implementation_specifier {
        Some(I::DnsCacheConfig(d)) => Some(DynamicForwardProxy {
            cache: dns_cache::translate(d, &cp, ctx)?,
        }),
        // Refused by the support table.
        Some(I::SubClusterConfig(_)) => None,
        None => {
            ctx.error(&cp, "is required (sub_cluster_config is not supported)");
            None
        }
    }
}

/// Translates a `PerRouteConfig`; one without a rewrite rewrites nothing.
pub fn per_route(
    m: &pb::PerRouteConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Option<HostRewrite>> {
    use pb::per_route_config::HostRewriteSpecifier as H;
    Some(match &m.host_rewrite_specifier {
        None => None,
        // Envoy sets an empty literal as no rewrite.
        Some(H::HostRewriteLiteral(l)) if l.is_empty() => None,
        Some(H::HostRewriteLiteral(l)) => Some(HostRewrite::Literal(l.clone())),
        Some(H::HostRewriteHeader(h)) if h.is_empty() => None,
        Some(H::HostRewriteHeader(h)) if h.bytes().all(super::ext_authz::is_header_name_byte) => {
            Some(HostRewrite::Header(h.to_ascii_lowercase()))
        }
        Some(H::HostRewriteHeader(h)) => {
            ctx.error(
                &path.field("host_rewrite_header"),
                format!("invalid header name {h:?}"),
            );
            return None;
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::load::Format;

    const FILTER: &str =
        "type.googleapis.com/envoy.extensions.filters.http.dynamic_forward_proxy.v3.FilterConfig";
    const PER_ROUTE: &str =
        "type.googleapis.com/envoy.extensions.filters.http.dynamic_forward_proxy.v3.PerRouteConfig";
    const SNI: &str = "type.googleapis.com/envoy.extensions.filters.network.sni_dynamic_forward_proxy.v3.FilterConfig";

    /// Every error of a bootstrap with an HTTP listener whose dynamic forward
    /// proxy filter has `filter` fields and whose route has `per_route`, and a
    /// TCP listener whose filters are `tcp_filters`.
    fn errors(filter: &str, per_route: &str, tcp_filters: &str) -> Vec<String> {
        let yaml = format!(
            "static_resources:
  listeners:
  - name: h
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          '@type': type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: h
          http_filters:
          - name: dfp
            typed_config: {{'@type': {FILTER}, dns_cache_config: {{name: c}}, {filter}}}
          - name: envoy.filters.http.router
            typed_config: {{'@type': type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
          route_config:
            virtual_hosts:
            - name: a
              domains: ['*']
              routes:
              - match: {{prefix: /}}
                route: {{cluster: d}}
                typed_per_filter_config:
                  dfp: {{'@type': {PER_ROUTE}, {per_route}}}
  - name: t
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
{tcp_filters}
  clusters:
  - name: d
    lb_policy: CLUSTER_PROVIDED
    cluster_type:
      name: envoy.clusters.dynamic_forward_proxy
      typed_config:
        '@type': type.googleapis.com/envoy.extensions.clusters.dynamic_forward_proxy.v3.ClusterConfig
        dns_cache_config: {{name: c}}
"
        );
        match crate::bootstrap_from_str(&yaml, Format::Yaml) {
            Ok(_) => Vec::new(),
            Err(e) => e.errors.iter().map(ToString::to_string).collect(),
        }
    }

    fn sni(fields: &str) -> String {
        format!(
            "      - name: sni
        typed_config: {{'@type': {SNI}, {fields}}}
      - name: envoy.filters.network.tcp_proxy
        typed_config: {{'@type': type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: t, cluster: d}}"
        )
    }

    #[test]
    fn the_filters_and_their_per_route_rewrites() {
        let ok = sni("dns_cache_config: {name: c}, port_value: 443");
        assert_eq!(
            errors("", "host_rewrite_literal: a.example", &ok),
            Vec::<String>::new()
        );
        assert_eq!(
            errors("", "host_rewrite_header: X-Host", &ok),
            Vec::<String>::new()
        );
        let b = crate::bootstrap_from_str(
            &format!(
                "static_resources:\n  listeners:\n  - name: t\n    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}\n    filter_chains:\n    - filters:\n{ok}\n  clusters:\n  - {{name: d, lb_policy: CLUSTER_PROVIDED, cluster_type: {{name: x, typed_config: {{'@type': type.googleapis.com/envoy.extensions.clusters.dynamic_forward_proxy.v3.ClusterConfig, dns_cache_config: {{name: c}}}}}}}}\n"
            ),
            Format::Yaml,
        )
        .unwrap();
        let d = b.listeners[0].filter_chains[0].sni_dfp.as_ref().unwrap();
        assert_eq!((d.cache.name.as_str(), d.port), ("c", 443));
    }

    #[test]
    fn what_is_not_implemented_is_refused_where_it_is() {
        let ok = sni("dns_cache_config: {name: c}, port_value: 443");
        let at = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config";
        assert_eq!(
            errors(
                "save_upstream_address: true",
                "host_rewrite_literal: a",
                &ok
            ),
            [format!(
                "{at}.save_upstream_address: save_upstream_address is not supported"
            )]
        );
        let t = "static_resources.listeners[1].filter_chains[0].filters[0]";
        assert_eq!(
            errors(
                "",
                "host_rewrite_literal: a",
                &sni("dns_cache_config: {name: c}, port_value: 443, save_upstream_address: true")
            ),
            [format!(
                "{t}.typed_config.save_upstream_address: save_upstream_address is not supported"
            )]
        );
        // The filter's cache and the cluster's: one name, one setting.
        assert_eq!(
            errors(
                "",
                "host_rewrite_literal: a",
                &sni("dns_cache_config: {name: c, dns_lookup_family: V6_ONLY}, port_value: 443")
            ),
            [format!(
                "{t}.typed_config.dns_cache_config: config specified DNS cache 'c' with different settings"
            )]
        );
        // Only before a tcp_proxy.
        let alone = "      - name: sni
        typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.network.sni_dynamic_forward_proxy.v3.FilterConfig, dns_cache_config: {name: c}}
      - name: envoy.filters.network.http_connection_manager
        typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: x, route_config: {}, http_filters: [{name: envoy.filters.http.router, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}]}";
        assert_eq!(
            errors("", "host_rewrite_literal: a", alone),
            [format!(
                "{t}: an sni_dynamic_forward_proxy filter that is not once before a terminal tcp_proxy is not supported"
            )]
        );
    }
}
