//! courier's own requests to a cluster: a remote JWKS fetch, an authorization check, a
//! control-plane call. They take the same way as a routed request (the cluster's load
//! balancer, then the calling thread's connection pool with the cluster's protocol and
//! TLS), so an internal call needs no connection of its own and no lock.
//!
//! Like the pools, the client is usable from any thread with a tokio runtime: each
//! thread gets its own connections to the cluster's hosts.

use super::host::Host;
use super::pool::{self, Lease, UpstreamBody};
use super::unary::{self, UnaryResponse};
use super::{ClusterManager, UpstreamCluster};
use crate::stats::ClusterStats;
use bytes::Bytes;
use courier_config::cluster::UpstreamProtocol;
use http::uri::{self, PathAndQuery};
use http::{HeaderValue, Request, Response, Uri, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::sync::Arc;
use std::time::Duration;

/// Why an internal request got no response.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The cluster does not exist.
    #[error("cluster {0} is unknown")]
    UnknownCluster(String),
    /// The cluster has no host to send to.
    #[error("cluster {0} has no healthy upstream")]
    NoHealthyUpstream(String),
    /// Connecting or sending failed (Envoy's response code details in the message).
    #[error("upstream {}", .0.details())]
    Send(pool::SendError),
    /// No complete response within the timeout.
    #[error("timed out")]
    Timeout,
    /// The response body failed midway.
    #[error("response body: {0}")]
    Body(String),
}

/// Sends courier's own requests to clusters by name.
#[derive(Debug, Clone)]
pub struct ClusterClient {
    clusters: Arc<ClusterManager>,
    /// Counters of the internal traffic, per cluster index (not the routed traffic's
    /// per-worker counters: internal calls may run on any thread).
    stats: Arc<[ClusterStats]>,
}

impl ClusterClient {
    /// A client for the clusters of `clusters`.
    pub fn new(clusters: Arc<ClusterManager>) -> Self {
        let stats = clusters
            .clusters()
            .iter()
            .map(|_| ClusterStats::default())
            .collect();
        Self { clusters, stats }
    }

    /// Sends `req` to a host of `cluster` and reads the whole response, all within
    /// `timeout`.
    pub async fn send(
        &self,
        cluster: &str,
        req: Request<Bytes>,
        timeout: Duration,
    ) -> Result<Response<Bytes>, ClientError> {
        let exchange = async {
            let (parts, body) = req.into_parts();
            let req = Request::from_parts(parts, full_body(body));
            let (resp, lease) = self.send_streaming(cluster, req).await?;
            let (parts, body) = resp.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| ClientError::Body(e.to_string()))?
                .to_bytes();
            lease.release();
            Ok(Response::from_parts(parts, body))
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| ClientError::Timeout)?
    }

    /// Sends `req` to a host of `cluster` and returns the response as it arrives; the
    /// lease goes back (with [`Lease::release`]) once its body has been read to the end.
    /// No timeout: the caller bounds the exchange.
    pub async fn send_streaming(
        &self,
        cluster: &str,
        req: Request<UpstreamBody>,
    ) -> Result<(Response<Incoming>, Lease), ClientError> {
        let (c, host) = self.pick(cluster)?;
        let req = for_protocol(req, c.config.http.protocol);
        pool::send(&c, &host, req, self.stats_of(&c))
            .await
            .map_err(ClientError::Send)
    }

    /// A unary call: `head` with the whole `body`, the whole response back. On an HTTP/2
    /// cluster it takes courier's own HTTP/2 connections ([`unary`]: HEADERS and DATA in
    /// one write, nothing spawned per call); `head` must then be in HTTP/2 form (scheme
    /// and authority in the URI). Otherwise it goes through the pool as
    /// [`Self::send_streaming`] does. No timeout: the caller bounds the call.
    pub async fn unary(
        &self,
        cluster: &str,
        head: Request<()>,
        body: Bytes,
    ) -> Result<UnaryResponse, ClientError> {
        let (c, host) = self.pick(cluster)?;
        let stats = self.stats_of(&c);
        // A cluster that names its TLS connections after the request
        // (`upstream_http_protocol_options`) takes the pool, which does that.
        if c.config.http.protocol == UpstreamProtocol::Http2 && !c.config.http.auto_sni.any() {
            return unary::call(&c, &host, head, body, stats)
                .await
                .map_err(ClientError::Send);
        }
        let (parts, ()) = head.into_parts();
        let req = for_protocol(
            Request::from_parts(parts, full_body(body)),
            c.config.http.protocol,
        );
        let (resp, lease) = pool::send(&c, &host, req, stats)
            .await
            .map_err(ClientError::Send)?;
        let (head, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| ClientError::Body(e.to_string()))?;
        lease.release();
        let trailers = body.trailers().cloned();
        Ok(UnaryResponse {
            head,
            body: body.to_bytes(),
            trailers,
        })
    }

    /// The cluster named `cluster` and the host its load balancer chooses.
    fn pick(&self, cluster: &str) -> Result<(Arc<UpstreamCluster>, Arc<Host>), ClientError> {
        let c = self
            .clusters
            .get(cluster)
            .ok_or_else(|| ClientError::UnknownCluster(cluster.to_string()))?;
        let host = c
            .choose()
            .ok_or_else(|| ClientError::NoHealthyUpstream(cluster.to_string()))?;
        Ok((c, host))
    }

    /// The counters internal calls to `c` count in.
    fn stats_of<'a>(&'a self, c: &'a UpstreamCluster) -> &'a ClusterStats {
        match c.stat_slot.and_then(|i| self.stats.get(i)) {
            Some(s) => s,
            None => &c.stats,
        }
    }
}

