//! The upstream of the hostile corpus: HTTP/1.1 and h2c (hyper), recording every
//! request it receives with the case it belongs to (`x-case`).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::sync::mpsc;

/// A request as the upstream saw it.
pub struct Seen {
    /// The `x-case` header.
    pub case: String,
    /// Request line, headers (one per line) and body.
    pub text: String,
}

/// The running upstream.
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    rx: mpsc::Receiver<Seen>,
}

impl Upstream {
    /// Starts it on its own thread.
    pub fn start() -> Upstream {
        let (tx, rx) = mpsc::channel();
        let (addr_tx, addr_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(l.local_addr().unwrap()).unwrap();
                loop {
                    let Ok((s, _)) = l.accept().await else {
                        continue;
                    };
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let svc = service_fn(move |req: hyper::Request<Incoming>| {
                            let tx = tx.clone();
                            async move {
                                let mut text = format!("{} {}\n", req.method(), req.uri());
                                let case = req
                                    .headers()
                                    .get("x-case")
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or("")
                                    .to_string();
                                for (k, v) in req.headers() {
                                    text.push_str(&format!(
                                        "{k}: {}\n",
                                        String::from_utf8_lossy(v.as_bytes())
                                    ));
                                }
                                // Only whole requests count: one the proxy reset
                                // midway reached nobody as a request.
                                if let Ok(body) = req.into_body().collect().await {
                                    let body = body.to_bytes();
                                    text.push_str(&format!(
                                        "body: {}",
                                        String::from_utf8_lossy(&body)
                                    ));
                                    let _ = tx.send(Seen { case, text });
                                }
                                Ok::<_, hyper::Error>(hyper::Response::new(Full::new(
                                    Bytes::from_static(b"ok"),
                                )))
                            }
                        });
                        let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(s), svc)
                            .await;
                    });
                }
            });
        });
        Upstream {
            addr: addr_rx.recv().unwrap(),
            rx,
        }
    }

    /// Everything received since the last call.
    pub fn drain(&self) -> Vec<Seen> {
        self.rx.try_iter().collect()
    }
}
