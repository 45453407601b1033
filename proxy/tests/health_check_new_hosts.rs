//! Hosts that arrive after start (here over EDS from a watched file) are
//! health checked too: a new host failing its check never takes traffic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod xds_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use support::programmable::{Act, upstream};
use support::*;
use xds_support::*;

fn cla_yaml(version: &str, hosts: &[SocketAddr]) -> String {
    let endpoints: String = hosts
        .iter()
        .map(|h| {
            format!(
                "    - endpoint: {{ address: {{ socket_address: {{ address: {}, port_value: {} }} }} }}\n",
                h.ip(),
                h.port()
            )
        })
        .collect();
    format!(
        "version_info: \"{version}\"\nresources:\n- \"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\n  cluster_name: backend\n  endpoints:\n  - lb_endpoints:\n{endpoints}"
    )
}

#[tokio::test]
#[ignore = "EDS from a path_config_source file is not delivered on this branch's base \
            (xds_sources' own file test fails the same way); run with --ignored once it is"]
async fn a_host_added_by_eds_is_checked_before_it_takes_traffic() {
    let (a, _) = upstream(|_, _| Act::Status(200)).await;
    let (b_checks, b_work) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (c2, w2) = (Arc::clone(&b_checks), Arc::clone(&b_work));
    let (b, _) = upstream(move |_, p| {
        if p.uri.path() == "/healthz" {
            c2.fetch_add(1, Ordering::SeqCst);
            Act::Status(503)
        } else {
            w2.fetch_add(1, Ordering::SeqCst);
            Act::Status(200)
        }
    })
    .await;
    let files = tempfile::tempdir().unwrap();
    let eds = files.path().join("eds.yaml");
    std::fs::write(&eds, cla_yaml("1", &[a])).unwrap();
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
    health_checks:
    - timeout: 1s
      interval: 0.05s
      no_traffic_interval: 0.05s
      unhealthy_threshold: 1
      healthy_threshold: 1
      http_health_check: {{path: /healthz}}
"#,
        eds = eds.display()
    );
    let c = launch(&config).await;
    until(c.listener, |r| r.status == 200).await;
    let tmp = files.path().join("eds.tmp");
    std::fs::write(&tmp, cla_yaml("2", &[a, b])).unwrap();
    std::fs::rename(&tmp, &eds).unwrap();
    // The new host gets checked (bounded wait), and fails.
    let mut checked = false;
    for _ in 0..200 {
        if b_checks.load(Ordering::SeqCst) >= 1 {
            checked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(checked, "the host added by EDS was never health checked");
    let before = b_work.load(Ordering::SeqCst);
    let mut h = H1::connect(c.listener).await;
    for _ in 0..40 {
        assert_eq!(h.get("/", &[]).await.status, 200);
    }
    assert_eq!(b_work.load(Ordering::SeqCst), before);
}
