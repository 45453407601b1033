//! `layered_runtime`: the runtime's layers, in Envoy's order (a later layer's
//! value wins), and the keys courier gives a meaning to ([`keys::check`]).
//!
//! Static layers keep every value as Envoy does, in its text form (numbers,
//! booleans and strings; a list or a null is refused as by Envoy), for admin's
//! `/runtime`. An admin layer holds what `/runtime_modify` sets at run time.
//! `rtds_layer` (runtime over xDS) is refused with its path.

mod envoy_flags;
pub mod keys;

use crate::config_source::ConfigSource;
use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::bootstrap::v3 as bpb;
use std::collections::{BTreeMap, HashMap};

/// Fields of the runtime messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    ("envoy.config.bootstrap.v3.LayeredRuntime", &["layers"]),
    (
        "envoy.config.bootstrap.v3.RuntimeLayer",
        &["name", "static_layer", "admin_layer", "rtds_layer"],
    ),
    ("envoy.config.bootstrap.v3.RuntimeLayer.AdminLayer", &[]),
    (
        "envoy.config.bootstrap.v3.RuntimeLayer.RtdsLayer",
        &["name", "rtds_config"],
    ),
    ("envoy.service.runtime.v3.Runtime", &["name", "layer"]),
];

/// One layer of the runtime.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// The layer's name (`/runtime` lists them).
    pub name: String,
    /// Its values.
    pub kind: LayerKind,
}

/// Where a layer's values come from.
#[derive(Debug, Clone, PartialEq)]
pub enum LayerKind {
    /// `static_layer`: flattened keys (`a.b.c`) and their values as text.
    Static(BTreeMap<String, String>),
    /// `admin_layer`: empty at start; `/runtime_modify` writes it.
    Admin,
    /// `rtds_layer`: empty until the control plane sends the `Runtime`
    /// resource `resource`; each accepted update replaces its values.
    Rtds {
        /// The `Runtime` resource's name (`rtds_layer.name`).
        resource: String,
        /// Where it comes from (`rtds_layer.rtds_config`).
        source: ConfigSource,
    },
}

/// The runtime: its layers and the values courier reads from them.
#[derive(Debug, Clone, PartialEq)]
pub struct Runtime {
    /// The layers, in order.
    pub layers: Vec<Layer>,
    /// `envoy.resource_limits.listener.<name>.connection_limit`, by listener name.
    pub listener_connection_limits: HashMap<String, u64>,
    /// `overload.global_downstream_max_connections` (deprecated in Envoy for the
    /// monitor, still honoured).
    pub global_downstream_max_connections: Option<u64>,
    /// `envoy.reloadable_features.http_reject_path_with_fragment` (Envoy
    /// 1.40's default: on).
    pub reject_path_with_fragment: bool,
    /// `tracing.opentelemetry.min_flush_spans` (Envoy's default: 5).
    pub otel_min_flush_spans: u64,
    /// `tracing.opentelemetry.flush_interval_ms` (Envoy's default: 5000).
    pub otel_flush_interval_ms: u64,
    /// The Zipkin tracer's `tracing.zipkin.*` settings.
    pub zipkin: ZipkinRuntime,
    /// `envoy.reloadable_features.fixed_heap_use_allocated` (Envoy 1.40's
    /// default: off): the heap monitor reads allocated bytes, not the heap.
    pub fixed_heap_use_allocated: bool,
    /// `re2.max_program_size.error_level` / `warn_level`: the RE2 program-size
    /// thresholds regexes are checked against when a config is loaded.
    pub re2_limits: crate::re2_program::Limits,
    /// `upstream.zone_routing.enabled`, when a layer sets it.
    pub zone_routing_enabled: Option<u64>,
    /// `upstream.zone_routing.min_cluster_size`, when a layer sets it.
    pub zone_min_cluster_size: Option<u64>,
}

/// The Zipkin tracer's runtime settings (Envoy's keys and defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZipkinRuntime {
    /// `tracing.zipkin.min_flush_spans` (5).
    pub min_flush_spans: u64,
    /// `tracing.zipkin.flush_interval_ms` (5000).
    pub flush_interval_ms: u64,
    /// `tracing.zipkin.request_timeout` in ms (5000).
    pub request_timeout_ms: u64,
}

