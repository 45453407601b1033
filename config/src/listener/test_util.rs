//! Bootstraps for unit tests: one listener with one connection manager, patched per test.

use crate::{Bootstrap, ConfigError};
use serde_json::{Value, json};

/// A bootstrap with one listener, one chain, one connection manager (inline
/// routes, no HTTP filters), with `patch` merged into the listener.
pub(crate) fn listener(patch: Value) -> Value {
    let mut l = json!({
        "name": "l",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
        "filter_chains": [{"filters": [hcm_filter(json!({}))]}],
    });
    merge(&mut l, patch);
    json!({"static_resources": {"listeners": [l]}})
}

/// The network filter entry of a connection manager with `patch` merged into its config.
pub(crate) fn hcm_filter(patch: Value) -> Value {
    let mut c = json!({
        "@type": crate::extensions::HTTP_CONNECTION_MANAGER,
        "stat_prefix": "ingress",
        "route_config": {"name": "r"},
        "http_filters": [],
    });
    merge(&mut c, patch);
    json!({"name": "envoy.filters.network.http_connection_manager", "typed_config": c})
}

/// A bootstrap whose connection manager config gets `patch`.
pub(crate) fn hcm(patch: Value) -> Value {
    listener(json!({"filter_chains": [{"filters": [hcm_filter(patch)]}]}))
}

/// A bootstrap whose only chain gets `patch` (filters kept).
pub(crate) fn chain(patch: Value) -> Value {
    let mut c = json!({"filters": [hcm_filter(json!({}))]});
    merge(&mut c, patch);
    listener(json!({"filter_chains": [c]}))
}

/// Loads a bootstrap built with the helpers.
pub(crate) fn load(v: &Value) -> Result<Bootstrap, ConfigError> {
    crate::bootstrap_from_str(&v.to_string(), crate::load::Format::Json)
}

/// Loads and returns the errors as `path: message` lines.
pub(crate) fn errors(v: &Value) -> Vec<String> {
    match load(v) {
        Ok(_) => Vec::new(),
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
    }
}

/// Objects merge key by key; anything else (lists included) replaces.
pub(crate) fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, p) => *slot = p,
    }
}
