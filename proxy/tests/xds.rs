//! courier's EDS and RDS over ADS, end to end: the real binary, an in-repo
//! tonic control plane (SotW and Delta) reached through a static `envoy_grpc`
//! cluster, and echo upstreams. Endpoints arrive and change (traffic shifts),
//! a route configuration arrives and changes (an open connection keeps working),
//! a route configuration courier does not serve is NACKed by name, the control
//! plane going away and coming back, updates under traffic, and the same
//! ACK/NACK sequence as real Envoy.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod xds_support;

use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::config::core::v3::{address, socket_address};
use envoy_types::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, lb_endpoint};
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use prost::Name;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use support::*;
use xds_support::*;

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

    // A route configuration courier does not serve (a header value with a
    // command the router does not evaluate) is NACKed by name; the one in
    // force keeps serving.
    let mut unserved = routes(to_backend());
    unserved.virtual_hosts[0].routes[0].request_headers_to_add = vec![HeaderValueOption {
        header: Some(HeaderValue {
            key: "x-start".into(),
            value: "%START_TIME%".into(),
            ..Default::default()
        }),
        ..Default::default()
    }];
    cp.set(rds_url.clone(), "routes", any(&unserved));
    let nack = cp.saw("error=RouteConfiguration 'routes'").await;
    assert!(nack.contains("RouteConfiguration 'routes'"), "{nack}");
    assert!(nack.contains("is not served yet"), "{nack}");
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

/// Forwards every connection to the Unix socket `path` to `to` (TCP): puts a
/// TCP server behind a pipe address.
async fn pipe_to_tcp(path: &std::path::Path, to: SocketAddr) {
    let l = tokio::net::UnixListener::bind(path).unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut unix, _)) = l.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let Ok(mut tcp) = tokio::net::TcpStream::connect(to).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut unix, &mut tcp).await;
            });
        }
    });
}

/// ADS through a cluster whose endpoint is a pipe (Istio's `xds-grpc` on
/// `/tmp/XDS`), and an EDS endpoint that is a pipe.
#[tokio::test]
async fn ads_over_a_pipe_cluster_delivers_pipe_endpoints() {
    use envoy_types::pb::envoy::config::core::v3::Pipe;
    let dir = tempfile::tempdir().unwrap();
    let a = echo_upstream("a").await;
    let mut cp = ControlPlane::start(Resources::new()).await;
    let xds_sock = dir.path().join("xds.sock");
    pipe_to_tcp(&xds_sock, cp.addr).await;
    let up_sock = dir.path().join("a.sock");
    pipe_to_tcp(&up_sock, a).await;
    let tcp_endpoint = format!(
        "endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}",
        cp.addr.port()
    );
    let bootstrap = ads_bootstrap(cp.addr, "GRPC");
    assert!(bootstrap.contains(&tcp_endpoint));
    let bootstrap = bootstrap.replace(
        &tcp_endpoint,
        &format!(
            "endpoint: {{address: {{pipe: {{path: \"{}\"}}}}}}",
            xds_sock.display()
        ),
    );
    let c = launch(&bootstrap).await;
    let first = cp.saw("ClusterLoadAssignment").await;
    assert!(first.contains("node=courier-1"), "{first}");
    let mut pipe_cla = cla("backend", a);
    pipe_cla.endpoints[0].lb_endpoints[0].host_identifier =
        Some(lb_endpoint::HostIdentifier::Endpoint(
            envoy_types::pb::envoy::config::endpoint::v3::Endpoint {
                address: Some(envoy_types::pb::envoy::config::core::v3::Address {
                    address: Some(address::Address::Pipe(Pipe {
                        path: up_sock.display().to_string(),
                        mode: 0,
                    })),
                }),
                ..Default::default()
            },
        ));
    cp.set(ClusterLoadAssignment::type_url(), "backend", any(&pipe_cla));
    cp.set(
        RouteConfiguration::type_url(),
        "routes",
        any(&routes(to_backend())),
    );
    until(c.listener, |r| r.header("x-upstream") == Some("a")).await;
    let clusters = get_text(&c.admin, "/clusters").await;
    assert!(
        clusters.contains(&format!("backend::{}::cx_total::", up_sock.display())),
        "{clusters}"
    );
}

#[tokio::test]
async fn sotw_ads_delivers_endpoints_and_routes_and_updates_shift_traffic() {
    eds_and_rds_over_ads("GRPC").await;
}

#[tokio::test]
async fn delta_ads_delivers_endpoints_and_routes_and_updates_shift_traffic() {
    eds_and_rds_over_ads("DELTA_GRPC").await;
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
async fn ads_reaches_a_tls_control_plane_through_its_cluster() {
    // The xds cluster has an UpstreamTlsContext: courier's ADS stream runs over
    // TLS, validating the control plane's certificate against the CA and SNI.
    let ca = courier_tests::TestCa::new("xds test CA");
    let cert = ca.leaf(&["xds.test"]);
    let a = echo_upstream("a").await;
    let mut cp = ControlPlane::start_tls(Resources::new(), &cert).await;
    let tls = format!(
        "    transport_socket:\n      name: envoy.transport_sockets.tls\n      typed_config:\n        \
         \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext\n        \
         sni: xds.test\n        common_tls_context:\n          validation_context:\n            \
         trusted_ca: {{inline_string: {:?}}}\n",
        ca.pem.cert
    );
    let config = ads_bootstrap(cp.addr, "GRPC").replacen(
        "  - name: xds\n    connect_timeout: 1s\n",
        &format!("  - name: xds\n    connect_timeout: 1s\n{tls}"),
        1,
    );
    assert!(config.contains("UpstreamTlsContext"));
    let c = launch(&config).await;
    let first = cp.saw("ClusterLoadAssignment").await;
    assert!(first.contains("node=courier-1"), "{first}");
    cp.set(
        ClusterLoadAssignment::type_url(),
        "backend",
        any(&cla("backend", a)),
    );
    cp.set(
        RouteConfiguration::type_url(),
        "routes",
        any(&routes(to_backend())),
    );
    until(c.listener, |r| r.header("x-upstream") == Some("a")).await;

    // A control plane whose certificate the CA did not sign is never reached.
    let other = courier_tests::TestCa::new("another CA").leaf(&["xds.test"]);
    let mut rogue = ControlPlane::start_tls(Resources::new(), &other).await;
    let config = ads_bootstrap(rogue.addr, "GRPC").replacen(
        "  - name: xds\n    connect_timeout: 1s\n",
        &format!("  - name: xds\n    connect_timeout: 1s\n{tls}"),
        1,
    );
    let _c2 = launch(&config).await;
    let seen = tokio::time::timeout(Duration::from_millis(1500), rogue.requests.recv()).await;
    assert!(
        seen.is_err(),
        "a request reached the untrusted control plane: {seen:?}"
    );
}
