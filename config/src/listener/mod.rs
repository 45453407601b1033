//! Listeners: addresses, filter chains and their matches, and the HTTP connection manager.

pub mod access_log;

use crate::core::{self, SocketAddress};
use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::listener::v3 as pb;

/// Fields of the listener messages courier implements.
pub(crate) const SUPPORT: &[Support] =
    &[("envoy.config.listener.v3.Listener", &["name", "address"])];

/// A validated listener.
#[derive(Debug, Clone)]
pub struct Listener {
    /// Name (generated when the config gives none, as Envoy does).
    pub name: String,
    /// Where it listens.
    pub address: SocketAddress,
}

/// Translates a `Listener`.
pub fn translate(l: &pb::Listener, path: &Path<'_>, ctx: &mut Ctx) -> Option<Listener> {
    let address = core::address(l.address.as_ref(), &path.field("address"), ctx)?;
    Some(Listener {
        name: l.name.clone(),
        address,
    })
}
