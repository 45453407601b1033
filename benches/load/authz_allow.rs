//! The ext_authz benchmark's authorization server: a trivial gRPC
//! `envoy.service.auth.v3.Authorization` that allows every check, served over h2c
//! on one current-thread runtime.
//!
//! Usage: `bench-authz-allow ADDR PORT_FILE MAX_SECONDS` (as `bench-upstream`).

use envoy_types::pb::envoy::service::auth::v3::authorization_server::{
    Authorization, AuthorizationServer,
};
use envoy_types::pb::envoy::service::auth::v3::{CheckRequest, CheckResponse};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::codegen::Service;

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Allow;

#[tonic::async_trait]
impl Authorization for Allow {
    async fn check(
        &self,
        _request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        Ok(tonic::Response::new(CheckResponse {
            status: Some(RpcStatus::default()),
            ..Default::default()
        }))
    }
}

async fn serve(listener: TcpListener) {
    let svc = AuthorizationServer::new(Allow);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let svc = svc.clone();
        let service = service_fn(move |req: hyper::Request<Incoming>| {
            let mut svc = svc.clone();
            async move { svc.call(req).await }
        });
        tokio::spawn(async move {
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let [_, addr, port_file, max_seconds] = args.as_slice() else {
        return Err("usage: bench-authz-allow ADDR PORT_FILE MAX_SECONDS".into());
    };
    let max = Duration::from_secs(max_seconds.parse()?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = TcpListener::bind(addr.as_str()).await?;
        std::fs::write(port_file, listener.local_addr()?.port().to_string())?;
        let _ = tokio::time::timeout(max, serve(listener)).await;
        Ok(())
    })
}
