//! Per-filter configs at the weighted-cluster level through the real binary: the picked
//! cluster's `typed_per_filter_config` is the most specific level, and the router takes
//! the cluster whose config the filters saw (Envoy resolves the weighted cluster with the
//! route, before the decoder filters run).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod jwt_support;
mod support;

use jwt_support::*;
use support::*;

const ROUTES: &str = r#"- match: {prefix: "/"}
  route:
    weighted_clusters:
      clusters:
      - name: a
        weight: 1
        typed_per_filter_config:
          envoy.filters.http.jwt_authn:
            "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig
            disabled: true
      - name: b
        weight: 1
  typed_per_filter_config:
    envoy.filters.http.jwt_authn:
      "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig
      requirement_name: remote
"#;

#[tokio::test]
async fn the_picked_weighted_clusters_per_filter_config_wins() {
    let (a, b) = (echo_upstream("a").await, echo_upstream("b").await);
    let (jwks_addr, _state) = jwks_server(jwks(&[])).await;
    let clusters = format!(
        "{}{}{}",
        static_cluster("a", &[a], ""),
        static_cluster("b", &[b], ""),
        static_cluster("jwks", &[jwks_addr], "")
    );
    let filter = remote_filter("").replace(
        "    rules:",
        "    requirement_map: {remote: {provider_name: remote}}\n    rules:",
    );
    let c = courier_filters(
        &["--concurrency", "1", "--drain-time-s", "1"],
        "",
        "",
        ROUTES,
        &clusters,
        &filter,
    )
    .await;
    let mut h1 = H1::connect(c.listener).await;
    let (mut passed, mut refused) = (0, 0);
    for _ in 0..60 {
        // No token: cluster a disables jwt_authn, b needs a token (route level).
        let r = h1.get("/x", &[]).await;
        match r.status {
            200 => {
                assert_eq!(r.header("x-upstream"), Some("a"), "{r:?}");
                passed += 1;
            }
            401 => {
                assert_eq!(r.body, "Jwt is missing");
                refused += 1;
            }
            s => panic!("unexpected {s}: {r:?}"),
        }
    }
    // Both clusters were picked (each with probability 1/2 per request).
    assert!(
        passed > 0 && refused > 0,
        "passed {passed}, refused {refused}"
    );
}
