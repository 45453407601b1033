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

use bytes::Bytes;
use envoy_types::pb::envoy::service::runtime::v3::Runtime;
use http_body_util::Full;
use prost::Name;
use std::net::SocketAddr;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use xds_support::lds::{ready_status, stat_of};
use xds_support::*;

/// A `google.protobuf.Struct` from JSON.
pub fn to_struct(
    m: &serde_json::Map<String, serde_json::Value>,
) -> envoy_types::pb::google::protobuf::Struct {
    use envoy_types::pb::google::protobuf::{ListValue, Struct, Value as V, value::Kind};
    use serde_json::Value;
    fn value(v: &Value) -> V {
        let kind = match v {
            Value::Null => Kind::NullValue(0),
            Value::Bool(b) => Kind::BoolValue(*b),
            Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap()),
            Value::String(s) => Kind::StringValue(s.clone()),
            Value::Array(a) => Kind::ListValue(ListValue {
                values: a.iter().map(value).collect(),
            }),
            Value::Object(o) => Kind::StructValue(to_struct(o)),
        };
        V { kind: Some(kind) }
    }
    Struct {
        fields: m.iter().map(|(k, v)| (k.clone(), value(v))).collect(),
    }
}

/// The `Runtime` resource `name` with `layer` (JSON).
pub fn runtime(name: &str, layer: serde_json::Value) -> Runtime {
    Runtime {
        name: name.into(),
        layer: Some(to_struct(layer.as_object().unwrap())),
    }
}

/// A static listener `ingress` answering 200 `ok`, a static layer, the RTDS
/// layer `dynamic` (resource `dynamic`) from `rtds_config`, an admin layer;
/// `ads` adds an `ads_config` of that API type.
pub fn rtds_bootstrap(cp: SocketAddr, rtds_config: &str, ads: Option<&str>) -> String {
    let ads = ads
        .map(|t| {
            format!(
                "dynamic_resources:\n  ads_config:\n    api_type: {t}\n    transport_api_version: V3\n    grpc_services: [{{envoy_grpc: {{cluster_name: xds}}}}]\n"
            )
        })
        .unwrap_or_default();
    format!(
        r#"
node: {{id: courier-1, cluster: test}}
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
{ads}layered_runtime:
  layers:
  - name: static
    static_layer:
      envoy.reloadable_features.rtds_test_static: "s"
  - name: dynamic
    rtds_layer:
      name: dynamic
      rtds_config: {rtds_config}
  - name: admin
    admin_layer: {{}}
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
              - match: {{prefix: /}}
                direct_response: {{status: 200, body: {{inline_string: ok}}}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: xds
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: xds
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}
"#,
        port = cp.port()
    )
}

/// Contour's `rtds_config`: its own stream to the `xds` cluster.
pub fn own_stream(api_type: &str) -> String {
    format!(
        "{{api_config_source: {{api_type: {api_type}, transport_api_version: V3, grpc_services: [{{envoy_grpc: {{cluster_name: xds}}}}]}}, resource_api_version: V3}}"
    )
}

/// `/runtime` as JSON.
pub async fn runtime_json(admin: &str) -> serde_json::Value {
    serde_json::from_str(&get_text(admin, "/runtime").await).unwrap()
}

/// Waits until `/runtime` satisfies `ok` (bounded).
pub async fn until_runtime(
    admin: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    for _ in 0..250 {
        last = runtime_json(admin).await;
        if ok(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("/runtime never as expected: {last}");
}

/// The status of a raw HTTP/1.1 request for `target` on a new connection;
/// `None` when the connection is closed without an answer (refused at accept).
pub async fn raw_status(addr: SocketAddr, target: &str) -> Option<u16> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET {target} HTTP/1.1\r\nhost: example.com\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&buf);
    text.split(' ').nth(1)?.parse().ok()
}

/// POSTs `path` to admin; the status.
pub async fn post(admin: &str, path: &str) -> u16 {
    let req = http::Request::post(path)
        .header("host", "admin")
        .body(Full::<Bytes>::default())
        .unwrap();
    H1::connect(admin.parse().unwrap())
        .await
        .send(req)
        .await
        .status
}

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
    let mut held = H1::connect(c.listener).await;
    assert_eq!(held.get("/", &[]).await.status, 200);
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
