//! `layered_runtime` with an `rtds_layer`, end to end: the real binary and the
//! in-repo tonic control plane, RTDS on its own stream (Contour's form,
//! `api_config_source` to a static cluster; SotW and Delta) and over ADS.
//! `/ready` waits for the first RTDS answer; a key arrives and `/runtime`
//! shows it in the layer's place; keys with a meaning change the running
//! proxy (a listener's connection limit, `http_reject_path_with_fragment`);
//! a key courier gives no meaning to is NACKed with its path and the values in
//! force stay; the admin layer above overrides RTDS; a Delta removal empties
//! the layer; the `runtime.*` stats.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod xds_support;

use envoy_types::pb::envoy::service::runtime::v3::Runtime;
use prost::Name;
use std::time::Duration;
use support::*;
use xds_support::lds::{ready_status, stat_of};
use xds_support::rtds::*;
use xds_support::*;

async fn scenario(rtds_config: &str, ads: Option<&str>, delta: bool) {
    let url = Runtime::type_url();
    let mut cp = ControlPlane::start(Resources::new()).await;
    // Nobody answers at first: `/ready` waits for the first RTDS answer.
    cp.stop().await;
    let c = launch(&rtds_bootstrap(cp.addr, rtds_config, ads)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ready_status(&c.admin).await, 503);
    cp.set(
        url.clone(),
        "dynamic",
        any(&runtime(
            "dynamic",
            serde_json::json!({
                "envoy": {"reloadable_features": {"rtds_test_flag": true}},
                "envoy.resource_limits.listener.ingress.connection_limit": 1,
            }),
        )),
    );
    cp.listen().await;
    cp.saw("Runtime").await;
    for _ in 0..500 {
        if ready_status(&c.admin).await == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ready_status(&c.admin).await, 200);

    // The layer's values by name, in layer order.
    let shown = until_runtime(&c.admin, |r| {
        r["entries"]["envoy.reloadable_features.rtds_test_flag"]["final_value"] == "true"
    })
    .await;
    assert_eq!(
        shown["layers"],
        serde_json::json!(["static", "dynamic", "admin"])
    );
    assert_eq!(
        shown["entries"]["envoy.resource_limits.listener.ingress.connection_limit"],
        serde_json::json!({"final_value": "1", "layer_values": ["", "1", ""]})
    );
    assert_eq!(
        shown["entries"]["envoy.reloadable_features.rtds_test_static"]["layer_values"],
        serde_json::json!(["s", "", ""])
    );

    // Envoy 1.40's default: a fragment in the request target is refused.
    assert_eq!(raw_status(c.listener, "/a#frag").await, Some(400));
    // The connection limit from RTDS holds: one connection in, the next refused.
    let held = held_connection(c.listener).await;
    assert_eq!(raw_status(c.listener, "/").await, None);
    // The admin layer above overrides it.
    assert_eq!(
        post(
            &c.admin,
            "/runtime_modify?envoy.resource_limits.listener.ingress.connection_limit=5"
        )
        .await,
        200
    );
    assert_eq!(raw_status(c.listener, "/").await, Some(200));
    let shown = runtime_json(&c.admin).await;
    assert_eq!(
        shown["entries"]["envoy.resource_limits.listener.ingress.connection_limit"],
        serde_json::json!({"final_value": "5", "layer_values": ["", "1", "5"]})
    );
    assert_eq!(
        post(
            &c.admin,
            "/runtime_modify?envoy.resource_limits.listener.ingress.connection_limit="
        )
        .await,
        200
    );
    assert_eq!(raw_status(c.listener, "/").await, None);

    // An update replaces the layer wholesale; a flag with a meaning applies.
    drop(held);
    cp.set(
        url.clone(),
        "dynamic",
        any(&runtime(
            "dynamic",
            serde_json::json!({"envoy.reloadable_features.http_reject_path_with_fragment": false}),
        )),
    );
    until_runtime(&c.admin, |r| {
        r["entries"]
            .get("envoy.resource_limits.listener.ingress.connection_limit")
            .is_none()
    })
    .await;
    assert_eq!(raw_status(c.listener, "/a#frag").await, Some(200));
    let mut ok = 0;
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut h = H1::connect(c.listener).await;
        ok += u32::from(h.get("/", &[]).await.status == 200);
        open.push(h);
    }
    assert_eq!(ok, 3, "the limit went with the key");
    let rejected_before = stat_of(&c.admin, "runtime.update_rejected").await;

    // A key courier gives no meaning to: NACKed with its path, values stay.
    cp.set(
        url.clone(),
        "dynamic",
        any(&runtime(
            "dynamic",
            serde_json::json!({"upstream": {"use_http2": false}, "envoy.reloadable_features.http_reject_path_with_fragment": true}),
        )),
    );
    let mut nack = String::new();
    for _ in 0..20 {
        nack = cp.saw("Runtime").await;
        if !nack.ends_with("error=-") {
            break;
        }
    }
    assert!(
        nack.contains(
            "Runtime 'dynamic': layer[\"upstream.use_http2\"]: runtime key upstream.use_http2 is not supported"
        ),
        "{nack}"
    );
    assert_eq!(
        stat_of(&c.admin, "runtime.update_rejected").await,
        rejected_before + 1
    );
    let shown = runtime_json(&c.admin).await;
    assert_eq!(
        shown["entries"]["envoy.reloadable_features.http_reject_path_with_fragment"]["final_value"],
        "false"
    );
    assert!(shown["entries"].get("upstream.use_http2").is_none());
    assert_eq!(raw_status(c.listener, "/a#frag").await, Some(200));

    // Stats Envoy keeps for the runtime and its RTDS subscription.
    assert_eq!(stat_of(&c.admin, "runtime.num_layers").await, 3);
    assert_eq!(stat_of(&c.admin, "runtime.num_keys").await, 2);
    assert!(stat_of(&c.admin, "runtime.update_success").await >= 2);
    assert!(stat_of(&c.admin, "runtime.load_success").await >= 5);
    assert_eq!(stat_of(&c.admin, "runtime.admin_overrides_active").await, 0);

    if delta {
        // Delta tells a removal: the layer empties, the default is back.
        cp.remove(&url, "dynamic");
        until_runtime(&c.admin, |r| {
            r["entries"]
                .get("envoy.reloadable_features.http_reject_path_with_fragment")
                .is_none()
        })
        .await;
        assert_eq!(raw_status(c.listener, "/a#frag").await, Some(400));
    }
}

