use super::*;
use courier_config::filters::rbac::{Permission, Principal, RbacEngine, RbacFilter, RbacPolicy};
use courier_config::filters::rbac_index::PolicyIndex;
use courier_config::matcher::Cidr;
use std::net::SocketAddr;
use tokio::io::AsyncReadExt;

fn deny(name: &str, principal: Principal, prefix: &str) -> Arc<Judge> {
    let policies = vec![RbacPolicy {
        name: name.into(),
        permissions: vec![Permission::Any],
        principals: vec![principal],
        condition: None,
    }];
    let rules = RbacEngine {
        action: RbacAction::Deny,
        index: PolicyIndex::build(&policies),
        policies,
    };
    Judge::new(Arc::new(NetworkRbac {
        stat_prefix: prefix.into(),
        rbac: Arc::new(RbacFilter {
            rules: Some(rules),
            rules_stat_prefix: String::new(),
            shadow_rules: None,
            shadow_rules_stat_prefix: String::new(),
            track_per_rule_stats: false,
            matcher: None,
            shadow_matcher: None,
        }),
    }))
}

/// A connection from `direct` whose PROXY protocol source is `source`.
fn facts(direct: &str, source: &str) -> ConnFacts {
    let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
    ConnFacts {
        peer: addr(direct),
        source: addr(source),
        local: addr("127.0.0.1:10000"),
        tls: None,
        worker: 0,
    }
}

fn loopback() -> Cidr {
    Cidr("127.0.0.0/8".parse().unwrap())
}

#[tokio::test]
async fn a_denied_first_read_drops_its_bytes_and_records_why() {
    let judge = deny("no loopback", Principal::SourceIp(loopback()), "unit_deny.");
    let (client, mut server) = tokio::io::duplex(64);
    let (mut gated, why) = Gate::new(
        client,
        Some((vec![judge], facts("10.0.0.1:1", "127.0.0.1:2"))),
    );
    tokio::io::AsyncWriteExt::write_all(&mut server, b"hi")
        .await
        .unwrap();
    let mut buf = [0u8; 8];
    let err = gated.read(&mut buf).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
    assert_eq!(
        why.details(),
        Some("rbac_access_denied_matched_policy[no_loopback]")
    );
    assert_eq!(why.read(), 2);
    // Every later read fails too.
    assert!(gated.read(&mut buf).await.is_err());
}

#[tokio::test]
async fn direct_remote_ip_is_the_socket_peer_and_allowed_reads_pass() {
    let judge = deny("lo", Principal::DirectRemoteIp(loopback()), "unit_allow.");
    let (client, mut server) = tokio::io::duplex(64);
    // Proxied from loopback, but the socket peer is elsewhere: allowed.
    let (mut gated, why) = Gate::new(
        client,
        Some((vec![Arc::clone(&judge)], facts("10.0.0.1:1", "127.0.0.1:2"))),
    );
    tokio::io::AsyncWriteExt::write_all(&mut server, b"hi")
        .await
        .unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(gated.read(&mut buf).await.unwrap(), 2);
    assert_eq!(&buf[..2], b"hi");
    assert_eq!(why.details(), None);
    assert_eq!(
        (judge.stats.allowed.get(), judge.stats.denied.get()),
        (1, 0)
    );
    // Judged once: later reads are not counted again.
    tokio::io::AsyncWriteExt::write_all(&mut server, b"yo")
        .await
        .unwrap();
    assert_eq!(gated.read(&mut buf).await.unwrap(), 2);
    assert_eq!(judge.stats.allowed.get(), 1);
}

#[test]
fn stat_names_join_prefixes_as_envoy() {
    assert_eq!(joined("tcp-10080"), "tcp-10080.");
    assert_eq!(joined("edge."), "edge.");
    assert_eq!(joined(""), "");
}
