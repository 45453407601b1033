//! The load harness's upstream: a tiny HTTP/1.1 server on one current-thread
//! runtime that answers every request with the 13 bytes `Hello, World!`.
//!
//! Usage: `bench-upstream ADDR PORT_FILE MAX_SECONDS [STATUS]` — binds `ADDR`
//! (port 0 for any), writes the bound port to `PORT_FILE` once listening, and
//! exits by itself after `MAX_SECONDS` so a harness that dies cannot leave it
//! running. `STATUS` (default 200) is the status of every answer: the
//! resilience scenario runs one host answering 503.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::time::Duration;
use tokio::net::TcpListener;

type Error = Box<dyn std::error::Error + Send + Sync>;

const BODY: &[u8] = b"Hello, World!";

/// The status of every answer (set once at start).
static STATUS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(200);

async fn answer(_req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut resp = Response::new(Full::new(Bytes::from_static(BODY)));
    let status = STATUS.load(std::sync::atomic::Ordering::Relaxed);
    *resp.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    Ok(resp)
}

async fn serve(listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors or similar: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::task::spawn_local(async move {
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service_fn(answer))
                .await;
        });
    }
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let (addr, port_file, max_secs) = match args.as_slice() {
        [_, a, p, m] => (a, p, m),
        [_, a, p, m, status] => {
            STATUS.store(status.parse()?, std::sync::atomic::Ordering::Relaxed);
            (a, p, m)
        }
        _ => return Err("usage: bench-upstream ADDR PORT_FILE MAX_SECONDS [STATUS]".into()),
    };
    let max = Duration::from_secs(max_secs.parse()?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = TcpListener::bind(addr.as_str()).await?;
        let port = listener.local_addr()?.port();
        // Written whole to a temporary name, then renamed, so a reader never sees half.
        let tmp = format!("{port_file}.tmp");
        std::fs::write(&tmp, format!("{port}\n"))?;
        std::fs::rename(&tmp, port_file)?;
        let _ = tokio::time::timeout(max, serve(listener)).await;
        Ok::<(), Error>(())
    })
}
