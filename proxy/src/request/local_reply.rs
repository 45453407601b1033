//! Envoy's local replies: a status, an optional `text/plain` body, and
//! `content-length`, as `sendLocalReply` builds them — turned into a gRPC
//! trailers-only reply for gRPC requests, and without a body for `HEAD`.

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::Full;

/// The response body type of everything courier answers itself.
pub type Body = Full<Bytes>;

/// A reply with `body`: `content-length` and `content-type: text/plain` only
/// when there is a body, as Envoy (its HTTP/1.1 codec adds `content-length: 0`
/// itself for an empty one, which hyper does too; HTTP/2 sends neither).
pub fn reply(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let body: Bytes = body.into();
    let mut resp = Response::new(Full::new(body.clone()));
    *resp.status_mut() = status;
    if !body.is_empty() {
        let headers = resp.headers_mut();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    }
    resp
}

/// What a local reply needs to know of the request it answers.
#[derive(Debug, Clone, Copy)]
pub struct ReplyTo {
    /// A `HEAD` request: the body is dropped, `content-length` kept.
    pub head: bool,
    /// A gRPC request (`content-type: application/grpc[+...|;...]`).
    pub grpc: bool,
}

impl ReplyTo {
    /// The facts about `req`.
    pub fn of<B>(req: &Request<B>) -> Self {
        ReplyTo {
            head: req.method() == http::Method::HEAD,
            grpc: req
                .headers()
                .get(header::CONTENT_TYPE)
                .is_some_and(|ct| is_grpc(ct.as_bytes())),
        }
    }
}

/// Envoy's `sendLocalReply` for `to`: a gRPC request gets a trailers-only
/// HTTP 200 with `grpc-status` mapped from `status` and `grpc-message` = the
/// body (percent-encoded); a `HEAD` request gets the headers only. hyper drops
/// `HEAD` bodies on HTTP/1.1 but not on HTTP/2, where a body is a protocol error.
pub fn local_reply(to: ReplyTo, status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let body: Bytes = body.into();
    if to.grpc {
        let mut resp = Response::new(Full::new(Bytes::new()));
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        headers.insert("grpc-status", HeaderValue::from(grpc_status(status)));
        if !body.is_empty()
            && let Ok(v) = HeaderValue::from_str(&percent_encode(&body))
        {
            headers.insert("grpc-message", v);
        }
        return resp;
    }
    let mut resp = reply(status, body);
    if to.head {
        *resp.body_mut() = Full::new(Bytes::new());
    }
    resp
}

/// Envoy's `Grpc::Utility::httpToGrpcStatus`.
fn grpc_status(status: StatusCode) -> u16 {
    match status.as_u16() {
        400 => 13,
        401 => 16,
        403 => 7,
        404 => 12,
        429 | 502 | 503 | 504 => 14,
        _ => 2,
    }
}

/// Envoy's `isGrpcRequest`: `application/grpc`, optionally followed by `+...` or `;...`.
pub(crate) fn is_grpc(content_type: &[u8]) -> bool {
    let prefix = b"application/grpc";
    content_type.len() >= prefix.len()
        && content_type[..prefix.len()].eq_ignore_ascii_case(prefix)
        && matches!(content_type.get(prefix.len()), None | Some(b'+' | b';'))
}

/// Envoy's `PercentEncoding::encode` for `grpc-message`: bytes outside
/// printable ASCII (and `~`), and `%`, become `%XX`.
fn percent_encode(body: &[u8]) -> String {
    let mut out = String::with_capacity(body.len());
    for &b in body {
        if !(b' '..b'~').contains(&b) || b == b'%' {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types_and_messages() {
        assert!(is_grpc(b"application/grpc"));
        assert!(is_grpc(b"Application/GRPC+proto"));
        assert!(is_grpc(b"application/grpc;charset=x"));
        assert!(!is_grpc(b"application/grpc-web"));
        assert!(!is_grpc(b"text/plain"));
        assert_eq!(percent_encode(b"down\n 100%~"), "down%0A 100%25%7E");
        assert_eq!(grpc_status(StatusCode::NOT_FOUND), 12);
        assert_eq!(grpc_status(StatusCode::OK), 2);
    }

    #[test]
    fn grpc_replies_are_trailers_only() {
        let to = ReplyTo {
            head: false,
            grpc: true,
        };
        let r = local_reply(to, StatusCode::SERVICE_UNAVAILABLE, "no healthy upstream");
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["grpc-status"], "14");
        assert_eq!(r.headers()["grpc-message"], "no healthy upstream");
        assert!(r.headers().get(header::CONTENT_LENGTH).is_none());
    }
}
