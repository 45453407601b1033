//! `envoy.clusters.dynamic_forward_proxy`: a cluster whose hosts are the
//! names requests ask for (the `:authority`, or the TLS SNI through the SNI
//! dynamic forward proxy filter), resolved through a shared DNS cache.

use super::{Cluster, Discovery};
use crate::core;
use crate::ctx::Ctx;
use crate::dns_cache::{self, DnsCacheConfig};
use crate::path::Path;
use envoy_types::pb::envoy::config::cluster::v3 as pb;
use envoy_types::pb::envoy::extensions::clusters::dynamic_forward_proxy::v3::{
    ClusterConfig, cluster_config::ClusterImplementationSpecifier,
};

/// A validated dynamic forward proxy cluster config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicForwardProxy {
    /// The DNS cache its hosts come from.
    pub cache: DnsCacheConfig,
    /// `allow_insecure_cluster_options`: `auto_sni` and `auto_san_validation`
    /// may be off.
    pub allow_insecure_cluster_options: bool,
}

/// Translates the `ClusterConfig` at `tp` (the cluster's `cluster_type.typed_config`).
pub(super) fn translate(
    any: &envoy_types::pb::google::protobuf::Any,
    tp: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Discovery> {
    let cc: ClusterConfig = core::unpack(any, tp, ctx)?;
    let cp = tp.field("dns_cache_config");
    let cache = match &cc.cluster_implementation_specifier {
        Some(ClusterImplementationSpecifier::DnsCacheConfig(d)) => {
            dns_cache::translate(d, &cp, ctx)?
        }
        // Refused by the support table; named here too so the cluster is not built.
        Some(ClusterImplementationSpecifier::SubClustersConfig(_)) => return None,
        None => {
            ctx.error(&cp, "is required (sub_clusters_config is not supported)");
            return None;
        }
    };
    Some(Discovery::DynamicForwardProxy(Box::new(
        DynamicForwardProxy {
            cache,
            allow_insecure_cluster_options: cc.allow_insecure_cluster_options,
        },
    )))
}

/// Envoy's checks of a dynamic forward proxy cluster as a whole: without
/// `allow_insecure_cluster_options`, `auto_sni` and `auto_san_validation`
/// must be on. Envoy turns both on when the cluster has no
/// `upstream_http_protocol_options` of its own, in either place; courier's
/// translation leaves them off then, so they are turned on here.
pub(super) fn finish(c: &pb::Cluster, cluster: &mut Cluster, path: &Path<'_>, ctx: &mut Ctx) {
    let Discovery::DynamicForwardProxy(d) = &cluster.discovery else {
        return;
    };
    let allow_insecure = d.allow_insecure_cluster_options;
    // Envoy's defaults apply only in place of the cluster-level field: typed
    // `HttpProtocolOptions` (with or without the message) are read instead.
    if c.upstream_http_protocol_options.is_none() && !has_typed_protocol_options(c) {
        cluster.http.auto_sni.sni = true;
        cluster.http.auto_sni.san_validation = true;
    }
    let secure = cluster.http.auto_sni.sni && cluster.http.auto_sni.san_validation;
    if !(allow_insecure || secure) {
        ctx.error(
            path,
            "dynamic_forward_proxy cluster must have auto_sni and auto_san_validation true unless allow_insecure_cluster_options is set.",
        );
    }
    if cluster.load_assignment.is_some() {
        // Envoy ignores it; courier says so.
        ctx.error(
            &path.field("load_assignment"),
            "is not used by dynamic_forward_proxy clusters (their hosts come from the DNS cache); remove it",
        );
    }
}

/// Whether the cluster has typed `HttpProtocolOptions`.
fn has_typed_protocol_options(c: &pb::Cluster) -> bool {
    c.typed_extension_protocol_options
        .contains_key(crate::extensions::HTTP_PROTOCOL_OPTIONS_KEY)
}
