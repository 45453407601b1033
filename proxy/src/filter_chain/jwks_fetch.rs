//! jwt_authn's remote JWKS, fetched through courier's own clusters.

use crate::upstream::client::ClusterClient;
use bytes::Bytes;
use courier_config::filters::http_uri::HttpUri;
use courier_filters::jwt_authn::jwks_cache::{FetchFuture, JwksFetcher};
use http::{Request, StatusCode, header};
use std::time::Duration;

/// A zero `http_uri.timeout` means none in Envoy's async client; courier still bounds a
/// fetch so a stalled JWKS server cannot hold requests forever.
const UNBOUNDED_FETCH: Duration = Duration::from_secs(3600);

/// Fetches `http_uri` with a GET through its cluster: the body of a 200 is the JWKS,
/// anything else a failure (as Envoy's `JwksFetcher`).
#[derive(Debug)]
pub struct ClusterJwksFetcher(pub ClusterClient);

impl JwksFetcher for ClusterJwksFetcher {
    fn fetch<'a>(&'a self, uri: &'a HttpUri) -> FetchFuture<'a> {
        Box::pin(async move {
            let req = Request::get(uri.path.as_str())
                .header(header::HOST, uri.host.as_str())
                .body(Bytes::new())
                .map_err(|e| format!("{}: {e}", uri.uri))?;
            let timeout = uri.timeout.unwrap_or(UNBOUNDED_FETCH);
            let resp = self
                .0
                .send(&uri.cluster, req, timeout)
                .await
                .map_err(|e| format!("{}: {e}", uri.uri))?;
            if resp.status() != StatusCode::OK {
                return Err(format!("{}: status {}", uri.uri, resp.status().as_u16()));
            }
            Ok(resp.into_body())
        })
    }
}
