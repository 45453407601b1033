//! A programmable upstream for resilience tests: a closure decides, per request
//! (numbered from 0), what to answer — a status, a stall, a gRPC status, a reset —
//! and the upstream records what it saw and how many requests (and retries) were
//! in flight at once.

use bytes::Bytes;
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

/// What to do with one request.
#[derive(Debug, Clone)]
pub enum Act {
    /// Answer with this status.
    Status(u16),
    /// Wait, then answer 200.
    Stall(Duration),
    /// Wait, then answer with this status.
    StallStatus(Duration, u16),
    /// Answer 200 with this `grpc-status` in the headers (trailers-only).
    Grpc(u32),
    /// A `grpc.health.v1` answer with this status (1 SERVING, 2 NOT_SERVING).
    GrpcHealth(u8),
    /// Wait until the upstream's gate opens (or 10 s), then answer 200.
    Gate,
    /// Answer with this status and these headers.
    WithHeaders(u16, Vec<(&'static str, String)>),
    /// Answer with this status and body.
    Body(u16, &'static str),
}

/// What one request looked like.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Its `x-envoy-attempt-count`.
    pub attempt: Option<String>,
    /// Its body.
    pub body: Bytes,
    /// Its headers.
    pub headers: http::HeaderMap,
    /// Its method.
    pub method: http::Method,
    /// Its path.
    pub path: String,
}

/// The upstream's record.
#[derive(Debug, Default)]
pub struct Log {
    /// Requests received.
    pub count: AtomicU64,
    /// Requests in flight.
    pub active: AtomicU64,
    /// Retries (attempt count > 1) in flight.
    pub retries_active: AtomicU64,
    /// The most retries ever in flight at once.
    pub retries_max: AtomicU64,
    /// Every request seen, in arrival order.
    pub seen: tokio::sync::Mutex<Vec<Seen>>,
    /// Opens [`Act::Gate`].
    pub gate: tokio::sync::Notify,
    gate_open: std::sync::atomic::AtomicBool,
}

impl Log {
    /// Opens the gate for every waiting and future [`Act::Gate`] request.
    pub fn open_gate(&self) {
        self.gate_open.store(true, Ordering::SeqCst);
        self.gate.notify_waiters();
    }
}

type Decide = dyn Fn(u64, &http::request::Parts) -> Act + Send + Sync;

/// Starts an upstream (HTTP/1.1 and h2c) on loopback.
pub async fn upstream(
    decide: impl Fn(u64, &http::request::Parts) -> Act + Send + Sync + 'static,
) -> (SocketAddr, Arc<Log>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = Arc::new(Log::default());
    let decide: Arc<Decide> = Arc::new(decide);
    let l = Arc::clone(&log);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (log, decide) = (Arc::clone(&l), Arc::clone(&decide));
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let (log, decide) = (Arc::clone(&log), Arc::clone(&decide));
                    async move { Ok::<_, hyper::Error>(serve(req, &log, &*decide).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, log)
}

async fn serve(req: Request<Incoming>, log: &Log, decide: &Decide) -> Response<Full<Bytes>> {
    let n = log.count.fetch_add(1, Ordering::SeqCst);
    log.active.fetch_add(1, Ordering::SeqCst);
    let (parts, body) = req.into_parts();
    let attempt = parts
        .headers
        .get("x-envoy-attempt-count")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let retry = attempt.as_deref().is_some_and(|a| a != "1");
    if retry {
        let now = log.retries_active.fetch_add(1, Ordering::SeqCst) + 1;
        log.retries_max.fetch_max(now, Ordering::SeqCst);
    }
    let act = decide(n, &parts);
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    log.seen.lock().await.push(Seen {
        attempt,
        body,
        headers: parts.headers.clone(),
        method: parts.method.clone(),
        path: parts.uri.path().to_string(),
    });
    let resp = match act {
        Act::Status(s) => Response::builder().status(s).body(Full::default()).unwrap(),
        Act::Body(s, body) => Response::builder()
            .status(s)
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap(),
        Act::Stall(d) => {
            tokio::time::sleep(d).await;
            Response::new(Full::new(Bytes::from_static(b"late")))
        }
        Act::StallStatus(d, s) => {
            tokio::time::sleep(d).await;
            Response::builder().status(s).body(Full::default()).unwrap()
        }
        Act::Grpc(code) => Response::builder()
            .header("content-type", "application/grpc")
            .header("grpc-status", code.to_string())
            .body(Full::default())
            .unwrap(),
        Act::GrpcHealth(status) => Response::builder()
            .header("content-type", "application/grpc")
            .header("grpc-status", "0")
            .body(Full::new(Bytes::from(vec![0, 0, 0, 0, 2, 0x08, status])))
            .unwrap(),
        Act::WithHeaders(status, headers) => {
            let mut b = Response::builder().status(status);
            for (name, value) in headers {
                b = b.header(name, value);
            }
            b.body(Full::default()).unwrap()
        }
        Act::Gate => {
            let notified = log.gate.notified();
            if !log.gate_open.load(Ordering::SeqCst) {
                let _ = tokio::time::timeout(Duration::from_secs(10), notified).await;
            }
            Response::new(Full::new(Bytes::from_static(b"gated")))
        }
    };
    if retry {
        log.retries_active.fetch_sub(1, Ordering::SeqCst);
    }
    log.active.fetch_sub(1, Ordering::SeqCst);
    resp
}

/// A loopback port nothing listens on.
pub fn closed_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}
