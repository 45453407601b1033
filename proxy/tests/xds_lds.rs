//! courier's LDS over ADS, end to end (SotW and Delta): the real binary, the
//! in-repo tonic control plane and an echo upstream. courier boots from ADS
//! alone (the bootstrap has only admin and the xDS cluster): a listener with
//! RDS warms until its routes arrive (`/ready` 503 until then), then serves
//! through a CDS+EDS cluster; a listener added later serves; an updated
//! listener serves new connections with the new config while open keep-alive
//! HTTP/1.1 connections get `connection: close` and HTTP/2 ones GOAWAY, and
//! are closed; an RDS-only change leaves open connections open; a bad listener
//! is NACKed by name and path while its valid sibling in the same response
//! applies and the bad one's old version keeps serving; a removed listener
//! stops accepting while the others serve. Listener updates under traffic fail
//! no request. An update changing one filter chain drains only that chain's
//! connections, and the chain it keeps keeps its filters' counters. LDS
//! listeners serve beside static ones (an LDS listener named as a static one
//! is NACKed).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod xds_support;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use prost::Name;
use std::sync::Arc;
use std::time::Duration;
use support::*;
use xds_support::lds::*;
use xds_support::*;

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

#[tokio::test]
async fn an_update_drains_only_connections_of_changed_filter_chains() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let lds_url = Listener::type_url();
        let cp = ControlPlane::start(Resources::new()).await;
        cp.set(
            lds_url.clone(),
            "chains",
            two_chain_listener("sni-v1", "plain-v1"),
        );
        let c = start(&lds_only_bootstrap(cp.addr, "GRPC")).await;
        let addr = port_of(&c.admin, "chains").await;
        until(addr, |r| r.body == "plain-v1").await;
        let mut open = H1::connect(addr).await;
        assert_eq!(open.get("/", &[]).await.body, "plain-v1");

        // Only the TLS chain changes: the plaintext connection on the default
        // chain carries on (Envoy's in-place filter chain update).
        cp.set(
            lds_url.clone(),
            "chains",
            two_chain_listener("sni-v2", "plain-v1"),
        );
        for _ in 0..250 {
            if stat_of(&c.admin, "listener_manager.listener_modified").await == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            stat_of(&c.admin, "listener_manager.listener_modified").await,
            1
        );
        // The kept chain keeps its filters and their counters.
        let allowed = stat_of(&c.admin, "http.chains.rbac.allowed").await;
        assert!(allowed >= 2, "{allowed}");
        for _ in 0..3 {
            let r = open.get("/", &[]).await;
            assert_eq!(r.body, "plain-v1");
            assert_eq!(r.header("connection"), None, "{r:?}");
        }
        assert!(!open.0.is_closed());
        assert_eq!(
            stat_of(&c.admin, "http.chains.rbac.allowed").await,
            allowed + 3
        );

        // The default chain changes: its connection drains.
        cp.set(
            lds_url.clone(),
            "chains",
            two_chain_listener("sni-v2", "plain-v3"),
        );
        until(addr, |r| r.body == "plain-v3").await;
        let r = open.get("/", &[]).await;
        assert_eq!(r.header("connection"), Some("close"), "{r:?}");
        until_closed(&mut open).await;
    })
    .await
    .expect("in time");
}

#[tokio::test]
async fn lds_listeners_beside_static_ones() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let (lds_url, rds_url) = (Listener::type_url(), RouteConfiguration::type_url());
        let mut cp = ControlPlane::start(Resources::new()).await;
        cp.set(rds_url, "routes", any(&routes(direct("static"))));
        // One response: a listener named as the static one, and a new one.
        cp.state.send_modify(|(v, r)| {
            *v += 1;
            let mut next = Resources::clone(r);
            let l = next.entry(lds_url.clone()).or_default();
            l.insert("ingress".into(), any(&inline_listener("ingress", "clash")));
            l.insert("extra".into(), any(&inline_listener("extra", "extra-v1")));
            *r = Arc::new(next);
        });
        let config = ads_bootstrap(cp.addr, "GRPC").replace(
            "dynamic_resources:\n",
            "dynamic_resources:\n  lds_config: {ads: {}, resource_api_version: V3}\n",
        );
        let c = start(&config).await;
        let mut nack = String::new();
        for _ in 0..50 {
            nack = lds_verdict(&mut cp).await;
            if nack != "ack" {
                break;
            }
        }
        assert!(nack.contains("'ingress'"), "{nack}");
        assert!(nack.contains("static listener"), "{nack}");
        assert!(!nack.contains("extra"), "{nack}");
        let ingress = port_of(&c.admin, "ingress").await;
        let extra = port_of(&c.admin, "extra").await;
        until(ingress, |r| r.body == "static").await;
        until(extra, |r| r.body == "extra-v1").await;
        // Static listeners first, then LDS ones; stats by the configured
        // address, as Envoy names them: both are 127.0.0.1:0, so one set
        // counts the connections of both.
        let listeners = get_text(&c.admin, "/listeners").await;
        assert!(listeners.starts_with("ingress::"), "{listeners}");
        let name = "listener.127.0.0.1_0.downstream_cx_total";
        assert!(stat_of(&c.admin, name).await >= 2, "{name}");
    })
    .await
    .expect("in time");
}

/// `GET /` over a new connection to the Unix socket `path`: the status and
/// body, or `None` when nothing accepts there.
async fn pipe_get(path: &std::path::Path) -> Option<(u16, String)> {
    use http_body_util::BodyExt;
    let s = tokio::net::UnixStream::connect(path).await.ok()?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s))
        .await
        .ok()?;
    tokio::spawn(conn);
    let req = http::Request::get("/")
        .header("host", "pipe.example")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.ok()?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A listener on a pipe over LDS: served once it arrives, updated in place on
/// the same socket (the socket file is not replaced, so clients never see it
/// missing), and gone once removed.
#[tokio::test]
async fn an_lds_listener_on_a_pipe_updates_on_its_socket() {
    use envoy_types::pb::envoy::config::core::v3::{Address, Pipe, address};
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lds.sock");
    let on_pipe = |body: &str| {
        let mut l = inline_listener("p", body);
        l.address = Some(Address {
            address: Some(address::Address::Pipe(Pipe {
                path: path.display().to_string(),
                mode: 0o600,
            })),
        });
        l
    };
    let lds_url = Listener::type_url();
    let cp = ControlPlane::start(Resources::new()).await;
    cp.set(lds_url.clone(), "p", any(&on_pipe("one")));
    let c = start(&lds_bootstrap(cp.addr, "GRPC")).await;
    let mut got = None;
    for _ in 0..250 {
        got = pipe_get(&path).await;
        if got.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(got, Some((200, "one".to_string())));
    let inode = std::fs::metadata(&path).unwrap().ino();
    assert_eq!(
        get_text(&c.admin, "/listeners").await.trim(),
        format!("p::{}", path.display())
    );

    cp.set(lds_url.clone(), "p", any(&on_pipe("two")));
    let mut updated = false;
    for _ in 0..250 {
        if pipe_get(&path).await == Some((200, "two".to_string())) {
            updated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(updated, "the update never served");
    assert_eq!(
        std::fs::metadata(&path).unwrap().ino(),
        inode,
        "same socket"
    );

    cp.remove(&lds_url, "p");
    let mut gone = false;
    for _ in 0..250 {
        if pipe_get(&path).await.is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "the removed listener still accepts");
}
