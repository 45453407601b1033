//! The unary HTTP/2 client against a real `h2` server on loopback.

use super::super::ClusterManager;
use super::super::client::{ClientError, ClusterClient};
use bytes::Bytes;
use courier_config::load::Format;
use courier_config::snapshot::Snapshot;
use http::{HeaderMap, HeaderValue, Request, Response};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// What the server saw of one request.
#[derive(Debug)]
struct Seen {
    conn: usize,
    headers: HeaderMap,
    body: Vec<u8>,
}

/// How the server answers.
#[derive(Clone, Copy)]
enum Answer {
    /// `:status 200`, the request body back in two DATA frames, trailers `grpc-status: 0`.
    Echo,
    /// Headers only, END_STREAM on them (`grpc-status: 7`).
    TrailersOnly,
    /// Holds the answer until `release` has `n` requests in flight, then echoes.
    Hold(usize),
    /// Echoes, then closes the connection.
    EchoThenClose,
}

/// An h2c server; returns its address, its connection count and what it saw.
async fn server(answer: Answer) -> (u16, Arc<AtomicUsize>, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let conns = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::unbounded_channel();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Notify::new());
    let counted = Arc::clone(&conns);
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let conn = counted.fetch_add(1, Ordering::SeqCst);
            let (tx, in_flight, gate) = (tx.clone(), Arc::clone(&in_flight), Arc::clone(&gate));
            tokio::spawn(async move {
                let mut h2 = h2::server::handshake(s).await.unwrap();
                while let Some(Ok((req, mut respond))) = h2.accept().await {
                    let (tx, in_flight, gate) =
                        (tx.clone(), Arc::clone(&in_flight), Arc::clone(&gate));
                    tokio::spawn(async move {
                        let (parts, mut body) = req.into_parts();
                        let mut got = Vec::new();
                        while let Some(d) = body.data().await {
                            let d = d.unwrap();
                            let _ = body.flow_control().release_capacity(d.len());
                            got.extend_from_slice(&d);
                        }
                        let _ = tx.send(Seen {
                            conn,
                            headers: parts.headers,
                            body: got.clone(),
                        });
                        if let Answer::Hold(n) = answer {
                            if in_flight.fetch_add(1, Ordering::SeqCst) + 1 >= n {
                                gate.notify_waiters();
                            } else {
                                gate.notified().await;
                            }
                        }
                        if let Answer::TrailersOnly = answer {
                            let resp = Response::builder()
                                .header("grpc-status", "7")
                                .body(())
                                .unwrap();
                            respond.send_response(resp, true).unwrap();
                            return;
                        }
                        let mut out = respond.send_response(Response::new(()), false).unwrap();
                        let half = got.len() / 2;
                        out.send_data(Bytes::copy_from_slice(&got[..half]), false)
                            .unwrap();
                        out.send_data(Bytes::copy_from_slice(&got[half..]), false)
                            .unwrap();
                        let mut trailers = HeaderMap::new();
                        trailers.insert("grpc-status", HeaderValue::from_static("0"));
                        out.send_trailers(trailers).unwrap();
                    });
                    if let Answer::EchoThenClose = answer {
                        // Let the one answer go out, then close.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        h2.graceful_shutdown();
                        while h2.accept().await.is_some() {}
                        return;
                    }
                }
            });
        }
    });
    (port, conns, rx)
}

/// A client with cluster `authz` (HTTP/2) at `port`; `extra` goes in its config.
fn client(port: u16, extra: &str) -> ClusterClient {
    let yaml = format!(
        r#"
static_resources:
  clusters:
  - name: authz
    connect_timeout: 1s
{extra}    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {{max_concurrent_streams: 1}}
    load_assignment:
      cluster_name: authz
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#
    );
    let b = courier_config::bootstrap_from_str(&yaml, Format::Yaml).unwrap();
    ClusterClient::new(Arc::new(
        ClusterManager::new(&Snapshot::from_bootstrap(&b)).unwrap(),
    ))
}

fn head() -> Request<()> {
    let mut r = Request::new(());
    *r.method_mut() = http::Method::POST;
    *r.uri_mut() = http::Uri::from_static("http://authz/svc/Method");
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    r
}

