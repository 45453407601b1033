//! Authorization servers for the ext_authz tests: a tonic `Authorization` service and a
//! plain HTTP authz server, both on loopback port 0, both reporting what they were asked,
//! and an upstream that counts what reaches it.

#![allow(dead_code)]

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption, QueryParameter};
use envoy_types::pb::envoy::service::auth::v3::authorization_server::{
    Authorization, AuthorizationServer,
};
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{
    CheckRequest, CheckResponse, DeniedHttpResponse, OkHttpResponse,
};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tonic::Status;
use tonic::codegen::Service;

/// A running gRPC authz server.
pub struct GrpcAuthz {
    /// Its address.
    pub addr: SocketAddr,
    /// Every CheckRequest, in arrival order.
    pub seen: mpsc::UnboundedReceiver<CheckRequest>,
    /// Checks received so far.
    pub calls: Arc<AtomicU64>,
    /// Checks in mode `hold` wait for a permit.
    pub release: Arc<Semaphore>,
}

struct Auth {
    tx: mpsc::UnboundedSender<CheckRequest>,
    calls: Arc<AtomicU64>,
    release: Arc<Semaphore>,
}

fn hvo(k: &str, v: &str, append: Option<bool>) -> HeaderValueOption {
    #[allow(deprecated)]
    HeaderValueOption {
        header: Some(HeaderValue {
            key: k.into(),
            value: v.into(),
            ..Default::default()
        }),
        append: append.map(|value| envoy_types::pb::google::protobuf::BoolValue { value }),
        ..Default::default()
    }
}

fn status(code: i32) -> Option<RpcStatus> {
    Some(RpcStatus {
        code,
        message: String::new(),
        details: vec![],
    })
}

/// Modes, by the client's `x-mode` header: `deny` (401 with header and body), `deny-bare`
/// (PERMISSION_DENIED without a denied_response), `unavailable`, `slow` (1 s), `hold`
/// (until released), default allow with mutations (`x-remove` lists headers to remove,
/// `x-qset` a `k=v` query parameter to set).
#[tonic::async_trait]
impl Authorization for Auth {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, Status> {
        let req = request.into_inner();
        self.calls.fetch_add(1, Ordering::SeqCst);
        let _ = self.tx.send(req.clone());
        let headers = req
            .attributes
            .and_then(|a| a.request)
            .and_then(|r| r.http)
            .map(|h| h.headers)
            .unwrap_or_default();
        let header = |n: &str| headers.get(n).cloned().unwrap_or_default();
        let resp = match header("x-mode").as_str() {
            "deny" => CheckResponse {
                status: status(7),
                http_response: Some(HttpResponse::DeniedResponse(DeniedHttpResponse {
                    status: Some(HttpStatus { code: 401 }),
                    headers: vec![hvo("x-deny", "yes", None)],
                    body: "go away".into(),
                })),
                ..Default::default()
            },
            "deny-bare" => CheckResponse {
                status: status(7),
                ..Default::default()
            },
            "unavailable" => return Err(Status::unavailable("down")),
            "slow" => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                allow(&header)
            }
            "hold" => {
                let _permit = self.release.acquire().await;
                allow(&header)
            }
            _ => allow(&header),
        };
        Ok(tonic::Response::new(resp))
    }
}

fn allow(header: &dyn Fn(&str) -> String) -> CheckResponse {
    let remove = header("x-remove");
    let qset = header("x-qset");
    let query_parameters_to_set = qset
        .split_once('=')
        .map(|(k, v)| QueryParameter {
            key: k.into(),
            value: v.into(),
        })
        .into_iter()
        .collect();
    let mut md = Struct::default();
    md.fields.insert(
        "user".into(),
        Value {
            kind: Some(Kind::StringValue("alice".into())),
        },
    );
    CheckResponse {
        status: status(0),
        dynamic_metadata: Some(md),
        http_response: Some(HttpResponse::OkResponse(OkHttpResponse {
            headers: vec![
                hvo("x-authz-user", "alice", None),
                hvo("x-existing", "more", Some(true)),
            ],
            headers_to_remove: remove
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            response_headers_to_add: vec![hvo("x-resp", "r1", None)],
            query_parameters_to_set,
            ..Default::default()
        })),
    }
}

