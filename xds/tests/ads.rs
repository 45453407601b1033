//! The xDS client against an in-repo tonic control plane on loopback: ADS in
//! State-of-the-World and Delta forms, a per-type CDS stream, ACK/NACK,
//! removal semantics, reconnect with resubscription.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use courier_xds::{
    Backoff, Client, ClientConfig, GrpcSource, Interest, ResourceType, Source, UriConnector,
};
use envoy_types::pb::envoy::config::core::v3::Node;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use support::*;

fn grpc(server: &Server, delta: bool, node_first_only: bool) -> GrpcSource {
    GrpcSource {
        connector: Arc::new(UriConnector::new(server.uri())),
        delta,
        node_on_first_message_only: node_first_only,
        initial_metadata: vec![],
    }
}

fn ads_config(server: &Server, delta: bool, types: &[ResourceType]) -> ClientConfig {
    ClientConfig {
        node: Node {
            id: "node-1".into(),
            cluster: "test".into(),
            ..Default::default()
        },
        ads: Some(grpc(server, delta, true)),
        sources: types.iter().map(|t| (*t, Source::Ads)).collect(),
        backoff: Backoff {
            base: Duration::from_millis(10),
            max: Duration::from_millis(50),
        },
        interest: vec![],
    }
}

fn names(n: &[&str]) -> Interest {
    Interest::Names(n.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>())
}

const CDS: ResourceType = ResourceType::Cluster;
const EDS: ResourceType = ResourceType::Endpoints;

