//! courier's other xDS sources, end to end: EDS from a watched
//! `path_config_source` file and over REST-JSON polling through a cluster.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod xds_support;

use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use support::*;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use xds_support::*;

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
    std::fs::write(&tmp, cla_yaml("v7", b)).unwrap();
    std::fs::rename(&tmp, &eds).unwrap();
    until(c.listener, |r| r.header("x-upstream") == Some("b")).await;
    let stats = get_text(&c.admin, "/stats").await;
    assert!(
        stats.contains("cluster_manager.eds.update_success: 2\n"),
        "{stats}"
    );
    // Envoy's `version` gauge: the xxHash64 of version_info (this value is what
    // Envoy 1.40 shows for "v7"); `update_time`: ms since the epoch.
    assert!(
        stats.contains("cluster_manager.eds.version: 7308050424466892544\n"),
        "{stats}"
    );
    let update_time: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("cluster_manager.eds.update_time: "))
        .unwrap()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        update_time <= now && now - update_time < 60_000,
        "{update_time}"
    );
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
