//! RTDS helpers: `Runtime` resources from JSON, a bootstrap with an RTDS
//! layer between a static and an admin layer, `/runtime` and raw requests.

use crate::support::*;
use bytes::Bytes;
use envoy_types::pb::envoy::service::runtime::v3::Runtime;
use http_body_util::Full;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// A keep-alive connection that got a 200 for `/`: retried while a closing
/// connection still holds the listener's only slot (bounded).
pub async fn held_connection(addr: SocketAddr) -> H1 {
    use hyper_util::rt::TokioIo;
    for _ in 0..250 {
        let s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = http::Request::get("/")
            .header("host", "example.com")
            .body(Full::<Bytes>::default())
            .unwrap();
        if let Ok(r) = send.send_request(req).await
            && r.status() == 200
        {
            use http_body_util::BodyExt;
            let _ = r.into_body().collect().await;
            return H1(send);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no connection to {addr} got through");
}