#[tokio::test]
async fn rtds_own_stream_sotw() {
    tokio::time::timeout(
        Duration::from_secs(120),
        scenario(&own_stream("GRPC"), None, false),
    )
    .await
    .expect("in time");
}

#[tokio::test]
async fn rtds_own_stream_delta() {
    tokio::time::timeout(
        Duration::from_secs(120),
        scenario(&own_stream("DELTA_GRPC"), None, true),
    )
    .await
    .expect("in time");
}

#[tokio::test]
async fn rtds_over_ads_delta() {
    tokio::time::timeout(
        Duration::from_secs(120),
        scenario(
            "{ads: {}, resource_api_version: V3}",
            Some("DELTA_GRPC"),
            true,
        ),
    )
    .await
    .expect("in time");
}

#[tokio::test]
async fn rtds_over_ads_sotw() {
    tokio::time::timeout(
        Duration::from_secs(120),
        scenario("{ads: {}, resource_api_version: V3}", Some("GRPC"), false),
    )
    .await
    .expect("in time");
}

/// What one proxy shows and does with the same RTDS layer.
#[derive(Debug, PartialEq)]
struct Seen {
    /// `/ready` before the first RTDS answer, and after.
    ready: (u16, u16),
    /// `/runtime` once the layer is in.
    runtime: serde_json::Value,
    /// `GET /a#frag` with the layer's `http_reject_path_with_fragment: false`.
    fragment: Option<u16>,
    /// A second connection while one is open, under the layer's limit of 1.
    second_connection: Option<u16>,
    /// The same after an update without the limit key.
    second_connection_after: Option<u16>,
    /// `/runtime` after the admin layer overrides a key.
    runtime_with_admin: serde_json::Value,
    /// `runtime.num_layers`, `runtime.num_keys`, `runtime.admin_overrides_active` then.
    runtime_stats: (u64, u64, u64),
    /// The verdict on a layer with a key courier gives no meaning to.
    unknown_key: &'static str,
}

