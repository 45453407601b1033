//! The ADS server of `bench-xds-scale`: serves its current resources over SotW
//! and Delta (Delta sends only what changed since last sent) and reports each
//! ACK (type URL, nonce).

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse, Resource,
};
use envoy_types::pb::google::protobuf::Any;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tonic::codegen::Service;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::tokio_stream::{Stream, StreamExt};
use tonic::{Status, Streaming};

type Error = Box<dyn std::error::Error + Send + Sync>;
type Out<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// type URL -> name -> (version it last changed at, resource).
pub type Resources = HashMap<String, BTreeMap<String, (u64, Any)>>;

/// An ACK: (type URL, nonce).
pub type Ack = (String, String);

#[derive(Clone)]
pub struct Cp {
    pub state: watch::Receiver<(u64, Arc<Resources>)>,
    pub acks: mpsc::UnboundedSender<Ack>,
}

pub fn nonce(version: u64, type_url: &str) -> String {
    format!("{version}-{type_url}")
}

fn record<R>(acks: &mpsc::UnboundedSender<Ack>, type_url: &str, nonce: &str, error: Option<R>) {
    if !nonce.is_empty() && error.is_none() {
        let _ = acks.send((type_url.to_string(), nonce.to_string()));
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Cp {
    type StreamAggregatedResourcesStream = Out<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = Out<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        request: tonic::Request<Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::StreamAggregatedResourcesStream>, Status> {
        let mut input = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let (mut state, acks) = (self.state.clone(), self.acks.clone());
        tokio::spawn(async move {
            let mut names: HashMap<String, Vec<String>> = HashMap::new();
            let sotw = |st: &(u64, Arc<Resources>), t: &str| DiscoveryResponse {
                version_info: st.0.to_string(),
                resources: st
                    .1
                    .get(t)
                    .map(|m| m.values().map(|(_, a)| a.clone()).collect())
                    .unwrap_or_default(),
                type_url: t.to_string(),
                nonce: nonce(st.0, t),
                ..Default::default()
            };
            loop {
                tokio::select! {
                    req = input.next() => {
                        let Some(Ok(req)) = req else { return };
                        record(&acks, &req.type_url, &req.response_nonce, req.error_detail);
                        let changed = names.get(&req.type_url) != Some(&req.resource_names);
                        names.insert(req.type_url.clone(), req.resource_names);
                        if req.response_nonce.is_empty() || changed {
                            let resp = sotw(&state.borrow(), &req.type_url);
                            if tx.send(Ok(resp)).await.is_err() { return; }
                        }
                    }
                    r = state.changed() => {
                        if r.is_err() { return; }
                        let cur = state.borrow().clone();
                        for t in names.keys() {
                            if tx.send(Ok(sotw(&cur, t))).await.is_err() { return; }
                        }
                    }
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn delta_aggregated_resources(
        &self,
        request: tonic::Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::DeltaAggregatedResourcesStream>, Status> {
        let mut input = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let (mut state, acks) = (self.state.clone(), self.acks.clone());
        tokio::spawn(async move {
            // Per type: the version each resource was sent at.
            let mut sent: HashMap<String, HashMap<String, u64>> = HashMap::new();
            // Resources of `t` changed since they were sent (all if `full`).
            let delta = |st: &(u64, Arc<Resources>),
                         t: &str,
                         sent: &mut HashMap<String, u64>,
                         full: bool| {
                let mut resources = Vec::new();
                for (name, (v, any)) in st.1.get(t).into_iter().flatten() {
                    if full || sent.get(name).is_none_or(|s| s < v) {
                        sent.insert(name.clone(), *v);
                        resources.push(Resource {
                            name: name.clone(),
                            version: v.to_string(),
                            resource: Some(any.clone()),
                            ..Default::default()
                        });
                    }
                }
                DeltaDiscoveryResponse {
                    system_version_info: st.0.to_string(),
                    resources,
                    type_url: t.to_string(),
                    nonce: nonce(st.0, t),
                    ..Default::default()
                }
            };
            loop {
                tokio::select! {
                    req = input.next() => {
                        let Some(Ok(req)) = req else { return };
                        record(&acks, &req.type_url, &req.response_nonce, req.error_detail);
                        let s = sent.entry(req.type_url.clone()).or_default();
                        if !req.resource_names_subscribe.is_empty() {
                            let resp = delta(&state.borrow(), &req.type_url, s, true);
                            if tx.send(Ok(resp)).await.is_err() { return; }
                        }
                    }
                    r = state.changed() => {
                        if r.is_err() { return; }
                        let cur = state.borrow().clone();
                        for (t, s) in sent.iter_mut() {
                            let resp = delta(&cur, t, s, false);
                            if resp.resources.is_empty() { continue; }
                            if tx.send(Ok(resp)).await.is_err() { return; }
                        }
                    }
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Serves the ADS service over h2c on a loopback port.
pub async fn serve_cp(cp: Cp) -> Result<SocketAddr, Error> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    let svc = AggregatedDiscoveryServiceServer::new(cp).max_decoding_message_size(1 << 30);
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let svc = svc.clone();
            let service = hyper::service::service_fn(move |req| {
                let mut svc = svc.clone();
                async move { svc.call(req).await }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), service)
                    .await;
            });
        }
    });
    Ok(addr)
}
