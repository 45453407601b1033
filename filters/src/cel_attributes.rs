//! Envoy's CEL attribute vocabulary (`request`, `response`, `source`,
//! `destination`, `connection`, ...), built from what courier holds of a
//! request: the filter chain's [`RequestState`] while it is decided, and the
//! access log's record once it is answered (through [`Request`] and
//! [`Response`]).
//!
//! Each root is built only when an expression names it; an attribute Envoy
//! would not have at that point (the response while the request is decided)
//! is absent, so an expression reading it errs and does not match, as Envoy's.

use crate::request::RequestState;
use courier_config::cel::{self, Attributes, Value};
use http::{HeaderMap, Method, Uri, Version};
use std::net::SocketAddr;

/// A request head, as the `request` root reads it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The method.
    pub method: &'a Method,
    /// The target.
    pub uri: &'a Uri,
    /// The HTTP version.
    pub version: Version,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// `:scheme` when the URI has none (`https` on TLS, else `http`).
    pub scheme: &'a str,
}

impl Request<'_> {
    fn authority(&self) -> &str {
        self.uri
            .authority()
            .map(|a| a.as_str())
            .or_else(|| {
                self.headers
                    .get(http::header::HOST)
                    .and_then(|h| h.to_str().ok())
            })
            .unwrap_or("")
    }

    /// The `request` root: Envoy's `path` (with query), `url_path`, `host`,
    /// `scheme`, `method`, `headers`, `referer`, `useragent`, `id`, `query`,
    /// `protocol` and `size` (from `content-length` only; the body's size is
    /// not known until it ends).
    pub fn value(&self) -> Value {
        let path = self.uri.path_and_query().map_or("/", |pq| pq.as_str());
        let url_path = path.find(['?', '#']).map_or(path, |i| &path[..i]);
        let scheme = self.uri.scheme_str().unwrap_or(self.scheme);
        let authority = self.authority();
        let mut fields = vec![
            ("path", cel::string(path)),
            ("url_path", cel::string(url_path)),
            ("host", cel::string(authority)),
            ("scheme", cel::string(scheme)),
            ("method", cel::string(self.method.as_str())),
            ("headers", self.headers_value(path, authority, scheme)),
            ("protocol", cel::string(protocol(self.version))),
        ];
        if let Some(q) = self.uri.query() {
            fields.push(("query", cel::string(q)));
        }
        let header =
            |name: http::header::HeaderName| self.headers.get(name).and_then(|v| v.to_str().ok());
        if let Some(v) = header(http::header::REFERER) {
            fields.push(("referer", cel::string(v)));
        }
        if let Some(v) = header(http::header::USER_AGENT) {
            fields.push(("useragent", cel::string(v)));
        }
        if let Some(v) = header(http::header::HeaderName::from_static("x-request-id")) {
            fields.push(("id", cel::string(v)));
        }
        if let Some(n) = header(http::header::CONTENT_LENGTH).and_then(|v| v.parse::<i64>().ok()) {
            fields.push(("size", Value::Int(n)));
        }
        cel::map(fields)
    }

    /// `request.headers`: Envoy's header map, pseudo-headers included (`host`
    /// is `:authority`), repeated headers joined with `,`.
    fn headers_value(&self, path: &str, authority: &str, scheme: &str) -> Value {
        let mut entries = vec![
            (":path".to_string(), cel::string(path)),
            (":method".to_string(), cel::string(self.method.as_str())),
            (":scheme".to_string(), cel::string(scheme)),
        ];
        if !authority.is_empty() {
            entries.push((":authority".to_string(), cel::string(authority)));
        }
        entries.extend(
            joined(self.headers)
                .filter(|(name, _)| name != "host")
                .map(|(n, v)| (n, cel::string(v))),
        );
        cel::map(entries)
    }
}

/// A header map as a CEL map (lower-case names, repeated values joined with
/// `,`, values that are not text left out).
pub fn headers(map: &HeaderMap) -> Value {
    cel::map(joined(map).map(|(n, v)| (n, cel::string(v))))
}

fn joined(map: &HeaderMap) -> impl Iterator<Item = (String, String)> + '_ {
    map.keys().filter_map(|name| {
        let mut out = String::new();
        for (i, v) in map.get_all(name).iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(v.to_str().ok()?);
        }
        Some((name.as_str().to_string(), out))
    })
}

/// Envoy's `request.protocol` text.
fn protocol(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

/// The response, as the `response` root reads it.
#[derive(Debug, Clone, Copy)]
pub struct Response<'a> {
    /// The status sent (0: none).
    pub code: u16,
    /// `%RESPONSE_CODE_DETAILS%`.
    pub details: Option<&'a str>,
    /// The response headers.
    pub headers: &'a HeaderMap,
    /// The response trailers.
    pub trailers: Option<&'a HeaderMap>,
    /// Body bytes sent.
    pub size: u64,
}