async fn observe(bin: &str, args: &[&str], rtds_config: &str) -> Seen {
    let url = Runtime::type_url();
    let mut cp = ControlPlane::start(Resources::new()).await;
    cp.stop().await;
    let key = "envoy.resource_limits.listener.ingress.connection_limit";
    let p =
        xds_support::lds::start_bin(bin, args, &rtds_bootstrap(cp.addr, rtds_config, None)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = ready_status(&p.admin).await;
    cp.set(
        url.clone(),
        "dynamic",
        any(&runtime(
            "dynamic",
            serde_json::json!({
                "envoy": {"reloadable_features": {
                    "http_reject_path_with_fragment": false,
                    "rtds_test_flag": "on",
                }},
                key: 1,
            }),
        )),
    );
    cp.listen().await;
    let mut after = 0;
    for _ in 0..500 {
        after = ready_status(&p.admin).await;
        if after == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listener = xds_support::lds::port_of(&p.admin, "ingress").await;
    let shown = until_runtime(&p.admin, |r| r["entries"][key]["final_value"] == "1").await;
    let fragment = raw_status(listener, "/a#frag").await;
    let held = held_connection(listener).await;
    let second_connection = raw_status(listener, "/").await;
    assert_eq!(
        post(
            &p.admin,
            "/runtime_modify?envoy.reloadable_features.rtds_test_flag=off"
        )
        .await,
        200
    );
    let runtime_with_admin = runtime_json(&p.admin).await;
    let runtime_stats = (
        stat_of(&p.admin, "runtime.num_layers").await,
        stat_of(&p.admin, "runtime.num_keys").await,
        stat_of(&p.admin, "runtime.admin_overrides_active").await,
    );
    cp.set(
        url.clone(),
        "dynamic",
        any(&runtime(
            "dynamic",
            serde_json::json!({"envoy.reloadable_features.rtds_test_flag": "on"}),
        )),
    );
    until_runtime(&p.admin, |r| r["entries"].get(key).is_none()).await;
    let second_connection_after = raw_status(listener, "/").await;
    drop(held);
    cp.set(
        url.clone(),
        "dynamic",
        any(&runtime(
            "dynamic",
            serde_json::json!({"upstream.use_http2": false}),
        )),
    );
    let mut unknown_key = "ack";
    for _ in 0..20 {
        let line = cp.saw("Runtime").await;
        if !line.ends_with("error=-") {
            unknown_key = "nack";
            break;
        }
        if until_runtime_quick(&p.admin).await {
            break;
        }
    }
    Seen {
        ready: (before, after),
        runtime: shown,
        fragment,
        second_connection,
        second_connection_after,
        runtime_with_admin,
        runtime_stats,
        unknown_key,
    }
}

/// Whether `/runtime` shows the unknown key (accepted).
async fn until_runtime_quick(admin: &str) -> bool {
    runtime_json(admin).await["entries"]
        .get("upstream.use_http2")
        .is_some()
}

/// The same bootstrap and the same `Runtime` resources to real Envoy 1.40 and
/// to courier: the same `/ready` wait, the same `/runtime` (layers, values,
/// the admin layer's override), the same behaviour of the keys with a meaning.
/// The one difference, by design: courier NACKs a key it gives no meaning to
/// (a bad xDS resource is refused with its path, never half ignored), where
/// Envoy accepts any key.
#[tokio::test]
async fn envoy_and_courier_agree_on_an_rtds_layer() {
    let Some(envoy) = xds_support::lds::envoy() else {
        return;
    };
    let rtds_config = own_stream("GRPC");
    let courier = tokio::time::timeout(
        Duration::from_secs(120),
        observe(
            env!("CARGO_BIN_EXE_courier"),
            &["--concurrency", "1", "--drain-time-s", "1"],
            &rtds_config,
        ),
    )
    .await
    .expect("in time");
    let envoy = tokio::time::timeout(
        Duration::from_secs(120),
        observe(
            &envoy,
            &[
                "--concurrency",
                "1",
                "--drain-time-s",
                "1",
                "--use-dynamic-base-id",
            ],
            &rtds_config,
        ),
    )
    .await
    .expect("in time");
    assert_eq!(courier.unknown_key, "nack");
    assert_eq!(envoy.unknown_key, "ack");
    let (courier, envoy) = (
        Seen {
            unknown_key: "",
            ..courier
        },
        Seen {
            unknown_key: "",
            ..envoy
        },
    );
    assert_eq!(courier, envoy);
    assert_eq!(courier.ready, (503, 200));
    assert_eq!(courier.runtime_stats, (3, 4, 1));
    assert_eq!(courier.fragment, Some(200));
    assert_eq!(
        (courier.second_connection, courier.second_connection_after),
        (None, Some(200))
    );
}

/// `path_config_source`: the layer comes from a file holding a
/// `DiscoveryResponse`, and a rewritten file replaces it.
#[tokio::test]
async fn rtds_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rtds.yaml");
    let write = |flag: &str| {
        let body = format!(
            "version_info: \"{flag}\"\nresources:\n- \"@type\": type.googleapis.com/envoy.service.runtime.v3.Runtime\n  name: dynamic\n  layer:\n    envoy.reloadable_features.rtds_test_flag: \"{flag}\"\n"
        );
        let tmp = dir.path().join("next.yaml");
        std::fs::write(&tmp, body).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
    };
    write("one");
    let rtds_config = format!("{{path_config_source: {{path: {}}}}}", file.display());
    // The bootstrap's xds cluster goes unused here.
    let c = launch(&rtds_bootstrap(
        "127.0.0.1:9".parse().unwrap(),
        &rtds_config,
        None,
    ))
    .await;
    let flag = "envoy.reloadable_features.rtds_test_flag";
    until_runtime(&c.admin, |r| r["entries"][flag]["final_value"] == "one").await;
    write("two");
    let shown = until_runtime(&c.admin, |r| r["entries"][flag]["final_value"] == "two").await;
    assert_eq!(
        shown["entries"][flag]["layer_values"],
        serde_json::json!(["", "two", ""])
    );
    for _ in 0..100 {
        if ready_status(&c.admin).await == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not ready");
}
