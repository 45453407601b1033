//! The global rate limit filter's transport: `RateLimitService/ShouldRateLimit` as a unary
//! gRPC call on the calling worker's own HTTP/2 connections to the service's cluster
//! (`envoy_grpc`; `google_grpc` is refused by the config).

use crate::filter_chain::ext_authz_client::unary_grpc;
use crate::upstream::client::ClusterClient;
use bytes::{BufMut, Bytes, BytesMut};
use courier_config::config_source::{GrpcService, GrpcTarget};
use courier_filters::ratelimit::{RateLimitTransport, RlsFuture};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use prost::Message;
use std::time::Duration;

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Rate limit calls over courier's clusters.
#[derive(Debug)]
pub struct ClusterRls(pub ClusterClient);

impl RateLimitTransport for ClusterRls {
    fn should_rate_limit<'a>(
        &'a self,
        service: &'a GrpcService,
        timeout: Option<Duration>,
        request: RateLimitRequest,
    ) -> RlsFuture<'a> {
        Box::pin(async move {
            let GrpcTarget::EnvoyGrpc {
                cluster_name,
                authority,
            } = &service.target
            else {
                return Err("google_grpc rate limit services are not supported".into());
            };
            let len = request.encoded_len();
            let mut frame = BytesMut::with_capacity(5 + len);
            frame.put_u8(0);
            frame.put_u32(len as u32);
            request.encode(&mut frame).map_err(|e| e.to_string())?;
            let frame: Bytes = frame.freeze();
            unary_grpc(
                &self.0,
                PATH,
                cluster_name,
                authority.as_deref().unwrap_or(cluster_name),
                service,
                timeout,
                frame,
            )
            .await
        })
    }
}