/// Puts the authority where the cluster's protocol carries it: HTTP/2 in the URI
/// (`:authority`, with `:scheme` http), HTTP/1.1 in `host` with an origin-form target.
fn for_protocol<B>(mut req: Request<B>, protocol: UpstreamProtocol) -> Request<B> {
    // Already in HTTP/2 form (ext_authz builds its checks so): nothing to rebuild.
    if protocol == UpstreamProtocol::Http2
        && req.uri().scheme().is_some()
        && req.uri().authority().is_some()
        && !req.headers().contains_key(header::HOST)
    {
        *req.version_mut() = http::Version::HTTP_2;
        return req;
    }
    let (mut parts, body) = req.into_parts();
    let authority = parts
        .uri
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            let host = parts.headers.get(header::HOST)?;
            host.to_str().ok().map(str::to_string)
        });
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let mut uri = uri::Parts::default();
    if protocol == UpstreamProtocol::Http2 {
        parts.version = http::Version::HTTP_2;
        parts.headers.remove(header::HOST);
        uri.scheme = Some(uri::Scheme::HTTP);
        uri.authority = authority.and_then(|a| uri::Authority::try_from(a).ok());
    } else {
        parts.version = http::Version::HTTP_11;
        if let Some(v) = authority.and_then(|a| HeaderValue::try_from(a).ok()) {
            parts.headers.insert(header::HOST, v);
        }
    }
    uri.path_and_query = Some(path);
    if let Ok(u) = Uri::from_parts(uri) {
        parts.uri = u;
    }
    Request::from_parts(parts, body)
}

/// The head of a unary gRPC call to `path` for [`ClusterClient::unary`], in HTTP/2
/// form: `content-type`, `te`, then the service's `initial_metadata` (entries that
/// are not valid header names or values are left out).
pub fn grpc_head(
    authority: &str,
    path: &str,
    metadata: &[(String, String)],
) -> Result<Request<()>, http::Error> {
    let uri = Uri::builder()
        .scheme(uri::Scheme::HTTP)
        .authority(authority)
        .path_and_query(path)
        .build()?;
    let mut r = Request::builder()
        .method(http::Method::POST)
        .uri(uri)
        .version(http::Version::HTTP_2)
        .header(header::CONTENT_TYPE, "application/grpc")
        .header(header::TE, "trailers")
        .body(())?;
    for (k, v) in metadata {
        if let (Ok(k), Ok(v)) = (
            http::HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            r.headers_mut().append(k, v);
        }
    }
    Ok(r)
}

