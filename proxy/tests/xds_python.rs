//! courier driven over ADS (SotW and Delta) by a control plane built on a
//! different gRPC and protobuf implementation: Python `grpcio` with the
//! `xds-protos` package (tests/xds_python/relay_server.py), which parses every
//! resource into its Python class and encodes it again. The scenarios of the
//! in-repo control plane's tests: boot from ADS alone, serve after
//! LDS/RDS/CDS/EDS, an endpoint change shifts traffic, an RDS-only change
//! leaves an open connection alone, a listener update drains the old
//! connections, a bad cluster is NACKed by name while its sibling applies, a
//! cluster removal, and a control-plane restart that keeps traffic flowing and
//! resubscribes. RTDS from the same control plane: a `Runtime` layer arrives
//! (its own stream, SotW; over ADS, Delta), its keys take effect, a key courier
//! gives no meaning to is NACKed with its path, a Delta removal empties it.
//!
//! Needs a Python with `grpcio` and `xds-protos`: `COURIER_XDS_PYTHON` (path to
//! the interpreter), else `python3`. Without one the test is skipped, unless
//! `COURIER_REQUIRE_XDS_PYTHON` is set (scripts/test.sh sets both).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod xds_support;

use envoy_types::pb::envoy::config::cluster::v3::{Cluster, cluster};
use prost::{Message, Name};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use xds_support::lds::*;
use xds_support::rtds::{
    held_connection, own_stream, raw_status, rtds_bootstrap, runtime, until_runtime,
};
use xds_support::*;

