//! A loopback upstream on hyper serving HTTP/1.1 and h2c (prior knowledge) on
//! one port, on a runtime of its own, for tests that need a real HTTP server
//! but no particular wire behaviour: each request gets what `answer` makes of
//! its head (the body is not read).

use bytes::Bytes;
use http_body_util::Full;
use std::net::SocketAddr;

/// Starts the upstream; its address. `answer` turns a request head into the
/// response.
pub fn start(answer: fn(&http::request::Parts) -> http::Response<Full<Bytes>>) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let Ok(l) = tokio::net::TcpListener::bind("127.0.0.1:0").await else {
                return;
            };
            let _ = tx.send(l.local_addr());
            while let Ok((s, _)) = l.accept().await {
                let svc = hyper::service::service_fn(
                    move |req: http::Request<hyper::body::Incoming>| async move {
                        let (parts, _) = req.into_parts();
                        Ok::<_, std::convert::Infallible>(answer(&parts))
                    },
                );
                tokio::spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                    .await;
                });
            }
        });
    });
    match rx.recv() {
        Ok(Ok(addr)) => addr,
        Ok(Err(e)) => panic!("binding the hyper upstream: {e}"),
        Err(_) => panic!("the hyper upstream's runtime did not start"),
    }
}
