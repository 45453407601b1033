//! LDS helpers for courier's end-to-end LDS tests: listener builders
//! (protos, JSON, a file source's YAML), LDS bootstraps, a proxy started with
//! no listener, and waits on admin's `/listeners`, `/ready` and `/stats`.

use super::*;
use crate::support::*;
use envoy_types::pb::envoy::config::cluster::v3::{Cluster, cluster};
use envoy_types::pb::envoy::config::core::v3::{
    Address, AggregatedConfigSource, ConfigSource, SocketAddress, address, config_source,
    socket_address,
};
use envoy_types::pb::envoy::config::listener::v3::{Filter, FilterChain, Listener, filter};
use envoy_types::pb::envoy::config::route::v3::{
    Route, RouteAction, RouteConfiguration, RouteMatch, VirtualHost, route, route_action,
    route_match,
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, HttpFilter, Rds, http_connection_manager, http_filter,
};
use envoy_types::pb::envoy::r#type::matcher::v3::RegexMatcher;
use prost::Name;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

pub fn ads() -> ConfigSource {
    ConfigSource {
        config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(
            AggregatedConfigSource {},
        )),
        resource_api_version: 2,
        ..Default::default()
    }
}

pub fn to(cluster: &str) -> route::Action {
    route::Action::Route(RouteAction {
        cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster.into())),
        ..Default::default()
    })
}

pub fn eds_cluster(name: &str, service: &str) -> Cluster {
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
            eds_config: Some(ads()),
            service_name: service.into(),
        }),
        ..Default::default()
    }
}