impl Default for ZipkinRuntime {
    fn default() -> Self {
        ZipkinRuntime {
            min_flush_spans: 5,
            flush_interval_ms: 5000,
            request_timeout_ms: 5000,
        }
    }
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime {
            layers: Vec::new(),
            listener_connection_limits: HashMap::new(),
            global_downstream_max_connections: None,
            reject_path_with_fragment: true,
            otel_min_flush_spans: 5,
            otel_flush_interval_ms: 5000,
            zipkin: ZipkinRuntime::default(),
            fixed_heap_use_allocated: false,
            re2_limits: crate::re2_program::Limits::default(),
            zone_routing_enabled: None,
            zone_min_cluster_size: None,
        }
    }
}

impl Runtime {
    /// Whether a layer takes `/runtime_modify` (Envoy answers 503 without one).
    pub fn has_admin_layer(&self) -> bool {
        self.layers.iter().any(|l| l.kind == LayerKind::Admin)
    }

    /// The runtime's layers with nothing read from them yet: what
    /// [`Runtime::read`] starts from to find the values in force.
    pub fn unread(&self) -> Runtime {
        Runtime {
            layers: self.layers.clone(),
            ..Runtime::default()
        }
    }

    /// Reads one layer's values (already checked) on top of what earlier
    /// layers set: call it for each layer in order. A value [`keys::check`]
    /// refuses is skipped (values are checked before they get into a layer).
    pub fn read<'a>(&mut self, values: impl IntoIterator<Item = (&'a String, &'a String)>) {
        for (key, value) in values {
            if let Ok(meaning) = keys::check(key, value) {
                apply(meaning, self);
            }
        }
    }

    /// The `Runtime` resources the RTDS layers subscribe to, with their sources.
    pub fn rtds_layers(&self) -> impl Iterator<Item = (&str, &ConfigSource)> {
        self.layers.iter().filter_map(|l| match &l.kind {
            LayerKind::Rtds { resource, source } => Some((resource.as_str(), source)),
            _ => None,
        })
    }
}

/// Translates `layered_runtime`.
pub fn translate(r: &bpb::LayeredRuntime, path: &Path<'_>, ctx: &mut Ctx) -> Runtime {
    use bpb::runtime_layer::LayerSpecifier;
    let mut out = Runtime::default();
    let lp = path.field("layers");
    for (i, layer) in r.layers.iter().enumerate() {
        let p = lp.index(i);
        let kind = match &layer.layer_specifier {
            Some(LayerSpecifier::StaticLayer(s)) => {
                LayerKind::Static(static_layer(s, &p.field("static_layer"), &mut out, ctx))
            }
            Some(LayerSpecifier::AdminLayer(_)) => {
                // Envoy: "Too many admin layers specified in LayeredRuntime, at most one may be specified".
                if out.has_admin_layer() {
                    ctx.error(
                        &p.field("admin_layer"),
                        "at most one admin layer may be specified",
                    );
                }
                LayerKind::Admin
            }
            Some(LayerSpecifier::RtdsLayer(r)) => {
                let rp = p.field("rtds_layer");
                if r.name.is_empty() {
                    ctx.error(&rp.field("name"), "must name the Runtime resource");
                }
                let Some(cs) = r.rtds_config.as_ref() else {
                    ctx.error(&rp.field("rtds_config"), "is required");
                    continue;
                };
                let cp = rp.field("rtds_config");
                let Some(source) = crate::config_source::translate(cs, &cp, ctx) else {
                    continue;
                };
                match &source.kind {
                    crate::config_source::ConfigSourceKind::SelfSource => {
                        ctx.unsupported(&cp.field("self"), "self config source for RTDS");
                    }
                    crate::config_source::ConfigSourceKind::Api(api)
                        if api.api_type == crate::config_source::ApiType::Rest =>
                    {
                        // Envoy's RTDS takes gRPC, Delta gRPC, ADS or a file.
                        ctx.unsupported(
                            &cp.field("api_config_source").field("api_type"),
                            "REST for RTDS",
                        );
                    }
                    _ => {}
                }
                LayerKind::Rtds {
                    resource: r.name.clone(),
                    source,
                }
            }
            Some(LayerSpecifier::DiskLayer(_)) => {
                ctx.unsupported(&p.field("disk_layer"), "disk_layer");
                continue;
            }
            None => {
                ctx.error(
                    &p,
                    "a layer needs static_layer, admin_layer, rtds_layer or disk_layer",
                );
                continue;
            }
        };
        out.layers.push(Layer {
            name: layer.name.clone(),
            kind,
        });
    }
    out
}

