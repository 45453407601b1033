//! courier's CDS over ADS, end to end (SotW and Delta): the real binary, the
//! in-repo tonic control plane and echo upstreams. A cluster arrives and is
//! routed to, is updated (traffic follows), turns into an EDS cluster that warms
//! until its endpoints arrive (the old one serves meanwhile), a bad cluster is
//! NACKed by name while its sibling applies, and a removed cluster answers 503
//! as Envoy's unknown cluster does.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod xds_support;

use envoy_types::pb::envoy::config::cluster::v3::{Cluster, cluster};
use envoy_types::pb::envoy::config::core::v3::{
    AggregatedConfigSource, ConfigSource, config_source,
};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::route::v3::{
    RouteAction, RouteConfiguration, route, route_action,
};
use prost::Name;
use std::net::SocketAddr;
use std::time::Duration;
use support::*;
use xds_support::*;

fn to(cluster: &str) -> route::Action {
    route::Action::Route(RouteAction {
        cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster.into())),
        ..Default::default()
    })
}

fn static_cluster(name: &str, addr: SocketAddr) -> Cluster {
    Cluster {
        name: name.into(),
        connect_timeout: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: 1,
            nanos: 0,
        }),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::Static as i32,
        )),
        load_assignment: Some(cla(name, addr)),
        ..Default::default()
    }
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
            eds_config: Some(ConfigSource {
                config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(
                    AggregatedConfigSource {},
                )),
                resource_api_version: 2,
                ..Default::default()
            }),
            service_name: service.into(),
        }),
        ..Default::default()
    }
}

/// The ADS bootstrap with CDS over ADS too.
fn cds_bootstrap(cp: SocketAddr, api_type: &str) -> String {
    ads_bootstrap(cp, api_type).replace(
        "dynamic_resources:\n",
        "dynamic_resources:\n  cds_config: {ads: {}, resource_api_version: V3}\n",
    )
}

