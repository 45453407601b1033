//! A listener's `socket_options`: the options courier sets on its listening
//! sockets (accepted connections inherit them), by Linux level and name.

use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::core::v3::SocketOption as Pb;
use envoy_types::pb::envoy::config::core::v3::socket_option::{SocketState, Value};

/// `SOL_SOCKET` / `SO_KEEPALIVE`.
const SO_KEEPALIVE: (i64, i64) = (1, 9);
/// `IPPROTO_TCP` / `TCP_NODELAY`.
const TCP_NODELAY: (i64, i64) = (6, 1);
/// `IPPROTO_TCP` / `TCP_KEEPIDLE`.
const TCP_KEEPIDLE: (i64, i64) = (6, 4);
/// `IPPROTO_TCP` / `TCP_KEEPINTVL`.
const TCP_KEEPINTVL: (i64, i64) = (6, 5);
/// `IPPROTO_TCP` / `TCP_KEEPCNT`.
const TCP_KEEPCNT: (i64, i64) = (6, 6);

/// The socket options of a listener, as values courier's socket library sets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketOptions {
    /// `SO_KEEPALIVE`.
    pub keepalive: Option<bool>,
    /// `TCP_NODELAY`.
    pub nodelay: Option<bool>,
    /// `TCP_KEEPIDLE` (seconds).
    pub keepalive_time: Option<u32>,
    /// `TCP_KEEPINTVL` (seconds).
    pub keepalive_interval: Option<u32>,
    /// `TCP_KEEPCNT`.
    pub keepalive_probes: Option<u32>,
}

impl SocketOptions {
    /// Whether any TCP keepalive parameter is set.
    pub fn keepalive_params(&self) -> bool {
        self.keepalive_time.is_some()
            || self.keepalive_interval.is_some()
            || self.keepalive_probes.is_some()
    }
}

/// Translates `socket_options`. Options are set once, on the listening socket
/// (at whichever `state` they name: these take effect the same either way);
/// an option courier has no setter for is refused with its path.
pub fn translate(list: &[Pb], path: &Path<'_>, ctx: &mut Ctx) -> SocketOptions {
    let mut out = SocketOptions::default();
    for (i, o) in list.iter().enumerate() {
        let p = path.index(i);
        let Some(Value::IntValue(v)) = o.value else {
            ctx.unsupported(&p.field("buf_value"), "a socket option with a buf_value");
            continue;
        };
        if SocketState::try_from(o.state).is_err() {
            ctx.error(
                &p.field("state"),
                format!("{} is not a socket state", o.state),
            );
            continue;
        }
        let int = |ctx: &mut Ctx| match u32::try_from(v) {
            Ok(n) if n > 0 => Some(n),
            _ => {
                ctx.error(
                    &p.field("int_value"),
                    format!("{v} is not a positive 32-bit value"),
                );
                None
            }
        };
        match (o.level, o.name) {
            SO_KEEPALIVE => out.keepalive = Some(v != 0),
            TCP_NODELAY => out.nodelay = Some(v != 0),
            TCP_KEEPIDLE => out.keepalive_time = int(ctx),
            TCP_KEEPINTVL => out.keepalive_interval = int(ctx),
            TCP_KEEPCNT => out.keepalive_probes = int(ctx),
            (level, name) => {
                ctx.unsupported(&p, format!("socket option level {level} name {name}"))
            }
        }
    }
    // courier's socket library turns keepalive on with its parameters.
    if out.keepalive_params() && out.keepalive != Some(true) {
        ctx.unsupported(
            path,
            "TCP keepalive parameters without SO_KEEPALIVE (level 1, name 9) set to 1",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn opt(level: i64, name: i64, v: i64) -> Pb {
        Pb {
            level,
            name,
            value: Some(Value::IntValue(v)),
            ..Default::default()
        }
    }

    #[test]
    fn keepalive_options_as_envoy_gateway_sets_them() {
        let mut ctx = Ctx::new();
        let got = translate(
            &[opt(1, 9, 1), opt(6, 6, 7), opt(6, 4, 50), opt(6, 5, 200)],
            &Path::ROOT.field("socket_options"),
            &mut ctx,
        );
        ctx.finish(()).unwrap();
        assert_eq!(
            got,
            SocketOptions {
                keepalive: Some(true),
                nodelay: None,
                keepalive_time: Some(50),
                keepalive_interval: Some(200),
                keepalive_probes: Some(7),
            }
        );
    }

    #[test]
    fn other_options_are_refused_with_their_path() {
        let mut ctx = Ctx::new();
        translate(
            &[opt(1, 7, 65536), opt(6, 4, 10)],
            &Path::ROOT.field("socket_options"),
            &mut ctx,
        );
        let errors: Vec<String> = ctx
            .finish(())
            .unwrap_err()
            .errors
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("socket_options[0]: socket option level 1 name 7")),
            "{errors:?}"
        );
        assert!(
            errors.iter().any(|e| e.contains("without SO_KEEPALIVE")),
            "{errors:?}"
        );
    }
}
