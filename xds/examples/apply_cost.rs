//! Measures the xDS client's main-thread cost on loopback: a SotW response of
//! 1 000 EDS clusters, one of 1 000 ClusterLoadAssignments with 10 endpoints
//! each (10 000 endpoints), then Delta updates of one endpoint. Each time is
//! from the response being queued at the server to the consumer having been
//! handed the update (decode, validate, translate, store) — the consumer here
//! does nothing, so the proxy's snapshot build is not included.
//!
//! `cargo run --release -p courier-xds --example apply_cost`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_xds::{
    Client, ClientConfig, GrpcSource, Interest, ResourceType, Source, Update, UriConnector, Verdict,
};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, EdsClusterConfig,
};
use envoy_types::pb::envoy::config::core::v3::{
    Address, AggregatedConfigSource, ConfigSource, SocketAddress, address, config_source,
    socket_address,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse, Resource,
};
use envoy_types::pb::google::protobuf::{Any, Duration as PbDuration};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::{Message, Name};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::codegen::Service;
use tonic::codegen::tokio_stream::Stream;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

type Out<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

enum Opened {
    Sotw(mpsc::Sender<Result<DiscoveryResponse, Status>>),
    Delta(mpsc::Sender<Result<DeltaDiscoveryResponse, Status>>),
}

#[derive(Clone)]
struct Hand(mpsc::UnboundedSender<Opened>);

#[tonic::async_trait]
impl AggregatedDiscoveryService for Hand {
    type StreamAggregatedResourcesStream = Out<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = Out<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        request: tonic::Request<Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::StreamAggregatedResourcesStream>, Status> {
        let mut input = request.into_inner();
        tokio::spawn(async move { while let Ok(Some(_)) = input.message().await {} });
        let (tx, rx) = mpsc::channel(4);
        let _ = self.0.send(Opened::Sotw(tx));
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn delta_aggregated_resources(
        &self,
        request: tonic::Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::DeltaAggregatedResourcesStream>, Status> {
        let mut input = request.into_inner();
        tokio::spawn(async move { while let Ok(Some(_)) = input.message().await {} });
        let (tx, rx) = mpsc::channel(4);
        let _ = self.0.send(Opened::Delta(tx));
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

fn any<M: Message + Name>(m: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: m.encode_to_vec(),
    }
}

fn cluster(i: usize) -> Cluster {
    Cluster {
        name: format!("c{i}"),
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

fn cla(i: usize, base_port: u32) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: format!("c{i}"),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints: (0..10)
                .map(|p| LbEndpoint {
                    host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                        address: Some(Address {
                            address: Some(address::Address::SocketAddress(SocketAddress {
                                address: "10.0.0.1".into(),
                                port_specifier: Some(socket_address::PortSpecifier::PortValue(
                                    base_port + p,
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

async fn serve() -> (String, mpsc::UnboundedReceiver<Opened>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let svc = AggregatedDiscoveryServiceServer::new(Hand(tx))
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    tokio::spawn(async move {
        for _ in 0..10 {
            let (s, _) = l.accept().await.unwrap();
            let svc = svc.clone();
            let service = hyper::service::service_fn(move |req| {
                let mut svc = svc.clone();
                async move { svc.call(req).await }
            });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), service),
            );
        }
    });
    (format!("http://{addr}"), rx)
}

fn start(uri: String, delta: bool) -> (Client, mpsc::UnboundedReceiver<(Instant, usize)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let consumer = move |u: &Update| {
        let _ = tx.send((Instant::now(), u.upserts.len()));
        Verdict::accept()
    };
    let config = ClientConfig {
        ads: Some(GrpcSource {
            connector: Arc::new(UriConnector::new(uri)),
            delta,
            node_on_first_message_only: true,
            initial_metadata: vec![],
        }),
        sources: vec![
            (ResourceType::Cluster, Source::Ads),
            (ResourceType::Endpoints, Source::Ads),
        ],
        interest: vec![(
            ResourceType::Endpoints,
            Interest::Names((0..1000).map(|i| format!("c{i}")).collect()),
        )],
        ..Default::default()
    };
    (Client::start(config, Arc::new(consumer)), rx)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (uri, mut opened) = serve().await;
    // SotW: 1 000 clusters, then 1 000 CLAs (10 000 endpoints).
    let (_c, mut applied) = start(uri.clone(), false);
    let Some(Opened::Sotw(tx)) = opened.recv().await else {
        panic!("no SotW stream")
    };
    let clusters = DiscoveryResponse {
        version_info: "1".into(),
        type_url: Cluster::type_url(),
        nonce: "1".into(),
        resources: (0..1000).map(|i| any(&cluster(i))).collect(),
        ..Default::default()
    };
    let t0 = Instant::now();
    tx.send(Ok(clusters)).await.unwrap();
    let (t1, n) = applied.recv().await.unwrap();
    println!("SotW CDS, {n} EDS clusters: {:?}", t1 - t0);
    let endpoints = DiscoveryResponse {
        version_info: "1".into(),
        type_url: ClusterLoadAssignment::type_url(),
        nonce: "2".into(),
        resources: (0..1000).map(|i| any(&cla(i, 1000))).collect(),
        ..Default::default()
    };
    let t0 = Instant::now();
    tx.send(Ok(endpoints)).await.unwrap();
    let (t1, n) = applied.recv().await.unwrap();
    println!("SotW EDS, {n} CLAs x 10 endpoints: {:?}", t1 - t0);

    // Delta: one CLA with one endpoint changed, 100 times.
    let (_d, mut applied) = start(uri, true);
    let Some(Opened::Delta(tx)) = opened.recv().await else {
        panic!("no Delta stream")
    };
    let mut total = Duration::ZERO;
    let rounds: u32 = 100;
    for r in 0..rounds {
        let resp = DeltaDiscoveryResponse {
            type_url: ClusterLoadAssignment::type_url(),
            nonce: format!("d{r}"),
            resources: vec![Resource {
                name: "c7".into(),
                version: r.to_string(),
                resource: Some(any(&cla(7, 2000 + r * 10))),
                ..Default::default()
            }],
            ..Default::default()
        };
        let t0 = Instant::now();
        tx.send(Ok(resp)).await.unwrap();
        let (t1, _) = applied.recv().await.unwrap();
        total += t1 - t0;
    }
    println!(
        "Delta EDS, one CLA (10 endpoints), mean of {rounds}: {:?}",
        total / rounds
    );
}
