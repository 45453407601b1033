//! Wire compatibility with a control plane courier's team did not write:
//! Python `grpcio` with the `xds-protos` package (tests/python/ads_server.py),
//! SotW and Delta ADS: node, NACK naming the bad cluster while its sibling
//! applies, ACK, Delta removal.
//!
//! Needs a Python with `grpcio` and `xds-protos`: `COURIER_XDS_PYTHON` (path to
//! the interpreter), else `python3`. Without one the test is skipped, unless
//! `COURIER_REQUIRE_XDS_PYTHON` is set.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use courier_xds::{Backoff, Client, ClientConfig, GrpcSource, ResourceType, Source, UriConnector};
use envoy_types::pb::envoy::config::core::v3::Node;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

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

struct Py {
    _child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    port: u16,
}

impl Py {
    async fn start(py: &str) -> Py {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/ads_server.py");
        let mut child = Command::new(py)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let port = first.strip_prefix("PORT ").unwrap().parse().unwrap();
        Py {
            _child: child,
            lines,
            port,
        }
    }

    /// The next request line about clusters.
    async fn cds(&mut self) -> String {
        for _ in 0..20 {
            let line = tokio::time::timeout(WAIT, self.lines.next_line())
                .await
                .expect("request in time")
                .unwrap()
                .expect("server running");
            if line.contains(" Cluster ") {
                return line;
            }
        }
        panic!("no CDS request");
    }
}

fn client(port: u16, delta: bool) -> (Client, Recorder) {
    let (consumer, rec) = recorder(&[]);
    let config = ClientConfig {
        node: Node {
            id: "py-node".into(),
            ..Default::default()
        },
        ads: Some(GrpcSource {
            connector: Arc::new(UriConnector::new(format!("http://127.0.0.1:{port}"))),
            delta,
            node_on_first_message_only: true,
            initial_metadata: vec![],
        }),
        sources: vec![(ResourceType::Cluster, Source::Ads)],
        backoff: Backoff {
            base: Duration::from_millis(10),
            max: Duration::from_millis(100),
        },
        interest: vec![],
    };
    (Client::start(config, consumer), rec)
}

#[tokio::test]
async fn sotw_against_grpcio() {
    let Some(py) = python() else { return };
    let mut server = Py::start(&py).await;
    let (c, mut rec) = client(server.port, false);
    let first = server.cds().await;
    assert!(
        first.contains("version=- nonce=- node=py-node error=-"),
        "{first}"
    );
    assert_eq!(upserted(&rec.next().await), ["a"]);
    let nack = server.cds().await;
    assert!(
        nack.contains(
            "version=- nonce=n1 node=- error=Cluster 'bad': lb_policy: cluster provided LB specified but cluster 'bad' did not provide one"
        ),
        "{nack}"
    );
    let ack = server.cds().await;
    assert!(ack.contains("version=2 nonce=n2 node=- error=-"), "{ack}");
    let st = c.handle().store().get(ResourceType::Cluster);
    assert_eq!(st.resources.keys().collect::<Vec<_>>(), ["a"]);
    assert_eq!(st.version_info, "2");
}

#[tokio::test]
async fn delta_against_grpcio() {
    let Some(py) = python() else { return };
    let mut server = Py::start(&py).await;
    let (c, mut rec) = client(server.port, true);
    let first = server.cds().await;
    assert!(
        first.contains("REQ delta Cluster version=* nonce=- node=py-node"),
        "{first}"
    );
    assert_eq!(upserted(&rec.next().await), ["a"]);
    let nack = server.cds().await;
    assert!(
        nack.contains("nonce=d1 node=- error=Cluster 'bad': lb_policy"),
        "{nack}"
    );
    assert_eq!(rec.next().await.removed, ["a"]);
    let ack = server.cds().await;
    assert!(ack.contains("nonce=d2 node=- error=-"), "{ack}");
    assert!(
        c.handle()
            .store()
            .get(ResourceType::Cluster)
            .resources
            .is_empty()
    );
}
