//! A direct response's `body_format`: its body rendered per request with the
//! access-log formatter, as Envoy formats it with its substitution formatter
//! before the response exists (so `%RESPONSE_CODE%` is 0 there too).

use crate::access_log::{Entry, Logs, Pending, ResponseSide, render};
use crate::request::body::RequestProgress;
use crate::request::conn::{ClientAddress, ConnInfo};
use bytes::Bytes;
use courier_config::route::{BodyFormat, BodyTemplate};
use http::Request;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The body `format` makes for `req` on `route_name`, with `body` (the
/// action's own `body`) as `%LOCAL_REPLY_BODY%`.
pub fn render<B>(
    format: &BodyFormat,
    body: Option<&Bytes>,
    req: &Request<B>,
    info: &ConnInfo,
    route_name: &str,
) -> Bytes {
    let template = match &format.template {
        BodyTemplate::Literal(bytes) => return bytes.clone(),
        BodyTemplate::Format(f) => f,
    };
    // The request side as a log entry sees it; only formatted direct
    // responses pay for it.
    let pending = Pending {
        logs: Logs::Hcm {
            listener: Arc::clone(&info.listener),
            filter_chain_index: info.filter_chain_index,
        },
        start: SystemTime::now(),
        started: Instant::now(),
        method: req.method().clone(),
        uri: req.uri().clone(),
        version: req.version(),
        headers: req.headers().clone(),
        peer: info.peer.clone(),
        remote: req.extensions().get::<ClientAddress>().map(|c| c.0),
        local: info.local.clone(),
        server_name: info.server_name.clone(),
        fingerprints: None,
        connection_id: info.id,
        request: Arc::new(RequestProgress::new(false)),
        span: None,
    };
    let resp = ResponseSide {
        route_name: Some(route_name.to_string()),
        direct: true,
        ..ResponseSide::default()
    };
    let entry = Entry {
        req: &pending,
        resp: &resp,
        duration: Duration::ZERO,
        bytes_received: 0,
        request_duration: None,
        local_reply_body: Some(body.map_or(&[][..], |b| &b[..])),
    };
    let mut out = Vec::new();
    render::format_into(template, format.omit_empty_values, &entry, &mut out);
    Bytes::from(out)
}
