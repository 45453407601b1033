//! The xDS control plane for courier's end-to-end xDS tests: an in-repo tonic
//! ADS server (SotW and Delta) that pushes its current resources to every
//! stream on each change and records the requests it receives; resource
//! builders; a courier (or Envoy) process from a bootstrap.

#![allow(dead_code)]

pub mod lds;
pub mod rtds;

use crate::support::*;
use envoy_types::pb::envoy::config::core::v3::{Address, SocketAddress, address, socket_address};
use envoy_types::pb::envoy::config::core::v3::{DataSource, data_source};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use envoy_types::pb::envoy::config::route::v3::{
    DirectResponseAction, Route, RouteAction, RouteConfiguration, RouteMatch, VirtualHost, route,
    route_action, route_match,
};
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse, Resource,
};
use envoy_types::pb::envoy::service::runtime::v3::runtime_discovery_service_server::{
    RuntimeDiscoveryService, RuntimeDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::secret::v3::secret_discovery_service_server::{
    SecretDiscoveryService, SecretDiscoveryServiceServer,
};
use envoy_types::pb::google::protobuf::Any;
use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::{Message, Name};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tonic::codegen::Service;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::tokio_stream::{Stream, StreamExt};
use tonic::{Status, Streaming};

pub type Out<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The control plane's config: type URL -> (name -> resource), at a version.
pub type Resources = HashMap<String, HashMap<String, Any>>;

/// Pushes its current resources to every stream on each change; records the
/// requests it receives.
#[derive(Clone)]
pub struct Cp {
    pub state: watch::Receiver<(u64, Arc<Resources>)>,
    pub requests: mpsc::UnboundedSender<String>,
}

pub fn sotw_response(state: &(u64, Arc<Resources>), type_url: &str) -> DiscoveryResponse {
    let resources = state
        .1
        .get(type_url)
        .map(|m| m.values().cloned().collect())
        .unwrap_or_default();
    DiscoveryResponse {
        version_info: state.0.to_string(),
        resources,
        type_url: type_url.into(),
        nonce: format!("{}-{type_url}", state.0),
        ..Default::default()
    }
}

pub fn delta_response(state: &(u64, Arc<Resources>), type_url: &str) -> DeltaDiscoveryResponse {
    delta_response_removing(state, type_url, &[])
}

/// A Delta response with every current resource and `removed` names.
pub fn delta_response_removing(
    state: &(u64, Arc<Resources>),
    type_url: &str,
    removed: &[String],
) -> DeltaDiscoveryResponse {
    let resources = state
        .1
        .get(type_url)
        .map(|m| {
            m.iter()
                .map(|(name, any)| Resource {
                    name: name.clone(),
                    version: state.0.to_string(),
                    resource: Some(any.clone()),
                    ..Default::default()
                })
                .collect()
        })
        .unwrap_or_default();
    DeltaDiscoveryResponse {
        system_version_info: state.0.to_string(),
        resources,
        removed_resources: removed.to_vec(),
        type_url: type_url.into(),
        nonce: format!("{}-{type_url}", state.0),
        ..Default::default()
    }
}

pub fn record(
    r: &mpsc::UnboundedSender<String>,
    node: Option<&str>,
    type_url: &str,
    error: Option<&str>,
) {
    let _ = r.send(format!(
        "{} node={} error={}",
        type_url.rsplit('.').next().unwrap_or(""),
        node.unwrap_or("-"),
        error.unwrap_or("-")
    ));
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
        let (mut state, requests) = (self.state.clone(), self.requests.clone());
        tokio::spawn(async move {
            let mut subscribed: Vec<String> = Vec::new();
            loop {
                tokio::select! {
                    req = input.next() => {
                        let Some(Ok(req)) = req else { return };
                        record(&requests, req.node.as_ref().map(|n| n.id.as_str()), &req.type_url,
                            req.error_detail.as_ref().map(|e| e.message.as_str()));
                        if !subscribed.contains(&req.type_url) {
                            subscribed.push(req.type_url.clone());
                        }
                        // Answer new subscriptions, not ACKs/NACKs of what was sent.
                        if req.response_nonce.is_empty() {
                            let resp = sotw_response(&state.borrow(), &req.type_url);
                            if tx.send(Ok(resp)).await.is_err() { return; }
                        }
                    }
                    r = state.changed() => {
                        if r.is_err() { return; }
                        let cur = state.borrow().clone();
                        for t in &subscribed {
                            if tx.send(Ok(sotw_response(&cur, t))).await.is_err() { return; }
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
        let (mut state, requests) = (self.state.clone(), self.requests.clone());
        tokio::spawn(async move {
            let mut sent: HashMap<String, Vec<String>> = HashMap::new();
            let mut subscribed: Vec<String> = Vec::new();
            loop {
                tokio::select! {
                    req = input.next() => {
                        let Some(Ok(req)) = req else { return };
                        record(&requests, req.node.as_ref().map(|n| n.id.as_str()), &req.type_url,
                            req.error_detail.as_ref().map(|e| e.message.as_str()));
                        if !subscribed.contains(&req.type_url) {
                            subscribed.push(req.type_url.clone());
                        }
                        if !req.resource_names_subscribe.is_empty() {
                            let cur = state.borrow().clone();
                            let names = cur.1.get(&req.type_url).map(|m| m.keys().cloned().collect()).unwrap_or_default();
                            sent.insert(req.type_url.clone(), names);
                            let resp = delta_response(&cur, &req.type_url);
                            if tx.send(Ok(resp)).await.is_err() { return; }
                        }
                    }
                    r = state.changed() => {
                        if r.is_err() { return; }
                        let cur = state.borrow().clone();
                        for t in &subscribed {
                            // Names sent before and gone now go out as removed.
                            let now: Vec<String> = cur.1.get(t).map(|m| m.keys().cloned().collect()).unwrap_or_default();
                            let before = sent.insert(t.clone(), now.clone()).unwrap_or_default();
                            let removed: Vec<String> = before.into_iter().filter(|n| !now.contains(n)).collect();
                            if tx.send(Ok(delta_response_removing(&cur, t, &removed))).await.is_err() { return; }
                        }
                    }
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// RTDS on its own stream (`api_config_source` naming the `Runtime` service):
/// the same answers as the ADS streams give, for the type the requests name.
#[tonic::async_trait]
impl RuntimeDiscoveryService for Cp {
    type StreamRuntimeStream = Out<DiscoveryResponse>;
    type DeltaRuntimeStream = Out<DeltaDiscoveryResponse>;

    async fn stream_runtime(
        &self,
        request: tonic::Request<Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::StreamRuntimeStream>, Status> {
        self.stream_aggregated_resources(request).await
    }

    async fn delta_runtime(
        &self,
        request: tonic::Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::DeltaRuntimeStream>, Status> {
        self.delta_aggregated_resources(request).await
    }

    async fn fetch_runtime(
        &self,
        _request: tonic::Request<DiscoveryRequest>,
    ) -> Result<tonic::Response<DiscoveryResponse>, Status> {
        Err(Status::unimplemented("REST-style fetch"))
    }
}

/// SDS on its own streams, as Envoy's `SdsApi` opens one per secret: each
/// response carries the resources the stream names (Envoy refuses any other
/// count than one), sent again on every change; the version is the control
/// plane's.
#[tonic::async_trait]
impl SecretDiscoveryService for Cp {
    type StreamSecretsStream = Out<DiscoveryResponse>;
    type DeltaSecretsStream = Out<DeltaDiscoveryResponse>;

    async fn stream_secrets(
        &self,
        request: tonic::Request<Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::StreamSecretsStream>, Status> {
        let mut input = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let (mut state, requests) = (self.state.clone(), self.requests.clone());
        tokio::spawn(async move {
            let mut names: Vec<String> = Vec::new();
            let named = |cur: &(u64, Arc<Resources>), t: &str, names: &[String]| {
                let mut r = sotw_response(cur, t);
                r.resources = names
                    .iter()
                    .filter_map(|n| cur.1.get(t).and_then(|m| m.get(n)).cloned())
                    .collect();
                r
            };
            let t =
                envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret::type_url();
            loop {
                tokio::select! {
                    req = input.next() => {
                        let Some(Ok(req)) = req else { return };
                        record(&requests, req.node.as_ref().map(|n| n.id.as_str()),
                            &format!("{}[{}]", req.type_url, req.resource_names.join(",")),
                            req.error_detail.as_ref().map(|e| e.message.as_str()));
                        if req.response_nonce.is_empty() {
                            names = req.resource_names.clone();
                            let cur = state.borrow().clone();
                            let resp = named(&cur, &t, &names);
                            if !resp.resources.is_empty() && tx.send(Ok(resp)).await.is_err() { return; }
                        }
                    }
                    r = state.changed() => {
                        if r.is_err() { return; }
                        let cur = state.borrow().clone();
                        let resp = named(&cur, &t, &names);
                        if !resp.resources.is_empty() && tx.send(Ok(resp)).await.is_err() { return; }
                    }
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn delta_secrets(
        &self,
        request: tonic::Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::DeltaSecretsStream>, Status> {
        self.delta_aggregated_resources(request).await
    }

    async fn fetch_secrets(
        &self,
        _request: tonic::Request<DiscoveryRequest>,
    ) -> Result<tonic::Response<DiscoveryResponse>, Status> {
        Err(Status::unimplemented("REST-style fetch"))
    }
}

pub struct ControlPlane {
    pub addr: SocketAddr,
    pub state: watch::Sender<(u64, Arc<Resources>)>,
    pub requests: mpsc::UnboundedReceiver<String>,
    pub req_tx: mpsc::UnboundedSender<String>,
    pub tasks: Arc<tokio::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    /// Serve over TLS (HTTP/2 by ALPN) with this acceptor.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

impl ControlPlane {
    pub async fn start(initial: Resources) -> Self {
        let (state, _) = watch::channel((1, Arc::new(initial)));
        let (req_tx, requests) = mpsc::unbounded_channel();
        let mut cp = ControlPlane {
            addr: "127.0.0.1:0".parse().unwrap(),
            state,
            requests,
            req_tx,
            tasks: Arc::default(),
            tls: None,
        };
        cp.listen().await;
        cp
    }

    /// Like [`Self::start`], serving over TLS with `cert` (HTTP/2 by ALPN).
    pub async fn start_tls(initial: Resources, cert: &courier_tests::Pem) -> Self {
        use rustls::pki_types::pem::PemObject;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![
                    rustls::pki_types::CertificateDer::from_pem_slice(cert.cert.as_bytes())
                        .unwrap(),
                ],
                rustls::pki_types::PrivateKeyDer::from_pem_slice(cert.key.as_bytes()).unwrap(),
            )
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let (state, _) = watch::channel((1, Arc::new(initial)));
        let (req_tx, requests) = mpsc::unbounded_channel();
        let mut cp = ControlPlane {
            addr: "127.0.0.1:0".parse().unwrap(),
            state,
            requests,
            req_tx,
            tasks: Arc::default(),
            tls: Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
        };
        cp.listen().await;
        cp
    }

    /// Serves on `self.addr` (port 0 the first time, the same port after a restart).
    pub async fn listen(&mut self) {
        let l = TcpListener::bind(self.addr).await.unwrap();
        self.addr = l.local_addr().unwrap();
        let inner = Cp {
            state: self.state.subscribe(),
            requests: self.req_tx.clone(),
        };
        let rtds = RuntimeDiscoveryServiceServer::new(inner.clone());
        let sds = SecretDiscoveryServiceServer::new(inner.clone());
        let cp = AggregatedDiscoveryServiceServer::new(inner);
        let conns = Arc::clone(&self.tasks);
        let tls = self.tls.clone();
        let accept = tokio::spawn(async move {
            for _ in 0..100 {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                let (cp, rtds, sds) = (cp.clone(), rtds.clone(), sds.clone());
                let service = service_fn(move |req: Request<Incoming>| {
                    let (mut cp, mut rtds, mut sds) = (cp.clone(), rtds.clone(), sds.clone());
                    async move {
                        if req
                            .uri()
                            .path()
                            .starts_with("/envoy.service.runtime.v3.RuntimeDiscoveryService/")
                        {
                            rtds.call(req).await
                        } else if req
                            .uri()
                            .path()
                            .starts_with("/envoy.service.secret.v3.SecretDiscoveryService/")
                        {
                            sds.call(req).await
                        } else {
                            cp.call(req).await
                        }
                    }
                });
                let tls = tls.clone();
                let conn = tokio::spawn(async move {
                    let h2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                    match tls {
                        Some(acceptor) => {
                            // A refused handshake ends this connection only.
                            if let Ok(s) = acceptor.accept(s).await {
                                let _ = h2.serve_connection(TokioIo::new(s), service).await;
                            }
                        }
                        None => {
                            let _ = h2.serve_connection(TokioIo::new(s), service).await;
                        }
                    }
                });
                conns.lock().await.push(conn);
            }
        });
        self.tasks.lock().await.push(accept);
    }

    /// Stops serving: the listener and every connection go away.
    pub async fn stop(&self) {
        for t in self.tasks.lock().await.drain(..) {
            t.abort();
        }
    }

    pub fn set(&self, type_url: String, name: &str, any: Any) {
        self.state.send_modify(|(v, r)| {
            *v += 1;
            let mut next = Resources::clone(r);
            next.entry(type_url).or_default().insert(name.into(), any);
            *r = Arc::new(next);
        });
    }

    /// Takes resource `name` of `type_url` away.
    pub fn remove(&self, type_url: &str, name: &str) {
        self.state.send_modify(|(v, r)| {
            *v += 1;
            let mut next = Resources::clone(r);
            if let Some(m) = next.get_mut(type_url) {
                m.remove(name);
            }
            *r = Arc::new(next);
        });
    }

    /// Waits for a request line containing `what`.
    pub async fn saw(&mut self, what: &str) -> String {
        for _ in 0..200 {
            let line = tokio::time::timeout(Duration::from_secs(10), self.requests.recv())
                .await
                .expect("request in time")
                .expect("control plane running");
            if line.contains(what) {
                return line;
            }
        }
        panic!("no request with {what}");
    }
}

pub fn any<M: Message + Name>(m: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: m.encode_to_vec(),
    }
}

pub fn cla(name: &str, addr: SocketAddr) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: name.into(),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints: vec![LbEndpoint {
                host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                    address: Some(Address {
                        address: Some(address::Address::SocketAddress(SocketAddress {
                            address: addr.ip().to_string(),
                            port_specifier: Some(socket_address::PortSpecifier::PortValue(
                                u32::from(addr.port()),
                            )),
                            ..Default::default()
                        })),
                    }),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub fn routes(action: route::Action) -> RouteConfiguration {
    RouteConfiguration {
        name: "routes".into(),
        virtual_hosts: vec![VirtualHost {
            name: "all".into(),
            domains: vec!["*".into()],
            routes: vec![Route {
                r#match: Some(RouteMatch {
                    path_specifier: Some(route_match::PathSpecifier::Prefix("/".into())),
                    ..Default::default()
                }),
                action: Some(action),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub fn to_backend() -> route::Action {
    route::Action::Route(RouteAction {
        cluster_specifier: Some(route_action::ClusterSpecifier::Cluster("backend".into())),
        ..Default::default()
    })
}

pub fn direct(body: &str) -> route::Action {
    route::Action::DirectResponse(DirectResponseAction {
        status: 200,
        body: Some(DataSource {
            specifier: Some(data_source::Specifier::InlineString(body.into())),
            ..Default::default()
        }),
        ..Default::default()
    })
}

pub struct Proc {
    pub child: Child,
    pub admin: String,
    pub listener: SocketAddr,
    pub _dir: tempfile::TempDir,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn courier_from_ads(cp: SocketAddr, api_type: &str) -> Proc {
    launch(&ads_bootstrap(cp, api_type)).await
}

pub fn ads_bootstrap(cp: SocketAddr, api_type: &str) -> String {
    format!(
        r#"
node: {{id: courier-1, cluster: test}}
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
dynamic_resources:
  ads_config:
    api_type: {api_type}
    transport_api_version: V3
    set_node_on_first_message_only: true
    grpc_services:
    - envoy_grpc: {{cluster_name: xds}}
static_resources:
  listeners:
  - name: ingress
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          rds:
            route_config_name: routes
            config_source: {{ads: {{}}, resource_api_version: V3}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: xds
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: xds
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}
  - name: backend
    connect_timeout: 1s
    type: EDS
    eds_cluster_config:
      eds_config: {{ads: {{}}, resource_api_version: V3}}
"#,
        port = cp.port()
    )
}

pub async fn launch(config: &str) -> Proc {
    launch_bin(
        env!("CARGO_BIN_EXE_courier"),
        &["--concurrency", "2", "--drain-time-s", "1"],
        config,
    )
    .await
}

pub async fn launch_bin(bin: &str, args: &[&str], config: &str) -> Proc {
    let mut p = lds::start_bin(bin, args, config).await;
    let listeners = get_text(&p.admin, "/listeners").await;
    p.listener = listeners
        .lines()
        .find_map(|l| l.strip_prefix("ingress::"))
        .unwrap()
        .parse()
        .unwrap();
    p
}

/// GETs `/` on fresh connections until `ok` holds (bounded).
pub async fn until(addr: SocketAddr, ok: impl Fn(&Reply) -> bool) -> Reply {
    until_at(addr, "/", ok).await
}

/// GETs `path` on fresh connections until `ok` holds (bounded).
pub async fn until_at(addr: SocketAddr, path: &str, ok: impl Fn(&Reply) -> bool) -> Reply {
    let mut last = None;
    for _ in 0..250 {
        // A warming listener (Envoy's, until its routes arrive) may refuse.
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let r = H1::connect(addr).await.get(path, &[]).await;
        if ok(&r) {
            return r;
        }
        last = Some(r);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("condition not reached on {path}; last reply {last:?}");
}
