//! The runtime in force: the bootstrap's layers, the RTDS layers' values (from
//! the control plane) and the admin layer `/runtime_modify` writes; `/runtime`
//! shows them as Envoy does.
//!
//! A value set through `/runtime_modify` or an RTDS update passes the same
//! check as a static layer's ([`courier_config::runtime::keys::check`]), so a
//! key means the same from any layer. After either changes, the layers are read
//! again in order and what they mean is applied to the running proxy in one
//! place ([`RuntimeAdmin::apply`]): connection limits (global and per
//! listener) and `http_reject_path_with_fragment` take effect for new
//! connections at once, the OpenTelemetry flush settings
//! (`tracing.opentelemetry.min_flush_spans` / `flush_interval_ms`) at the next
//! span and the next tick.

use crate::request::local_reply::{Body, reply};
use arc_swap::ArcSwap;
use courier_config::runtime::keys;
use courier_config::runtime::{LayerKind, Runtime};
use http::{Response, StatusCode};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

type Values = BTreeMap<String, String>;

/// The runtime's layers and the values of its dynamic ones.
#[derive(Debug)]
pub struct RuntimeAdmin {
    runtime: Runtime,
    /// Written by `/runtime_modify` only (admin, on the main thread, one
    /// request at a time); nothing on the request path reads it.
    admin: ArcSwap<Values>,
    /// The RTDS layers' values, by `Runtime` resource name (absent: nothing
    /// received yet, or the resource was removed). Written by the xDS client
    /// on the main thread.
    rtds: ArcSwap<HashMap<String, Arc<Values>>>,
    /// Times the layers were read and applied (`runtime.load_success`): once
    /// at start, then after every change.
    loads: AtomicU64,
}

impl Default for RuntimeAdmin {
    fn default() -> Self {
        Self::new(&Runtime::default())
    }
}

impl RuntimeAdmin {
    /// The runtime of the bootstrap, with empty admin and RTDS layers.
    pub fn new(runtime: &Runtime) -> Self {
        Self {
            runtime: runtime.clone(),
            admin: ArcSwap::default(),
            rtds: ArcSwap::default(),
            loads: AtomicU64::new(1),
        }
    }

    /// The values each layer holds now, in layer order.
    fn layer_values(&self) -> Vec<Option<Arc<Values>>> {
        let admin = self.admin.load_full();
        let rtds = self.rtds.load();
        self.runtime
            .layers
            .iter()
            .map(|l| match &l.kind {
                LayerKind::Static(values) => Some(Arc::new(values.clone())),
                LayerKind::Admin => Some(Arc::clone(&admin)),
                LayerKind::Rtds { resource, .. } => rtds.get(resource).cloned(),
            })
            .collect()
    }

    /// What the layers mean now, read in order (a later layer wins).
    pub fn in_force(&self) -> Runtime {
        let mut rt = self.runtime.unread();
        for values in self.layer_values().into_iter().flatten() {
            rt.read(values.iter());
        }
        rt
    }

    /// Applies what the layers mean now to the running proxy: the one path
    /// for RTDS updates and `/runtime_modify`.
    pub fn apply(&self) {
        let rt = self.in_force();
        crate::codec::h1_check::set_reject_fragment(rt.reject_path_with_fragment);
        crate::trace::export::set_flush(rt.otel_min_flush_spans, rt.otel_flush_interval_ms);
        crate::trace::zipkin_export::set_runtime(rt.zipkin);
        crate::overload::set_use_allocated(rt.fixed_heap_use_allocated);
        crate::upstream::zone::set_runtime(rt.zone_routing_enabled, rt.zone_min_cluster_size);
        // Regexes already compiled keep working; configs loaded from now on
        // (xDS resources) are checked against the new thresholds, as in Envoy.
        courier_config::re2_program::set_process_limits(rt.re2_limits);
        crate::overload::get().set_runtime_limits(
            rt.global_downstream_max_connections,
            &rt.listener_connection_limits,
        );
        self.loads.fetch_add(1, Ordering::Relaxed);
    }

    /// An accepted RTDS update: each `(resource, values)` replaces that
    /// layer's values wholesale; each removed resource empties its layer.
    pub fn rtds_update(&self, upserts: Vec<(String, Values)>, removed: &[String]) {
        self.rtds.rcu(|cur| {
            let mut next = HashMap::clone(cur);
            for (name, values) in &upserts {
                next.insert(name.clone(), Arc::new(values.clone()));
            }
            for name in removed {
                next.remove(name);
            }
            next
        });
        self.apply();
    }

