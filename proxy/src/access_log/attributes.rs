//! A finished request's CEL attributes, for access-log CEL filters: the
//! request as the connection manager saw it, the response sent, the
//! connection's ends, the upstream and the `xds` names (cluster, route).

use super::Entry;
use crate::request::conn::Peer;
use courier_config::cel::{self, Value};
use courier_filters::cel_attributes::{self as attrs, Request, Response};

/// The value of CEL attribute root `root` for `e`.
pub(super) fn root(e: &Entry<'_>, root: &str) -> Option<Value> {
    let (req, resp) = (e.req, e.resp);
    match root {
        "request" => {
            let scheme = if req.server_name.is_some() || req.uri.scheme_str() == Some("https") {
                "https"
            } else {
                "http"
            };
            Some(
                Request {
                    method: &req.method,
                    uri: &req.uri,
                    version: req.version,
                    headers: &req.headers,
                    scheme,
                }
                .value(),
            )
        }
        "response" => Some(
            Response {
                code: resp.status,
                details: super::render::code_details(resp),
                headers: &resp.headers,
                trailers: resp.trailers.as_ref(),
                size: resp.bytes_sent,
            }
            .value(),
        ),
        "source" => match (&req.remote, &req.peer) {
            (Some(a), _) | (None, Peer::Ip(a)) => Some(attrs::address(*a)),
            (None, Peer::Pipe(_)) => None,
        },
        "destination" => match &req.local {
            Peer::Ip(a) => Some(attrs::address(*a)),
            Peer::Pipe(_) => None,
        },
        "connection" => Some(cel::map([
            ("id", Value::UInt(req.connection_id)),
            (
                "requested_server_name",
                cel::string(req.server_name.as_deref().unwrap_or("")),
            ),
        ])),
        "upstream" => {
            // A pipe host's `address` is only a stand-in key: no IP attributes.
            let host = resp.upstream.as_ref()?.host.as_ref()?;
            host.pipe_path()
                .is_none()
                .then(|| attrs::address(host.address))
        }
        "xds" => {
            let mut fields = Vec::new();
            if let Some(u) = &resp.upstream {
                fields.push(("cluster_name", cel::string(u.cluster.name.as_str())));
            }
            if let Some(r) = &resp.route_name {
                fields.push(("route_name", cel::string(r.as_str())));
            }
            Some(cel::map(fields))
        }
        _ => None,
    }
}
