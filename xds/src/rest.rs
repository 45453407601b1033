//! REST-JSON polling (`api_type: REST`): `POST /v3/discovery:<type>` with a JSON
//! DiscoveryRequest every `refresh_delay`; the previous response's ACK or NACK
//! rides on the next poll, as in Envoy. One request outstanding per type.

use crate::apply::{Removal, Shared};
use crate::decode::{self, Raw};
use crate::error::XdsError;
use crate::resource_type::ResourceType;
use crate::sotw::NACK_CODE;
use courier_config::load;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use prost::Name;
use prost_reflect::SerializeOptions;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Sends one REST-JSON request to the management cluster (the proxy implements
/// it over the cluster named in `cluster_names`).
pub trait RestTransport: Send + Sync + 'static {
    /// POSTs `body` (JSON) to `path`; returns the response body (empty: no change).
    fn post(
        &self,
        path: &'static str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, XdsError>> + Send + '_>>;
}

/// A REST-JSON source.
#[derive(Clone)]
pub struct RestSource {
    /// Reaches the management server.
    pub transport: Arc<dyn RestTransport>,
    /// Poll period.
    pub refresh_delay: Duration,
    /// Per-request timeout.
    pub request_timeout: Duration,
}

impl std::fmt::Debug for RestSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestSource")
            .field("refresh_delay", &self.refresh_delay)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

fn path(t: ResourceType) -> &'static str {
    match t {
        ResourceType::Listener => "/v3/discovery:listeners",
        ResourceType::RouteConfig => "/v3/discovery:routes",
        ResourceType::Cluster => "/v3/discovery:clusters",
        ResourceType::Endpoints => "/v3/discovery:endpoints",
        ResourceType::Runtime => "/v3/discovery:runtime",
        ResourceType::Secret => "/v3/discovery:secrets",
    }
}

/// The proto3 JSON form of a request.
fn to_json(req: &DiscoveryRequest) -> Result<Vec<u8>, XdsError> {
    let desc = courier_config::descriptors::message(&DiscoveryRequest::full_name())
        .map_err(XdsError::File)?;
    let dynamic =
        prost_reflect::DynamicMessage::decode(desc, prost::Message::encode_to_vec(req).as_slice())
            .map_err(|e| XdsError::File(e.to_string()))?;
    let mut out = serde_json::Serializer::new(Vec::new());
    dynamic
        .serialize_with_options(
            &mut out,
            &SerializeOptions::new().use_proto_field_name(true),
        )
        .map_err(|e| XdsError::File(e.to_string()))?;
    Ok(out.into_inner())
}

fn from_json(body: &[u8]) -> Result<DiscoveryResponse, String> {
    let text = std::str::from_utf8(body).map_err(|e| e.to_string())?;
    let value = load::parse_text(text, load::Format::Json).map_err(|e| e.to_string())?;
    let dynamic = load::dynamic_from_json(value, &DiscoveryResponse::full_name())
        .map_err(|e| e.to_string())?;
    load::typed_from_dynamic(&dynamic).map_err(|e| e.to_string())
}

impl RestSource {
    /// Polls for ever (the task is aborted with the client).
    pub(crate) async fn run(self, shared: Arc<Shared>, t: ResourceType, node: Node) {
        let mut nonce = String::new();
        let mut error_detail: Option<RpcStatus> = None;
        let mut changed = shared.interests.subscribe();
        loop {
            let interest = shared.interests.get(t);
            if !interest.is_empty() {
                let req = DiscoveryRequest {
                    version_info: shared.store.get(t).version_info.clone(),
                    node: Some(node.clone()),
                    resource_names: interest.names(),
                    type_url: t.type_url(),
                    response_nonce: nonce.clone(),
                    error_detail: error_detail.take(),
                    ..Default::default()
                };
                match self.poll(&shared, t, &req).await {
                    Ok(Some((n, detail))) => {
                        nonce = n;
                        error_detail = detail.map(|message| RpcStatus {
                            code: NACK_CODE,
                            message,
                            details: Vec::new(),
                        });
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(type_ = %t, "xDS REST poll failed: {e}"),
                }
            }
            // Next poll after refresh_delay, or at once when the interest changes.
            tokio::select! {
                _ = tokio::time::sleep(self.refresh_delay) => {}
                r = changed.changed() => {
                    if r.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// One poll; `Some((nonce, NACK detail))` when a response was applied.
    async fn poll(
        &self,
        shared: &Shared,
        t: ResourceType,
        req: &DiscoveryRequest,
    ) -> Result<Option<(String, Option<String>)>, XdsError> {
        let body = self
            .transport
            .post(path(t), to_json(req)?, self.request_timeout)
            .await?;
        if body.is_empty() {
            return Ok(None);
        }
        let resp = match from_json(&body) {
            Ok(r) => r,
            Err(e) => {
                let detail = format!("invalid DiscoveryResponse: {e}");
                shared
                    .store
                    .update(t, |s| s.last_error = Some(detail.clone()));
                shared.store.count(t, None);
                return Ok(Some((String::new(), Some(detail))));
            }
        };
        if resp.type_url != t.type_url() && !resp.type_url.is_empty() {
            return Ok(Some((
                resp.nonce,
                Some(format!(
                    "response of type {} to a {t} request",
                    resp.type_url
                )),
            )));
        }
        let decoded = decode::decode(
            t,
            resp.resources.iter().map(|any| Raw {
                name: None,
                version: &resp.version_info,
                any,
            }),
            &shared.store.get(t),
        );
        let result = shared
            .apply(t, &resp.version_info, decoded, Removal::SotwSet)
            .await;
        Ok(Some((resp.nonce, result.err())))
    }
}
