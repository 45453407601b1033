//! courier's EDS and RDS over ADS, end to end: the real binary, an in-repo
//! tonic control plane (SotW and Delta) reached through a static `envoy_grpc`
//! cluster, and echo upstreams. Endpoints arrive and change (traffic shifts),
//! a route configuration arrives and changes (an open connection keeps working),
//! and a route configuration courier does not serve is NACKed by name.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use envoy_types::pb::envoy::config::core::v3::{Address, SocketAddress, address, socket_address};
use envoy_types::pb::envoy::config::core::v3::{DataSource, data_source};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use envoy_types::pb::envoy::config::route::v3::{
    DirectResponseAction, RetryPolicy, Route, RouteAction, RouteConfiguration, RouteMatch,
    VirtualHost, route, route_action, route_match,
};
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse, Resource,
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
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use support::*;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tonic::codegen::Service;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::tokio_stream::{Stream, StreamExt};
use tonic::{Status, Streaming};

type Out<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The control plane's config: type URL -> (name -> resource), at a version.
type Resources = HashMap<String, HashMap<String, Any>>;

/// Pushes its current resources to every stream on each change; records the
/// requests it receives.
#[derive(Clone)]
struct Cp {
    state: watch::Receiver<(u64, Arc<Resources>)>,
    requests: mpsc::UnboundedSender<String>,
}

fn sotw_response(state: &(u64, Arc<Resources>), type_url: &str) -> DiscoveryResponse {
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

fn delta_response(state: &(u64, Arc<Resources>), type_url: &str) -> DeltaDiscoveryResponse {
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
        type_url: type_url.into(),
        nonce: format!("{}-{type_url}", state.0),
        ..Default::default()
    }
}

fn record(
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
                            let resp = delta_response(&state.borrow(), &req.type_url);
                            if tx.send(Ok(resp)).await.is_err() { return; }
                        }
                    }
                    r = state.changed() => {
                        if r.is_err() { return; }
                        let cur = state.borrow().clone();
                        for t in &subscribed {
                            if tx.send(Ok(delta_response(&cur, t))).await.is_err() { return; }
                        }
                    }
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

struct ControlPlane {
    addr: SocketAddr,
    state: watch::Sender<(u64, Arc<Resources>)>,
    requests: mpsc::UnboundedReceiver<String>,
    req_tx: mpsc::UnboundedSender<String>,
    tasks: Arc<tokio::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl ControlPlane {
    async fn start(initial: Resources) -> Self {
        let (state, _) = watch::channel((1, Arc::new(initial)));
        let (req_tx, requests) = mpsc::unbounded_channel();
        let mut cp = ControlPlane {
            addr: "127.0.0.1:0".parse().unwrap(),
            state,
            requests,
            req_tx,
            tasks: Arc::default(),
        };
        cp.listen().await;
        cp
    }

    /// Serves on `self.addr` (port 0 the first time, the same port after a restart).
    async fn listen(&mut self) {
        let l = TcpListener::bind(self.addr).await.unwrap();
        self.addr = l.local_addr().unwrap();
        let cp = AggregatedDiscoveryServiceServer::new(Cp {
            state: self.state.subscribe(),
            requests: self.req_tx.clone(),
        });
        let conns = Arc::clone(&self.tasks);
        let accept = tokio::spawn(async move {
            for _ in 0..100 {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                let cp = cp.clone();
                let service = service_fn(move |req: Request<Incoming>| {
                    let mut cp = cp.clone();
                    async move { cp.call(req).await }
                });
                let conn = tokio::spawn(async move {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(s), service)
                        .await;
                });
                conns.lock().await.push(conn);
            }
        });
        self.tasks.lock().await.push(accept);
    }

    /// Stops serving: the listener and every connection go away.
    async fn stop(&self) {
        for t in self.tasks.lock().await.drain(..) {
            t.abort();
        }
    }

    fn set(&self, type_url: String, name: &str, any: Any) {
        self.state.send_modify(|(v, r)| {
            *v += 1;
            let mut next = Resources::clone(r);
            next.entry(type_url).or_default().insert(name.into(), any);
            *r = Arc::new(next);
        });
    }