    /// `GET /runtime`: every key with its value per layer (empty where a layer
    /// does not set it) and the value in force, and the layers' names.
    pub fn show(&self) -> serde_json::Value {
        let per_layer = self.layer_values();
        let mut keys: Vec<&String> = per_layer.iter().flatten().flat_map(|v| v.keys()).collect();
        keys.sort();
        keys.dedup();
        let mut entries = serde_json::Map::new();
        for key in keys {
            let values: Vec<Option<&String>> = per_layer
                .iter()
                .map(|v| v.as_ref().and_then(|v| v.get(key)))
                .collect();
            let final_value = values.iter().rev().flatten().next().copied();
            entries.insert(
                key.clone(),
                serde_json::json!({
                    "final_value": final_value.cloned().unwrap_or_default(),
                    "layer_values": values
                        .into_iter()
                        .map(|v| v.cloned().unwrap_or_default())
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

    /// The runtime loader's stats as Envoy names them: `runtime.load_success`
    /// (the layers read and applied: at start and after each RTDS update or
    /// `/runtime_modify`), `runtime.load_error` (courier refuses a bad layer
    /// before loading it, so none), `runtime.num_keys` (distinct keys in
    /// force), `runtime.num_layers`, `runtime.admin_overrides_active`.
    pub fn samples(&self, out: &mut Vec<crate::stats::Sample>) {
        let per_layer = self.layer_values();
        let mut keys: Vec<&String> = per_layer.iter().flatten().flat_map(|v| v.keys()).collect();
        keys.sort();
        keys.dedup();
        out.extend([
            (
                "runtime.load_success".to_string(),
                self.loads.load(Ordering::Relaxed),
            ),
            ("runtime.load_error".to_string(), 0),
            ("runtime.num_keys".to_string(), keys.len() as u64),
            (
                "runtime.num_layers".to_string(),
                self.runtime.layers.len() as u64,
            ),
            (
                "runtime.admin_overrides_active".to_string(),
                u64::from(!self.admin.load().is_empty()),
            ),
        ]);
    }

    /// `POST /runtime_modify?key=value&...`: sets (or, with an empty value,
    /// removes) admin-layer values, all or none, and applies what they mean.
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
            if let Err(e) = keys::check(key, value) {
                return reply(StatusCode::BAD_REQUEST, format!("{key}: {e}\n"));
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
        self.apply();
        reply(StatusCode::OK, "OK\n")
    }
}

/// Decodes a query component (`%2F`, `+` for a space), keeping what is not
/// valid escaping as it is.
pub(crate) fn percent_decode(s: &str) -> String {
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
    fn opentelemetry_flush_settings_apply_from_any_layer() {
        let rt = RuntimeAdmin::new(&runtime(serde_json::json!([
            {"name": "static", "static_layer": {"tracing.opentelemetry.min_flush_spans": 7}},
            {"name": "admin", "admin_layer": {}},
        ])));
        // Other tests of this process apply their runtimes too (Envoy's
        // defaults); applying again until this one is seen keeps it exact.
        let seen = |want: (u64, u64)| {
            (0..100).any(|_| {
                rt.apply();
                crate::trace::export::flush_settings() == want
            })
        };
        assert!(seen((7, 5000)));
        let r = rt.modify("tracing.opentelemetry.flush_interval_ms=250");
        assert_eq!(r.status(), StatusCode::OK);
        assert!(seen((7, 250)));
        assert_eq!(
            rt.modify("tracing.opentelemetry.min_flush_spans=x")
                .status(),
            StatusCode::BAD_REQUEST
        );
        assert!(seen((7, 250)));
    }

    /// `/runtime_modify` (like RTDS) changes the RE2 program-size thresholds
    /// that xDS resources loaded from then on are checked against.
    #[test]
    fn re2_program_size_thresholds_apply_to_later_loads() {
        use courier_config::re2_program::{Limits, process_limits};
        let rt = RuntimeAdmin::new(&runtime(serde_json::json!([
            {"name": "static", "static_layer": {"re2.max_program_size.error_level": "32768"}},
            {"name": "admin", "admin_layer": {}},
        ])));
        let r = rt.modify("re2.max_program_size.warn_level=1000");
        assert_eq!(r.status(), StatusCode::OK);
        let want = Limits {
            error_level: 32768,
            warn_level: 1000,
        };
        assert_eq!(rt.in_force().re2_limits, want);
        // Other tests of this process apply their runtimes too (Envoy's
        // defaults); applying again until this one is seen keeps it exact.
        assert!(
            (0..100).any(|_| {
                rt.apply();
                process_limits() == want
            }),
            "apply() does not set the process's RE2 limits"
        );
        // Back to Envoy's defaults for the other tests of this process.
        courier_config::re2_program::set_process_limits(Limits::default());
    }

    #[test]
    fn refuses_what_it_cannot_apply_all_or_none() {
        let rt = RuntimeAdmin::new(&runtime(
            serde_json::json!([{"name": "a", "admin_layer": {}}]),
        ));
        for query in [
            "envoy.reloadable_features.old=1&upstream.use_http2=0",
            "envoy.reloadable_features.http_reject_path_with_fragment=maybe",
            "overload.global_downstream_max_connections=-1",
        ] {
            assert_eq!(
                rt.modify(query).status(),
                StatusCode::BAD_REQUEST,
                "{query}"
            );
        }
        assert_eq!(rt.show()["entries"], serde_json::json!({}));
        assert_eq!(rt.modify("").status(), StatusCode::BAD_REQUEST);
        // A key with a meaning is taken, and means what it does in a static layer.
        assert_eq!(
            rt.modify("envoy.resource_limits.listener.x.connection_limit=4")
                .status(),
            StatusCode::OK
        );
        assert_eq!(rt.in_force().listener_connection_limits.get("x"), Some(&4));
        let none = RuntimeAdmin::new(&Runtime::default());
        assert_eq!(none.modify("a=1").status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}

#[cfg(test)]
mod rtds_tests {
    use super::*;

    /// Layers in order: static, RTDS, admin; an RTDS update replaces its
    /// layer wholesale, a removal empties it, the admin layer stays on top.
    #[test]
    fn rtds_layer_values_sit_between_their_neighbours() {
        let v = serde_json::json!({"layered_runtime": {"layers": [
            {"name": "static", "static_layer": {"envoy.resource_limits.listener.l.connection_limit": 10}},
            {"name": "dynamic", "rtds_layer": {"name": "rt", "rtds_config": {"path_config_source": {"path": "/dev/null"}}}},
            {"name": "admin", "admin_layer": {}},
        ]}});
        let rt = RuntimeAdmin::new(
            &courier_config::bootstrap_from_str(&v.to_string(), courier_config::load::Format::Json)
                .unwrap()
                .runtime,
        );
        let key = "envoy.resource_limits.listener.l.connection_limit";
        let values = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Values>()
        };
        let in_force =
            |rt: &RuntimeAdmin| rt.in_force().listener_connection_limits.get("l").copied();
        assert_eq!(in_force(&rt), Some(10));
        rt.rtds_update(
            vec![(
                "rt".into(),
                values(&[(key, "2"), ("envoy.reloadable_features.x", "true")]),
            )],
            &[],
        );
        assert_eq!(in_force(&rt), Some(2));
        assert_eq!(
            rt.show()["entries"][key],
            serde_json::json!({"final_value": "2", "layer_values": ["10", "2", ""]})
        );
        assert_eq!(
            rt.show()["layers"],
            serde_json::json!(["static", "dynamic", "admin"])
        );
        // Wholesale: the flag the first update set is gone.
        rt.rtds_update(vec![("rt".into(), values(&[(key, "3")]))], &[]);
        assert!(
            rt.show()["entries"]
                .get("envoy.reloadable_features.x")
                .is_none()
        );
        assert_eq!(rt.modify(&format!("{key}=7")).status(), StatusCode::OK);
        assert_eq!(in_force(&rt), Some(7));
        assert_eq!(rt.modify(&format!("{key}=")).status(), StatusCode::OK);
        assert_eq!(in_force(&rt), Some(3));
        rt.rtds_update(Vec::new(), &["rt".to_string()]);
        assert_eq!(in_force(&rt), Some(10));
        let mut samples = Vec::new();
        rt.samples(&mut samples);
        let get = |n: &str| samples.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        assert_eq!(get("runtime.num_layers"), Some(3));
        assert_eq!(get("runtime.num_keys"), Some(1));
        assert_eq!(get("runtime.load_success"), Some(6));
    }
}
