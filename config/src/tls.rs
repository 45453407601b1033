//! TLS contexts: downstream (termination, client-certificate validation) and upstream.

use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::core::v3::TransportSocket;

/// Fields of the TLS messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[];

/// A validated downstream TLS context.
#[derive(Debug, Clone)]
pub struct DownstreamTls {}

/// A validated upstream TLS context.
#[derive(Debug, Clone)]
pub struct UpstreamTls {}

/// Translates a downstream `transport_socket`.
pub fn downstream(ts: &TransportSocket, path: &Path<'_>, ctx: &mut Ctx) -> Option<DownstreamTls> {
    ctx.unsupported(path, format!("transport socket {}", ts.name));
    None
}

/// Translates an upstream `transport_socket`.
pub fn upstream(ts: &TransportSocket, path: &Path<'_>, ctx: &mut Ctx) -> Option<UpstreamTls> {
    ctx.unsupported(path, format!("transport socket {}", ts.name));
    None
}
