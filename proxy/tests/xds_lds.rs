//! courier's LDS over ADS, end to end (SotW and Delta): the real binary, the
//! in-repo tonic control plane and an echo upstream. courier boots from ADS
//! alone (the bootstrap has only admin and the xDS cluster): a listener with
//! RDS warms until its routes arrive (`/ready` 503 until then), then serves
//! through a CDS+EDS cluster; a listener added later serves; an updated
//! listener serves new connections with the new config while an open
//! keep-alive connection gets `connection: close` and is closed; an RDS-only
//! change leaves open connections open; a bad listener is NACKed by name and
//! path while its valid sibling in the same response applies and the bad
//! one's old version keeps serving; a removed listener stops accepting while
//! the others serve. A listener whose jwt_authn fetches its JWKS at start-up
//! warms until the fetch is done. Envoy and courier agree on an LDS scenario.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod jwt_support;
mod support;
mod xds_support;

use envoy_types::pb::envoy::config::cluster::v3::{Cluster, cluster};
use envoy_types::pb::envoy::config::core::v3::{
    Address, AggregatedConfigSource, ConfigSource, SocketAddress, address, config_source,
    socket_address,
};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
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
use std::sync::Arc;
use std::time::Duration;
use support::*;
use xds_support::*;

fn ads() -> ConfigSource {
    ConfigSource {
        config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(
            AggregatedConfigSource {},
        )),
        resource_api_version: 2,
        ..Default::default()
    }
}

fn to(cluster: &str) -> route::Action {
    route::Action::Route(RouteAction {
        cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster.into())),
        ..Default::default()
    })
}

