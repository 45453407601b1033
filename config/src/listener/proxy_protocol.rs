//! The PROXY protocol listener filter (`envoy.filters.listener.proxy_protocol`):
//! which header versions a listener takes and whether a connection without a
//! header is let through. `rules` (TLVs into metadata), `pass_through_tlvs`
//! and `tlv_location` are refused by the support table.

use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::core::v3::proxy_protocol_config::Version;
use envoy_types::pb::envoy::extensions::filters::listener::proxy_protocol::v3 as pb;

/// Fields of `ProxyProtocol` courier implements.
pub(crate) const SUPPORT: &[Support] = &[(
    "envoy.extensions.filters.listener.proxy_protocol.v3.ProxyProtocol",
    &[
        "allow_requests_without_proxy_protocol",
        "disallowed_versions",
        "stat_prefix",
    ],
)];

/// A validated `ProxyProtocol`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyProtocol {
    /// `allow_requests_without_proxy_protocol`: a connection that does not
    /// start with a header goes on with its own addresses.
    pub allow_without: bool,
    /// Version 1 (text) headers are taken.
    pub v1: bool,
    /// Version 2 (binary) headers are taken.
    pub v2: bool,
    /// `stat_prefix`: the filter's stats are `proxy_proto.<stat_prefix>.*`
    /// (`proxy_proto.*` without one).
    pub stat_prefix: String,
}

/// Translates a `ProxyProtocol`.
pub fn translate(m: &pb::ProxyProtocol, path: &Path<'_>, ctx: &mut Ctx) -> Option<ProxyProtocol> {
    let (mut v1, mut v2) = (true, true);
    let dp = path.field("disallowed_versions");
    for (i, v) in m.disallowed_versions.iter().enumerate() {
        match Version::try_from(*v) {
            Ok(Version::V1) => v1 = false,
            Ok(Version::V2) => v2 = false,
            Err(_) => ctx.error(&dp.index(i), format!("unknown version {v}")),
        }
    }
    Some(ProxyProtocol {
        allow_without: m.allow_requests_without_proxy_protocol,
        v1,
        v2,
        stat_prefix: m.stat_prefix.clone(),
    })
}