/// `/config_dump`'s ClustersConfigDump.
async fn clusters_dump(admin: &str) -> serde_json::Value {
    let dump: serde_json::Value =
        serde_json::from_str(&get_text(admin, "/config_dump").await).unwrap();
    dump["configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["@type"] == "type.googleapis.com/envoy.admin.v3.ClustersConfigDump")
        .unwrap()
        .clone()
}

async fn admin_clusters(admin: &str) -> String {
    get_text(admin, "/clusters").await
}

async fn cds_lifecycle(api_type: &str) {
    let a = echo_upstream("a").await;
    let b = echo_upstream("b").await;
    let (cds_url, cla_url, rds_url) = (
        Cluster::type_url(),
        ClusterLoadAssignment::type_url(),
        RouteConfiguration::type_url(),
    );
    let mut cp = ControlPlane::start(Resources::new()).await;
    cp.set(rds_url.clone(), "routes", any(&routes(to("dyn"))));
    let c = launch(&cds_bootstrap(cp.addr, api_type)).await;
    cp.saw("Cluster ").await;

    // No cluster "dyn" yet: 503, as Envoy's cluster_not_found (NC).
    until(c.listener, |r| r.status == 503).await;

    // The cluster arrives over CDS and is routed to.
    cp.set(cds_url.clone(), "dyn", any(&static_cluster("dyn", a)));
    until(c.listener, |r| r.header("x-upstream") == Some("a")).await;
    let mut open = H1::connect(c.listener).await;
    assert_eq!(open.get("/", &[]).await.header("x-upstream"), Some("a"));

    // Updated: its new endpoint takes the traffic, also on an open connection.
    cp.set(cds_url.clone(), "dyn", any(&static_cluster("dyn", b)));
    until(c.listener, |r| r.header("x-upstream") == Some("b")).await;
    assert_eq!(open.get("/", &[]).await.header("x-upstream"), Some("b"));

    // Turned into an EDS cluster: it warms (the one in force keeps serving b)
    // until its assignment arrives, then serves a.
    cp.set(cds_url.clone(), "dyn", any(&eds_cluster("dyn", "svc")));
    cp.saw("ClusterLoadAssignment").await;
    for _ in 0..5 {
        let r = H1::connect(c.listener).await.get("/", &[]).await;
        assert_eq!(r.header("x-upstream"), Some("b"), "{r:?}");
    }
    // /config_dump shows it among the warming clusters meanwhile.
    let warming = clusters_dump(&c.admin).await["dynamic_warming_clusters"].clone();
    assert_eq!(warming[0]["cluster"]["name"], "dyn", "{warming}");
    assert_eq!(warming[0]["cluster"]["type"], "EDS", "{warming}");
    cp.set(cla_url.clone(), "svc", any(&cla("svc", a)));
    until(c.listener, |r| r.header("x-upstream") == Some("a")).await;
    let dump = clusters_dump(&c.admin).await;
    assert!(dump.get("dynamic_warming_clusters").is_none(), "{dump}");
    let active = dump["dynamic_active_clusters"].as_array().unwrap();
    assert!(
        active.iter().any(|c| c["cluster"]["name"] == "dyn"),
        "{dump}"
    );

    // A cluster courier does not serve is NACKed by name; its sibling in the
    // same response applies.
    let mut bad = static_cluster("bad", a);
    bad.lb_policy = cluster::LbPolicy::ClusterProvided as i32;
    cp.state.send_modify(|(v, r)| {
        *v += 1;
        let mut next = Resources::clone(r);
        let m = next.entry(cds_url.clone()).or_default();
        m.insert("bad".into(), any(&bad));
        m.insert("sib".into(), any(&static_cluster("sib", b)));
        *r = std::sync::Arc::new(next);
    });
    let nack = cp.saw("error=Cluster 'bad'").await;
    assert!(nack.contains("lb_policy"), "{nack}");
    assert!(!nack.contains("'sib'"), "{nack}");
    let mut listed = String::new();
    for _ in 0..250 {
        listed = admin_clusters(&c.admin).await;
        if listed.contains("sib::") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(listed.contains("sib::"), "{listed}");
    assert!(!listed.contains("bad::"), "{listed}");
    let stats = get_text(&c.admin, "/stats").await;
    assert!(
        stats.contains("cluster_manager.cds.update_rejected: 1\n"),
        "{stats}"
    );
    // A cluster added over CDS has its own counters.
    assert!(stats.contains("cluster.dyn.upstream_rq_total: "), "{stats}");
    assert!(
        !stats.contains("cluster.dyn.upstream_rq_total: 0\n"),
        "{stats}"
    );

    // Removed: routes to it answer 503 again; the open connection stays up.
    cp.remove(&cds_url, "bad");
    cp.remove(&cds_url, "dyn");
    until(c.listener, |r| r.status == 503).await;
    let r = open.get("/", &[]).await;
    assert_eq!(r.status, 503, "{r:?}");
    let listed = admin_clusters(&c.admin).await;
    assert!(!listed.contains("dyn::"), "{listed}");
    assert!(listed.contains("sib::"), "{listed}");
    assert!(listed.contains("sib::added_via_api::true"), "{listed}");
    // Bootstrap clusters stay.
    assert!(listed.contains("backend::added_via_api::false"), "{listed}");
    let dump = clusters_dump(&c.admin).await;
    let active = dump["dynamic_active_clusters"].as_array().unwrap();
    assert_eq!(active.len(), 1, "{active:?}");
    assert_eq!(active[0]["cluster"]["name"], "sib");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cds_sotw_add_update_warm_nack_remove() {
    tokio::time::timeout(Duration::from_secs(60), cds_lifecycle("GRPC"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cds_delta_add_update_warm_nack_remove() {
    tokio::time::timeout(Duration::from_secs(60), cds_lifecycle("DELTA_GRPC"))
        .await
        .unwrap();
}

/// A ClusterLoadAssignment with one endpoint per address.
fn cla_of(name: &str, addrs: &[SocketAddr]) -> ClusterLoadAssignment {
    let mut out = cla(name, addrs[0]);
    for a in &addrs[1..] {
        let more = cla(name, *a);
        out.endpoints[0]
            .lb_endpoints
            .extend(more.endpoints[0].lb_endpoints.clone());
    }
    out
}

async fn stat_of(admin: &str, name: &str) -> u64 {
    let stats = get_text(admin, "/stats").await;
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// An EDS update that keeps an endpoint keeps its host object: a host ejected
/// by outlier detection stays ejected (and gets no traffic) across the update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eds_update_keeps_an_ejected_host_ejected() {
    use envoy_types::pb::envoy::config::cluster::v3::OutlierDetection;
    use envoy_types::pb::google::protobuf::{Duration as PDuration, UInt32Value};
    use std::sync::atomic::Ordering;
    use support::programmable::{Act, upstream};
    let run = async {
        let (bad, bad_log) = upstream(|_, _| Act::Status(503)).await;
        let good = echo_upstream("good").await;
        let good2 = echo_upstream("good2").await;
        let (cds_url, cla_url, rds_url) = (
            Cluster::type_url(),
            ClusterLoadAssignment::type_url(),
            RouteConfiguration::type_url(),
        );
        let mut cp = ControlPlane::start(Resources::new()).await;
        cp.set(rds_url.clone(), "routes", any(&routes(to("dyn"))));
        cp.set(cla_url.clone(), "svc", any(&cla_of("svc", &[bad, good])));
        let mut dyn_cluster = eds_cluster("dyn", "svc");
        dyn_cluster.outlier_detection = Some(OutlierDetection {
            consecutive_5xx: Some(UInt32Value { value: 1 }),
            interval: Some(PDuration {
                seconds: 0,
                nanos: 50_000_000,
            }),
            base_ejection_time: Some(PDuration {
                seconds: 300,
                nanos: 0,
            }),
            max_ejection_percent: Some(UInt32Value { value: 100 }),
            ..Default::default()
        });
        cp.set(cds_url.clone(), "dyn", any(&dyn_cluster));
        let c = launch(&cds_bootstrap(cp.addr, "GRPC")).await;
        cp.saw("Cluster ").await;
        until(c.listener, |r| r.header("x-upstream") == Some("good")).await;
        // Traffic until the bad host is ejected.
        let mut ejected = false;
        for _ in 0..250 {
            let _ = H1::connect(c.listener).await.get("/", &[]).await;
            if stat_of(&c.admin, "cluster.dyn.outlier_detection.ejections_active").await == 1 {
                ejected = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(ejected, "{}", get_text(&c.admin, "/stats").await);
        // A new endpoint arrives; the bad one is still in the assignment.
        cp.set(
            cla_url.clone(),
            "svc",
            any(&cla_of("svc", &[bad, good, good2])),
        );
        until(c.listener, |r| r.header("x-upstream") == Some("good2")).await;
        let before = bad_log.count.load(Ordering::SeqCst);
        for _ in 0..30 {
            let r = H1::connect(c.listener).await.get("/", &[]).await;
            assert_eq!(r.status, 200, "{r:?}");
        }
        assert_eq!(bad_log.count.load(Ordering::SeqCst), before);
        assert_eq!(
            stat_of(&c.admin, "cluster.dyn.outlier_detection.ejections_active").await,
            1
        );
        // A CDS update of the cluster itself (same EDS service) keeps its hosts
        // too: the bad one stays out.
        dyn_cluster.connect_timeout = Some(PDuration {
            seconds: 2,
            nanos: 0,
        });
        cp.set(cds_url.clone(), "dyn", any(&dyn_cluster));
        for _ in 0..250 {
            let dump = get_text(&c.admin, "/config_dump").await;
            if dump.contains("\"connect_timeout\": \"2s\"") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for _ in 0..30 {
            let r = H1::connect(c.listener).await.get("/", &[]).await;
            assert_eq!(r.status, 200, "{r:?}");
        }
        assert_eq!(bad_log.count.load(Ordering::SeqCst), before);
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap();
}

/// An EDS cluster whose assignment never comes goes into force (with no
/// hosts) once its source's `initial_fetch_timeout` passes: 503 "no healthy
/// upstream" (UH) instead of the unknown cluster's NC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eds_cluster_warms_until_its_initial_fetch_timeout() {
    let run = async {
        let (cds_url, rds_url) = (Cluster::type_url(), RouteConfiguration::type_url());
        let mut cp = ControlPlane::start(Resources::new()).await;
        cp.set(rds_url.clone(), "routes", any(&routes(to("dyn"))));
        let c = launch(&cds_bootstrap(cp.addr, "GRPC")).await;
        cp.saw("Cluster ").await;
        // Routes in, no cluster: NC.
        until(c.listener, |r| r.status == 503).await;
        let warming = with_fetch_timeout(eds_cluster("dyn", "never"), 300);
        cp.set(cds_url.clone(), "dyn", any(&warming));
        // Warming: not in force yet (the route's cluster is unknown: NC, no body).
        cp.saw("ClusterLoadAssignment").await;
        let listed = admin_clusters(&c.admin).await;
        let r = H1::connect(c.listener).await.get("/", &[]).await;
        if !listed.contains("dyn::") {
            assert_eq!((r.status, r.body.as_str()), (503, ""), "{r:?}");
        }
        // Timed out: in force with no hosts.
        let r = until(c.listener, |r| r.body == "no healthy upstream").await;
        assert_eq!(r.status, 503);
        assert!(
            admin_clusters(&c.admin)
                .await
                .contains("dyn::added_via_api::true")
        );
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap();
}

fn with_fetch_timeout(mut c: Cluster, ms: i32) -> Cluster {
    if let Some(cfg) = c
        .eds_cluster_config
        .as_mut()
        .and_then(|e| e.eds_config.as_mut())
    {
        cfg.initial_fetch_timeout = Some(envoy_types::pb::google::protobuf::Duration {
            seconds: 0,
            nanos: ms * 1_000_000,
        });
    }
    c
}

/// Two EDS clusters of one CDS response with the same `initial_fetch_timeout`
/// (courier keeps one timer per response and timeout, not one per cluster):
/// the one whose assignment arrives in time serves it, and the timeout does
/// not put an empty version of it in force; the other goes into force without
/// hosts. A cluster added later for a service whose assignment is in force
/// starts with its hosts at once, though no new assignment comes (courier
/// keeps no translation of assignments: it is translated again from the bytes
/// in force).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warming_timeouts_and_known_assignments() {
    let run = async {
        let a = echo_upstream("a").await;
        let (cds_url, cla_url, rds_url) = (
            Cluster::type_url(),
            ClusterLoadAssignment::type_url(),
            RouteConfiguration::type_url(),
        );
        let mut rc = routes(to("dyn"));
        let fallback = rc.virtual_hosts[0].routes[0].clone();
        rc.virtual_hosts[0].routes = ["/two", "/three"]
            .into_iter()
            .zip(["dyn2", "dyn3"])
            .map(|(prefix, cluster)| {
                let mut r = fallback.clone();
                r.r#match = Some(envoy_types::pb::envoy::config::route::v3::RouteMatch {
                    path_specifier: Some(
                        envoy_types::pb::envoy::config::route::v3::route_match::PathSpecifier::Prefix(
                            prefix.into(),
                        ),
                    ),
                    ..Default::default()
                });
                r.action = Some(to(cluster));
                r
            })
            .chain([fallback.clone()])
            .collect();
        let mut cp = ControlPlane::start(Resources::new()).await;
        cp.set(rds_url.clone(), "routes", any(&rc));
        cp.set(cla_url.clone(), "svc2", any(&cla("svc2", a)));
        let c = launch(&cds_bootstrap(cp.addr, "GRPC")).await;
        cp.saw("Cluster ").await;
        cp.state.send_modify(|(v, r)| {
            *v += 1;
            let mut next = Resources::clone(r);
            let m = next.entry(cds_url.clone()).or_default();
            m.insert(
                "dyn".into(),
                any(&with_fetch_timeout(eds_cluster("dyn", "never"), 300)),
            );
            m.insert(
                "dyn2".into(),
                any(&with_fetch_timeout(eds_cluster("dyn2", "svc2"), 300)),
            );
            *r = std::sync::Arc::new(next);
        });
        until_at(c.listener, "/two", |r| r.header("x-upstream") == Some("a")).await;
        // "dyn" times out: in force with no hosts.
        let r = until_at(c.listener, "/", |r| r.body == "no healthy upstream").await;
        assert_eq!(r.status, 503);
        // The timeout left "dyn2" as its assignment made it.
        for _ in 0..5 {
            let r = H1::connect(c.listener).await.get("/two", &[]).await;
            assert_eq!(r.header("x-upstream"), Some("a"), "{r:?}");
        }
        // A new cluster of the known service: served without a new assignment
        // (its default initial_fetch_timeout is 15 s).
        cp.set(cds_url.clone(), "dyn3", any(&eds_cluster("dyn3", "svc2")));
        until_at(c.listener, "/three", |r| {
            r.header("x-upstream") == Some("a")
        })
        .await;
        // /config_dump still shows the assignment as received.
        let dump: serde_json::Value =
            serde_json::from_str(&get_text(&c.admin, "/config_dump?include_eds").await).unwrap();
        let eds = dump["configs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["@type"] == "type.googleapis.com/envoy.admin.v3.EndpointsConfigDump")
            .cloned()
            .unwrap_or_default();
        let configs = eds["dynamic_endpoint_configs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            configs
                .iter()
                .any(|e| e["endpoint_config"]["cluster_name"] == "svc2"),
            "{dump}"
        );
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap();
}

/// A keep-alive HTTP/1.1 upstream answering 200; reports how many connections
/// are open on it.
async fn counting_upstream() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicI64>) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let open = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let counter = std::sync::Arc::clone(&open);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let open = std::sync::Arc::clone(&counter);
            open.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n) = s.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let resp = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if s.write_all(resp).await.is_err() {
                            break;
                        }
                    }
                }
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, open)
}

#[tokio::test]
async fn an_updated_cluster_drains_its_predecessors_idle_connections() {
    use std::sync::atomic::Ordering;
    let (up, open) = counting_upstream().await;
    let (cds_url, rds_url) = (Cluster::type_url(), RouteConfiguration::type_url());
    let cp = ControlPlane::start(Resources::new()).await;
    cp.set(rds_url.clone(), "routes", any(&routes(to("dyn"))));
    cp.set(cds_url.clone(), "dyn", any(&static_cluster("dyn", up)));
    let c = launch(&cds_bootstrap(cp.addr, "GRPC")).await;
    until(c.listener, |r| r.status == 200).await;
    // Each update that changes how connections are made (here the buffer
    // limit): a few requests, then the connections they left idle belong to a
    // replaced cluster and must close.
    for generation in 2..6u32 {
        for _ in 0..4 {
            assert_eq!(
                H1::connect(c.listener).await.get("/", &[]).await.status,
                200
            );
        }
        let mut cluster = static_cluster("dyn", up);
        cluster.per_connection_buffer_limit_bytes =
            Some(envoy_types::pb::google::protobuf::UInt32Value {
                value: 65_536 * generation,
            });
        cp.set(cds_url.clone(), "dyn", any(&cluster));
        let mut drained = false;
        for _ in 0..200 {
            if open.load(Ordering::SeqCst) == 0 {
                drained = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            drained,
            "{} upstream connections still open after update {generation}",
            open.load(Ordering::SeqCst)
        );
    }
}

/// Differs from Envoy on purpose: Envoy drains every pool of an updated
/// cluster, so each CDS update (a new connect timeout, say) opens every
/// upstream connection again; courier keeps the pools when connections would be
/// made the same way (bench-xds-churn: cluster updates at 33/s put the p99 at
/// 1.8x the quiet one before).
#[tokio::test]
async fn an_update_that_keeps_how_connections_are_made_keeps_them() {
    use std::sync::atomic::Ordering;
    let (up, open) = counting_upstream().await;
    let (cds_url, rds_url) = (Cluster::type_url(), RouteConfiguration::type_url());
    let cp = ControlPlane::start(Resources::new()).await;
    cp.set(rds_url.clone(), "routes", any(&routes(to("dyn"))));
    cp.set(cds_url.clone(), "dyn", any(&static_cluster("dyn", up)));
    let c = launch(&cds_bootstrap(cp.addr, "GRPC")).await;
    until(c.listener, |r| r.status == 200).await;
    let mut h = H1::connect(c.listener).await;
    assert_eq!(h.get("/", &[]).await.status, 200);
    let before = open.load(Ordering::SeqCst);
    assert!(before >= 1);
    let mut cluster = static_cluster("dyn", up);
    cluster.connect_timeout = Some(envoy_types::pb::google::protobuf::Duration {
        seconds: 7,
        nanos: 0,
    });
    cp.set(cds_url.clone(), "dyn", any(&cluster));
    // Applied (its connect timeout in the dump), then past two pool sweeps
    // (one a second): the pooled connection is still open and still used.
    for _ in 0..200 {
        if get_text(&c.admin, "/config_dump").await.contains("\"7s\"") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(open.load(Ordering::SeqCst), before);
    for _ in 0..5 {
        assert_eq!(h.get("/", &[]).await.status, 200);
    }
    assert_eq!(open.load(Ordering::SeqCst), before);
}