fn python() -> Option<String> {
    let py = std::env::var("COURIER_XDS_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&py)
        .args(["-c", "import grpc, envoy.service.discovery.v3.ads_pb2_grpc"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(py);
    }
    assert!(
        std::env::var_os("COURIER_REQUIRE_XDS_PYTHON").is_none(),
        "no Python with grpcio and xds-protos ({py})"
    );
    eprintln!("skipped: no Python with grpcio and xds-protos ({py})");
    None
}

/// The Python control plane, and the resources it was given (replayed into a
/// restarted one).
struct PyCp {
    py: String,
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    addr: SocketAddr,
    given: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

impl PyCp {
    async fn start(py: &str, port: u16) -> (Child, ChildStdin, Lines<BufReader<ChildStdout>>, u16) {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/xds_python/relay_server.py"
        );
        let mut child = Command::new(py)
            .arg(script)
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let port = first.strip_prefix("PORT ").unwrap().parse().unwrap();
        (child, stdin, lines, port)
    }

    async fn new(py: &str) -> Self {
        let (child, stdin, lines, port) = Self::start(py, 0).await;
        PyCp {
            py: py.to_string(),
            child,
            stdin,
            lines,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            given: BTreeMap::new(),
        }
    }

    async fn send(&mut self, cmd: serde_json::Value) {
        let mut line = cmd.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Resources of one type, in one response.
    async fn set<M: Message + Name>(&mut self, items: &[(&str, &M)]) {
        let t = M::type_url();
        let mut list = Vec::new();
        for (name, m) in items {
            let bytes = m.encode_to_vec();
            list.push(serde_json::json!([name, b64(&bytes)]));
            self.given
                .entry(t.clone())
                .or_default()
                .insert((*name).to_string(), bytes);
        }
        self.send(serde_json::json!({"op": "set", "type": t, "items": list}))
            .await;
    }

    async fn remove(&mut self, type_url: &str, name: &str) {
        if let Some(m) = self.given.get_mut(type_url) {
            m.remove(name);
        }
        self.send(serde_json::json!({"op": "del", "type": type_url, "names": [name]}))
            .await;
    }

    /// Waits for a request line containing `what`.
    async fn saw(&mut self, what: &str) -> String {
        for _ in 0..200 {
            let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
                .await
                .expect("request in time")
                .unwrap()
                .expect("control plane running");
            if line.contains(what) {
                return line;
            }
        }
        panic!("no request with {what}");
    }

    /// Stops the control plane (its streams end), starts another on the same
    /// port and gives it the same resources.
    async fn restart(&mut self) {
        self.child.kill().await.unwrap();
        let port = self.addr.port();
        // The port is free again once the old process is gone (bounded).
        let mut started = None;
        for _ in 0..50 {
            if std::net::TcpListener::bind(self.addr).is_ok() {
                started = Some(Self::start(&self.py, port).await);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (child, stdin, lines, _) = started.expect("port free after the restart");
        (self.child, self.stdin, self.lines) = (child, stdin, lines);
        let given = std::mem::take(&mut self.given);
        for (t, items) in &given {
            let list: Vec<_> = items
                .iter()
                .map(|(n, b)| serde_json::json!([n, b64(b)]))
                .collect();
            self.send(serde_json::json!({"op": "set", "type": t, "items": list}))
                .await;
        }
        self.given = given;
    }
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A cluster courier refuses, as Envoy does (`CLUSTER_PROVIDED` on a cluster type that provides no balancer).
fn unserved(name: &str) -> Cluster {
    Cluster {
        lb_policy: cluster::LbPolicy::ClusterProvided as i32,
        ..eds_cluster(name, name)
    }
}

async fn scenarios(api_type: &str) {
    let Some(py) = python() else { return };
    let (a, b) = (echo_upstream("a").await, echo_upstream("b").await);
    let mut cp = PyCp::new(&py).await;
    cp.set(&[("dyn", &eds_cluster("dyn", "svc"))]).await;
    cp.set(&[("svc", &cla("svc", a))]).await;
    cp.set(&[("ingress", &rds_listener("ingress", "routes"))])
        .await;
    let c = start(&lds_bootstrap(cp.addr, api_type)).await;

    // Boot from ADS alone: the listener warms until its routes arrive.
    // The node rides on the stream's first request only.
    let first = cp.saw("REQ").await;
    assert!(first.contains("node=courier-1"), "{first}");
    cp.saw("RouteConfiguration").await;
    assert_eq!(ready_status(&c.admin).await, 503);
    cp.set(&[("routes", &routes(to("dyn")))]).await;
    let ingress = port_of(&c.admin, "ingress").await;
    until(ingress, |r| r.header("x-upstream") == Some("a")).await;

    // An endpoint change shifts traffic.
    cp.set(&[("svc", &cla("svc", b))]).await;
    until(ingress, |r| r.header("x-upstream") == Some("b")).await;

    // An RDS-only change leaves an open connection alone.
    let mut open = H1::connect(ingress).await;
    assert_eq!(open.get("/", &[]).await.header("x-upstream"), Some("b"));
    cp.set(&[("routes", &routes(direct("routes-v2")))]).await;
    until(ingress, |r| r.body == "routes-v2").await;
    let r = open.get("/", &[]).await;
    assert_eq!(
        (r.body.as_str(), r.header("connection")),
        ("routes-v2", None)
    );
    assert!(!open.0.is_closed());

    // A listener update: new connections see it, old ones are drained.
    cp.set(&[("second", &inline_listener("second", "second-v1"))])
        .await;
    let second = port_of(&c.admin, "second").await;
    until(second, |r| r.body == "second-v1").await;
    let mut old = H1::connect(second).await;
    assert_eq!(old.get("/", &[]).await.body, "second-v1");
    cp.set(&[
        ("ingress", &rds_listener("ingress", "routes")),
        ("second", &inline_listener("second", "second-v2")),
    ])
    .await;
    until(second, |r| r.body == "second-v2").await;
    let r = old.get("/", &[]).await;
    assert_eq!(r.header("connection"), Some("close"), "{r:?}");
    until_closed(&mut old).await;

    // A bad cluster is NACKed by name while its sibling applies.
    cp.set(&[
        ("bad", &unserved("bad")),
        ("dyn2", &eds_cluster("dyn2", "svc")),
    ])
    .await;
    let mut nack = String::new();
    for _ in 0..20 {
        nack = cp.saw("Cluster").await;
        if !nack.ends_with("error=-") {
            break;
        }
    }
    assert!(nack.contains("Cluster 'bad'"), "{nack}");
    assert!(nack.contains("cluster provided LB specified"), "{nack}");
    cp.set(&[("routes", &routes(to("dyn2")))]).await;
    until(ingress, |r| r.header("x-upstream") == Some("b")).await;

    // Cluster removal: its route answers 503 (no cluster).
    cp.remove(&Cluster::type_url(), "dyn2").await;
    until(ingress, |r| r.status == 503).await;
    cp.set(&[("routes", &routes(to("dyn")))]).await;
    until(ingress, |r| r.header("x-upstream") == Some("b")).await;

    // The control plane restarts: traffic keeps flowing meanwhile, and
    // courier subscribes again.
    let mut kept = H1::connect(ingress).await;
    cp.restart().await;
    for _ in 0..20 {
        assert_eq!(kept.get("/", &[]).await.header("x-upstream"), Some("b"));
    }
    cp.saw("Listener").await;
    cp.saw("Cluster").await;
    cp.set(&[("svc", &cla("svc", a))]).await;
    until(ingress, |r| r.header("x-upstream") == Some("a")).await;
    assert_eq!(stat_of(&c.admin, "control_plane.connected_state").await, 1);
}

#[tokio::test]
async fn sotw_ads_from_grpcio() {
    tokio::time::timeout(Duration::from_secs(120), scenarios("GRPC"))
        .await
        .expect("in time");
}

#[tokio::test]
async fn delta_ads_from_grpcio() {
    tokio::time::timeout(Duration::from_secs(120), scenarios("DELTA_GRPC"))
        .await
        .expect("in time");
}

async fn rtds_scenario(rtds_config: &str, ads: Option<&str>, delta: bool) {
    use envoy_types::pb::envoy::service::runtime::v3::Runtime;
    let Some(py) = python() else { return };
    let mut cp = PyCp::new(&py).await;
    cp.set(&[(
        "dynamic",
        &runtime(
            "dynamic",
            serde_json::json!({"envoy": {"resource_limits": {"listener": {"ingress": {"connection_limit": 1}}}}}),
        ),
    )])
    .await;
    let c = launch(&rtds_bootstrap(cp.addr, rtds_config, ads)).await;
    cp.saw("Runtime").await;
    let key = "envoy.resource_limits.listener.ingress.connection_limit";
    let shown = until_runtime(&c.admin, |r| r["entries"][key]["final_value"] == "1").await;
    assert_eq!(
        shown["entries"][key]["layer_values"],
        serde_json::json!(["", "1", ""])
    );
    for _ in 0..100 {
        if ready_status(&c.admin).await == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ready_status(&c.admin).await, 200);
    let held = held_connection(c.listener).await;
    assert_eq!(raw_status(c.listener, "/").await, None);

    cp.set(&[(
        "dynamic",
        &runtime(
            "dynamic",
            serde_json::json!({"envoy.reloadable_features.http_reject_path_with_fragment": false}),
        ),
    )])
    .await;
    until_runtime(&c.admin, |r| r["entries"].get(key).is_none()).await;
    assert_eq!(raw_status(c.listener, "/a#frag").await, Some(200));

    cp.set(&[(
        "dynamic",
        &runtime(
            "dynamic",
            serde_json::json!({"tracing": {"random_sampling": 50}}),
        ),
    )])
    .await;
    let mut nack = String::new();
    for _ in 0..20 {
        nack = cp.saw("Runtime").await;
        if !nack.ends_with("error=-") {
            break;
        }
    }
    assert!(
        nack.contains("layer[\"tracing.random_sampling\"]: runtime key tracing.random_sampling is not supported"),
        "{nack}"
    );
    assert_eq!(raw_status(c.listener, "/a#frag").await, Some(200));
    drop(held);
    if delta {
        cp.remove(&Runtime::type_url(), "dynamic").await;
        until_runtime(&c.admin, |r| r["entries"] == serde_json::json!({"envoy.reloadable_features.rtds_test_static": {"final_value": "s", "layer_values": ["s", "", ""]}})).await;
        assert_eq!(raw_status(c.listener, "/a#frag").await, Some(400));
    }
}

#[tokio::test]
async fn rtds_own_stream_sotw_from_grpcio() {
    tokio::time::timeout(
        Duration::from_secs(120),
        rtds_scenario(&own_stream("GRPC"), None, false),
    )
    .await
    .expect("in time");
}

#[tokio::test]
async fn rtds_over_ads_delta_from_grpcio() {
    tokio::time::timeout(
        Duration::from_secs(120),
        rtds_scenario(
            "{ads: {}, resource_api_version: V3}",
            Some("DELTA_GRPC"),
            true,
        ),
    )
    .await
    .expect("in time");
}
