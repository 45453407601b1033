//! From courier-config's `ConfigSource` model to the client's [`Source`]s.

use crate::client::{GrpcSource, Source};
use crate::file::FileSource;
use crate::grpc::{Connector, UriConnector};
use crate::resource_type::ResourceType;
use crate::rest::{RestSource, RestTransport};
use courier_config::config_source::{
    ApiConfigSource, ApiType, ConfigSource, ConfigSourceKind, GrpcService, GrpcTarget,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How the proxy reaches what a config source names: `envoy_grpc` clusters and
/// REST clusters go through its cluster manager.
pub trait Resolve {
    /// A connector for an `envoy_grpc` cluster.
    fn grpc_cluster(&self, cluster: &str, authority: Option<&str>) -> Option<Arc<dyn Connector>>;
    /// A REST transport to `cluster`.
    fn rest_cluster(&self, cluster: &str) -> Option<Arc<dyn RestTransport>>;
}

/// The connector for a gRPC service: `google_grpc` dials its target URI
/// (`host:port`, `dns:///host:port`, `ipv4:host:port`), `envoy_grpc` asks `resolve`.
pub fn connector(g: &GrpcService, resolve: &dyn Resolve) -> Result<Arc<dyn Connector>, String> {
    match &g.target {
        GrpcTarget::GoogleGrpc { target_uri, .. } => {
            let t = target_uri
                .trim_start_matches("dns:///")
                .trim_start_matches("dns:")
                .trim_start_matches("ipv4:");
            Ok(Arc::new(UriConnector::new(format!("http://{t}"))))
        }
        GrpcTarget::EnvoyGrpc {
            cluster_name,
            authority,
        } => resolve
            .grpc_cluster(cluster_name, authority.as_deref())
            .ok_or_else(|| format!("envoy_grpc cluster '{cluster_name}' cannot be reached")),
    }
}

/// A gRPC `ApiConfigSource` (also `ads_config`).
pub fn grpc_source(api: &ApiConfigSource, resolve: &dyn Resolve) -> Result<GrpcSource, String> {
    let g = api
        .grpc_services
        .first()
        .ok_or_else(|| "a gRPC api_config_source needs grpc_services".to_string())?;
    Ok(GrpcSource {
        connector: connector(g, resolve)?,
        delta: api.api_type == ApiType::DeltaGrpc,
        node_on_first_message_only: api.set_node_on_first_message_only,
        initial_metadata: g.initial_metadata.clone(),
    })
}

/// The source of `t` resources that `cs` describes.
pub fn source(
    cs: &ConfigSource,
    t: ResourceType,
    resolve: &dyn Resolve,
    file_poll_interval: Duration,
) -> Result<Source, String> {
    match &cs.kind {
        ConfigSourceKind::Ads => Ok(Source::Ads),
        ConfigSourceKind::Api(api) if api.api_type == ApiType::Rest => {
            let cluster = api
                .cluster_names
                .first()
                .ok_or("REST needs cluster_names")?;
            Ok(Source::Rest(RestSource {
                transport: resolve
                    .rest_cluster(cluster)
                    .ok_or_else(|| format!("REST cluster '{cluster}' cannot be reached"))?,
                refresh_delay: api.refresh_delay,
                request_timeout: api.request_timeout,
            }))
        }
        ConfigSourceKind::Api(api) => Ok(Source::Grpc(grpc_source(api, resolve)?)),
        ConfigSourceKind::Path {
            path,
            watched_directory,
        } => Ok(Source::File(FileSource {
            type_: t,
            path: PathBuf::from(path),
            watched_directory: watched_directory.as_ref().map(PathBuf::from),
            poll_interval: file_poll_interval,
        })),
        ConfigSourceKind::SelfSource => {
            Err("self config sources are not supported by the xDS client yet".into())
        }
    }
}