/// A listener on 127.0.0.1:0 with one connection manager (`stat_prefix` = name).
pub fn listener(name: &str, routes: http_connection_manager::RouteSpecifier) -> Listener {
    let hcm = HttpConnectionManager {
        stat_prefix: name.into(),
        route_specifier: Some(routes),
        http_filters: vec![HttpFilter {
            name: "envoy.filters.http.router".into(),
            config_type: Some(http_filter::ConfigType::TypedConfig(
                any(&Router::default()),
            )),
            ..Default::default()
        }],
        ..Default::default()
    };
    Listener {
        name: name.into(),
        address: Some(Address {
            address: Some(address::Address::SocketAddress(SocketAddress {
                address: "127.0.0.1".into(),
                port_specifier: Some(socket_address::PortSpecifier::PortValue(0)),
                ..Default::default()
            })),
        }),
        filter_chains: vec![FilterChain {
            filters: vec![Filter {
                name: "envoy.filters.network.http_connection_manager".into(),
                config_type: Some(filter::ConfigType::TypedConfig(any(&hcm))),
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub fn rds_listener(name: &str, route_config: &str) -> Listener {
    listener(
        name,
        http_connection_manager::RouteSpecifier::Rds(Rds {
            config_source: Some(ads()),
            route_config_name: route_config.into(),
        }),
    )
}

pub fn inline_listener(name: &str, body: &str) -> Listener {
    let mut rc = routes(direct(body));
    rc.name = format!("{name}-inline");
    listener(
        name,
        http_connection_manager::RouteSpecifier::RouteConfig(rc),
    )
}

/// A listener whose inline route has a regex that does not compile.
pub fn bad_listener(name: &str) -> Listener {
    let rc = RouteConfiguration {
        name: "bad".into(),
        virtual_hosts: vec![VirtualHost {
            name: "all".into(),
            domains: vec!["*".into()],
            routes: vec![Route {
                r#match: Some(RouteMatch {
                    path_specifier: Some(route_match::PathSpecifier::SafeRegex(RegexMatcher {
                        regex: "(".into(),
                        ..Default::default()
                    })),
                    ..Default::default()
                }),
                action: Some(direct("never")),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    listener(
        name,
        http_connection_manager::RouteSpecifier::RouteConfig(rc),
    )
}

/// Admin and the xDS cluster only: listeners, routes, clusters and endpoints
/// all come over ADS.
pub fn lds_bootstrap(cp: SocketAddr, api_type: &str) -> String {
    format!(
        r#"
node: {{id: courier-1, cluster: test}}
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
dynamic_resources:
  lds_config: {{ads: {{}}, resource_api_version: V3}}
  cds_config: {{ads: {{}}, resource_api_version: V3}}
  ads_config:
    api_type: {api_type}
    transport_api_version: V3
    set_node_on_first_message_only: true
    grpc_services:
    - envoy_grpc: {{cluster_name: xds}}
static_resources:
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

/// A courier process and its admin address (no listener at start).
pub async fn start(config: &str) -> Proc {
    start_bin(
        env!("CARGO_BIN_EXE_courier"),
        &["--concurrency", "2", "--drain-time-s", "1"],
        config,
    )
    .await
}

/// A proxy process (courier or Envoy) and its admin address.
pub async fn start_bin(bin: &str, args: &[&str], config: &str) -> Proc {
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
            return p;
        }
        if let Ok(Some(status)) = p.child.try_wait() {
            panic!("courier exited with {status}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("courier did not start");
}

/// The address admin's `/listeners` gives listener `name`, if listed.
pub async fn listed(admin: &str, name: &str) -> Option<SocketAddr> {
    let prefix = format!("{name}::");
    get_text(admin, "/listeners")
        .await
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_string))
        .map(|a| a.parse().unwrap())
}

/// Waits until listener `name` is listed by admin (bounded).
pub async fn port_of(admin: &str, name: &str) -> SocketAddr {
    for _ in 0..250 {
        if let Some(a) = listed(admin, name).await {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("listener {name} never listed");
}

pub async fn ready_status(admin: &str) -> u16 {
    H1::connect(admin.parse().unwrap())
        .await
        .get("/ready", &[])
        .await
        .status
}

pub async fn stat_of(admin: &str, name: &str) -> u64 {
    get_text(admin, "/stats")
        .await
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Waits until connecting to `addr` is refused (bounded).
pub async fn until_refused(addr: SocketAddr) {
    for _ in 0..250 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{addr} still accepts");
}

/// Waits until the server has closed `c` (bounded).
pub async fn until_closed(c: &mut H1) {
    for _ in 0..250 {
        if c.0.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("connection still open");
}

/// The bootstrap of [`lds_bootstrap`] without CDS (listeners with inline routes).
pub fn lds_only_bootstrap(cp: SocketAddr, api_type: &str) -> String {
    lds_bootstrap(cp, api_type).replace("  cds_config: {ads: {}, resource_api_version: V3}\n", "")
}

/// Real Envoy, when installed (`COURIER_ENVOY`, else /work/venv/bin/envoy).
pub fn envoy() -> Option<String> {
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

/// Waits for the next LDS request and says whether it ACKs or NACKs (with the
/// NACK's detail).
pub async fn lds_verdict(cp: &mut ControlPlane) -> String {
    let line = cp.saw("Listener node=").await;
    if line.ends_with("error=-") {
        "ack".into()
    } else {
        line
    }
}

/// A listener (given as proto3 JSON) as an `Any`.
pub fn listener_from_json(json: serde_json::Value) -> envoy_types::pb::google::protobuf::Any {
    use prost::Message;
    let desc = courier_config::descriptors::message_for_type_url(&Listener::type_url()).unwrap();
    let msg = prost_reflect::DynamicMessage::deserialize(desc, json).unwrap();
    envoy_types::pb::google::protobuf::Any {
        type_url: Listener::type_url(),
        value: msg.encode_to_vec(),
    }
}

/// A listener (inline route answering `body`) in a `DiscoveryResponse`'s YAML.
pub fn listener_yaml(name: &str, body: &str) -> String {
    format!(
        r#"- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: {name}
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
  filter_chains:
  - filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: {name}
        route_config:
          virtual_hosts:
          - name: all
            domains: ["*"]
            routes:
            - match: {{prefix: "/"}}
              direct_response: {{status: 200, body: {{inline_string: {body}}}}}
        http_filters:
        - name: envoy.filters.http.router
          typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
"#
    )
}

/// A listener with a chain for TLS clients naming `tls.test` (answering
/// `sni_body`) and a default chain answering `plain_body`; both with an
/// allow-all RBAC filter (`http.chains.rbac.allowed`).
pub fn two_chain_listener(
    sni_body: &str,
    plain_body: &str,
) -> envoy_types::pb::google::protobuf::Any {
    let chain = |body: &str| {
        serde_json::json!({"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": "chains",
                "route_config": {"virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [
                    {"match": {"prefix": "/"}, "direct_response": {"status": 200, "body": {"inline_string": body}}}
                ]}]},
                "http_filters": [
                    {"name": "envoy.filters.http.rbac", "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC",
                        "rules": {"action": "ALLOW", "policies": {"all": {
                            "permissions": [{"any": true}], "principals": [{"any": true}]
                        }}}
                    }},
                    {"name": "envoy.filters.http.router", "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                    }}
                ]
            }
        }]})
    };
    let mut sni = chain(sni_body);
    sni["filter_chain_match"] = serde_json::json!({"server_names": ["tls.test"]});
    listener_from_json(serde_json::json!({
        "name": "chains",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}},
        "filter_chains": [sni],
        "default_filter_chain": chain(plain_body),
    }))
}
