//! An OTLP trace collector (opentelemetry-proto's generated `TraceService`, served
//! over h2c with hyper) and an HTTP/1.1 upstream that records the trace headers it
//! receives, both on a runtime thread of their own, for the tracing tests.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
pub use opentelemetry_proto::tonic::trace::v1::Span;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::codegen::Service;

/// One export call as the collector received it.
#[derive(Debug, Clone)]
pub struct Export {
    /// The call's request metadata (lower-case names).
    pub metadata: BTreeMap<String, String>,
    /// The `:authority` of the call.
    pub authority: String,
    /// The message.
    pub request: ExportTraceServiceRequest,
}

#[derive(Clone)]
struct Collector(mpsc::Sender<Export>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let metadata = req
            .metadata()
            .clone()
            .into_headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    v.to_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        let authority = req
            .extensions()
            .get::<Authority>()
            .map(|a| a.0.clone())
            .unwrap_or_default();
        let _ = self.0.send(Export {
            metadata,
            authority,
            request: req.into_inner(),
        });
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[derive(Clone)]
struct Authority(String);

/// A request the upstream received: its path and trace headers.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// The request path.
    pub path: String,
    /// `traceparent`, if any.
    pub traceparent: Option<String>,
    /// `tracestate`, if any.
    pub tracestate: Option<String>,
    /// `x-request-id`, if any.
    pub request_id: Option<String>,
}

/// Starts a collector; its exports arrive on the returned channel.
pub fn collector() -> (SocketAddr, mpsc::Receiver<Export>) {
    let (tx, rx) = mpsc::channel();
    let addr = on_runtime(move || async move {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let svc = TraceServiceServer::new(Collector(tx));
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let svc = svc.clone();
                let service = service_fn(move |mut req: Request<Incoming>| {
                    let mut svc = svc.clone();
                    let authority = req
                        .uri()
                        .authority()
                        .map(|a| a.as_str().to_string())
                        .unwrap_or_default();
                    req.extensions_mut().insert(Authority(authority));
                    async move { svc.call(req).await }
                });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(s), service),
                );
            }
        });
        addr
    });
    (addr, rx)
}

/// Starts an HTTP/1.1 upstream that answers with the status in the request's
/// `x-status` header (200 without it) and reports what it received.
pub fn upstream() -> (SocketAddr, mpsc::Receiver<Seen>) {
    let (tx, rx) = mpsc::channel();
    let addr = on_runtime(move || async move {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let tx = tx.clone();
                let service = service_fn(move |req: Request<Incoming>| {
                    let h = |n: &str| {
                        req.headers()
                            .get(n)
                            .map(|v| v.to_str().unwrap_or_default().to_string())
                    };
                    let _ = tx.send(Seen {
                        path: req.uri().path().to_string(),
                        traceparent: h("traceparent"),
                        tracestate: h("tracestate"),
                        request_id: h("x-request-id"),
                    });
                    let status = h("x-status").and_then(|s| s.parse().ok()).unwrap_or(200);
                    // `x-grpc-status` answers as a gRPC server would, in the headers.
                    let grpc = h("x-grpc-status");
                    async move {
                        let mut b = Response::builder().status(status);
                        if let Some(code) = grpc {
                            b = b
                                .header("content-type", "application/grpc")
                                .header("grpc-status", code)
                                .header("grpc-message", "nope");
                        }
                        Ok::<_, hyper::Error>(
                            b.body(Full::new(Bytes::from_static(b"hello"))).unwrap(),
                        )
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), service),
                );
            }
        });
        addr
    });
    (addr, rx)
}

/// Runs `start` on a new runtime thread that lives as long as the process.
pub fn on_runtime<F, Fut>(start: F) -> SocketAddr
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = SocketAddr>,
{
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            tx.send(start().await).unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().unwrap()
}

/// Every export received within `wait` of the last one.
pub fn exports(rx: &mpsc::Receiver<Export>, wait: Duration) -> Vec<Export> {
    let mut out = Vec::new();
    while let Ok(e) = rx.recv_timeout(wait) {
        out.push(e);
    }
    out
}

/// The spans of `exports`, each with its resource's attributes.
pub fn spans(exports: &[Export]) -> Vec<(BTreeMap<String, String>, Span)> {
    let mut out = Vec::new();
    for e in exports {
        for rs in &e.request.resource_spans {
            let resource = rs
                .resource
                .as_ref()
                .map(|r| attributes(&r.attributes))
                .unwrap_or_default();
            for ss in &rs.scope_spans {
                for s in &ss.spans {
                    out.push((resource.clone(), s.clone()));
                }
            }
        }
    }
    out
}

/// Attributes as text (string values as they are, others in debug form).
pub fn attributes(
    kv: &[opentelemetry_proto::tonic::common::v1::KeyValue],
) -> BTreeMap<String, String> {
    kv.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
