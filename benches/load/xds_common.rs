//! What the xDS benchmarks share: keep-alive upstreams, the resources they push
//! (EDS clusters, assignments, an RDS route by `x-cluster`), courier's ADS
//! bootstrap, and reading its admin and RSS.

// Each benchmark binary includes this module and uses part of it.
#![allow(dead_code)]

use envoy_types::pb::envoy::config::cluster::v3::{Cluster, cluster};
use envoy_types::pb::envoy::config::core::v3::{
    Address, AggregatedConfigSource, ConfigSource, SocketAddress, address, config_source,
    socket_address,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use envoy_types::pb::envoy::config::route::v3::{
    Route, RouteAction, RouteConfiguration, RouteMatch, VirtualHost, route, route_action,
    route_match,
};
use envoy_types::pb::google::protobuf::Any;
use prost::{Message, Name};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::cp::Ack;

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// A keep-alive HTTP/1.1 upstream answering 200 `ok` to everything.
pub async fn upstream() -> Result<SocketAddr, Error> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n) = s.read(&mut chunk).await {
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let resp = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if s.write_all(resp).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    Ok(addr)
}

/// The status of `GET /` with `x-cluster: cluster` on a new connection.
pub async fn status(addr: SocketAddr, cluster: &str) -> Result<u16, Error> {
    let mut s = TcpStream::connect(addr).await?;
    let req = format!(
        "GET / HTTP/1.1\r\nhost: bench\r\nx-cluster: {cluster}\r\nconnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await??;
    let head = String::from_utf8_lossy(&out);
    Ok(head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0))
}

pub fn any<M: Message + Name>(m: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: m.encode_to_vec(),
    }
}

pub fn sock(addr: SocketAddr) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: addr.ip().to_string(),
            port_specifier: Some(socket_address::PortSpecifier::PortValue(u32::from(
                addr.port(),
            ))),
            ..Default::default()
        })),
    }
}

pub fn cla(name: &str, addrs: &[SocketAddr]) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: name.into(),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints: addrs
                .iter()
                .map(|a| LbEndpoint {
                    host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                        address: Some(sock(*a)),
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

pub fn eds_cluster(name: &str) -> Cluster {
    Cluster {
        name: name.into(),
        connect_timeout: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: 1,
            nanos: 0,
        }),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::Eds as i32,
        )),
        eds_cluster_config: Some(cluster::EdsClusterConfig {
            eds_config: Some(ConfigSource {
                config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(
                    AggregatedConfigSource {},
                )),
                resource_api_version: 2,
                ..Default::default()
            }),
            service_name: String::new(),
        }),
        ..Default::default()
    }
}

pub fn routes() -> RouteConfiguration {
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
                action: Some(route::Action::Route(RouteAction {
                    cluster_specifier: Some(route_action::ClusterSpecifier::ClusterHeader(
                        "x-cluster".into(),
                    )),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub fn bootstrap(cp: SocketAddr, delta: bool) -> String {
    let api = if delta { "DELTA_GRPC" } else { "GRPC" };
    format!(
        r#"
node: {{id: bench, cluster: bench}}
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
dynamic_resources:
  cds_config: {{ads: {{}}, resource_api_version: V3}}
  ads_config:
    api_type: {api}
    transport_api_version: V3
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
"#,
        port = cp.port()
    )
}

pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Waits for an ACK of `nonce` (bounded).
pub async fn acked(acks: &mut mpsc::UnboundedReceiver<Ack>, want: &str) -> Result<Instant, Error> {
    let wait = async {
        while let Some((_, n)) = acks.recv().await {
            if n == want {
                return Some(Instant::now());
            }
        }
        None
    };
    tokio::time::timeout(Duration::from_secs(120), wait)
        .await?
        .ok_or_else(|| format!("no ACK of {want}").into())
}

pub struct Courier(pub std::process::Child);

impl Drop for Courier {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The address of listener `name`, from courier's admin `/listeners`.
pub async fn listener(admin: SocketAddr, name: &str) -> Result<SocketAddr, Error> {
    let mut s = TcpStream::connect(admin).await?;
    s.write_all(b"GET /listeners HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n")
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    let prefix = format!("{name}::");
    Ok(out
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .ok_or("no such listener")?
        .trim()
        .parse()?)
}
