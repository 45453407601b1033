//! Envoy's local replies: a status, an optional `text/plain` body, and
//! `content-length`, as `sendLocalReply` builds them.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;

/// The response body type of everything courier answers itself.
pub type Body = Full<Bytes>;

/// A local reply with `body` (no `content-type` when the body is empty, as Envoy).
pub fn reply(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let body: Bytes = body.into();
    let mut resp = Response::new(Full::new(body.clone()));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    if !body.is_empty() {
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    }
    resp
}