/// A client-streaming call's request: the messages `rx` yields, with the
/// service's `initial_metadata` (entries that are not valid metadata left out,
/// as they are refused when the config loads).
pub fn grpc_stream<T>(
    rx: tokio::sync::mpsc::Receiver<T>,
    metadata: &[(String, String)],
) -> tonic::Request<tonic::codegen::tokio_stream::wrappers::ReceiverStream<T>> {
    let mut req = tonic::Request::new(tonic::codegen::tokio_stream::wrappers::ReceiverStream::new(
        rx,
    ));
    for (k, v) in metadata {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(k.as_bytes()),
            v.parse(),
        ) {
            req.metadata_mut().insert(k, v);
        }
    }
    req
}

/// The gRPC message frame of `m` (uncompressed), for [`ClusterClient::unary`].
pub fn grpc_frame(m: &impl prost::Message) -> Bytes {
    use bytes::BufMut;
    let len = m.encoded_len();
    let mut b = bytes::BytesMut::with_capacity(5 + len);
    b.put_u8(0);
    b.put_u32(len as u32);
    // Encoding into a buffer with room for it cannot fail.
    let _ = m.encode(&mut b);
    b.freeze()
}

/// A request body of `bytes`, for [`ClusterClient::send_streaming`].
pub fn full_body(bytes: Bytes) -> UpstreamBody {
    UpstreamBody::new(crate::request::body::RequestBody::full(bytes), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_config::load::Format;
    use courier_config::snapshot::Snapshot;
    use http_body_util::Full;
    use hyper::server::conn::http1;
    use hyper_util::rt::TokioIo;

    /// A bootstrap with cluster `up` at `addr` and cluster `none` with no endpoint.
    fn clusters(addr: std::net::SocketAddr) -> Arc<ClusterManager> {
        let yaml = format!(
            r#"
static_resources:
  clusters:
  - name: up
    connect_timeout: 1s
    load_assignment:
      cluster_name: up
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}
  - name: none
    connect_timeout: 1s
"#,
            addr.port()
        );
        let b = courier_config::bootstrap_from_str(&yaml, Format::Yaml).unwrap();
        Arc::new(ClusterManager::new(&Snapshot::from_bootstrap(&b)).unwrap())
    }

    /// Answers every request with its method, path and body, after `delay`.
    async fn echo_server(delay: Duration) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| async move {
                    tokio::time::sleep(delay).await;
                    let head = format!("{} {} ", req.method(), req.uri().path());
                    let body = req.into_body().collect().await?.to_bytes();
                    let mut out = head.into_bytes();
                    out.extend_from_slice(&body);
                    Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from(out))))
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(s), svc));
            }
        });
        addr
    }

    #[tokio::test]
    async fn sends_through_the_cluster_and_reads_the_whole_response() {
        let addr = echo_server(Duration::ZERO).await;
        let client = ClusterClient::new(clusters(addr));
        for body in ["first", "second"] {
            let req = Request::post("/check").body(Bytes::from(body)).unwrap();
            let resp = client
                .send("up", req, Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            assert_eq!(resp.body(), format!("POST /check {body}").as_bytes());
        }
    }

    #[tokio::test]
    async fn unknown_empty_and_slow_clusters_are_errors() {
        let addr = echo_server(Duration::from_secs(5)).await;
        let client = ClusterClient::new(clusters(addr));
        let get = || Request::get("/").body(Bytes::new()).unwrap();
        let short = Duration::from_millis(100);
        assert!(matches!(
            client.send("nope", get(), short).await,
            Err(ClientError::UnknownCluster(_))
        ));
        assert!(matches!(
            client.send("none", get(), short).await,
            Err(ClientError::NoHealthyUpstream(_))
        ));
        assert!(matches!(
            client.send("up", get(), short).await,
            Err(ClientError::Timeout)
        ));
    }
}
