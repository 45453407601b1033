//! `/config_dump`: the bootstrap as loaded, in Envoy's `ConfigDump` shape
//! (bootstrap, static clusters, static listeners, the route configs inlined in
//! connection managers), with secrets redacted as Envoy does.

use prost_reflect::{DynamicMessage, SerializeOptions};
use serde_json::{Value, json};

const TYPE: &str = "type.googleapis.com/envoy.admin.v3.";
const HCM: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

/// Fields Envoy marks `sensitive`: their string leaves print as `[redacted]`.
const SENSITIVE: &[&str] = &[
    "private_key",
    "password",
    "session_ticket_keys",
    "secret",
    "hmac_secret",
    "token_secret",
    "client_secret",
];

/// The dump, or an error message when the bootstrap cannot be serialized.
pub fn dump(bootstrap: &DynamicMessage) -> Result<Value, String> {
    let opts = SerializeOptions::new().use_proto_field_name(true);
    let mut b = bootstrap
        .serialize_with_options(serde_json::value::Serializer, &opts)
        .map_err(|e| e.to_string())?;
    redact(&mut b, false);
    let statics = b.get("static_resources");
    let list = |name: &str| -> Vec<Value> {
        statics
            .and_then(|s| s.get(name))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let listeners = list("listeners");
    let clusters = list("clusters");
    let mut routes = Vec::new();
    for l in &listeners {
        let chains = l
            .get("filter_chains")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .chain(l.get("default_filter_chain"));
        for fc in chains {
            for f in fc
                .get("filters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(tc) = f.get("typed_config")
                    && tc.get("@type").and_then(Value::as_str) == Some(HCM)
                    && let Some(rc) = tc.get("route_config")
                {
                    routes.push(json!({ "route_config": rc }));
                }
            }
        }
    }
    Ok(json!({
        "configs": [
            { "@type": format!("{TYPE}BootstrapConfigDump"), "bootstrap": b },
            {
                "@type": format!("{TYPE}ClustersConfigDump"),
                "static_clusters": clusters.into_iter().map(|c| json!({ "cluster": c })).collect::<Vec<_>>(),
            },
            {
                "@type": format!("{TYPE}ListenersConfigDump"),
                "static_listeners": listeners.into_iter().map(|l| json!({ "listener": l })).collect::<Vec<_>>(),
            },
            { "@type": format!("{TYPE}RoutesConfigDump"), "static_route_configs": routes },
        ]
    }))
}

/// Replaces every string under a sensitive field with `[redacted]`, and shows an empty
/// `Any` as it was written (`{}`), not as the loader's stand-in type.
fn redact(v: &mut Value, sensitive: bool) {
    match v {
        Value::Object(map)
            if map.get("@type").and_then(Value::as_str)
                == Some(courier_config::extensions::EMPTY_ANY) =>
        {
            map.clear();
        }
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                // `@type` names a message, not a secret.
                if k == "@type" {
                    continue;
                }
                redact(child, sensitive || SENSITIVE.contains(&k.as_str()));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| redact(i, sensitive)),
        Value::String(s) if sensitive => *s = "[redacted]".to_string(),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::redact;
    use serde_json::json;

    #[test]
    fn redacts_sensitive_leaves_only() {
        let mut v = json!({"tls_certificates": [{
            "certificate_chain": {"inline_string": "CERT"},
            "private_key": {"inline_string": "KEY"},
        }]});
        redact(&mut v, false);
        assert_eq!(
            v,
            json!({"tls_certificates": [{
                "certificate_chain": {"inline_string": "CERT"},
                "private_key": {"inline_string": "[redacted]"},
            }]})
        );
    }

    #[test]
    fn shows_the_empty_any_as_written() {
        let mut v =
            json!({"config": {"@type": courier_config::extensions::EMPTY_ANY, "value": {}}});
        redact(&mut v, false);
        assert_eq!(v, json!({"config": {}}));
    }
}
