//! `/runtime` and `/runtime_modify`: the bootstrap's runtime layers as Envoy
//! shows them, and the admin layer `/runtime_modify` writes.
//!
//! A value set through `/runtime_modify` passes the same check as a static
//! layer's ([`courier_config::runtime::keys::check`]), so a key means the same
//! from either place. The keys courier reads only while starting (connection
//! limits) are refused here with the reason: taking them and doing nothing
//! would be the silent ignore courier never does.

use crate::request::local_reply::{Body, reply};
use arc_swap::ArcSwap;
use courier_config::runtime::keys::{self, Meaning};
use courier_config::runtime::{LayerKind, Runtime};
use http::{Response, StatusCode};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The runtime's layers and the admin layer's values.
#[derive(Debug, Default)]
pub struct RuntimeAdmin {
    runtime: Runtime,
    /// Written by `/runtime_modify` only (admin, on the main thread, one
    /// request at a time); nothing on the request path reads it.
    admin: ArcSwap<BTreeMap<String, String>>,
}

impl RuntimeAdmin {
    /// The runtime of the bootstrap, with an empty admin layer.
    pub fn new(runtime: &Runtime) -> Self {
        Self {
            runtime: runtime.clone(),
            admin: ArcSwap::default(),
        }
    }

    /// `GET /runtime`: every key with its value per layer (empty where a layer
    /// does not set it) and the value in force, and the layers' names.
    pub fn show(&self) -> serde_json::Value {
        let admin = self.admin.load_full();
        let layer_values = |kind: &LayerKind, key: &str| -> Option<String> {
            match kind {
                LayerKind::Static(values) => values.get(key).cloned(),
                LayerKind::Admin => admin.get(key).cloned(),
            }
        };
        let mut keys: Vec<&String> = admin.keys().collect();
        for layer in &self.runtime.layers {
            if let LayerKind::Static(values) = &layer.kind {
                keys.extend(values.keys());
            }
        }
        keys.sort();
        keys.dedup();
        let mut entries = serde_json::Map::new();
        for key in keys {
            let per_layer: Vec<Option<String>> = self
                .runtime
                .layers
                .iter()
                .map(|l| layer_values(&l.kind, key))
                .collect();
            let final_value = per_layer.iter().rev().flatten().next().cloned();
            entries.insert(
                key.clone(),
                serde_json::json!({
                    "final_value": final_value.unwrap_or_default(),
                    "layer_values": per_layer
                        .into_iter()
                        .map(Option::unwrap_or_default)
                        .collect::<Vec<_>>(),
                }),
            );
        }
        let layers: Vec<&str> = self
            .runtime
            .layers
            .iter()
            .map(|l| l.name.as_str())
            .collect();
        serde_json::json!({ "entries": entries, "layers": layers })
    }

    /// `POST /runtime_modify?key=value&...`: sets (or, with an empty value,
    /// removes) admin-layer values, all or none.
    pub fn modify(&self, query: &str) -> Response<Body> {
        let params: Vec<(String, String)> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (percent_decode(k), percent_decode(v))
            })
            .collect();
        if params.is_empty() {
            return reply(
                StatusCode::BAD_REQUEST,
                "usage: /runtime_modify?key1=value1&key2=value2&keyN=valueN\n       \
                 use an empty value to remove a previously added override\n",
            );
        }
        if !self.runtime.has_admin_layer() {
            return reply(StatusCode::SERVICE_UNAVAILABLE, "No admin layer specified");
        }
        for (key, value) in &params {
            if value.is_empty() {
                continue;
            }
            match keys::check(key, value) {
                Ok(Meaning::Kept) => {}
                Ok(_) => {
                    return reply(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "{key}: courier reads this key from the bootstrap's static layers only\n"
                        ),
                    );
                }
                Err(e) => return reply(StatusCode::BAD_REQUEST, format!("{key}: {e}\n")),
            }
        }
        let mut admin = BTreeMap::clone(&self.admin.load());
        for (key, value) in params {
            if value.is_empty() {
                admin.remove(&key);
            } else {
                admin.insert(key, value);
            }
        }
        self.admin.store(Arc::new(admin));
        reply(StatusCode::OK, "OK\n")
    }
}

/// Decodes a query component (`%2F`, `+` for a space), keeping what is not
/// valid escaping as it is.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime(yaml_layers: serde_json::Value) -> Runtime {
        let v = serde_json::json!({"layered_runtime": {"layers": yaml_layers}});
        courier_config::bootstrap_from_str(&v.to_string(), courier_config::load::Format::Json)
            .unwrap()
            .runtime
    }

    #[test]
    fn shows_layers_and_admin_overrides_as_envoy() {
        let rt = RuntimeAdmin::new(&runtime(serde_json::json!([
            {"name": "static", "static_layer": {
                "envoy.reloadable_features.coalesce_lb_rebuilds_on_batch_update": false,
                "envoy.reloadable_features.old_flag": "x"}},
            {"name": "admin", "admin_layer": {}},
        ])));
        let r = rt
            .modify("envoy.reloadable_features.old_flag=y&envoy.reloadable_features.new%2Dflag=1");
        assert_eq!(r.status(), StatusCode::OK);
        let shown = rt.show();
        assert_eq!(shown["layers"], serde_json::json!(["static", "admin"]));
        assert_eq!(
            shown["entries"]["envoy.reloadable_features.old_flag"],
            serde_json::json!({"final_value": "y", "layer_values": ["x", "y"]})
        );
        assert_eq!(
            shown["entries"]["envoy.reloadable_features.new-flag"]["layer_values"],
            serde_json::json!(["", "1"])
        );
        // An empty value removes the override.
        assert_eq!(
            rt.modify("envoy.reloadable_features.old_flag=").status(),
            StatusCode::OK
        );
        assert_eq!(
            rt.show()["entries"]["envoy.reloadable_features.old_flag"]["final_value"],
            "x"
        );
    }

    #[test]
    fn refuses_what_it_cannot_apply_all_or_none() {
        let rt = RuntimeAdmin::new(&runtime(
            serde_json::json!([{"name": "a", "admin_layer": {}}]),
        ));
        for query in [
            "envoy.reloadable_features.old=1&upstream.use_http2=0",
            // Read from the static layers only.
            "envoy.reloadable_features.http_reject_path_with_fragment=false",
            "overload.global_downstream_max_connections=10",
        ] {
            assert_eq!(
                rt.modify(query).status(),
                StatusCode::BAD_REQUEST,
                "{query}"
            );
        }
        assert_eq!(rt.show()["entries"], serde_json::json!({}));
        assert_eq!(rt.modify("").status(), StatusCode::BAD_REQUEST);
        let none = RuntimeAdmin::new(&Runtime::default());
        assert_eq!(none.modify("a=1").status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}
