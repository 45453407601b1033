//! gRPC through the real binary: a tonic client, courier, and tonic services
//! (generated in `envoy-types`) on an HTTP/2 upstream: unary calls, a non-OK
//! status (trailers-only and in trailers after messages), and a bidirectional
//! stream echoing messages both ways.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::authorization_server::{
    Authorization, AuthorizationServer,
};
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest, CheckResponse};
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;
use support::*;
use tokio::net::TcpListener;
use tonic::codegen::Service;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::tokio_stream::{Stream, StreamExt};
use tonic::{Code, Status, Streaming};

struct Auth;

#[tonic::async_trait]
impl Authorization for Auth {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, Status> {
        if request.get_ref().attributes.is_none() {
            return Err(Status::permission_denied("denied by upstream"));
        }
        Ok(tonic::Response::new(CheckResponse {
            status: Some(RpcStatus {
                code: 0,
                message: "allowed by upstream".into(),
                details: vec![],
            }),
            ..Default::default()
        }))
    }
}

type Out<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Echoes each request as a response (version + "!"); a request with type_url
/// `fail` ends the stream with RESOURCE_EXHAUSTED (a status in trailers).
struct Ads;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Out<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = Out<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        request: tonic::Request<Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::StreamAggregatedResourcesStream>, Status> {
        let mut input = request.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            while let Some(Ok(req)) = input.next().await {
                if req.type_url == "fail" {
                    let _ = tx.send(Err(Status::resource_exhausted("too much"))).await;
                    return;
                }
                let resp = DiscoveryResponse {
                    version_info: format!("{}!", req.version_info),
                    type_url: req.type_url,
                    ..Default::default()
                };
                if tx.send(Ok(resp)).await.is_err() {
                    return;
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn delta_aggregated_resources(
        &self,
        _request: tonic::Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::DeltaAggregatedResourcesStream>, Status> {
        Err(Status::unimplemented("delta"))
    }
}

/// Both services on one h2c port, served by hyper.
async fn grpc_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let auth = AuthorizationServer::new(Auth);
    let ads = AggregatedDiscoveryServiceServer::new(Ads);
    tokio::spawn(async move {
        for _ in 0..100 {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let (auth, ads) = (auth.clone(), ads.clone());
            let service = service_fn(move |req: Request<Incoming>| {
                let (mut auth, mut ads) = (auth.clone(), ads.clone());
                async move {
                    if req.uri().path().starts_with("/envoy.service.auth.") {
                        auth.call(req).await
                    } else {
                        ads.call(req).await
                    }
                }
            });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), service),
            );
        }
    });
    addr
}

const H2: &str = r#"typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    explicit_http_config:
      http2_protocol_options: {}
"#;

async fn through_courier() -> (Courier, tonic::transport::Channel) {
    let up = grpc_upstream().await;
    let c = courier(
        "",
        "- match: {prefix: \"/\"}\n  route: {cluster: grpc}\n",
        &static_cluster("grpc", &[up], H2),
    )
    .await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", c.listener))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (c, channel)
}

#[tokio::test]
async fn unary_calls_and_error_statuses_pass_through() {
    let (_c, channel) = through_courier().await;
    let mut client = AuthorizationClient::new(channel);
    let ok = client
        .check(CheckRequest {
            attributes: Some(AttributeContext::default()),
        })
        .await
        .unwrap();
    assert_eq!(
        ok.get_ref().status.as_ref().map(|s| s.message.as_str()),
        Some("allowed by upstream")
    );
    // A trailers-only error from the upstream.
    let err = client.check(CheckRequest::default()).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    assert_eq!(err.message(), "denied by upstream");
}

#[tokio::test]
async fn bidirectional_stream_echoes_both_ways_and_keeps_trailer_status() {
    let (_c, channel) = through_courier().await;
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut responses = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    // One message at a time: each answer comes back before the next is sent.
    for i in 0..5 {
        tx.send(DiscoveryRequest {
            version_info: format!("v{i}"),
            type_url: "t".into(),
            ..Default::default()
        })
        .await
        .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(3), responses.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(resp.version_info, format!("v{i}!"));
    }
    // A non-OK status after messages arrives in the trailers.
    tx.send(DiscoveryRequest {
        type_url: "fail".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(3), responses.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(err.message(), "too much");

    // A stream the client ends ends with OK.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut responses = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DiscoveryRequest::default()).await.unwrap();
    assert!(responses.message().await.unwrap().is_some());
    drop(tx);
    assert!(responses.message().await.unwrap().is_none());
}
