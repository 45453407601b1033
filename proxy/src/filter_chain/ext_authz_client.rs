//! ext_authz's transport: gRPC `Authorization/Check` through a courier cluster
//! (`envoy_grpc`, a unary call on the calling worker's own HTTP/2 connections to the
//! cluster's hosts, `ClusterClient::unary`) or a direct tonic channel
//! (`google_grpc`, one per thread, built on first use), and HTTP checks through a
//! cluster. Every call runs on the request's own task; an HTTP check and an `envoy_grpc`
//! one retry under their service's `retry_policy` ([`call_retry`]).

use super::call_retry;
use crate::upstream::client::{ClientError, ClusterClient};
use crate::upstream::unary::UnaryResponse;
use bytes::{Buf, Bytes};
use courier_config::config_source::{GrpcService, GrpcTarget};
use courier_config::filters::http_uri::{CallRetryPolicy, HttpUri};
use courier_filters::ext_authz::{AuthzTransport, CheckFuture, HttpCheckFuture};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::{CheckRequest, CheckResponse};
use http::{HeaderName, HeaderValue, Request, header};
use prost::Message;
use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;
use tonic::transport::Channel;

const CHECK_PATH: &str = "/envoy.service.auth.v3.Authorization/Check";

/// Bounds a call whose config sets no deadline (the filter bounds it too).
const UNBOUNDED: Duration = Duration::from_secs(3600);

thread_local! {
    /// `google_grpc` channels of this thread, by target URI: each worker keeps its own
    /// connection, so no call crosses threads.
    static CHANNELS: RefCell<HashMap<String, Channel>> = RefCell::new(HashMap::new());
}

/// ext_authz calls over courier's clusters and direct channels.
#[derive(Debug)]
pub struct ClusterAuthz(pub ClusterClient);

impl AuthzTransport for ClusterAuthz {
    fn check<'a>(
        &'a self,
        service: &'a GrpcService,
        timeout: Option<Duration>,
        frame: Bytes,
    ) -> CheckFuture<'a> {
        match &service.target {
            GrpcTarget::EnvoyGrpc {
                cluster_name,
                authority,
            } => Box::pin(self.envoy_grpc(
                cluster_name,
                authority.as_deref().unwrap_or(cluster_name),
                service,
                timeout,
                frame,
            )),
            GrpcTarget::GoogleGrpc { target_uri, .. } => {
                let channel = channel(target_uri);
                Box::pin(async move {
                    let channel = channel?;
                    // tonic encodes the message itself.
                    let req = CheckRequest::decode(frame.get(5..).unwrap_or_default())
                        .map_err(|e| e.to_string())?;
                    let mut r = tonic::Request::new(req);
                    if let Some(t) = timeout {
                        r.set_timeout(t);
                    }
                    for (k, v) in &service.initial_metadata {
                        if let (Ok(k), Ok(v)) = (
                            tonic::metadata::AsciiMetadataKey::from_bytes(k.as_bytes()),
                            v.parse(),
                        ) {
                            r.metadata_mut().insert(k, v);
                        }
                    }
                    AuthorizationClient::new(channel)
                        .check(r)
                        .await
                        .map(tonic::Response::into_inner)
                        .map_err(|s| format!("grpc status {}: {}", s.code() as i32, s.message()))
                })
            }
        }
    }

    fn http<'a>(
        &'a self,
        uri: &'a HttpUri,
        retry: Option<&'a CallRetryPolicy>,
        req: Request<Bytes>,
    ) -> HttpCheckFuture<'a> {
        Box::pin(async move {
            let mut started = tokio::time::Instant::now();
            // A copy for the retries, only when there may be some.
            let spare = retry.map(|_| req.clone());
            let mut first = Some(req);
            let mut resp = call_retry::run(retry, || {
                // The router stamps the time of the attempt that answered.
                started = tokio::time::Instant::now();
                let req = first.take().or_else(|| spare.clone()).unwrap_or_default();
                self.0
                    .send(&uri.cluster, req, uri.timeout.unwrap_or(UNBOUNDED))
            })
            .await
            .map_err(|e| e.to_string())?;
            // Envoy's async client goes through its router, which stamps the answer; a
            // denial passes the server's headers on to the client, this one included.
            resp.headers_mut().insert(
                "x-envoy-upstream-service-time",
                HeaderValue::from(started.elapsed().as_millis() as u64),
            );
            Ok(resp)
        })
    }
}

/// This thread's channel to `target` (plaintext; `dns:///` stripped).
fn channel(target: &str) -> Result<Channel, String> {
    CHANNELS.with(|c| {
        if let Some(ch) = c.borrow().get(target) {
            return Ok(ch.clone());
        }
        let authority = target
            .strip_prefix("dns:///")
            .or_else(|| target.strip_prefix("dns:"))
            .unwrap_or(target);
        let ch = Channel::from_shared(format!("http://{authority}"))
            .map_err(|e| format!("{target}: {e}"))?
            .connect_lazy();
        c.borrow_mut().insert(target.to_string(), ch.clone());
        Ok(ch)
    })
}

const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
/// Pre-parsed: looked up on every answer.
static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// `grpc-timeout` in milliseconds (at most 8 digits).
fn grpc_timeout(t: Duration) -> HeaderValue {
    let mut ms = t.as_millis().min(99_999_999) as u32;
    let mut out = [0u8; 9];
    let mut i = 8;
    out[8] = b'm';
    // At most 8 digits.
    loop {
        i -= 1;
        out[i] = b'0' + (ms % 10) as u8;
        ms /= 10;
        if ms == 0 {
            break;
        }
    }
    HeaderValue::from_bytes(&out[i..]).unwrap_or(HeaderValue::from_static("0m"))
}