#[tokio::test]
async fn sotw_subscribes_with_node_acks_and_follows_interest() {
    let mut server = Server::start().await;
    let (consumer, mut rec) = recorder(&[]);
    let client = Client::start(ads_config(&server, false, &[CDS, EDS]), consumer);
    let mut s = server.sotw().await;
    assert!(
        s.method
            .ends_with("AggregatedDiscoveryService/StreamAggregatedResources")
    );

    // First request: CDS wildcard, node, empty version and nonce; no EDS request yet.
    let first = s.next().await;
    assert_eq!(first.type_url, CDS.type_url());
    assert_eq!(first.node.as_ref().map(|n| n.id.as_str()), Some("node-1"));
    assert!(first.resource_names.is_empty());
    assert_eq!(first.version_info, "");
    assert_eq!(first.response_nonce, "");
    assert!(!client.handle().initialized());

    s.send(
        &CDS.type_url(),
        "v1",
        "n1",
        vec![any(&static_cluster("a", 1001)), any(&eds_cluster("e"))],
    )
    .await;
    let u = rec.next().await;
    assert_eq!(u.type_, CDS);
    assert_eq!(u.version_info, "v1");
    assert_eq!(upserted(&u), ["a", "e"]);
    let ack = s.next().await;
    assert_eq!(ack.type_url, CDS.type_url());
    assert_eq!(
        (ack.version_info.as_str(), ack.response_nonce.as_str()),
        ("v1", "n1")
    );
    assert!(ack.error_detail.is_none());
    // set_node_on_first_message_only: no node after the first message.
    assert!(ack.node.is_none());

    // The consumer wants the EDS cluster's endpoints: an EDS request names it.
    let h = client.handle();
    assert!(h.initial_fetch(Some(WAIT)).await);
    h.set_interest(EDS, names(&["e"]));
    // A wanted name not yet delivered: initialisation waits for it.
    assert!(!h.initialized());
    let eds = s.next_of(&EDS.type_url()).await;
    assert_eq!(eds.resource_names, ["e"]);
    assert_eq!(eds.version_info, "");
    s.send(
        &EDS.type_url(),
        "e1",
        "n2",
        vec![any(&cla("e", &[2001, 2002]))],
    )
    .await;
    let u = rec.next().await;
    assert_eq!((u.type_, upserted(&u)), (EDS, vec!["e".to_string()]));
    let ack = s.next_of(&EDS.type_url()).await;
    assert_eq!(
        (ack.version_info.as_str(), ack.response_nonce.as_str()),
        ("e1", "n2")
    );
    assert_eq!(ack.resource_names, ["e"]);

    let st = h.store().get(CDS);
    assert_eq!(st.version_info, "v1");
    assert!(st.last_updated.is_some());
    assert_eq!(st.resources.keys().collect::<Vec<_>>(), ["a", "e"]);
    assert_eq!(h.store().get(EDS).version_info, "e1");
    assert!(h.initialized());
    assert!(h.connected());

    // Clusters keep their translation (shared with the running cluster);
    // assignments are kept as received only (the consumer holds their hosts),
    // and the store translates them again when asked.
    assert!(st.resources["a"].resource.is_some());
    let e = std::sync::Arc::clone(&h.store().get(EDS).resources["e"]);
    assert!(e.resource.is_none());
    assert_eq!(e.any(EDS), any(&cla("e", &[2001, 2002])));
    match h.store().resource(EDS, "e").as_deref() {
        Some(courier_config::resource::Resource::LoadAssignment(la)) => {
            let endpoints = la
                .priorities
                .iter()
                .flat_map(|p| &p.localities)
                .flat_map(|l| &l.endpoints)
                .count();
            assert_eq!(endpoints, 2);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn sotw_nack_names_the_bad_cluster_and_applies_its_siblings() {
    let mut server = Server::start().await;
    let (consumer, mut rec) = recorder(&["refused"]);
    let client = Client::start(ads_config(&server, false, &[CDS]), consumer);
    let mut s = server.sotw().await;
    s.next_of(&CDS.type_url()).await;
    s.send(
        &CDS.type_url(),
        "v1",
        "n1",
        vec![any(&static_cluster("a", 1))],
    )
    .await;
    rec.next().await;
    assert_eq!(s.next().await.version_info, "v1");

    s.send(
        &CDS.type_url(),
        "v2",
        "n2",
        vec![
            any(&static_cluster("a", 2)),
            any(&bad_cluster("bad")),
            any(&static_cluster("b", 3)),
            any(&static_cluster("refused", 4)),
        ],
    )
    .await;
    let u = rec.next().await;
    // The valid siblings reach the consumer; the invalid one never does.
    assert_eq!(upserted(&u), ["a", "b", "refused"]);
    let nack = s.next().await;
    assert_eq!(nack.response_nonce, "n2");
    // NACK carries the version still in force.
    assert_eq!(nack.version_info, "v1");
    let detail = nack.error_detail.expect("error_detail");
    assert_eq!(detail.code, 13);
    assert!(
        detail
            .message
            .contains("Cluster 'bad': lb_policy: cluster provided LB specified but cluster 'bad' did not provide one"),
        "{}",
        detail.message
    );
    assert!(
        detail
            .message
            .contains("Cluster 'refused': refused by the consumer")
    );
    assert!(!detail.message.contains("'a'") && !detail.message.contains("'b'"));

    let st = client.handle().store().get(CDS);
    assert_eq!(st.resources.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(st.version_info, "v1");
    assert!(st.last_error.is_some());

    // A response that changes nothing applies nothing and is ACKed.
    s.send(
        &CDS.type_url(),
        "v3",
        "n3",
        vec![any(&static_cluster("a", 2)), any(&static_cluster("b", 3))],
    )
    .await;
    let ack = s.next().await;
    assert_eq!((ack.version_info.as_str(), ack.error_detail), ("v3", None));
    assert!(rec.updates.try_recv().is_err());
    assert_eq!(
        client.handle().store().counters(CDS).samples()[..3],
        [
            ("update_attempt", 3),
            ("update_success", 2),
            ("update_rejected", 1)
        ]
    );
    // The version gauge follows the last version accepted ("v3"), not the rejected one.
    let version = client.handle().store().counters(CDS).samples()[4];
    assert_eq!(version, ("version", xxhash_rust::xxh64::xxh64(b"v3", 0)));
}

#[tokio::test]
async fn sotw_removal_semantics_per_type() {
    let mut server = Server::start().await;
    let (consumer, mut rec) = recorder(&[]);
    let client = Client::start(ads_config(&server, false, &[CDS, EDS]), consumer);
    let h = client.handle();
    h.set_interest(EDS, names(&["x", "y"]));
    let mut s = server.sotw().await;
    s.next_of(&CDS.type_url()).await;
    s.send(
        &CDS.type_url(),
        "1",
        "c1",
        vec![any(&eds_cluster("x")), any(&eds_cluster("y"))],
    )
    .await;
    rec.next().await;
    s.next_of(&CDS.type_url()).await;
    // CDS is a complete set: a missing cluster is removed.
    s.send(&CDS.type_url(), "2", "c2", vec![any(&eds_cluster("x"))])
        .await;
    let u = rec.next().await;
    assert!(u.upserts.is_empty());
    assert_eq!(u.removed, ["y"]);
    s.next_of(&CDS.type_url()).await;

    s.send(
        &EDS.type_url(),
        "1",
        "e1",
        vec![any(&cla("x", &[1])), any(&cla("y", &[2]))],
    )
    .await;
    assert_eq!(upserted(&rec.next().await), ["x", "y"]);
    s.next_of(&EDS.type_url()).await;
    // EDS: absence is not deletion.
    s.send(&EDS.type_url(), "2", "e2", vec![any(&cla("x", &[3]))])
        .await;
    let u = rec.next().await;
    assert_eq!((upserted(&u), u.removed.len()), (vec!["x".to_string()], 0));
    s.next_of(&EDS.type_url()).await;
    assert_eq!(h.store().get(EDS).resources.len(), 2);
    // Dropping interest unsubscribes and forgets the resource.
    h.set_interest(EDS, names(&["x"]));
    let r = s.next_of(&EDS.type_url()).await;
    assert_eq!(r.resource_names, ["x"]);
    assert_eq!(r.version_info, "2");
    assert_eq!(r.response_nonce, "e2");
    assert_eq!(h.store().get(EDS).resources.len(), 1);
    // An empty CDS response removes every cluster.
    s.send(&CDS.type_url(), "3", "c3", vec![]).await;
    assert_eq!(rec.next().await.removed, ["x"]);
}

#[tokio::test]
async fn sotw_reconnects_after_server_restart_and_resubscribes_at_its_versions() {
    let mut server = Server::start().await;
    let (consumer, mut rec) = recorder(&[]);
    let client = Client::start(ads_config(&server, false, &[CDS, EDS]), consumer);
    let h = client.handle();
    h.set_interest(EDS, names(&["a"]));
    let mut s = server.sotw().await;
    s.next_of(&CDS.type_url()).await;
    s.send(&CDS.type_url(), "c7", "1", vec![any(&eds_cluster("a"))])
        .await;
    rec.next().await;
    s.next_of(&CDS.type_url()).await;
    s.send(&EDS.type_url(), "e7", "2", vec![any(&cla("a", &[1]))])
        .await;
    rec.next().await;
    s.next_of(&EDS.type_url()).await;

    server.restart().await;
    drop(s);
    let mut s = server.sotw().await;
    let cds = s.next_of(&CDS.type_url()).await;
    assert_eq!(cds.version_info, "c7");
    assert_eq!(cds.response_nonce, "");
    assert!(
        cds.node.is_some(),
        "the node goes on the first message of a new stream"
    );
    let eds = s.next_of(&EDS.type_url()).await;
    assert_eq!(
        (eds.version_info.as_str(), eds.resource_names.clone()),
        ("e7", vec!["a".to_string()])
    );
    // The config stayed in force meanwhile.
    assert_eq!(h.store().get(EDS).resources.len(), 1);
    // Same resources again: nothing to apply.
    s.send(&CDS.type_url(), "c7", "3", vec![any(&eds_cluster("a"))])
        .await;
    assert_eq!(s.next_of(&CDS.type_url()).await.response_nonce, "3");
    assert!(rec.updates.try_recv().is_err());
}

#[tokio::test]
async fn delta_subscribes_acks_nacks_removes_and_resumes_with_initial_versions() {
    let mut server = Server::start().await;
    let (consumer, mut rec) = recorder(&[]);
    let client = Client::start(ads_config(&server, true, &[CDS, EDS]), consumer);
    let h = client.handle();
    let mut s = server.delta().await;
    let first = s.next_of(&CDS.type_url()).await;
    assert_eq!(first.resource_names_subscribe, ["*"]);
    assert!(first.initial_resource_versions.is_empty());
    assert_eq!(first.node.as_ref().map(|n| n.id.as_str()), Some("node-1"));

    s.send(
        &CDS.type_url(),
        "d1",
        vec![
            ("a".into(), "1".into(), any(&eds_cluster("a"))),
            ("b".into(), "1".into(), any(&static_cluster("b", 5))),
            ("bad".into(), "1".into(), any(&bad_cluster("bad"))),
        ],
        vec![],
    )
    .await;
    assert_eq!(upserted(&rec.next().await), ["a", "b"]);
    let nack = s.next_of(&CDS.type_url()).await;
    assert_eq!(nack.response_nonce, "d1");
    let detail = nack.error_detail.expect("NACK");
    assert!(
        detail.message.contains("Cluster 'bad': lb_policy"),
        "{}",
        detail.message
    );

    // removed_resources removes; unknown names are ignored.
    s.send(
        &CDS.type_url(),
        "d2",
        vec![],
        vec!["b".into(), "zzz".into()],
    )
    .await;
    let u = rec.next().await;
    assert_eq!(u.removed, ["b"]);
    let ack = s.next_of(&CDS.type_url()).await;
    assert_eq!(
        (ack.response_nonce.as_str(), ack.error_detail),
        ("d2", None)
    );

    // Interest changes go out as subscribe/unsubscribe differences.
    h.set_interest(EDS, names(&["a", "z"]));
    let r = s.next_of(&EDS.type_url()).await;
    assert_eq!(r.resource_names_subscribe, ["a", "z"]);
    s.send(
        &EDS.type_url(),
        "d3",
        vec![("a".into(), "ea".into(), any(&cla("a", &[1])))],
        vec![],
    )
    .await;
    rec.next().await;
    s.next_of(&EDS.type_url()).await;
    h.set_interest(EDS, names(&["a"]));
    let r = s.next_of(&EDS.type_url()).await;
    assert!(r.resource_names_subscribe.is_empty());
    assert_eq!(r.resource_names_unsubscribe, ["z"]);

    // Restart: the new stream carries every subscription with the versions held.
    server.restart().await;
    drop(s);
    let mut s = server.delta().await;
    let cds = s.next_of(&CDS.type_url()).await;
    assert_eq!(cds.resource_names_subscribe, ["*"]);
    assert_eq!(cds.initial_resource_versions.len(), 1);
    assert_eq!(
        cds.initial_resource_versions.get("a").map(String::as_str),
        Some("1")
    );
    let eds = s.next_of(&EDS.type_url()).await;
    assert_eq!(eds.resource_names_subscribe, ["a"]);
    assert_eq!(
        eds.initial_resource_versions.get("a").map(String::as_str),
        Some("ea")
    );
    assert_eq!(
        h.store().get(CDS).resources.keys().collect::<Vec<_>>(),
        ["a"]
    );
}

#[tokio::test]
async fn per_type_cds_stream() {
    let mut server = Server::start().await;
    let (consumer, mut rec) = recorder(&[]);
    let config = ClientConfig {
        node: Node {
            id: "n".into(),
            ..Default::default()
        },
        ads: None,
        sources: vec![(CDS, Source::Grpc(grpc(&server, false, false)))],
        backoff: Backoff::default(),
        interest: vec![],
    };
    let _client = Client::start(config, consumer);
    let mut s = server.sotw().await;
    assert!(
        s.method.ends_with("ClusterDiscoveryService/StreamClusters"),
        "{}",
        s.method
    );
    s.next().await;
    s.send(
        &CDS.type_url(),
        "1",
        "x",
        vec![any(&static_cluster("c", 9))],
    )
    .await;
    assert_eq!(upserted(&rec.next().await), ["c"]);
    let ack = s.next().await;
    assert_eq!(ack.version_info, "1");
    // Node on every message unless set_node_on_first_message_only.
    assert!(ack.node.is_some());
}
