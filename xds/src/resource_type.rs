//! The resource types courier subscribes to.

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
use envoy_types::pb::envoy::service::runtime::v3::Runtime;
use prost::{Message, Name};

/// An xDS resource type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    /// LDS: `envoy.config.listener.v3.Listener`.
    Listener,
    /// RDS: `envoy.config.route.v3.RouteConfiguration`.
    RouteConfig,
    /// CDS: `envoy.config.cluster.v3.Cluster`.
    Cluster,
    /// EDS: `envoy.config.endpoint.v3.ClusterLoadAssignment`.
    Endpoints,
    /// RTDS: `envoy.service.runtime.v3.Runtime` (one runtime layer's values).
    Runtime,
    /// SDS: `envoy.extensions.transport_sockets.tls.v3.Secret`.
    Secret,
}

impl ResourceType {
    /// All types, in make-before-break order (CDS, EDS, LDS, RDS), then RTDS, SDS.
    pub const ALL: [ResourceType; 6] = [
        ResourceType::Cluster,
        ResourceType::Endpoints,
        ResourceType::Listener,
        ResourceType::RouteConfig,
        ResourceType::Runtime,
        ResourceType::Secret,
    ];

    /// The v3 type URL.
    pub fn type_url(self) -> String {
        match self {
            ResourceType::Listener => Listener::type_url(),
            ResourceType::RouteConfig => RouteConfiguration::type_url(),
            ResourceType::Cluster => Cluster::type_url(),
            ResourceType::Endpoints => ClusterLoadAssignment::type_url(),
            ResourceType::Runtime => Runtime::type_url(),
            ResourceType::Secret => Secret::type_url(),
        }
    }

    /// The type whose v3 type URL is `url`.
    pub fn from_type_url(url: &str) -> Option<ResourceType> {
        Self::ALL.into_iter().find(|t| t.type_url() == url)
    }

    /// Short name used in messages (`Cluster`, ...).
    pub fn short_name(self) -> &'static str {
        match self {
            ResourceType::Listener => "Listener",
            ResourceType::RouteConfig => "RouteConfiguration",
            ResourceType::Cluster => "Cluster",
            ResourceType::Endpoints => "ClusterLoadAssignment",
            ResourceType::Runtime => "Runtime",
            ResourceType::Secret => "Secret",
        }
    }

    /// Whether the store keeps a resource's translation beside its bytes. Not
    /// for endpoints: the consumer turns each assignment into host sets, so a
    /// kept translation would hold every endpoint twice (a cluster manager with
    /// thousands of clusters pays for it in RSS); it is translated again from
    /// its bytes in the rare case it is needed ([`crate::Store::resource`]).
    pub fn keeps_translation(self) -> bool {
        !matches!(self, ResourceType::Endpoints)
    }

    /// LDS and CDS: subscribed by wildcard, and a SotW response is the complete set.
    pub fn is_wildcard(self) -> bool {
        matches!(self, ResourceType::Listener | ResourceType::Cluster)
    }

    /// RTDS: initialization waits for a first answer only, whatever it
    /// carries (Envoy's RTDS init target is ready after its first update,
    /// accepted or rejected, or a removal).
    pub fn ready_on_any_response(self) -> bool {
        matches!(self, ResourceType::Runtime)
    }

    /// Index into per-type arrays.
    pub(crate) fn index(self) -> usize {
        match self {
            ResourceType::Cluster => 0,
            ResourceType::Endpoints => 1,
            ResourceType::Listener => 2,
            ResourceType::RouteConfig => 3,
            ResourceType::Runtime => 4,
            ResourceType::Secret => 5,
        }
    }

    /// The resource's name from its encoded proto, even when it fails validation
    /// (so a NACK can name it).
    pub(crate) fn proto_name(self, bytes: &[u8]) -> Option<String> {
        let name = match self {
            ResourceType::Listener => Listener::decode(bytes).ok()?.name,
            ResourceType::RouteConfig => RouteConfiguration::decode(bytes).ok()?.name,
            ResourceType::Cluster => Cluster::decode(bytes).ok()?.name,
            ResourceType::Endpoints => ClusterLoadAssignment::decode(bytes).ok()?.cluster_name,
            ResourceType::Runtime => Runtime::decode(bytes).ok()?.name,
            ResourceType::Secret => Secret::decode(bytes).ok()?.name,
        };
        (!name.is_empty()).then_some(name)
    }
}

impl std::fmt::Display for ResourceType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.short_name())
    }
}