/// A check's URI and headers as built for a service on this thread: the same for every
/// check of a filter config, so built once and cloned (no parsing, no hashing) per check.
struct CheckHead {
    path: &'static str,
    authority: String,
    timeout: Option<Duration>,
    metadata: Vec<(String, String)>,
    uri: http::Uri,
    headers: http::HeaderMap,
}

/// How many services' heads a thread keeps (configs come and go over xDS; past this, a
/// head is built per check).
const HEADS_KEPT: usize = 16;

thread_local! {
    static HEADS: RefCell<Vec<CheckHead>> = const { RefCell::new(Vec::new()) };
}

/// The check's URI in HTTP/2 form (`:scheme`, `:authority` in it) and its headers:
/// `content-type`, `te`, `grpc-timeout`, then the service's `initial_metadata`.
fn check_head(
    path: &'static str,
    authority: &str,
    service: &GrpcService,
    timeout: Option<Duration>,
) -> Result<(http::Uri, http::HeaderMap), String> {
    let kept = HEADS.with(|h| {
        h.borrow()
            .iter()
            .find(|k| {
                k.path == path
                    && k.authority == authority
                    && k.timeout == timeout
                    && k.metadata == service.initial_metadata
            })
            .map(|k| (k.uri.clone(), k.headers.clone()))
    });
    if let Some(head) = kept {
        return Ok(head);
    }
    let uri = http::Uri::builder()
        .scheme(http::uri::Scheme::HTTP)
        .authority(authority)
        .path_and_query(http::uri::PathAndQuery::from_static(path))
        .build()
        .map_err(|e| e.to_string())?;
    let mut h = http::HeaderMap::with_capacity(3 + service.initial_metadata.len());
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert(header::TE, HeaderValue::from_static("trailers"));
    if let Some(t) = timeout {
        h.insert(GRPC_TIMEOUT, grpc_timeout(t));
    }
    for (k, v) in &service.initial_metadata {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            h.append(k, v);
        }
    }
    HEADS.with(|heads| {
        let mut heads = heads.borrow_mut();
        if heads.len() < HEADS_KEPT {
            heads.push(CheckHead {
                path,
                authority: authority.to_string(),
                timeout,
                metadata: service.initial_metadata.clone(),
                uri: uri.clone(),
                headers: h.clone(),
            });
        }
    });
    Ok((uri, h))
}

impl ClusterAuthz {
    async fn envoy_grpc(
        &self,
        cluster: &str,
        authority: &str,
        service: &GrpcService,
        timeout: Option<Duration>,
        frame: Bytes,
    ) -> Result<CheckResponse, String> {
        unary_grpc(
            &self.0, CHECK_PATH, cluster, authority, service, timeout, frame,
        )
        .await
    }
}

/// A unary gRPC call to `path` through `cluster` (`envoy_grpc`) with `frame`, the
/// length-prefixed request, retried under the service's `retry_policy`; decodes the
/// answer as `M`. A non-OK status is an `Err`.
pub(crate) async fn unary_grpc<M: Message + Default>(
    client: &ClusterClient,
    path: &'static str,
    cluster: &str,
    authority: &str,
    service: &GrpcService,
    timeout: Option<Duration>,
    frame: Bytes,
) -> Result<M, String> {
    let (uri, headers) = check_head(path, authority, service, timeout)?;
    let mut r = Request::new(());
    *r.method_mut() = http::Method::POST;
    *r.uri_mut() = uri;
    *r.version_mut() = http::Version::HTTP_2;
    *r.headers_mut() = headers;
    // A copy for the retries, only when there may be some.
    let spare = service.retry_policy.as_ref().map(|_| clone_head(&r));
    let mut first = Some(r);
    let resp = call_retry::run(service.retry_policy.as_ref(), || {
        let head = first
            .take()
            .or_else(|| spare.as_ref().map(clone_head))
            .unwrap_or_default();
        client.unary(cluster, head, frame.clone())
    })
    .await
    .map_err(|e: ClientError| e.to_string())?;
    decode_unary(resp)
}

/// A copy of a call's head for another attempt (a bodiless `Request` has no `Clone`
/// bound to meet, but its extensions cannot be copied: the calls set none).
fn clone_head(r: &Request<()>) -> Request<()> {
    let mut c = Request::new(());
    *c.method_mut() = r.method().clone();
    *c.uri_mut() = r.uri().clone();
    *c.version_mut() = r.version();
    *c.headers_mut() = r.headers().clone();
    c
}

/// The message of a unary answer; a non-200 status or a non-OK `grpc-status` is an `Err`.
fn decode_unary<M: Message + Default>(resp: UnaryResponse) -> Result<M, String> {
    if resp.head.status != http::StatusCode::OK {
        return Err(format!("http status {}", resp.head.status.as_u16()));
    }
    // Trailers-only answers carry the status in the headers.
    let status = resp
        .trailers
        .as_ref()
        .and_then(|t| t.get(&GRPC_STATUS))
        .or_else(|| resp.head.headers.get(&GRPC_STATUS))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok());
    if status != Some(0) {
        return Err(format!("grpc status {status:?}"));
    }
    let mut data = resp.body;
    if data.len() < 5 || data[0] != 0 {
        return Err("malformed gRPC message".into());
    }
    data.advance(1);
    let len = data.get_u32() as usize;
    if data.len() < len {
        return Err("truncated gRPC message".into());
    }
    M::decode(data.slice(..len)).map_err(|e| e.to_string())
}
