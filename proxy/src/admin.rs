//! The admin endpoint (`admin.address`), served on the main thread: `/ready`,
//! `/stats`, `/stats/prometheus`, `/server_info`, `/listeners`, `/clusters`,
//! `/quitquitquit`.

use crate::local_reply::{Body, reply};
use crate::server::{Shared, State};
use crate::stats;
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Binds admin and serves it in the background; returns the bound address.
pub async fn spawn(addr: SocketAddr, shared: Arc<Shared>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let shared = Arc::clone(&shared);
                    async move { Ok::<_, std::convert::Infallible>(handle(&req, &shared)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(bound)
}

fn handle(req: &Request<Incoming>, shared: &Shared) -> Response<Body> {
    let path = req.uri().path();
    let query = req.uri().query().unwrap_or("");
    // Envoy: endpoints that change state need POST.
    let mutating = matches!(
        path,
        "/quitquitquit" | "/drain_listeners" | "/healthcheck/fail" | "/healthcheck/ok"
    );
    if mutating && req.method() != Method::POST {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "This endpoint requires POST\n",
        );
    }
    match path {
        "/ready" => match shared.state() {
            State::Live => reply(StatusCode::OK, "LIVE\n"),
            State::Initializing => reply(StatusCode::SERVICE_UNAVAILABLE, "INITIALIZING\n"),
            State::Draining => reply(StatusCode::SERVICE_UNAVAILABLE, "DRAINING\n"),
        },
        "/stats" => {
            let samples = stats::collect(&shared.stats);
            if query.split('&').any(|p| p == "format=prometheus") {
                prometheus(&samples)
            } else {
                reply(StatusCode::OK, stats::render_text(&samples))
            }
        }
        "/stats/prometheus" => prometheus(&stats::collect(&shared.stats)),
        "/server_info" => json(server_info(shared)),
        "/listeners" => {
            let mut s = String::new();
            for (name, addr) in &shared.listeners {
                s.push_str(&format!("{name}::{addr}\n"));
            }
            reply(StatusCode::OK, s)
        }
        "/clusters" => {
            let snapshot = shared.snapshot.load();
            let mut names: Vec<&String> = snapshot.clusters.keys().collect();
            names.sort();
            let mut s = String::new();
            for name in names {
                s.push_str(&format!(
                    "{name}::default_priority::max_connections::1024\n"
                ));
            }
            reply(StatusCode::OK, s)
        }
        "/quitquitquit" => {
            shared.quit.notify_one();
            reply(StatusCode::OK, "OK\n")
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "invalid path. admin commands are: /clusters /listeners /quitquitquit /ready /server_info /stats /stats/prometheus\n",
        ),
    }
}

fn prometheus(samples: &[stats::Sample]) -> Response<Body> {
    let mut r = reply(StatusCode::OK, stats::render_prometheus(samples));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

fn json(v: serde_json::Value) -> Response<Body> {
    let mut r = reply(StatusCode::OK, format!("{v:#}\n"));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn server_info(shared: &Shared) -> serde_json::Value {
    let uptime = shared.started.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    let state = match shared.state() {
        State::Live => "LIVE",
        State::Initializing => "INITIALIZING",
        State::Draining => "DRAINING",
    };
    serde_json::json!({
        "version": concat!("courier/", env!("CARGO_PKG_VERSION")),
        "state": state,
        "uptime_current_epoch": format!("{uptime}s"),
        "uptime_all_epochs": format!("{uptime}s"),
        "command_line_options": { "concurrency": shared.concurrency },
    })
}
