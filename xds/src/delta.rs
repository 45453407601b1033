//! One Delta (incremental) stream: subscribe/unsubscribe by difference,
//! `initial_resource_versions` on every new stream, ACK/NACK by nonce.

use crate::apply::{Removal, Shared};
use crate::client::StreamConfig;
use crate::decode::{self, Raw};
use crate::error::XdsError;
use crate::grpc;
use crate::interest::Interest;
use crate::resource_type::ResourceType;
use crate::sotw::NACK_CODE;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use std::collections::{BTreeSet, HashMap};
use tokio::sync::mpsc;

/// The Delta names of an interest: `*` stands for the wildcard.
fn names(i: &Interest) -> BTreeSet<String> {
    match i {
        Interest::Wildcard => BTreeSet::from(["*".to_string()]),
        Interest::Names(n) => n.clone(),
    }
}

/// Runs one stream until it fails.
pub(crate) async fn session(
    shared: &Shared,
    cfg: &StreamConfig,
    got_response: &mut bool,
) -> Result<(), XdsError> {
    let channel = cfg.source.connector.connect().await?;
    let (tx, rx) = mpsc::channel::<DeltaDiscoveryRequest>(64);
    let mut changed = shared.interests.subscribe();
    changed.mark_unchanged();
    let mut node_sent = false;
    // Names subscribed on this stream, per type (`None` = no request yet).
    let mut sent: HashMap<ResourceType, Option<BTreeSet<String>>> =
        cfg.types.iter().map(|t| (*t, None)).collect();
    for t in &cfg.types {
        if let Some(req) = subscription(shared, cfg, *t, &mut sent, &mut node_sent) {
            let _ = tx.send(req).await;
        }
    }
    let mut input = grpc::open_delta(channel, cfg.rpc, rx, &cfg.source.initial_metadata).await?;
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
                if let Some(req) = respond(shared, cfg, resp, &sent, &mut node_sent).await
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
                    if let Some(req) = subscription(shared, cfg, *t, &mut sent, &mut node_sent)
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

/// The request that brings `t`'s subscription on this stream to its interest.
fn subscription(
    shared: &Shared,
    cfg: &StreamConfig,
    t: ResourceType,
    sent: &mut HashMap<ResourceType, Option<BTreeSet<String>>>,
    node_sent: &mut bool,
) -> Option<DeltaDiscoveryRequest> {
    let interest = shared.interests.get(t);
    let want = names(&interest);
    let slot = sent.get_mut(&t)?;
    let req = match slot {
        None if want.is_empty() => return None,
        None => {
            // First request of the type on this stream: every subscription, and
            // the versions in force so the server sends only what changed.
            let initial_resource_versions = shared
                .store
                .versions(t)
                .into_iter()
                .filter(|(n, _)| interest.wants(n))
                .collect();
            DeltaDiscoveryRequest {
                node: node(cfg, node_sent),
                type_url: t.type_url(),
                resource_names_subscribe: want.iter().cloned().collect(),
                initial_resource_versions,
                ..Default::default()
            }
        }
        Some(have) if *have == want => return None,
        Some(have) => DeltaDiscoveryRequest {
            node: node(cfg, node_sent),
            type_url: t.type_url(),
            resource_names_subscribe: want.difference(have).cloned().collect(),
            resource_names_unsubscribe: have.difference(&want).cloned().collect(),
            ..Default::default()
        },
    };
    *slot = Some(want);
    Some(req)
}

async fn respond(
    shared: &Shared,
    cfg: &StreamConfig,
    resp: DeltaDiscoveryResponse,
    sent: &HashMap<ResourceType, Option<BTreeSet<String>>>,
    node_sent: &mut bool,
) -> Option<DeltaDiscoveryRequest> {
    let Some(t) = ResourceType::from_type_url(&resp.type_url).filter(|t| sent.contains_key(t))
    else {
        tracing::warn!(
            type_url = resp.type_url,
            "xDS delta response of an unexpected type ignored"
        );
        return None;
    };
    let decoded = decode::decode(
        t,
        resp.resources.iter().filter_map(|r| {
            Some(Raw {
                name: Some(r.name.as_str()),
                version: &r.version,
                any: r.resource.as_ref()?,
            })
        }),
        &shared.store.get(t),
    );
    let result = shared
        .apply(
            t,
            &resp.system_version_info,
            decoded,
            Removal::Names(resp.removed_resources),
        )
        .await;
    Some(DeltaDiscoveryRequest {
        node: node(cfg, node_sent),
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
