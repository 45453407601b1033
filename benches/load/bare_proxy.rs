//! The load harness's floor: the smallest reverse proxy on courier's stack
//! (one current-thread tokio runtime, hyper 1.x's HTTP/1.1 and h2c server on
//! one port, a last-in-first-out pool of hyper HTTP/1.1 client connections to
//! one upstream), with none of courier's work — no routing, header rules,
//! timeouts, stats or config. The harness runs it beside courier so a figure
//! says how much of courier's cost per request is its own and how much is the
//! stack's (`../shared/research/hyper-proxy-costs.md` measured the same
//! design at about 1.04–1.13× nginx's requests per CPU-second on HTTP/1.1).
//!
//! Usage: `bench-bare-proxy LISTEN_ADDR UPSTREAM_ADDR MAX_SECONDS` — exits by
//! itself after `MAX_SECONDS` so a harness that dies cannot leave it running.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::body::Incoming;
use hyper::client::conn::http1 as client;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

type Error = Box<dyn std::error::Error + Send + Sync>;
type Body = UnsyncBoxBody<Bytes, hyper::Error>;

/// Idle upstream connections, most recently used last (reused first: a warm
/// connection's buffers and socket are still in cache).
#[derive(Default)]
struct Pool {
    idle: RefCell<Vec<client::SendRequest<Incoming>>>,
}

impl Pool {
    /// An idle connection that is still open, or a new one.
    async fn checkout(&self, upstream: SocketAddr) -> Result<client::SendRequest<Incoming>, Error> {
        // Not `while let`: its scrutinee's borrow would be held across the
        // `ready().await`, while other requests' tasks use the pool.
        loop {
            let Some(mut conn) = self.idle.borrow_mut().pop() else {
                break;
            };
            if conn.ready().await.is_ok() {
                return Ok(conn);
            }
        }
        let stream = TcpStream::connect(upstream).await?;
        stream.set_nodelay(true)?;
        let (send, conn) = client::handshake(TokioIo::new(stream)).await?;
        tokio::task::spawn_local(async move {
            let _ = conn.await;
        });
        Ok(send)
    }
}

/// Forwards one request and hands the connection back to the pool once the
/// response's head is in (hyper queues the next request behind the body).
async fn forward(
    pool: Rc<Pool>,
    upstream: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Body>, Error> {
    let mut conn = pool.checkout(upstream).await?;
    let (mut parts, body) = req.into_parts();
    // HTTP/2 requests arrive in absolute form; the upstream speaks HTTP/1.1.
    parts.version = hyper::Version::HTTP_11;
    if parts.uri.authority().is_some() {
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        parts.uri = path.parse()?;
    }
    let resp = conn.send_request(Request::from_parts(parts, body)).await?;
    pool.idle.borrow_mut().push(conn);
    Ok(resp.map(|b| b.boxed_unsync()))
}

async fn answer(
    pool: Rc<Pool>,
    upstream: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Body>, Error> {
    match forward(pool, upstream, req).await {
        Ok(resp) => Ok(resp),
        Err(_) => {
            let empty = Full::new(Bytes::new()).map_err(|never| match never {});
            let mut resp = Response::new(empty.boxed_unsync());
            *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            Ok(resp)
        }
    }
}

/// The executor h2c streams run on: this thread's `LocalSet`.
#[derive(Clone, Copy)]
struct Local;

impl<F: std::future::Future + 'static> hyper::rt::Executor<F> for Local {
    fn execute(&self, fut: F) {
        tokio::task::spawn_local(fut);
    }
}

async fn serve(listener: TcpListener, upstream: SocketAddr) {
    let pool = Rc::new(Pool::default());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let pool = pool.clone();
        tokio::task::spawn_local(async move {
            let service =
                hyper::service::service_fn(move |req| answer(pool.clone(), upstream, req));
            let _ = auto::Builder::new(Local)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let [_, listen, upstream, max_secs] = args.as_slice() else {
        return Err("usage: bench-bare-proxy LISTEN_ADDR UPSTREAM_ADDR MAX_SECONDS".into());
    };
    let upstream: SocketAddr = upstream.parse()?;
    let max = Duration::from_secs(max_secs.parse()?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = TcpListener::bind(listen.as_str()).await?;
        let _ = tokio::time::timeout(max, serve(listener, upstream)).await;
        Ok::<(), Error>(())
    })
}
