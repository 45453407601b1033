//! `transport_socket_matches`: per-endpoint transport sockets, chosen by the
//! endpoint's (then its locality's) metadata under `envoy.transport_socket_match`,
//! as Envoy's `TransportSocketMatcherImpl` chooses them.

use crate::core::{self, MetadataMap};
use crate::ctx::Ctx;
use crate::path::Path;
use crate::tls::UpstreamTls;
use envoy_types::pb::envoy::config::cluster::v3 as pb;

/// The metadata namespace the matches read.
pub const NAMESPACE: &str = "envoy.transport_socket_match";

/// Which transport socket a host's connections use: the cluster's own
/// (`transport_socket`, index 0) or a match's (`transport_socket_matches[i]`,
/// index `i + 1`). A small integer so that a host and a pool key carry it cheaply.
pub type SocketIndex = u16;

/// The default socket's index.
pub const DEFAULT_SOCKET: SocketIndex = 0;

/// One `TransportSocketMatch`.
#[derive(Debug, Clone)]
pub struct TransportSocketMatch {
    /// `name`: the stats prefix (`cluster.<c>.<name>.total_match_count`).
    pub name: String,
    /// `match`: every key must be present in the metadata with an equal value;
    /// empty matches every endpoint.
    pub criteria: serde_json::Map<String, serde_json::Value>,
    /// Its TLS socket; `None` for a raw-buffer (plaintext) socket.
    pub tls: Option<Box<UpstreamTls>>,
    /// `upstream_proxy_protocol` around it: the PROXY header version.
    pub proxy_protocol: Option<super::ProxyProtocolVersion>,
}

impl TransportSocketMatch {
    /// Envoy's `metadataLabelMatch`: without the namespace, only an empty
    /// `match` matches; otherwise every key must be present with an equal value
    /// (numbers compare as the doubles protobuf holds).
    fn matches(&self, metadata: &MetadataMap) -> bool {
        let Some(fields) = metadata.get(NAMESPACE) else {
            return self.criteria.is_empty();
        };
        self.criteria
            .iter()
            .all(|(k, v)| fields.get(k).is_some_and(|have| same_value(have, v)))
    }
}

/// Protobuf `Value` equality on JSON values: numbers by their `f64` value (a
/// bootstrap's `1` and an xDS `1.0` are the same double).
fn same_value(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a, b) {
        (serde_json::Value::Number(x), serde_json::Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// The socket of a host: the first match on the endpoint's metadata, else the
/// first on its locality's, else the default (Envoy checks the endpoint's
/// metadata against every match before it looks at the locality's).
pub fn resolve(
    matches: &[TransportSocketMatch],
    endpoint: &MetadataMap,
    locality: &MetadataMap,
) -> SocketIndex {
    [endpoint, locality]
        .into_iter()
        .find_map(|md| matches.iter().position(|m| m.matches(md)))
        .map_or(DEFAULT_SOCKET, |i| {
            SocketIndex::try_from(i + 1).unwrap_or(DEFAULT_SOCKET)
        })
}

/// Translates `transport_socket_matches`.
pub(super) fn translate(
    c: &pb::Cluster,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Vec<TransportSocketMatch> {
    let mp = path.field("transport_socket_matches");
    if c.transport_socket_matches.len() >= usize::from(SocketIndex::MAX) {
        ctx.error(
            &mp,
            format!("at most {} matches are supported", SocketIndex::MAX - 1),
        );
        return Vec::new();
    }
    c.transport_socket_matches
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let ip = mp.index(i);
            // PGV: name min_len 1.
            if m.name.is_empty() {
                ctx.error(&ip.field("name"), "must not be empty");
            }
            let socket = match &m.transport_socket {
                Some(ts) => super::proxy_socket::translate(ts, &ip.field("transport_socket"), ctx),
                None => {
                    ctx.error(&ip.field("transport_socket"), "is required");
                    super::UpstreamSocket::default()
                }
            };
            TransportSocketMatch {
                name: m.name.clone(),
                criteria: m
                    .r#match
                    .as_ref()
                    .map(core::struct_to_json)
                    .unwrap_or_default(),
                tls: socket.tls,
                proxy_protocol: socket.proxy_protocol,
            }
        })
        .collect()
}

/// A health check's `transport_socket_match_criteria`: the socket its
/// connections use, found by matching the criteria (as endpoint metadata, with
/// no locality) against the cluster's matches, as Envoy's health checkers do.
pub(super) fn health_check_socket(
    matches: &[TransportSocketMatch],
    criteria: &envoy_types::pb::google::protobuf::Struct,
) -> SocketIndex {
    let mut md = MetadataMap::new();
    md.insert(NAMESPACE.to_string(), core::struct_to_json(criteria));
    resolve(matches, &md, &MetadataMap::new())
}
