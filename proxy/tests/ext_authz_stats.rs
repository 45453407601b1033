//! ext_authz's counters in the route's cluster scope, as Envoy 1.40 emits them (checked
//! against `envoy --concurrency 1` with the same filters: `cluster.<route cluster>.
//! ext_authz.[<stat_prefix>.]{ok,denied,error,failure_mode_allowed}`, created on first
//! use, none for `disabled`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod ext_authz_support;
mod support;

use ext_authz_support::*;
use std::net::SocketAddr;
use support::*;

const H2: &str = r#"typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    explicit_http_config:
      http2_protocol_options: {}
"#;

const ROUTES: &str = r#"- match: {prefix: "/open"}
  route: {cluster: up}
  typed_per_filter_config:
    envoy.filters.http.ext_authz:
      "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute
      disabled: true
- match: {prefix: "/w"}
  route: {weighted_clusters: {clusters: [{name: up2, weight: 1}]}}
- match: {prefix: "/"}
  route: {cluster: up}
"#;

/// courier with ext_authz (`extra` fields) calling `authz` over `envoy_grpc`.
async fn start(authz: SocketAddr, extra: &str) -> Courier {
    let (up, _) = counting_upstream().await;
    let clusters = format!(
        "{}{}{}",
        static_cluster("up", &[up], ""),
        static_cluster("up2", &[up], ""),
        static_cluster("authz", &[authz], H2)
    );
    let filter = format!(
        "- name: envoy.filters.http.ext_authz\n  typed_config:\n    \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz\n    grpc_service: {{envoy_grpc: {{cluster_name: authz}}, timeout: 5s}}\n{}",
        extra
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    );
    courier_filters(&["--concurrency", "1"], "", "", ROUTES, &clusters, &filter).await
}

async fn get(c: &Courier, path: &str, mode: &str) -> u16 {
    H1::connect(c.listener)
        .await
        .get(path, &[("x-mode", mode)])
        .await
        .status
}

/// The `cluster.*.ext_authz.*` lines of `/stats`.
async fn cluster_stats(c: &Courier) -> Vec<String> {
    get_text(&c.admin, "/stats")
        .await
        .lines()
        .filter(|l| l.starts_with("cluster.") && l.contains(".ext_authz."))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn outcomes_count_under_the_route_cluster() {
    let authz = grpc_authz().await;
    let c = start(authz.addr, "").await;
    assert_eq!(get(&c, "/a", "").await, 200);
    assert_eq!(get(&c, "/a", "").await, 200);
    assert_eq!(get(&c, "/a", "deny").await, 401);
    // The weighted cluster picked, not the route's first.
    assert_eq!(get(&c, "/w", "").await, 200);
    // Not checked: no count anywhere.
    assert_eq!(get(&c, "/open", "").await, 200);
    assert_eq!(
        cluster_stats(&c).await,
        [
            "cluster.up.ext_authz.denied: 1",
            "cluster.up.ext_authz.ok: 2",
            "cluster.up2.ext_authz.ok: 1",
        ]
    );
}

#[tokio::test]
async fn errors_fail_open_and_the_stat_prefix_count_there_too() {
    let down = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = down.local_addr().unwrap();
    drop(down);
    let open = start(addr, "failure_mode_allow: true\nstat_prefix: sp").await;
    assert_eq!(get(&open, "/a", "").await, 200);
    assert_eq!(
        cluster_stats(&open).await,
        [
            "cluster.up.ext_authz.sp.error: 1",
            "cluster.up.ext_authz.sp.failure_mode_allowed: 1",
        ]
    );
    // Disabled by `filter_enabled`: counted as `disabled` in the HCM's scope only.
    let authz = grpc_authz().await;
    let off = start(
        authz.addr,
        "filter_enabled: {default_value: {numerator: 0}}",
    )
    .await;
    assert_eq!(get(&off, "/a", "").await, 200);
    assert_eq!(stat(&off, "http.ingress.ext_authz.disabled").await, 1);
    assert!(cluster_stats(&off).await.is_empty());
}