/// Flattens a static layer, checks each key and applies what it means (a later
/// layer's value replaces an earlier one's).
fn static_layer(
    s: &envoy_types::pb::google::protobuf::Struct,
    path: &Path<'_>,
    out: &mut Runtime,
    ctx: &mut Ctx,
) -> BTreeMap<String, String> {
    let values = layer_values(s, path, ctx);
    out.read(&values);
    values
}

/// The values of an RTDS layer: a `Runtime` resource's name and its `layer`,
/// flattened and checked as a static layer's.
#[derive(Debug, Clone, PartialEq)]
pub struct RtdsValues {
    /// The resource's name.
    pub name: String,
    /// Flattened keys and their values as text.
    pub values: BTreeMap<String, String>,
}

/// Translates a `Runtime` resource (RTDS): every key must pass [`keys::check`];
/// errors are reported at `layer["<key>"]`.
pub fn rtds_resource(
    r: &envoy_types::pb::envoy::service::runtime::v3::Runtime,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<RtdsValues> {
    if r.name.is_empty() {
        ctx.error(&path.field("name"), "must not be empty");
        return None;
    }
    let values = match &r.layer {
        Some(s) => layer_values(s, &path.field("layer"), ctx),
        None => BTreeMap::new(),
    };
    Some(RtdsValues {
        name: r.name.clone(),
        values,
    })
}

/// Flattens a layer's struct and checks each key.
fn layer_values(
    s: &envoy_types::pb::google::protobuf::Struct,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> BTreeMap<String, String> {
    let mut flat = Vec::new();
    flatten(
        &serde_json::Value::Object(crate::core::struct_to_json(s)),
        String::new(),
        &mut flat,
    );
    let mut values = BTreeMap::new();
    for (key, value) in flat {
        let kp = path.key(&key);
        let Some(text) = text(&value) else {
            // As Envoy: "Invalid runtime entry value for <key>".
            ctx.error(&kp, "invalid runtime entry value (a list or a null)");
            continue;
        };
        if let Err(e) = keys::check(&key, &text) {
            ctx.error(&kp, e.to_string());
            continue;
        }
        values.insert(key, text);
    }
    values
}

fn apply(meaning: keys::Meaning, out: &mut Runtime) {
    match meaning {
        keys::Meaning::Kept => {}
        keys::Meaning::ListenerConnectionLimit(name, n) => {
            out.listener_connection_limits.insert(name, n);
        }
        keys::Meaning::GlobalDownstreamMaxConnections(n) => {
            out.global_downstream_max_connections = Some(n);
        }
        keys::Meaning::RejectPathWithFragment(on) => out.reject_path_with_fragment = on,
        keys::Meaning::OtelMinFlushSpans(n) => out.otel_min_flush_spans = n,
        keys::Meaning::OtelFlushIntervalMs(ms) => out.otel_flush_interval_ms = ms,
        keys::Meaning::ZipkinMinFlushSpans(n) => out.zipkin.min_flush_spans = n,
        keys::Meaning::ZipkinFlushIntervalMs(ms) => out.zipkin.flush_interval_ms = ms,
        keys::Meaning::ZipkinRequestTimeoutMs(ms) => out.zipkin.request_timeout_ms = ms,
        keys::Meaning::FixedHeapUseAllocated(on) => out.fixed_heap_use_allocated = on,
        keys::Meaning::Re2ErrorLevel(n) => out.re2_limits.error_level = n,
        keys::Meaning::Re2WarnLevel(n) => out.re2_limits.warn_level = n,
        keys::Meaning::ZoneRoutingEnabled(n) => out.zone_routing_enabled = Some(n),
        keys::Meaning::ZoneMinClusterSize(n) => out.zone_min_cluster_size = Some(n),
    }
}

/// A leaf's value as Envoy shows it: integral numbers without a fraction.
fn text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        serde_json::Value::Number(n) => Some(match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => format!("{}", f as i64),
            Some(f) => f.to_string(),
            None => n.to_string(),
        }),
        serde_json::Value::Null | serde_json::Value::Array(_) | serde_json::Value::Object(_) => {
            None
        }
    }
}

/// Runtime keys are the dotted paths to the leaves of the layer.
fn flatten(v: &serde_json::Value, prefix: String, out: &mut Vec<(String, serde_json::Value)>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(v, key, out);
            }
        }
        leaf => out.push((prefix, leaf.clone())),
    }
}

#[cfg(test)]
mod tests;
