//! REST-JSON polling: JSON DiscoveryRequests to `/v3/discovery:clusters`, the
//! ACK/NACK of one response riding on the next poll.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use courier_xds::{
    Backoff, Client, ClientConfig, ResourceType, RestSource, RestTransport, Source, XdsError,
};
use envoy_types::pb::envoy::config::core::v3::Node;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use support::*;
use tokio::sync::mpsc;

/// Hands each request to the test and answers with what the test queues.
struct Scripted {
    requests: mpsc::UnboundedSender<(String, serde_json::Value)>,
    answers: tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>,
}

impl RestTransport for Scripted {
    fn post(
        &self,
        path: &'static str,
        body: Vec<u8>,
        _timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, XdsError>> + Send + '_>> {
        Box::pin(async move {
            let json = serde_json::from_slice(&body).unwrap();
            let _ = self.requests.send((path.to_string(), json));
            let answer = self.answers.lock().await.recv().await.unwrap_or_default();
            Ok(answer.into_bytes())
        })
    }
}

fn cluster_json(version: &str, nonce: &str, clusters: &[(&str, &str)]) -> String {
    let resources: Vec<String> = clusters
        .iter()
        .map(|(n, lb)| {
            format!(
                r#"{{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"{n}","connect_timeout":"1s","type":"STATIC","lb_policy":"{lb}","load_assignment":{{"cluster_name":"{n}"}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"version_info":"{version}","nonce":"{nonce}","type_url":"type.googleapis.com/envoy.config.cluster.v3.Cluster","resources":[{}]}}"#,
        resources.join(",")
    )
}

#[tokio::test]
async fn rest_polls_with_json_and_acks_or_nacks_on_the_next_poll() {
    let (req_tx, mut requests) = mpsc::unbounded_channel();
    let (answer_tx, answers) = mpsc::unbounded_channel();
    let transport = Scripted {
        requests: req_tx,
        answers: tokio::sync::Mutex::new(answers),
    };
    let (consumer, mut rec) = recorder(&[]);
    let config = ClientConfig {
        node: Node {
            id: "rest-node".into(),
            ..Default::default()
        },
        sources: vec![(
            ResourceType::Cluster,
            Source::Rest(RestSource {
                transport: Arc::new(transport),
                refresh_delay: Duration::from_millis(5),
                request_timeout: Duration::from_secs(1),
            }),
        )],
        backoff: Backoff::default(),
        ..Default::default()
    };
    let _client = Client::start(config, consumer);
    let mut next = async || {
        tokio::time::timeout(WAIT, requests.recv())
            .await
            .unwrap()
            .unwrap()
    };

    let (path, first) = next().await;
    assert_eq!(path, "/v3/discovery:clusters");
    assert_eq!(first["node"]["id"], "rest-node");
    assert_eq!(
        first["type_url"],
        "type.googleapis.com/envoy.config.cluster.v3.Cluster"
    );
    answer_tx
        .send(cluster_json("1", "r1", &[("a", "ROUND_ROBIN")]))
        .unwrap();
    assert_eq!(upserted(&rec.next().await), ["a"]);

    let (_, ack) = next().await;
    assert_eq!(
        (ack["version_info"].as_str(), ack["response_nonce"].as_str()),
        (Some("1"), Some("r1"))
    );
    assert!(ack.get("error_detail").is_none());
    answer_tx
        .send(cluster_json(
            "2",
            "r2",
            &[("a", "ROUND_ROBIN"), ("bad", "CLUSTER_PROVIDED")],
        ))
        .unwrap();

    let (_, nack) = next().await;
    assert_eq!(
        (
            nack["version_info"].as_str(),
            nack["response_nonce"].as_str()
        ),
        (Some("1"), Some("r2"))
    );
    let msg = nack["error_detail"]["message"].as_str().unwrap();
    assert!(msg.contains("Cluster 'bad': lb_policy"), "{msg}");
    // "a" was unchanged: nothing new reached the consumer.
    assert!(rec.updates.try_recv().is_err());
    drop(answer_tx);
}
