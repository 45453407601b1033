//! Test harness: an in-repo tonic xDS server (ADS and per-type CDS, SotW and
//! Delta) on loopback port 0 that hands every opened stream to the test, plus
//! resource builders and a recording consumer.

#![allow(dead_code)]

use courier_xds::{Update, Verdict};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, EdsClusterConfig, LbPolicy,
};
use envoy_types::pb::envoy::config::core::v3::{
    Address, AggregatedConfigSource, ConfigSource, SocketAddress, address, config_source,
    socket_address,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_server::{
    ClusterDiscoveryService, ClusterDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse, Resource,
};
use envoy_types::pb::google::protobuf::{Any, Duration as PbDuration};
use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::{Message, Name};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, atomic::AtomicUsize, atomic::Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tonic::codegen::Service;
use tonic::codegen::tokio_stream::Stream;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

/// Bound on every wait in these tests.
pub const WAIT: Duration = Duration::from_secs(10);

type Out<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// One stream opened by the client.
pub enum Opened {
    /// SotW (ADS or per-type), with the RPC path.
    Sotw(SotwStream),
    /// Delta (ADS).
    Delta(DeltaStream),
}

/// The server side of a SotW stream.
pub struct SotwStream {
    /// The gRPC method path.
    pub method: String,
    pub requests: Streaming<DiscoveryRequest>,
    pub responses: mpsc::Sender<Result<DiscoveryResponse, Status>>,
}

/// The server side of a Delta stream.
pub struct DeltaStream {
    pub requests: Streaming<DeltaDiscoveryRequest>,
    pub responses: mpsc::Sender<Result<DeltaDiscoveryResponse, Status>>,
}

impl SotwStream {
    /// The next request from the client.
    pub async fn next(&mut self) -> DiscoveryRequest {
        tokio::time::timeout(WAIT, self.requests.message())
            .await
            .expect("request in time")
            .expect("stream ok")
            .expect("stream open")
    }

    /// The next request of `type_url` (skipping others).
    pub async fn next_of(&mut self, type_url: &str) -> DiscoveryRequest {
        for _ in 0..20 {
            let r = self.next().await;
            if r.type_url == type_url {
                return r;
            }
        }
        panic!("no request of {type_url}");
    }

    /// Sends a response.
    pub async fn send(&self, type_url: &str, version: &str, nonce: &str, resources: Vec<Any>) {
        self.responses
            .send(Ok(DiscoveryResponse {
                version_info: version.into(),
                resources,
                type_url: type_url.into(),
                nonce: nonce.into(),
                ..Default::default()
            }))
            .await
            .expect("client stream open");
    }
}

impl DeltaStream {
    /// The next request from the client.
    pub async fn next(&mut self) -> DeltaDiscoveryRequest {
        tokio::time::timeout(WAIT, self.requests.message())
            .await
            .expect("request in time")
            .expect("stream ok")
            .expect("stream open")
    }

    /// The next request of `type_url` (skipping others).
    pub async fn next_of(&mut self, type_url: &str) -> DeltaDiscoveryRequest {
        for _ in 0..20 {
            let r = self.next().await;
            if r.type_url == type_url {
                return r;
            }
        }
        panic!("no request of {type_url}");
    }

    /// Sends a response.
    pub async fn send(
        &self,
        type_url: &str,
        nonce: &str,
        resources: Vec<(String, String, Any)>,
        removed: Vec<String>,
    ) {
        self.responses
            .send(Ok(DeltaDiscoveryResponse {
                system_version_info: nonce.into(),
                resources: resources
                    .into_iter()
                    .map(|(name, version, any)| Resource {
                        name,
                        version,
                        resource: Some(any),
                        ..Default::default()
                    })
                    .collect(),
                type_url: type_url.into(),
                removed_resources: removed,
                nonce: nonce.into(),
                ..Default::default()
            }))
            .await
            .expect("client stream open");
    }
}

#[derive(Clone)]
struct Hand {
    opened: mpsc::UnboundedSender<Opened>,
    method: String,
}

impl Hand {
    fn sotw(&self, requests: Streaming<DiscoveryRequest>) -> Out<DiscoveryResponse> {
        let (tx, rx) = mpsc::channel(16);
        let _ = self.opened.send(Opened::Sotw(SotwStream {
            method: self.method.clone(),
            requests,
            responses: tx,
        }));
        Box::pin(ReceiverStream::new(rx))
    }

    fn delta(&self, requests: Streaming<DeltaDiscoveryRequest>) -> Out<DeltaDiscoveryResponse> {
        let (tx, rx) = mpsc::channel(16);
        let _ = self.opened.send(Opened::Delta(DeltaStream {
            requests,
            responses: tx,
        }));
        Box::pin(ReceiverStream::new(rx))
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Hand {
    type StreamAggregatedResourcesStream = Out<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = Out<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        request: tonic::Request<Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::StreamAggregatedResourcesStream>, Status> {
        Ok(tonic::Response::new(self.sotw(request.into_inner())))
    }

    async fn delta_aggregated_resources(
        &self,
        request: tonic::Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::DeltaAggregatedResourcesStream>, Status> {
        Ok(tonic::Response::new(self.delta(request.into_inner())))
    }
}

#[tonic::async_trait]
impl ClusterDiscoveryService for Hand {
    type StreamClustersStream = Out<DiscoveryResponse>;
    type DeltaClustersStream = Out<DeltaDiscoveryResponse>;

    async fn stream_clusters(
        &self,
        request: tonic::Request<Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::StreamClustersStream>, Status> {
        Ok(tonic::Response::new(self.sotw(request.into_inner())))
    }

    async fn delta_clusters(
        &self,
        request: tonic::Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::DeltaClustersStream>, Status> {
        Ok(tonic::Response::new(self.delta(request.into_inner())))
    }

    async fn fetch_clusters(
        &self,
        _request: tonic::Request<DiscoveryRequest>,
    ) -> Result<tonic::Response<DiscoveryResponse>, Status> {
        Err(Status::unimplemented("fetch"))
    }
}

/// The control plane: accepts connections; `restart()` drops every open
/// connection (as a restarted server would) while the port stays bound.
pub struct Server {
    pub addr: SocketAddr,
    opened: mpsc::UnboundedReceiver<Opened>,
    generation: Arc<AtomicUsize>,
    conns: Arc<tokio::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Server {
    pub async fn start() -> Server {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, opened) = mpsc::unbounded_channel();
        let conns: Arc<tokio::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let conns2 = Arc::clone(&conns);
        let accept = tokio::spawn(async move {
            for _ in 0..100 {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                let tx = tx.clone();
                let service = service_fn(move |req: Request<Incoming>| {
                    let hand = Hand {
                        opened: tx.clone(),
                        method: req.uri().path().to_string(),
                    };
                    async move {
                        if req.uri().path().starts_with("/envoy.service.cluster.") {
                            ClusterDiscoveryServiceServer::new(hand).call(req).await
                        } else {
                            AggregatedDiscoveryServiceServer::new(hand).call(req).await
                        }
                    }
                });
                let conn = tokio::spawn(async move {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(s), service)
                        .await;
                });
                conns2.lock().await.push(conn);
            }
        });
        Server {
            addr,
            opened,
            generation: Arc::default(),
            conns,
            accept,
        }
    }

    pub fn uri(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next stream the client opens.
    pub async fn opened(&mut self) -> Opened {
        tokio::time::timeout(WAIT, self.opened.recv())
            .await
            .expect("stream opened in time")
            .expect("server running")
    }

    pub async fn sotw(&mut self) -> SotwStream {
        match self.opened().await {
            Opened::Sotw(s) => s,
            Opened::Delta(_) => panic!("expected a SotW stream"),
        }
    }

    pub async fn delta(&mut self) -> DeltaStream {
        match self.opened().await {
            Opened::Delta(s) => s,
            Opened::Sotw(_) => panic!("expected a Delta stream"),
        }
    }

    /// Drops every connection (the client sees the server go away).
    pub async fn restart(&mut self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
        for c in self.conns.lock().await.drain(..) {
            c.abort();
        }
    }
}

pub fn any<M: Message + Name>(m: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: m.encode_to_vec(),
    }
}

pub fn cla(name: &str, ports: &[u16]) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: name.into(),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints: ports
                .iter()
                .map(|p| LbEndpoint {
                    host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                        address: Some(Address {
                            address: Some(address::Address::SocketAddress(SocketAddress {
                                address: "127.0.0.1".into(),
                                port_specifier: Some(socket_address::PortSpecifier::PortValue(
                                    u32::from(*p),
                                )),
                                ..Default::default()
                            })),
                        }),
                        ..Default::default()
                    })),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A STATIC cluster with one endpoint.
pub fn static_cluster(name: &str, port: u16) -> Cluster {
    Cluster {
        name: name.into(),
        connect_timeout: Some(PbDuration {
            seconds: 1,
            nanos: 0,
        }),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
        load_assignment: Some(cla(name, &[port])),
        ..Default::default()
    }
}

/// An EDS cluster whose endpoints come over ADS.
pub fn eds_cluster(name: &str) -> Cluster {
    Cluster {
        name: name.into(),
        connect_timeout: Some(PbDuration {
            seconds: 1,
            nanos: 0,
        }),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig {
            eds_config: Some(ConfigSource {
                config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(
                    AggregatedConfigSource::default(),
                )),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A cluster courier rejects: `lb_policy: CLUSTER_PROVIDED`.
pub fn bad_cluster(name: &str) -> Cluster {
    Cluster {
        lb_policy: LbPolicy::ClusterProvided as i32,
        ..static_cluster(name, 1)
    }
}

/// A consumer that records every update and rejects upserts named in `reject`.
pub struct Recorder {
    pub updates: mpsc::UnboundedReceiver<Update>,
}

pub fn recorder(reject: &'static [&'static str]) -> (Arc<dyn courier_xds::Consumer>, Recorder) {
    let (tx, rx) = mpsc::unbounded_channel();
    let consumer = move |u: &Update| {
        let _ = tx.send(u.clone());
        Verdict {
            rejected: u
                .upserts
                .iter()
                .filter(|up| reject.contains(&up.name.as_str()))
                .map(|up| (up.name.clone(), "refused by the consumer".to_string()))
                .collect(),
        }
    };
    (Arc::new(consumer), Recorder { updates: rx })
}

impl Recorder {
    pub async fn next(&mut self) -> Update {
        tokio::time::timeout(WAIT, self.updates.recv())
            .await
            .expect("update in time")
            .expect("client running")
    }
}

/// Sorted upsert names of an update.
pub fn upserted(u: &Update) -> Vec<String> {
    let mut v: Vec<String> = u.upserts.iter().map(|x| x.name.clone()).collect();
    v.sort();
    v
}