const LONG: Duration = Duration::from_secs(10);

#[tokio::test]
async fn calls_reuse_one_connection_and_read_the_whole_answer() {
    let (port, conns, mut seen) = server(Answer::Echo).await;
    let c = client(port, "");
    for body in ["first call", "second call"] {
        let resp = tokio::time::timeout(LONG, c.unary("authz", head(), Bytes::from(body)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(resp.head.status, 200);
        // Two DATA frames, joined.
        assert_eq!(resp.body, body.as_bytes());
        assert_eq!(resp.trailers.unwrap()["grpc-status"], "0");
        let s = seen.recv().await.unwrap();
        assert_eq!(s.body, body.as_bytes());
        assert_eq!(s.headers["content-type"], "application/grpc");
        assert!(!s.headers.contains_key("content-length"));
    }
    assert_eq!(conns.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_trailers_only_answer_has_no_body_and_no_trailers() {
    let (port, _, _seen) = server(Answer::TrailersOnly).await;
    let c = client(port, "");
    let resp = tokio::time::timeout(LONG, c.unary("authz", head(), Bytes::from_static(b"x")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.head.headers["grpc-status"], "7");
    assert!(resp.body.is_empty());
    assert!(resp.trailers.is_none());
}

#[tokio::test]
async fn calls_past_max_concurrent_streams_open_another_connection() {
    let (port, conns, mut seen) = server(Answer::Hold(2)).await;
    let c = client(port, "");
    let (a, b) = tokio::time::timeout(
        LONG,
        futures_join(
            c.unary("authz", head(), Bytes::from_static(b"a")),
            c.unary("authz", head(), Bytes::from_static(b"b")),
        ),
    )
    .await
    .unwrap();
    assert_eq!(a.unwrap().body, "a");
    assert_eq!(b.unwrap().body, "b");
    assert_eq!(conns.load(Ordering::SeqCst), 2);
    let (x, y) = (seen.recv().await.unwrap(), seen.recv().await.unwrap());
    assert_ne!(x.conn, y.conn);
}

#[tokio::test]
async fn at_max_connections_a_call_overflows_without_pending_room() {
    let (port, conns, mut seen) = server(Answer::Hold(2)).await;
    let c = client(
        port,
        "    circuit_breakers: {thresholds: [{max_connections: 1, max_pending_requests: 0}]}\n",
    );
    let held = c.unary("authz", head(), Bytes::from_static(b"a"));
    let second = async {
        // Once the server has the first call, its connection holds its one stream.
        seen.recv().await.unwrap();
        c.unary("authz", head(), Bytes::from_static(b"b")).await
    };
    let (first, second) = futures_join(
        tokio::time::timeout(Duration::from_millis(500), held),
        tokio::time::timeout(LONG, second),
    )
    .await;
    let second = second.unwrap();
    // The first stays held (the server waits for a second request that never comes).
    assert!(first.is_err());
    match second {
        Err(ClientError::Send(e)) => assert!(e.details().contains("overflow"), "{e:?}"),
        other => panic!("expected an overflow, got {other:?}"),
    }
    assert_eq!(conns.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_closed_connection_is_replaced_and_a_dead_host_is_an_error() {
    let (port, conns, _seen) = server(Answer::EchoThenClose).await;
    let c = client(port, "");
    for body in ["one", "two"] {
        let resp = tokio::time::timeout(LONG, async {
            // The connection may be closing when the call starts: a retry after it is
            // gone must open a new one.
            for _ in 0..50 {
                match c.unary("authz", head(), Bytes::from(body)).await {
                    Ok(r) => return r,
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
            panic!("no answer");
        })
        .await
        .unwrap();
        assert_eq!(resp.body, body.as_bytes());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(conns.load(Ordering::SeqCst), 2);

    let unused = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = unused.local_addr().unwrap().port();
    drop(unused);
    let c = client(dead, "");
    match c.unary("authz", head(), Bytes::new()).await {
        Err(ClientError::Send(e)) => {
            assert!(e.details().contains("remote_connection_failure"), "{e:?}")
        }
        other => panic!("expected a connect failure, got {other:?}"),
    }
}

/// Both futures, polled together on this task.
async fn futures_join<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    tokio::join!(a, b)
}