impl Response<'_> {
    /// The `response` root: `code`, `code_details`, `headers`, `trailers`,
    /// `size` and, for a gRPC response, `grpc_status`.
    pub fn value(&self) -> Value {
        let mut fields = vec![
            ("code", Value::Int(i64::from(self.code))),
            ("headers", headers(self.headers)),
            (
                "size",
                Value::Int(i64::try_from(self.size).unwrap_or(i64::MAX)),
            ),
        ];
        if let Some(d) = self.details {
            fields.push(("code_details", cel::string(d)));
        }
        if let Some(t) = self.trailers {
            fields.push(("trailers", headers(t)));
        }
        let grpc = self
            .trailers
            .and_then(|t| t.get("grpc-status"))
            .or_else(|| self.headers.get("grpc-status"))
            .and_then(|v| v.to_str().ok()?.parse::<i64>().ok());
        if let Some(g) = grpc {
            fields.push(("grpc_status", Value::Int(g)));
        }
        cel::map(fields)
    }
}

/// The `source` / `destination` root of an address: `address` (`ip:port`)
/// and `port`.
pub fn address(a: SocketAddr) -> Value {
    cel::map([
        ("address", cel::string(a.to_string())),
        ("port", Value::Int(i64::from(a.port()))),
    ])
}

/// The `connection` root: `id`, `mtls` (the client presented a certificate),
/// `requested_server_name` (the SNI, empty without one).
pub fn connection(id: Option<u64>, tls: Option<&crate::request::TlsFacts>) -> Value {
    let mut fields = vec![
        (
            "mtls",
            Value::Bool(tls.is_some_and(|t| t.peer_cert.is_some())),
        ),
        (
            "requested_server_name",
            cel::string(tls.and_then(|t| t.sni.as_deref()).unwrap_or("")),
        ),
    ];
    if let Some(id) = id {
        fields.push(("id", Value::UInt(id)));
    }
    cel::map(fields)
}

/// A request being decided by the filter chain: `request`, `source`,
/// `destination` and `connection` (no response yet).
pub struct Deciding<'r, 'a>(pub &'r RequestState<'a>);

impl Attributes for Deciding<'_, '_> {
    fn root(&self, root: &str) -> Option<Value> {
        let req = self.0;
        match root {
            "request" => Some(
                Request {
                    method: &req.head.method,
                    uri: &req.head.uri,
                    version: req.head.version,
                    headers: &req.head.headers,
                    scheme: req.scheme(),
                }
                .value(),
            ),
            "source" => {
                // The trusted client address; its port is the connection's when
                // the address is the connection's own (else unknown: 0, as Envoy's
                // address from `x-forwarded-for`).
                let port = if req.remote == req.conn.source.ip() {
                    req.conn.source.port()
                } else {
                    0
                };
                Some(address(SocketAddr::new(req.remote, port)))
            }
            "destination" => Some(address(req.conn.local)),
            "connection" => Some(connection(None, req.conn.tls.as_ref())),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_config::cel::Expr;

    struct Only<'a>(Request<'a>, Response<'a>);

    impl Attributes for Only<'_> {
        fn root(&self, root: &str) -> Option<Value> {
            match root {
                "request" => Some(self.0.value()),
                "response" => Some(self.1.value()),
                _ => None,
            }
        }
    }

    #[test]
    fn roots_have_envoys_fields() {
        let uri: Uri = "/admin/x?y=1".parse().expect("uri");
        let mut headers = HeaderMap::new();
        headers.insert("host", "example.com".parse().expect("v"));
        headers.append("x-a", "1".parse().expect("v"));
        headers.append("x-a", "2".parse().expect("v"));
        let mut resp_headers = HeaderMap::new();
        resp_headers.insert("grpc-status", "7".parse().expect("v"));
        let a = Only(
            Request {
                method: &Method::POST,
                uri: &uri,
                version: Version::HTTP_11,
                headers: &headers,
                scheme: "http",
            },
            Response {
                code: 503,
                details: Some("upstream_reset"),
                headers: &resp_headers,
                trailers: None,
                size: 12,
            },
        );
        for (expr, want) in [
            ("request.path == '/admin/x?y=1'", true),
            ("request.url_path == '/admin/x'", true),
            (
                "request.host == 'example.com' && request.scheme == 'http'",
                true,
            ),
            (
                "request.query == 'y=1' && request.protocol == 'HTTP/1.1'",
                true,
            ),
            ("request.headers['x-a'] == '1,2'", true),
            ("request.headers[':authority'] == 'example.com'", true),
            ("'host' in request.headers", false),
            (
                "response.code == 503 && response.code_details == 'upstream_reset'",
                true,
            ),
            ("response.grpc_status == 7 && response.size == 12", true),
            ("request.useragent == 'x'", false),
        ] {
            let e = Expr::compile(expr).expect(expr);
            assert_eq!(e.matches(&a), want, "{expr}");
        }
    }
}
