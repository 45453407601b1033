//! A cluster's transport socket, `envoy.transport_sockets.upstream_proxy_protocol`
//! (`ProxyProtocolUpstreamTransport`) around TLS or plaintext: each new
//! connection starts with a PROXY protocol header naming the downstream
//! connection's addresses.

use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use crate::tls::UpstreamTls;
use envoy_types::pb::envoy::config::core::v3::{TransportSocket, transport_socket::ConfigType};
use envoy_types::pb::envoy::extensions::transport_sockets::proxy_protocol::v3 as pb;

/// The PROXY protocol version a connection's header is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProxyProtocolVersion {
    /// The text header (`PROXY TCP4 ...\r\n`).
    V1,
    /// The binary header.
    V2,
}

/// An upstream transport socket: TLS or plaintext, maybe behind a PROXY
/// protocol header.
#[derive(Debug, Clone, Default)]
pub struct UpstreamSocket {
    /// `upstream_proxy_protocol`: the header each new connection starts with.
    pub proxy_protocol: Option<ProxyProtocolVersion>,
    /// TLS over the connection (`None`: plaintext).
    pub tls: Option<Box<UpstreamTls>>,
}

/// Translates a cluster's (or a socket match's) `transport_socket`.
pub fn translate(ts: &TransportSocket, path: &Path<'_>, ctx: &mut Ctx) -> UpstreamSocket {
    let Some(ConfigType::TypedConfig(any)) = &ts.config_type else {
        return plain(ts, path, ctx);
    };
    if any.type_url != <pb::ProxyProtocolUpstreamTransport as prost::Name>::type_url() {
        return plain(ts, path, ctx);
    }
    let tp = path.field("typed_config");
    let Some(c) = core::unpack::<pb::ProxyProtocolUpstreamTransport>(any, &tp, ctx) else {
        return UpstreamSocket::default();
    };
    let cp = tp.field("config");
    let version = match &c.config {
        Some(config) => {
            if config.pass_through_tlvs.is_some() {
                ctx.unsupported(&cp.field("pass_through_tlvs"), "pass_through_tlvs");
            }
            if !config.added_tlvs.is_empty() {
                ctx.unsupported(&cp.field("added_tlvs"), "added_tlvs");
            }
            if config.version == 1 {
                ProxyProtocolVersion::V2
            } else {
                ProxyProtocolVersion::V1
            }
        }
        // PGV: `config` is required.
        None => {
            ctx.error(&cp, "is required");
            ProxyProtocolVersion::V1
        }
    };
    for (set, field) in [
        (c.allow_unspecified_address, "allow_unspecified_address"),
        (c.tlv_as_pool_key, "tlv_as_pool_key"),
    ] {
        if set {
            ctx.unsupported(&tp.field(field), field);
        }
    }
    // PGV: the wrapped socket is required; a second PROXY wrapper inside is
    // refused by type, as any other socket courier does not serve.
    let tls = match &c.transport_socket {
        Some(inner) => {
            crate::tls::upstream(inner, &tp.field("transport_socket"), ctx).map(Box::new)
        }
        None => {
            ctx.error(&tp.field("transport_socket"), "is required");
            None
        }
    };
    UpstreamSocket {
        proxy_protocol: Some(version),
        tls,
    }
}

fn plain(ts: &TransportSocket, path: &Path<'_>, ctx: &mut Ctx) -> UpstreamSocket {
    UpstreamSocket {
        proxy_protocol: None,
        tls: crate::tls::upstream(ts, path, ctx).map(Box::new),
    }
}
