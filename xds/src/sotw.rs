//! One State-of-the-World stream (ADS or per type): subscribe, answer every
//! response with an ACK or NACK, follow interest changes.

use crate::apply::{Removal, Shared};
use crate::client::StreamConfig;
use crate::decode::{self, Raw};
use crate::error::XdsError;
use crate::grpc;
use crate::interest::Interest;
use crate::resource_type::ResourceType;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;

/// gRPC INTERNAL, the code Envoy puts in a NACK's error_detail.
pub(crate) const NACK_CODE: i32 = 13;

struct TypeStream {
    nonce: String,
    /// The interest last sent; `None` before the first request.
    sent: Option<Arc<Interest>>,
}

/// Runs one stream until it fails; `got_response` tells the caller whether the
/// server answered at all (a stream that worked resets the backoff).
pub(crate) async fn session(
    shared: &Shared,
    cfg: &StreamConfig,
    got_response: &mut bool,
) -> Result<(), XdsError> {
    let channel = cfg.source.connector.connect().await?;
    let (tx, rx) = mpsc::channel::<DiscoveryRequest>(64);
    let mut changed = shared.interests.subscribe();
    changed.mark_unchanged();
    let mut node_sent = false;
    let mut streams: HashMap<ResourceType, TypeStream> = cfg
        .types
        .iter()
        .map(|t| {
            (
                *t,
                TypeStream {
                    nonce: String::new(),
                    sent: None,
                },
            )
        })
        .collect();
    // Initial requests are queued before the call: some servers send response
    // headers only with their first message.
    for t in &cfg.types {
        if let Some(req) = subscription(shared, cfg, *t, &mut streams, &mut node_sent) {
            let _ = tx.send(req).await;
        }
    }
    let mut input = grpc::open_sotw(channel, cfg.rpc, rx, &cfg.source.initial_metadata).await?;
    let _up = shared.stream_up();
    loop {
        tokio::select! {
            msg = input.message() => {
                let resp = match msg {
                    Ok(Some(r)) => r,
                    Ok(None) => return Err(XdsError::Closed),
                    Err(s) => return Err(XdsError::Stream(s)),
                };
                *got_response = true;
                if let Some(req) = respond(shared, cfg, resp, &mut streams, &mut node_sent).await
                    && tx.send(req).await.is_err()
                {
                    return Err(XdsError::Closed);
                }
            }
            r = changed.changed() => {
                if r.is_err() {
                    return Err(XdsError::Closed);
                }
                for t in &cfg.types {
                    if let Some(req) = subscription(shared, cfg, *t, &mut streams, &mut node_sent)
                        && tx.send(req).await.is_err()
                    {
                        return Err(XdsError::Closed);
                    }
                }
            }
        }
    }
}

fn node(
    cfg: &StreamConfig,
    node_sent: &mut bool,
) -> Option<envoy_types::pb::envoy::config::core::v3::Node> {
    if cfg.source.node_on_first_message_only && *node_sent {
        return None;
    }
    *node_sent = true;
    Some(cfg.node.clone())
}

/// A request for `t` when its interest differs from what was last sent.
fn subscription(
    shared: &Shared,
    cfg: &StreamConfig,
    t: ResourceType,
    streams: &mut HashMap<ResourceType, TypeStream>,
    node_sent: &mut bool,
) -> Option<DiscoveryRequest> {
    let interest = shared.interests.get(t);
    let st = streams.get_mut(&t)?;
    match &st.sent {
        Some(sent) if **sent == *interest => return None,
        // Nothing wanted and nothing asked yet: an empty list would mean wildcard.
        None if interest.is_empty() => return None,
        _ => {}
    }
    st.sent = Some(Arc::clone(&interest));
    Some(DiscoveryRequest {
        version_info: shared.store.get(t).version_info.clone(),
        node: node(cfg, node_sent),
        resource_names: interest.names(),
        type_url: t.type_url(),
        response_nonce: st.nonce.clone(),
        error_detail: None,
        ..Default::default()
    })
}

/// Applies a response and builds its ACK or NACK.
async fn respond(
    shared: &Shared,
    cfg: &StreamConfig,
    resp: DiscoveryResponse,
    streams: &mut HashMap<ResourceType, TypeStream>,
    node_sent: &mut bool,
) -> Option<DiscoveryRequest> {
    let Some(t) = ResourceType::from_type_url(&resp.type_url).filter(|t| streams.contains_key(t))
    else {
        tracing::warn!(
            type_url = resp.type_url,
            "xDS response of an unexpected type ignored"
        );
        return None;
    };
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
    let interest = shared.interests.get(t);
    let st = streams.get_mut(&t)?;
    st.nonce = resp.nonce.clone();
    st.sent = Some(Arc::clone(&interest));
    Some(DiscoveryRequest {
        // ACK: the version just accepted; NACK: the one still in force.
        version_info: shared.store.get(t).version_info.clone(),
        node: node(cfg, node_sent),
        resource_names: interest.names(),
        type_url: t.type_url(),
        response_nonce: resp.nonce,
        error_detail: result.err().map(|message| RpcStatus {
            code: NACK_CODE,
            message,
            details: Vec::new(),
        }),
        ..Default::default()
    })
}