/// A gRPC authz server over h2c on loopback.
pub async fn grpc_authz() -> GrpcAuthz {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, seen) = mpsc::unbounded_channel();
    let calls = Arc::new(AtomicU64::new(0));
    let release = Arc::new(Semaphore::new(0));
    let svc = AuthorizationServer::new(Auth {
        tx,
        calls: Arc::clone(&calls),
        release: Arc::clone(&release),
    });
    tokio::spawn(async move {
        for _ in 0..10_000 {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let svc = svc.clone();
            let service = service_fn(move |req: Request<Incoming>| {
                let mut svc = svc.clone();
                async move { svc.call(req).await }
            });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), service),
            );
        }
    });
    GrpcAuthz {
        addr,
        seen,
        calls,
        release,
    }
}

/// What the HTTP authz server was asked.
#[derive(Debug)]
pub struct HttpCheck {
    /// Method.
    pub method: String,
    /// Path with query.
    pub path: String,
    /// Headers.
    pub headers: http::HeaderMap,
}

/// A plain HTTP/1.1 authz server: `x-mode: deny` answers 403 `nope` with `x-deny: yes`,
/// `x-mode: error` answers 500, anything else 200 with `x-authz-user: bob`,
/// `x-append: a2`, `x-resp: r2`, `x-envoy-auth-headers-to-remove: x-secret`.
pub async fn http_authz() -> (SocketAddr, mpsc::UnboundedReceiver<HttpCheck>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        for _ in 0..10_000 {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let tx = tx.clone();
            let service = service_fn(move |req: Request<Incoming>| {
                let tx = tx.clone();
                async move {
                    let mode = req
                        .headers()
                        .get("x-mode")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string();
                    let _ = tx.send(HttpCheck {
                        method: req.method().to_string(),
                        path: req.uri().to_string(),
                        headers: req.headers().clone(),
                    });
                    let b = Response::builder();
                    let resp = match mode.as_str() {
                        "deny" => b
                            .status(403)
                            .header("x-deny", "yes")
                            .body(Full::new(Bytes::from("nope"))),
                        "error" => b.status(500).body(Full::new(Bytes::from("broken"))),
                        _ => b
                            .header("x-authz-user", "bob")
                            .header("x-append", "a2")
                            .header("x-resp", "r2")
                            .header("x-envoy-auth-headers-to-remove", "x-secret")
                            .body(Full::new(Bytes::new())),
                    };
                    Ok::<_, hyper::Error>(resp.unwrap())
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), service),
            );
        }
    });
    (addr, rx)
}

/// An upstream that counts requests and answers 200 with the headers it saw, one
/// `name: value` per line, then `body: <body>`.
pub async fn counting_upstream() -> (SocketAddr, Arc<AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicU64::new(0));
    let h = Arc::clone(&hits);
    tokio::spawn(async move {
        for _ in 0..10_000 {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let h = Arc::clone(&h);
            let service = service_fn(move |req: Request<Incoming>| {
                let h = Arc::clone(&h);
                async move {
                    h.fetch_add(1, Ordering::SeqCst);
                    let mut text = format!("{} {}\n", req.method(), req.uri());
                    for (k, v) in req.headers() {
                        text.push_str(&format!("{k}: {}\n", v.to_str().unwrap_or("?")));
                    }
                    let body = req.into_body().collect().await.unwrap().to_bytes();
                    text.push_str(&format!("body: {}\n", String::from_utf8_lossy(&body)));
                    Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from(text))))
                }
            });
            tokio::spawn(async move {
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), service)
                    .await;
            });
        }
    });
    (addr, hits)
}
