//! gRPC plumbing: reaching the management server and opening the xDS streams
//! (ADS or one per type, SotW or Delta).

use crate::error::XdsError;
use crate::resource_type::ResourceType;
use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::envoy::service::endpoint::v3::endpoint_discovery_service_client::EndpointDiscoveryServiceClient;
use envoy_types::pb::envoy::service::listener::v3::listener_discovery_service_client::ListenerDiscoveryServiceClient;
use envoy_types::pb::envoy::service::route::v3::route_discovery_service_client::RouteDiscoveryServiceClient;
use envoy_types::pb::envoy::service::runtime::v3::runtime_discovery_service_client::RuntimeDiscoveryServiceClient;
use envoy_types::pb::envoy::service::secret::v3::secret_discovery_service_client::SecretDiscoveryServiceClient;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tonic::codec::Streaming;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::{Channel, Endpoint};

/// Opens a channel to the management server (once per stream attempt).
pub trait Connector: Send + Sync + 'static {
    /// Connects; called again after every stream failure.
    fn connect(&self) -> Pin<Box<dyn Future<Output = Result<Channel, XdsError>> + Send + '_>>;
}

/// Connects to a fixed `http://host:port` URI over HTTP/2 cleartext.
#[derive(Debug, Clone)]
pub struct UriConnector {
    /// e.g. `http://127.0.0.1:18000`.
    pub uri: String,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
}

impl UriConnector {
    /// A connector to `uri` with a 5 s connect timeout.
    pub fn new(uri: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

impl Connector for UriConnector {
    fn connect(&self) -> Pin<Box<dyn Future<Output = Result<Channel, XdsError>> + Send + '_>> {
        Box::pin(async move {
            let endpoint = Endpoint::from_shared(self.uri.clone())
                .map_err(|e| XdsError::Connect(e.to_string()))?
                .connect_timeout(self.connect_timeout);
            endpoint
                .connect()
                .await
                .map_err(|e| XdsError::Connect(format!("{}: {e}", self.uri)))
        })
    }
}

/// Largest response accepted: tonic's default (4 MiB) is below a large SotW
/// response (thousands of clusters), which Envoy takes.
const MAX_MESSAGE: usize = 1 << 30;

/// Which RPC a stream uses.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Rpc {
    /// AggregatedDiscoveryService.
    Ads,
    /// The per-type service of this type.
    Type(ResourceType),
}

fn request<T>(
    rx: tokio::sync::mpsc::Receiver<T>,
    metadata: &[(String, String)],
) -> tonic::Request<ReceiverStream<T>> {
    let mut req = tonic::Request::new(ReceiverStream::new(rx));
    for (k, v) in metadata {
        // Keys and values were validated by config; a bad one is skipped, not fatal.
        if let (Ok(k), Ok(v)) = (
            MetadataKey::from_bytes(k.as_bytes()),
            MetadataValue::try_from(v.as_str()),
        ) {
            req.metadata_mut().insert(k, v);
        }
    }
    req
}

/// Opens a State-of-the-World stream.
pub(crate) async fn open_sotw(
    channel: Channel,
    rpc: Rpc,
    rx: tokio::sync::mpsc::Receiver<DiscoveryRequest>,
    metadata: &[(String, String)],
) -> Result<Streaming<DiscoveryResponse>, tonic::Status> {
    let req = request(rx, metadata);
    let resp = match rpc {
        Rpc::Ads => {
            AggregatedDiscoveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .stream_aggregated_resources(req)
                .await
        }
        Rpc::Type(ResourceType::Listener) => {
            ListenerDiscoveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .stream_listeners(req)
                .await
        }
        Rpc::Type(ResourceType::RouteConfig) => {
            RouteDiscoveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .stream_routes(req)
                .await
        }
        Rpc::Type(ResourceType::Cluster) => {
            ClusterDiscoveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .stream_clusters(req)
                .await
        }
        Rpc::Type(ResourceType::Endpoints) => {
            EndpointDiscoveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .stream_endpoints(req)
                .await
        }
        Rpc::Type(ResourceType::Runtime) => {
            RuntimeDiscoveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .stream_runtime(req)
                .await
        }
        Rpc::Type(ResourceType::Secret) => {
            SecretDiscoveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .stream_secrets(req)
                .await
        }
    }?;
    Ok(resp.into_inner())
}

/// Opens a Delta (incremental) stream.
pub(crate) async fn open_delta(
    channel: Channel,
    rpc: Rpc,
    rx: tokio::sync::mpsc::Receiver<DeltaDiscoveryRequest>,
    metadata: &[(String, String)],
) -> Result<Streaming<DeltaDiscoveryResponse>, tonic::Status> {
    let req = request(rx, metadata);
    let resp = match rpc {
        Rpc::Ads => {
            AggregatedDiscoveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .delta_aggregated_resources(req)
                .await
        }
        Rpc::Type(ResourceType::Listener) => {
            ListenerDiscoveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .delta_listeners(req)
                .await
        }
        Rpc::Type(ResourceType::RouteConfig) => {
            RouteDiscoveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .delta_routes(req)
                .await
        }
        Rpc::Type(ResourceType::Cluster) => {
            ClusterDiscoveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .delta_clusters(req)
                .await
        }
        Rpc::Type(ResourceType::Endpoints) => {
            EndpointDiscoveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .delta_endpoints(req)
                .await
        }
        Rpc::Type(ResourceType::Runtime) => {
            RuntimeDiscoveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .delta_runtime(req)
                .await
        }
        Rpc::Type(ResourceType::Secret) => {
            SecretDiscoveryServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .delta_secrets(req)
                .await
        }
    }?;
    Ok(resp.into_inner())
}
