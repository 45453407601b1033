//! `/config_dump`'s xDS parts: the route configurations, clusters, endpoint
//! assignments and listeners in force (and warming), each with its version and
//! when it was applied, in Envoy's admin shapes.

use crate::accept::listeners::Registry;
use crate::upstream::ClusterManager;
use courier_xds::ResourceType;

/// `/config_dump`'s dynamic parts: RDS route configurations and EDS
/// assignments in force, each with its version and when it was applied.
fn dump(
    handle: &courier_xds::XdsHandle,
    clusters: &ClusterManager,
    listeners: &Registry,
) -> Vec<serde_json::Value> {
    let warming = clusters.warming();
    // `keep` picks the resources (by name) that go in this list.
    let list =
        |t: ResourceType, field: &str, keep: &dyn Fn(&str) -> bool| -> Vec<serde_json::Value> {
            let st = handle.store().get(t);
            st.resources
                .iter()
                .filter(|(name, _)| keep(name))
                .map(|(_, e)| {
                    let mut when = String::new();
                    crate::log_time::default_format(e.last_updated, &mut when);
                    serde_json::json!({
                        "version_info": e.version,
                        field: any_json(&e.any(t)),
                        "last_updated": when,
                    })
                })
                .collect()
        };
    let entries = |t: ResourceType, field: &str| list(t, field, &|_| true);
    const TYPE: &str = "type.googleapis.com/envoy.admin.v3.";
    let mut out = Vec::new();
    if handle.delivers(ResourceType::RouteConfig) {
        out.push(serde_json::json!({
            "@type": format!("{TYPE}RoutesConfigDump"),
            "dynamic_route_configs": entries(ResourceType::RouteConfig, "route_config"),
        }));
    }
    if handle.delivers(ResourceType::Cluster) {
        let is_warming = |name: &str| warming.iter().any(|w| w == name);
        let mut dump = serde_json::json!({
            "@type": format!("{TYPE}ClustersConfigDump"),
            "dynamic_active_clusters":
                list(ResourceType::Cluster, "cluster", &|n| !is_warming(n)),
        });
        // As Envoy, the list is left out when no cluster warms.
        let warming = list(ResourceType::Cluster, "cluster", &is_warming);
        if let (false, Some(m)) = (warming.is_empty(), dump.as_object_mut()) {
            m.insert("dynamic_warming_clusters".into(), warming.into());
        }
        out.push(dump);
    }
    if handle.delivers(ResourceType::Listener) {
        out.push(serde_json::json!({
            "@type": format!("{TYPE}ListenersConfigDump"),
            "dynamic_listeners": listeners_dump(listeners),
        }));
    }
    if handle.delivers(ResourceType::Endpoints) {
        out.push(serde_json::json!({
            "@type": format!("{TYPE}EndpointsConfigDump"),
            "dynamic_endpoint_configs": entries(ResourceType::Endpoints, "endpoint_config"),
        }));
    }
    out
}

/// Adds [`dump`]'s dynamic parts to the static dump's `configs`: into the config
/// of the same `@type` (RoutesConfigDump gets `dynamic_route_configs` beside
/// its static ones), or as a new config.
pub fn merge_dump(
    handle: &courier_xds::XdsHandle,
    clusters: &ClusterManager,
    listeners: &Registry,
    configs: &mut Vec<serde_json::Value>,
) {
    for extra in dump(handle, clusters, listeners) {
        let ty = extra.get("@type").cloned();
        let existing = configs
            .iter_mut()
            .find(|c| c.get("@type") == ty.as_ref())
            .and_then(|c| c.as_object_mut());
        match (existing, extra) {
            (Some(into), serde_json::Value::Object(fields)) => into.extend(fields),
            (_, extra) => configs.push(extra),
        }
    }
}

/// `dynamic_listeners`: each LDS listener's version in force
/// (`active_state`) and the one warming (`warming_state`), as Envoy.
fn listeners_dump(registry: &Registry) -> Vec<serde_json::Value> {
    let state = |l: &crate::accept::listeners::ActiveListener| {
        let d = l.dynamic.as_ref()?;
        let mut when = String::new();
        crate::log_time::default_format(d.last_updated, &mut when);
        let listener = any_json(&d.raw);
        Some(serde_json::json!({
            "version_info": d.version_info,
            "listener": listener,
            "last_updated": when,
        }))
    };
    let mut out: Vec<(String, serde_json::Value)> = Vec::new();
    for l in &registry.current().listeners {
        if let Some(s) = state(l) {
            out.push((
                l.name().to_string(),
                serde_json::json!({"name": l.name(), "active_state": s}),
            ));
        }
    }
    for l in registry.warming().iter() {
        let Some(s) = state(l) else { continue };
        match out.iter_mut().find(|(n, _)| n == l.name()) {
            Some((_, entry)) => {
                if let Some(m) = entry.as_object_mut() {
                    m.insert("warming_state".into(), s);
                }
            }
            None => out.push((
                l.name().to_string(),
                serde_json::json!({"name": l.name(), "warming_state": s}),
            )),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, v)| v).collect()
}

/// A resource in proto3 JSON with its `@type`.
fn any_json(any: &envoy_types::pb::google::protobuf::Any) -> serde_json::Value {
    let Some(desc) = courier_config::descriptors::message_for_type_url(&any.type_url) else {
        return serde_json::Value::Null;
    };
    let Ok(msg) = prost_reflect::DynamicMessage::decode(desc, any.value.as_slice()) else {
        return serde_json::Value::Null;
    };
    let opts = prost_reflect::SerializeOptions::new().use_proto_field_name(true);
    let mut v = msg
        .serialize_with_options(serde_json::value::Serializer, &opts)
        .unwrap_or(serde_json::Value::Null);
    if let serde_json::Value::Object(m) = &mut v {
        m.insert("@type".into(), any.type_url.clone().into());
    }
    v
}
