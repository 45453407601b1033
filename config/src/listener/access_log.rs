//! Access logs: file and stdout/stderr sinks in Envoy's format-string and JSON forms.

use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::accesslog::v3 as pb;

/// A validated access log.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessLog {
    /// Where lines go: a file path, or `/dev/stdout` / `/dev/stderr`.
    pub path: String,
}

impl AccessLog {
    /// A file log in Envoy's default format.
    pub fn file(path: &str) -> Self {
        Self {
            path: path.to_string(),
        }
    }
}

/// Translates a list of `AccessLog`s.
pub fn translate_all(logs: &[pb::AccessLog], path: &Path<'_>, ctx: &mut Ctx) -> Vec<AccessLog> {
    logs.iter()
        .enumerate()
        .filter_map(|(i, _l)| {
            ctx.unsupported(&path.index(i), "access_log");
            None
        })
        .collect()
}