fn eds_cluster(name: &str, service: &str) -> Cluster {
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
fn listener(name: &str, routes: http_connection_manager::RouteSpecifier) -> Listener {
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

fn rds_listener(name: &str, route_config: &str) -> Listener {
    listener(
        name,
        http_connection_manager::RouteSpecifier::Rds(Rds {
            config_source: Some(ads()),
            route_config_name: route_config.into(),
        }),
    )
}

fn inline_listener(name: &str, body: &str) -> Listener {
    let mut rc = routes(direct(body));
    rc.name = format!("{name}-inline");
    listener(
        name,
        http_connection_manager::RouteSpecifier::RouteConfig(rc),
    )
}

/// A listener whose inline route has a regex that does not compile.
fn bad_listener(name: &str) -> Listener {
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
fn lds_bootstrap(cp: SocketAddr, api_type: &str) -> String {
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
async fn start(config: &str) -> Proc {
    start_bin(
        env!("CARGO_BIN_EXE_courier"),
        &["--concurrency", "2", "--drain-time-s", "1"],
        config,
    )
    .await
}

/// A proxy process (courier or Envoy) and its admin address.
async fn start_bin(bin: &str, args: &[&str], config: &str) -> Proc {
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
    for _ in 0..500 {
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
async fn listed(admin: &str, name: &str) -> Option<SocketAddr> {
    let prefix = format!("{name}::");
    get_text(admin, "/listeners")
        .await
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_string))
        .map(|a| a.parse().unwrap())
}

/// Waits until listener `name` is listed by admin (bounded).
async fn port_of(admin: &str, name: &str) -> SocketAddr {
    for _ in 0..250 {
        if let Some(a) = listed(admin, name).await {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("listener {name} never listed");
}

async fn ready_status(admin: &str) -> u16 {
    H1::connect(admin.parse().unwrap())
        .await
        .get("/ready", &[])
        .await
        .status
}

async fn stat_of(admin: &str, name: &str) -> u64 {
    get_text(admin, "/stats")
        .await
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Waits until connecting to `addr` is refused (bounded).
async fn until_refused(addr: SocketAddr) {
    for _ in 0..250 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{addr} still accepts");
}

/// Waits until the server has closed `c` (bounded).
async fn until_closed(c: &mut H1) {
    for _ in 0..250 {
        if c.0.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("connection still open");
}

async fn lds_lifecycle(api_type: &str) {
    let a = echo_upstream("a").await;
    let (lds_url, rds_url, cds_url, cla_url) = (
        Listener::type_url(),
        RouteConfiguration::type_url(),
        Cluster::type_url(),
        ClusterLoadAssignment::type_url(),
    );
    let mut cp = ControlPlane::start(Resources::new()).await;
    cp.set(cds_url.clone(), "dyn", any(&eds_cluster("dyn", "svc")));
    cp.set(cla_url.clone(), "svc", any(&cla("svc", a)));
    cp.set(
        lds_url.clone(),
        "ingress",
        any(&rds_listener("ingress", "routes")),
    );
    let c = start(&lds_bootstrap(cp.addr, api_type)).await;

    // The listener warms until its route configuration arrives: not served,
    // `/ready` not LIVE, and RDS asked for its routes.
    cp.saw("RouteConfiguration").await;
    assert_eq!(ready_status(&c.admin).await, 503);
    assert_eq!(listed(&c.admin, "ingress").await, None);
    let dump: serde_json::Value =
        serde_json::from_str(&get_text(&c.admin, "/config_dump").await).unwrap();
    let listeners = dump["configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["@type"] == "type.googleapis.com/envoy.admin.v3.ListenersConfigDump")
        .unwrap()
        .clone();
    let warming = &listeners["dynamic_listeners"][0];
    assert_eq!(warming["name"], "ingress", "{listeners}");
    assert_eq!(
        warming["warming_state"]["listener"]["name"], "ingress",
        "{listeners}"
    );
    assert_eq!(
        stat_of(&c.admin, "listener_manager.total_listeners_warming").await,
        1
    );

    // Routes arrive: the listener goes into force, `/ready` turns LIVE and
    // traffic reaches the upstream through the CDS+EDS cluster.
    cp.set(rds_url.clone(), "routes", any(&routes(to("dyn"))));
    let ingress = port_of(&c.admin, "ingress").await;
    until(ingress, |r| r.header("x-upstream") == Some("a")).await;
    for _ in 0..100 {
        if ready_status(&c.admin).await == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ready_status(&c.admin).await, 200);
    assert_eq!(
        stat_of(&c.admin, "listener_manager.total_listeners_warming").await,
        0
    );
    assert_eq!(
        stat_of(&c.admin, "listener_manager.total_listeners_active").await,
        1
    );
    assert!(stat_of(&c.admin, "http.ingress.downstream_rq_total").await >= 1);

    // A listener added later serves.
    cp.set(
        lds_url.clone(),
        "second",
        any(&inline_listener("second", "second-v1")),
    );
    let second = port_of(&c.admin, "second").await;
    until(second, |r| r.body == "second-v1").await;
    assert!(stat_of(&c.admin, "listener_manager.listener_added").await >= 2);

    // An RDS-only change: the open connection on the LDS listener stays open
    // and follows the new routes.
    let mut on_ingress = H1::connect(ingress).await;
    assert_eq!(
        on_ingress.get("/", &[]).await.header("x-upstream"),
        Some("a")
    );
    cp.set(rds_url.clone(), "routes", any(&routes(direct("routes-v2"))));
    until(ingress, |r| r.body == "routes-v2").await;
    for _ in 0..3 {
        let r = on_ingress.get("/", &[]).await;
        assert_eq!(r.body, "routes-v2");
        assert_eq!(r.header("connection"), None, "{r:?}");
    }
    assert!(!on_ingress.0.is_closed());

    // A listener update: new connections get the new config; the keep-alive
    // connection opened before gets its next response with `connection:
    // close` and is closed.
    let mut on_second = H1::connect(second).await;
    assert_eq!(on_second.get("/", &[]).await.body, "second-v1");
    let mut h2_on_second = H2::connect(second).await;
    let h2_get = || {
        http::Request::get("http://example.com/")
            .body(http_body_util::Full::default())
            .unwrap()
    };
    assert_eq!(h2_on_second.send(h2_get()).await.body, "second-v1");
    let modified = stat_of(&c.admin, "listener_manager.listener_modified").await;
    cp.set(
        lds_url.clone(),
        "second",
        any(&inline_listener("second", "second-v2")),
    );
    until(second, |r| r.body == "second-v2").await;
    assert_eq!(listed(&c.admin, "second").await, Some(second));
    let r = on_second.get("/", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("connection"), Some("close"), "{r:?}");
    until_closed(&mut on_second).await;
    // HTTP/2 gets GOAWAY and is closed once its streams are done.
    for _ in 0..250 {
        if h2_on_second.0.is_closed() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(h2_on_second.0.is_closed());
    assert_eq!(
        stat_of(&c.admin, "listener_manager.listener_modified").await,
        modified + 1
    );

    // A bad listener and a valid sibling in one response: the sibling
    // applies, the bad one is NACKed by name and field path, and its old
    // version keeps serving.
    cp.state.send_modify(|(v, r)| {
        *v += 1;
        let mut next = Resources::clone(r);
        let l = next.entry(lds_url.clone()).or_default();
        l.insert("second".into(), any(&bad_listener("second")));
        l.insert("third".into(), any(&inline_listener("third", "third-v1")));
        *r = Arc::new(next);
    });
    let mut nack = String::new();
    for _ in 0..50 {
        nack = cp.saw("Listener node=").await;
        if !nack.ends_with("error=-") {
            break;
        }
    }
    assert!(nack.contains("'second'"), "{nack}");
    assert!(nack.contains("virtual_hosts[0].routes[0]"), "{nack}");
    assert!(!nack.contains("third"), "{nack}");
    let third = port_of(&c.admin, "third").await;
    until(third, |r| r.body == "third-v1").await;
    let r = H1::connect(second).await.get("/", &[]).await;
    assert_eq!(r.body, "second-v2");
    assert!(stat_of(&c.admin, "listener_manager.lds.update_rejected").await >= 1);

    // A removed listener stops accepting; the others serve.
    cp.remove(&lds_url, "third");
    until_refused(third).await;
    assert_eq!(listed(&c.admin, "third").await, None);
    assert_eq!(
        H1::connect(second).await.get("/", &[]).await.body,
        "second-v2"
    );
    assert_eq!(
        H1::connect(ingress).await.get("/", &[]).await.body,
        "routes-v2"
    );
    assert!(stat_of(&c.admin, "listener_manager.listener_removed").await >= 1);
}

#[tokio::test]
async fn lds_over_sotw_ads() {
    tokio::time::timeout(Duration::from_secs(60), lds_lifecycle("GRPC"))
        .await
        .expect("in time");
}

#[tokio::test]
async fn lds_over_delta_ads() {
    tokio::time::timeout(Duration::from_secs(60), lds_lifecycle("DELTA_GRPC"))
        .await
        .expect("in time");
}

/// The bootstrap of [`lds_bootstrap`] without CDS (listeners with inline routes).
fn lds_only_bootstrap(cp: SocketAddr, api_type: &str) -> String {
    lds_bootstrap(cp, api_type).replace("  cds_config: {ads: {}, resource_api_version: V3}\n", "")
}

#[tokio::test]
async fn listener_updates_under_traffic_fail_no_request() {
    use http_body_util::{BodyExt, Full};
    tokio::time::timeout(Duration::from_secs(60), async {
        let lds_url = Listener::type_url();
        let cp = ControlPlane::start(Resources::new()).await;
        cp.set(lds_url.clone(), "edge", any(&inline_listener("edge", "v0")));
        let c = start(&lds_only_bootstrap(cp.addr, "DELTA_GRPC")).await;
        let addr = port_of(&c.admin, "edge").await;
        until(addr, |r| r.body == "v0").await;

        // Keep-alive clients send back to back, reconnecting when courier
        // closes a drained connection, while the listener changes 30 times.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut clients = Vec::new();
        for _ in 0..2 {
            let stop = Arc::clone(&stop);
            clients.push(tokio::spawn(async move {
                let (mut ok, mut closes, mut bad) = (0u32, 0u32, Vec::new());
                let mut h = H1::connect(addr).await;
                for _ in 0..100_000 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    // A connection courier closed after `connection: close`.
                    if h.0.ready().await.is_err() {
                        h = H1::connect(addr).await;
                        continue;
                    }
                    let req = http::Request::get("/")
                        .header("host", "example.com")
                        .body(Full::default())
                        .unwrap();
                    match h.0.send_request(req).await {
                        Ok(resp) => {
                            let status = resp.status().as_u16();
                            closes += u32::from(resp.headers().get("connection").is_some());
                            let body = resp.into_body().collect().await;
                            if status == 200 && body.is_ok() {
                                ok += 1;
                            } else {
                                bad.push(format!("{status} {:?}", body.err()));
                            }
                        }
                        Err(e) => bad.push(e.to_string()),
                    }
                }
                (ok, closes, bad)
            }));
        }
        for i in 1..=30 {
            let body = format!("v{i}");
            cp.set(
                lds_url.clone(),
                "edge",
                any(&inline_listener("edge", &body)),
            );
            until(addr, |r| r.body == body).await;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut drained = 0;
        for client in clients {
            let (ok, closes, bad) = client.await.unwrap();
            assert!(ok > 0);
            assert!(bad.is_empty(), "failed requests: {bad:?}");
            drained += closes;
        }
        // Connections of replaced versions were drained, not left behind.
        assert!(drained > 0);
        // The socket stayed: same address throughout.
        assert_eq!(listed(&c.admin, "edge").await, Some(addr));
        assert_eq!(
            stat_of(&c.admin, "listener_manager.listener_modified").await,
            30
        );
    })
    .await
    .expect("in time");
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

/// Waits for the next LDS request and says whether it ACKs or NACKs (with the
/// NACK's detail).
async fn lds_verdict(cp: &mut ControlPlane) -> String {
    let line = cp.saw("Listener node=").await;
    if line.ends_with("error=-") {
        "ack".into()
    } else {
        line
    }
}

/// One LDS scenario against one proxy: what it answered and served at each step.
async fn lds_scenario(bin: &str, args: &[&str]) -> Vec<String> {
    let lds_url = Listener::type_url();
    let mut cp = ControlPlane::start(Resources::new()).await;
    cp.set(lds_url.clone(), "edge", any(&inline_listener("edge", "v1")));
    let p = start_bin(bin, args, &lds_only_bootstrap(cp.addr, "GRPC")).await;
    let edge = port_of(&p.admin, "edge").await;
    until(edge, |r| r.body == "v1").await;
    let mut seen = Vec::new();
    // A bad version of `edge` beside a new valid listener, in one response.
    cp.state.send_modify(|(v, r)| {
        *v += 1;
        let mut next = Resources::clone(r);
        let l = next.entry(lds_url.clone()).or_default();
        l.insert("edge".into(), any(&bad_listener("edge")));
        l.insert("other".into(), any(&inline_listener("other", "other-v1")));
        *r = Arc::new(next);
    });
    let mut verdict = lds_verdict(&mut cp).await;
    for _ in 0..20 {
        if verdict != "ack" {
            break;
        }
        verdict = lds_verdict(&mut cp).await;
    }
    // The detail's wording differs (Envoy: "Error adding/updating listener(s)
    // edge: ..."); both name the bad listener only.
    seen.push(if verdict.contains("edge") && !verdict.contains("other") {
        "nack edge".to_string()
    } else {
        verdict
    });
    let other = port_of(&p.admin, "other").await;
    seen.push(until(other, |r| r.status == 200).await.body);
    seen.push(H1::connect(edge).await.get("/", &[]).await.body);
    // A valid update of `edge`, then `other` removed.
    cp.set(lds_url.clone(), "edge", any(&inline_listener("edge", "v2")));
    seen.push(until(edge, |r| r.body == "v2").await.body);
    cp.remove(&lds_url, "other");
    until_refused(other).await;
    seen.push(format!(
        "other listed: {}",
        listed(&p.admin, "other").await.is_some()
    ));
    seen.push(H1::connect(edge).await.get("/", &[]).await.body);
    seen
}

#[tokio::test]
async fn envoy_and_courier_agree_on_lds() {
    let Some(envoy) = envoy() else { return };
    tokio::time::timeout(Duration::from_secs(90), async {
        let courier = lds_scenario(
            env!("CARGO_BIN_EXE_courier"),
            &["--concurrency", "1", "--drain-time-s", "1"],
        )
        .await;
        let envoy = lds_scenario(
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
        assert_eq!(
            courier,
            [
                "nack edge",
                "other-v1",
                "v1",
                "v2",
                "other listed: false",
                "v2"
            ]
        );
    })
    .await
    .expect("in time");
}

/// A listener (given as proto3 JSON) as an `Any`.
fn listener_from_json(json: serde_json::Value) -> envoy_types::pb::google::protobuf::Any {
    use prost::Message;
    let desc = courier_config::descriptors::message_for_type_url(&Listener::type_url()).unwrap();
    let msg = prost_reflect::DynamicMessage::deserialize(desc, json).unwrap();
    envoy_types::pb::google::protobuf::Any {
        type_url: Listener::type_url(),
        value: msg.encode_to_vec(),
    }
}

#[tokio::test]
async fn a_listener_warms_until_its_jwks_start_up_fetch_is_done() {
    use jwt_support::{ISS, Key, jwks, jwks_server};
    tokio::time::timeout(Duration::from_secs(60), async {
        let key = Key::rsa("k");
        let (jwks_addr, state) = jwks_server(jwks(&[&key])).await;
        state.set_open(false);
        let listener = listener_from_json(serde_json::json!({
            "name": "authed",
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}},
            "filter_chains": [{"filters": [{
                "name": "envoy.filters.network.http_connection_manager",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                    "stat_prefix": "authed",
                    "route_config": {"virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [
                        {"match": {"prefix": "/"}, "direct_response": {"status": 200, "body": {"inline_string": "ok"}}}
                    ]}]},
                    "http_filters": [
                        {"name": "envoy.filters.http.jwt_authn", "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
                            "providers": {"remote": {"issuer": ISS, "remote_jwks": {
                                "http_uri": {"uri": "http://jwks.test/keys", "cluster": "jwks", "timeout": "5s"},
                                "async_fetch": {}
                            }}},
                            "rules": [{"match": {"prefix": "/"}, "requires": {"provider_name": "remote"}}]
                        }},
                        {"name": "envoy.filters.http.router", "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                        }}
                    ]
                }
            }]}]
        }));
        let cp = ControlPlane::start(Resources::new()).await;
        cp.set(Listener::type_url(), "authed", listener);
        let bootstrap = format!(
            "{}  - name: jwks\n    connect_timeout: 1s\n    load_assignment:\n      cluster_name: jwks\n      endpoints:\n      - lb_endpoints:\n        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}\n",
            lds_only_bootstrap(cp.addr, "GRPC"),
            jwks_addr.port()
        );
        let c = start(&bootstrap).await;
        // The fetch starts when the listener arrives; the listener warms meanwhile.
        state.arrived.notified().await;
        assert_eq!(listed(&c.admin, "authed").await, None);
        assert_eq!(
            stat_of(&c.admin, "listener_manager.total_listeners_warming").await,
            1
        );
        // `/ready` waits for the listeners the initial resources brought.
        assert_eq!(ready_status(&c.admin).await, 503);
        state.set_open(true);
        let addr = port_of(&c.admin, "authed").await;
        for _ in 0..100 {
            if ready_status(&c.admin).await == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(ready_status(&c.admin).await, 200);
        let token = key.token("a");
        let r = H1::connect(addr)
            .await
            .get("/", &[("authorization", &format!("Bearer {token}"))])
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, "ok");
        // The request found the keys at hand.
        assert_eq!(state.fetches(), 1);
        assert_eq!(H1::connect(addr).await.get("/", &[]).await.status, 401);
    })
    .await
    .expect("in time");
}

/// A listener (inline route answering `body`) in a `DiscoveryResponse`'s YAML.
fn listener_yaml(name: &str, body: &str) -> String {
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

#[tokio::test]
async fn listeners_from_a_watched_file_are_added_updated_and_removed() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let files = tempfile::tempdir().unwrap();
        let lds = files.path().join("lds.yaml");
        let write = |version: &str, listeners: &[String]| {
            let tmp = files.path().join("lds.tmp");
            std::fs::write(
                &tmp,
                format!("version_info: \"{version}\"\nresources:\n{}", listeners.concat()),
            )
            .unwrap();
            // Atomic replace, as config pushers do.
            std::fs::rename(&tmp, &lds).unwrap();
        };
        write("1", &[listener_yaml("one", "one-v1")]);
        let config = format!(
            "admin:\n  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}\ndynamic_resources:\n  lds_config: {{path_config_source: {{path: {}}}, resource_api_version: V3}}\n",
            lds.display()
        );
        let c = start(&config).await;
        let one = port_of(&c.admin, "one").await;
        until(one, |r| r.body == "one-v1").await;

        write(
            "2",
            &[listener_yaml("one", "one-v2"), listener_yaml("two", "two-v1")],
        );
        let two = port_of(&c.admin, "two").await;
        until(two, |r| r.body == "two-v1").await;
        until(one, |r| r.body == "one-v2").await;
        assert_eq!(listed(&c.admin, "one").await, Some(one));

        // The file is the complete set: a listener left out is removed.
        write("3", &[listener_yaml("two", "two-v1")]);
        until_refused(one).await;
        assert_eq!(listed(&c.admin, "one").await, None);
        assert_eq!(H1::connect(two).await.get("/", &[]).await.body, "two-v1");
        assert_eq!(
            stat_of(&c.admin, "listener_manager.lds.update_success").await,
            3
        );
    })
    .await
    .expect("in time");
}