    /// Waits for a request line containing `what`.
    async fn saw(&mut self, what: &str) -> String {
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

fn any<M: Message + Name>(m: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: m.encode_to_vec(),
    }
}

fn cla(name: &str, addr: SocketAddr) -> ClusterLoadAssignment {
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

fn routes(action: route::Action) -> RouteConfiguration {
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

fn to_backend() -> route::Action {
    route::Action::Route(RouteAction {
        cluster_specifier: Some(route_action::ClusterSpecifier::Cluster("backend".into())),
        ..Default::default()
    })
}

fn direct(body: &str) -> route::Action {
    route::Action::DirectResponse(DirectResponseAction {
        status: 200,
        body: Some(DataSource {
            specifier: Some(data_source::Specifier::InlineString(body.into())),
            ..Default::default()
        }),
        ..Default::default()
    })
}

struct Proc {
    child: Child,
    admin: String,
    listener: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn courier_from_ads(cp: SocketAddr, api_type: &str) -> Proc {
    launch(&ads_bootstrap(cp, api_type)).await
}

fn ads_bootstrap(cp: SocketAddr, api_type: &str) -> String {
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

async fn launch(config: &str) -> Proc {
    launch_bin(
        env!("CARGO_BIN_EXE_courier"),
        &["--concurrency", "2", "--drain-time-s", "1"],
        config,
    )
    .await
}

async fn launch_bin(bin: &str, args: &[&str], config: &str) -> Proc {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("courier.yaml");
    std::fs::write(&config_path, config).unwrap();
    let admin_path = dir.path().join("admin");
    let child = Command::new(bin)
        .args(args)
        .arg("-c")
        .arg(&config_path)
        .arg("--admin-address-path")
        .arg(&admin_path)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut p = Proc {
        child,
        admin: String::new(),
        listener: "127.0.0.1:0".parse().unwrap(),
        _dir: dir,
    };
    for _ in 0..1000 {
        if let Ok(a) = std::fs::read_to_string(&admin_path)
            && !a.is_empty()
        {
            p.admin = a;
            break;
        }
        if let Ok(Some(status)) = p.child.try_wait() {
            panic!("courier exited with {status}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!p.admin.is_empty(), "courier did not start");
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
async fn until(addr: SocketAddr, ok: impl Fn(&Reply) -> bool) -> Reply {
    let mut last = None;
    for _ in 0..250 {
        // A warming listener (Envoy's, until its routes arrive) may refuse.
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let r = H1::connect(addr).await.get("/", &[]).await;
        if ok(&r) {
            return r;
        }
        last = Some(r);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("condition not reached; last reply {last:?}");
}

async fn eds_and_rds_over_ads(api_type: &str) {
    let a = echo_upstream("a").await;
    let b = echo_upstream("b").await;
    let cla_url = ClusterLoadAssignment::type_url();
    let rds_url = RouteConfiguration::type_url();
    let mut cp = ControlPlane::start(Resources::new()).await;
    let c = courier_from_ads(cp.addr, api_type).await;
    let first = cp.saw("ClusterLoadAssignment").await;
    assert!(first.contains("node=courier-1"), "{first}");
    // The control plane has nothing yet: not ready.
    let admin: SocketAddr = c.admin.parse().unwrap();
    let ready = H1::connect(admin).await.get("/ready", &[]).await;
    assert_eq!((ready.status, ready.body.as_str()), (503, "INITIALIZING\n"));

    // Routes and endpoints arrive over ADS: ready, and traffic reaches upstream a.
    cp.set(cla_url.clone(), "backend", any(&cla("backend", a)));
    cp.set(rds_url.clone(), "routes", any(&routes(to_backend())));
    until(c.listener, |r| r.header("x-upstream") == Some("a")).await;
    let mut live = None;
    for _ in 0..250 {
        let r = H1::connect(admin).await.get("/ready", &[]).await;
        if r.status == 200 {
            live = Some(r.body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(live.as_deref(), Some("LIVE\n"));
    let stats = get_text(&c.admin, "/stats").await;
    assert!(
        stats.contains("control_plane.connected_state: 1\n"),
        "{stats}"
    );

    // An endpoint change shifts traffic to b.
    let mut open = H1::connect(c.listener).await;
    assert_eq!(open.get("/", &[]).await.header("x-upstream"), Some("a"));
    cp.set(cla_url.clone(), "backend", any(&cla("backend", b)));
    until(c.listener, |r| r.header("x-upstream") == Some("b")).await;

    // A route change applies to new requests, also on a connection opened before it.
    cp.set(rds_url.clone(), "routes", any(&routes(direct("direct!"))));
    until(c.listener, |r| r.body == "direct!").await;
    let r = open.get("/", &[]).await;
    assert_eq!((r.status, r.body.as_str()), (200, "direct!"));

    // A route configuration courier does not serve (retries) is NACKed by name;
    // the one in force keeps serving.
    let mut retry = routes(to_backend());
    if let Some(route::Action::Route(ra)) = &mut retry.virtual_hosts[0].routes[0].action {
        ra.retry_policy = Some(RetryPolicy {
            retry_on: "5xx".into(),
            ..Default::default()
        });
    }
    cp.set(rds_url.clone(), "routes", any(&retry));
    let nack = cp.saw("error=RouteConfiguration 'routes'").await;
    assert!(nack.contains("RouteConfiguration 'routes'"), "{nack}");
    assert!(nack.contains("retries are not served yet"), "{nack}");
    let r = open.get("/", &[]).await;
    assert_eq!(r.body, "direct!");
    let dump: serde_json::Value =
        serde_json::from_str(&get_text(&c.admin, "/config_dump").await).unwrap();
    let configs = dump["configs"].as_array().unwrap();
    let routes_dump = configs
        .iter()
        .find(|c| c["@type"] == "type.googleapis.com/envoy.admin.v3.RoutesConfigDump")
        .unwrap();
    let dynamic = &routes_dump["dynamic_route_configs"][0];
    assert_eq!(dynamic["route_config"]["name"], "routes");
    assert!(
        dynamic["route_config"]["virtual_hosts"][0]["routes"][0]["direct_response"].is_object()
    );
    assert!(dynamic["last_updated"].as_str().unwrap().ends_with('Z'));
    let eds_dump = configs
        .iter()
        .find(|c| c["@type"] == "type.googleapis.com/envoy.admin.v3.EndpointsConfigDump")
        .unwrap();
    assert_eq!(
        eds_dump["dynamic_endpoint_configs"][0]["endpoint_config"]["cluster_name"],
        "backend"
    );
    let stats = get_text(&c.admin, "/stats").await;
    assert!(stats.contains("http.rds.update_rejected: 1\n"), "{stats}");
    assert!(
        stats.contains("cluster_manager.eds.update_rejected: 0\n"),
        "{stats}"
    );

    // The control plane goes away: the config in force keeps serving.
    cp.stop().await;
    let down = "control_plane.connected_state: 0\n";
    for _ in 0..250 {
        if get_text(&c.admin, "/stats").await.contains(down) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(get_text(&c.admin, "/stats").await.contains(down));
    let r = H1::connect(c.listener).await.get("/", &[]).await;
    assert_eq!((r.status, r.body.as_str()), (200, "direct!"));

    // It comes back on the same port: courier resubscribes, and a new update applies.
    while cp.requests.try_recv().is_ok() {}
    cp.listen().await;
    let again = cp.saw("ClusterLoadAssignment").await;
    assert!(again.contains("node=courier-1"), "{again}");
    cp.saw("RouteConfiguration").await;
    cp.set(
        rds_url.clone(),
        "routes",
        any(&routes(direct("after restart"))),
    );
    until(c.listener, |r| r.body == "after restart").await;
}

#[tokio::test]
async fn sotw_ads_delivers_endpoints_and_routes_and_updates_shift_traffic() {
    eds_and_rds_over_ads("GRPC").await;
}

#[tokio::test]
async fn delta_ads_delivers_endpoints_and_routes_and_updates_shift_traffic() {
    eds_and_rds_over_ads("DELTA_GRPC").await;
}

/// A CLA file in YAML for `path_config_source`.
fn cla_yaml(version: &str, addr: SocketAddr) -> String {
    format!(
        "version_info: \"{version}\"\nresources:\n- \"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\n  cluster_name: backend\n  endpoints:\n  - lb_endpoints:\n    - endpoint: {{ address: {{ socket_address: {{ address: {}, port_value: {} }} }} }}\n",
        addr.ip(),
        addr.port()
    )
}

#[tokio::test]
async fn eds_from_a_watched_file_shifts_traffic_when_the_file_is_replaced() {
    let a = echo_upstream("a").await;
    let b = echo_upstream("b").await;
    let files = tempfile::tempdir().unwrap();
    let eds = files.path().join("eds.yaml");
    std::fs::write(&eds, cla_yaml("1", a)).unwrap();
    let config = format!(
        r#"
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
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
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route: {{cluster: backend}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: backend
    connect_timeout: 1s
    type: EDS
    eds_cluster_config:
      eds_config: {{path_config_source: {{path: {eds}}}, resource_api_version: V3}}
"#,
        eds = eds.display()
    );
    let c = launch(&config).await;
    until(c.listener, |r| r.header("x-upstream") == Some("a")).await;
    // Atomic replace, as config pushers do.
    let tmp = files.path().join("eds.tmp");
    std::fs::write(&tmp, cla_yaml("2", b)).unwrap();
    std::fs::rename(&tmp, &eds).unwrap();
    until(c.listener, |r| r.header("x-upstream") == Some("b")).await;
    let stats = get_text(&c.admin, "/stats").await;
    assert!(
        stats.contains("cluster_manager.eds.update_success: 2\n"),
        "{stats}"
    );
}

#[test]
fn serve_still_refuses_lds_and_cds() {
    // EDS and RDS are served over ADS; listeners and clusters over xDS are not yet.
    let example = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/xds.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_courier"))
        .arg("-c")
        .arg(example)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("dynamic_resources.lds_config: LDS is not served yet"),
        "{err}"
    );
    assert!(
        err.contains("dynamic_resources.cds_config: CDS is not served yet"),
        "{err}"
    );
    assert!(!err.contains("ads_config"), "{err}");
}

/// Real Envoy, when installed (`COURIER_ENVOY`, else /work/venv/bin/envoy).
fn envoy() -> Option<String> {
    let path = std::env::var("COURIER_ENVOY").unwrap_or_else(|_| "/work/venv/bin/envoy".into());
    if std::path::Path::new(&path).exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("COURIER_REQUIRE_ENVOY").is_none(),
        "no envoy at {path}"
    );
    eprintln!("SKIPPED: no envoy binary at {path}");
    None
}

/// One scenario against one proxy; returns each EDS request's verdict in order
/// after the first response (`ack` / `nack`).
async fn eds_verdicts(bin: &str, args: &[&str]) -> Vec<&'static str> {
    let a = echo_upstream("a").await;
    let b = echo_upstream("b").await;
    let cla_url = ClusterLoadAssignment::type_url();
    let rds_url = RouteConfiguration::type_url();
    let mut cp = ControlPlane::start(Resources::new()).await;
    cp.set(cla_url.clone(), "backend", any(&cla("backend", a)));
    cp.set(rds_url.clone(), "routes", any(&routes(to_backend())));
    let p = launch_bin(bin, args, &ads_bootstrap(cp.addr, "GRPC")).await;
    until(p.listener, |r| r.header("x-upstream") == Some("a")).await;
    // An endpoint on port 70000: invalid for both; the old endpoints stay.
    let mut bad = cla("backend", b);
    if let Some(lb_endpoint::HostIdentifier::Endpoint(e)) =
        &mut bad.endpoints[0].lb_endpoints[0].host_identifier
        && let Some(address::Address::SocketAddress(sa)) = &mut e.address.as_mut().unwrap().address
    {
        sa.port_specifier = Some(socket_address::PortSpecifier::PortValue(70000));
    }
    cp.set(cla_url.clone(), "backend", any(&bad));
    let mut verdicts = Vec::new();
    for _ in 0..50 {
        let line = cp.saw("ClusterLoadAssignment").await;
        let v = if line.ends_with("error=-") {
            "ack"
        } else {
            "nack"
        };
        verdicts.push(v);
        if v == "nack" {
            break;
        }
    }
    let r = H1::connect(p.listener).await.get("/", &[]).await;
    assert_eq!(r.header("x-upstream"), Some("a"), "{bin}");
    cp.set(cla_url.clone(), "backend", any(&cla("backend", b)));
    until(p.listener, |r| r.header("x-upstream") == Some("b")).await;
    let line = cp.saw("ClusterLoadAssignment").await;
    verdicts.push(if line.ends_with("error=-") {
        "ack"
    } else {
        "nack"
    });
    // How many requests precede the first response varies (subscription, ACKs
    // of re-sent state): compare the sequence of verdicts, not their count.
    verdicts.dedup();
    verdicts
}

#[tokio::test]
async fn envoy_and_courier_agree_on_acks_nacks_and_traffic() {
    let Some(envoy) = envoy() else { return };
    let courier = eds_verdicts(
        env!("CARGO_BIN_EXE_courier"),
        &["--concurrency", "1", "--drain-time-s", "1"],
    )
    .await;
    let envoy = eds_verdicts(
        &envoy,
        &[
            "--concurrency",
            "1",
            "--drain-time-s",
            "1",
            "--use-dynamic-base-id",
        ],
    )
    .await;
    assert_eq!(courier, envoy);
    assert_eq!(courier, ["ack", "nack", "ack"]);
}

#[tokio::test]
async fn updates_under_traffic_fail_no_request() {
    let a = echo_upstream("a").await;
    let b = echo_upstream("b").await;
    let cla_url = ClusterLoadAssignment::type_url();
    let rds_url = RouteConfiguration::type_url();
    let mut initial = Resources::new();
    initial
        .entry(cla_url.clone())
        .or_default()
        .insert("backend".into(), any(&cla("backend", a)));
    initial
        .entry(rds_url.clone())
        .or_default()
        .insert("routes".into(), any(&routes(to_backend())));
    let cp = ControlPlane::start(initial).await;
    let c = courier_from_ads(cp.addr, "DELTA_GRPC").await;
    until(c.listener, |r| r.status == 200).await;

    // Two keep-alive clients send requests back to back while 200 updates
    // alternate endpoints (a, b) and routes (to the cluster, a direct response).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..2 {
        let (stop, addr) = (Arc::clone(&stop), c.listener);
        clients.push(tokio::spawn(async move {
            let mut h = H1::connect(addr).await;
            let (mut ok, mut bad) = (0u32, Vec::new());
            for _ in 0..100_000 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let r = h.get("/", &[]).await;
                if r.status == 200 {
                    ok += 1;
                } else {
                    bad.push(r.status);
                }
            }
            (ok, bad)
        }));
    }
    for i in 0..200u32 {
        if i % 2 == 0 {
            let to = if i % 4 == 0 { b } else { a };
            cp.set(cla_url.clone(), "backend", any(&cla("backend", to)));
        } else {
            let action = if i % 4 == 1 {
                direct("direct")
            } else {
                to_backend()
            };
            cp.set(rds_url.clone(), "routes", any(&routes(action)));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for client in clients {
        let (ok, bad) = client.await.unwrap();
        assert!(ok > 0);
        assert!(bad.is_empty(), "non-200 responses: {bad:?}");
    }
}

#[tokio::test]
async fn eds_over_rest_polling_through_a_cluster() {
    use http_body_util::{BodyExt, Full};
    let a = echo_upstream("a").await;
    let b = echo_upstream("b").await;
    // The REST control plane: answers POST /v3/discovery:endpoints with the
    // current target's CLA in JSON, and reports each request body.
    let (target_tx, target) = watch::channel(a);
    let (seen_tx, mut seen) = mpsc::unbounded_channel::<(String, serde_json::Value)>();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rest = l.local_addr().unwrap();
    tokio::spawn(async move {
        for _ in 0..100 {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let (target, seen_tx) = (target.clone(), seen_tx.clone());
            let service = service_fn(move |req: Request<Incoming>| {
                let (target, seen_tx) = (target.clone(), seen_tx.clone());
                async move {
                    let path = req.uri().path().to_string();
                    let body = req.into_body().collect().await.unwrap().to_bytes();
                    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    let _ = seen_tx.send((path, json));
                    let to = *target.borrow();
                    let answer = format!(
                        r#"{{"version_info":"{p}","nonce":"n{p}","type_url":"type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment","resources":[{{"@type":"type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment","cluster_name":"backend","endpoints":[{{"lb_endpoints":[{{"endpoint":{{"address":{{"socket_address":{{"address":"127.0.0.1","port_value":{p}}}}}}}}}]}}]}}]}}"#,
                        p = to.port()
                    );
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                        bytes::Bytes::from(answer),
                    )))
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), service),
            );
        }
    });
    let config = format!(
        r#"
node: {{id: rest-node, cluster: test}}
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
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
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route: {{cluster: backend}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: rest_cp
    connect_timeout: 1s
    load_assignment:
      cluster_name: rest_cp
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}
  - name: backend
    connect_timeout: 1s
    type: EDS
    eds_cluster_config:
      eds_config:
        resource_api_version: V3
        api_config_source:
          api_type: REST
          transport_api_version: V3
          cluster_names: [rest_cp]
          refresh_delay: 0.05s
"#,
        port = rest.port()
    );
    let c = launch(&config).await;
    until(c.listener, |r| r.header("x-upstream") == Some("a")).await;
    let (path, first) = seen.recv().await.unwrap();
    assert_eq!(path, "/v3/discovery:endpoints");
    assert_eq!(first["node"]["id"], "rest-node");
    assert_eq!(first["resource_names"][0], "backend");
    target_tx.send_replace(b);
    until(c.listener, |r| r.header("x-upstream") == Some("b")).await;
    // Later polls carry the version accepted (the ACK).
    let mut acked = false;
    let want = b.port().to_string();
    for _ in 0..100 {
        let (_, req) = seen.recv().await.unwrap();
        if req["version_info"] == want.as_str() {
            acked = true;
            break;
        }
    }
    assert!(acked);
}
