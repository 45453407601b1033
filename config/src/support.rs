//! "No field is silently ignored": every field set in a config must be one courier
//! implements.
//!
//! Each config module declares, per proto message, the fields it translates (its
//! `SUPPORT` table). This walker visits every set field of a decoded message and
//! reports, at its path, each one that is not declared. It runs on a
//! `DynamicMessage`, so it works the same for a bootstrap read from YAML and for an
//! xDS resource decoded from protobuf.
//!
//! An `Any` whose type has no table entry is not walked here: the code that
//! dispatches on that `@type` (filters, transport sockets, ...) refuses it at the
//! path of the element that names it, which is where a user looks.

use crate::ctx::Ctx;
use crate::descriptors;
use crate::path::Path;
use prost_reflect::{DynamicMessage, MapKey, ReflectMessage, Value};
use std::collections::HashMap;
use std::sync::LazyLock;

/// Fields of one message that courier implements; `&["*"]` means all of them.
pub(crate) type Support = (&'static str, &'static [&'static str]);

/// All fields of the message are implemented.
pub(crate) const ALL: &[&str] = &["*"];

/// Per message, the union of the fields its modules implement. Some messages are
/// translated in more than one place (`HeaderValueOption` by routes and filters,
/// HTTP protocol options by clusters and the connection manager): each of those
/// places refuses in code what it does not implement in its context.
static TABLE: LazyLock<HashMap<&'static str, Vec<&'static str>>> = LazyLock::new(|| {
    let tables: &[&[Support]] = &[
        crate::bootstrap::SUPPORT,
        crate::cel::SUPPORT,
        crate::config_source::SUPPORT,
        crate::core::SUPPORT,
        crate::matcher::SUPPORT,
        crate::listener::SUPPORT,
        crate::listener::sni_dfp::SUPPORT,
        crate::listener::otel_access_log::SUPPORT,
        crate::listener::grpc_access_log::SUPPORT,
        crate::tls::SUPPORT,
        crate::route::SUPPORT,
        crate::cluster::SUPPORT,
        crate::dns_cache::SUPPORT,
        crate::filters::SUPPORT,
        crate::filters::rate_limit_support::SUPPORT,
        crate::filters::csrf::SUPPORT,
        crate::filters::dynamic_forward_proxy::SUPPORT,
        crate::filters::basic_auth::SUPPORT,
        crate::filters::oauth2::SUPPORT,
        crate::filters::ext_proc::SUPPORT,
        crate::filters::api_key_auth::SUPPORT,
        crate::filters::health_check::SUPPORT,
        crate::filters::fault::SUPPORT,
        crate::filters::grpc::SUPPORT,
        crate::overload::SUPPORT,
        crate::runtime::SUPPORT,
        crate::tracing::SUPPORT,
        crate::tracing::zipkin::SUPPORT,
        crate::tracing::datadog::SUPPORT,
        crate::stats::SUPPORT,
        crate::stats::sinks::SUPPORT,
    ];
    let mut table: HashMap<&'static str, Vec<&'static str>> = HashMap::new();
    for (message, fields) in tables.iter().flat_map(|t| t.iter().copied()) {
        let entry = table.entry(message).or_default();
        for f in fields {
            if !entry.contains(f) {
                entry.push(f);
            }
        }
    }
    table
});

/// Whether courier has a support table for message `full_name`.
pub(crate) fn is_known(full_name: &str) -> bool {
    TABLE.contains_key(full_name) || full_name.starts_with("google.protobuf.")
}

/// Reports every set field of `msg` (recursively) that courier does not implement.
pub(crate) fn check(msg: &DynamicMessage, path: &Path<'_>, ctx: &mut Ctx) {
    let desc = msg.descriptor();
    let name = desc.full_name();
    if name.starts_with("google.protobuf.") {
        if name == "google.protobuf.Any" {
            check_any(msg, path, ctx);
        }
        return;
    }
    let Some(allowed) = TABLE.get(name) else {
        ctx.unsupported(path, name);
        return;
    };
    let all = allowed.contains(&"*");
    for (field, value) in msg.fields() {
        let field_name = field.name();
        let field_path = path.field(field_name);
        if !all && !allowed.contains(&field_name) {
            ctx.unsupported(&field_path, field_name);
            continue;
        }
        value_check(value, &field_path, ctx);
    }
}

fn value_check(value: &Value, path: &Path<'_>, ctx: &mut Ctx) {
    match value {
        Value::Message(m) => check(m, path, ctx),
        Value::List(items) => {
            for (i, item) in items.iter().enumerate() {
                value_check(item, &path.index(i), ctx);
            }
        }
        Value::Map(map) => {
            for (k, v) in map {
                let key = match k {
                    MapKey::String(s) => s.clone(),
                    other => format!("{other:?}"),
                };
                value_check(v, &path.key(&key), ctx);
            }
        }
        _ => {}
    }
}

fn check_any(msg: &DynamicMessage, path: &Path<'_>, ctx: &mut Ctx) {
    let type_url = msg
        .get_field_by_name("type_url")
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let Some(desc) = descriptors::message_for_type_url(&type_url) else {
        return;
    };
    if !is_known(desc.full_name()) {
        return;
    }
    let bytes = msg
        .get_field_by_name("value")
        .and_then(|v| v.as_bytes().cloned())
        .unwrap_or_default();
    match DynamicMessage::decode(desc, bytes) {
        Ok(inner) => check(&inner, path, ctx),
        Err(e) => ctx.error(path, format!("cannot decode {type_url}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The descriptor set is pruned to what courier reads (build.rs): every
    /// message courier implements must be there whole, every field it lists
    /// with it. A message left as a stand-in would lose its fields silently.
    #[test]
    fn every_supported_message_is_kept_whole() {
        for (name, fields) in TABLE.iter() {
            let desc = descriptors::message(name).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                !descriptors::is_stand_in(&desc),
                "{name} is a stand-in: add its root to config/build.rs ROOTS"
            );
            let missing: Vec<_> = fields
                .iter()
                .filter(|f| **f != "*" && desc.get_field_by_name(f).is_none())
                .collect();
            assert!(missing.is_empty(), "{name} has no field {missing:?}");
        }
    }

    /// Envoy messages courier does not read keep their names (an `Any` naming
    /// one resolves, to be refused by type) but not their fields.
    #[test]
    fn other_messages_are_name_only_stand_ins() {
        let cors = descriptors::message("envoy.extensions.filters.http.cors.v3.Cors").unwrap();
        assert!(descriptors::is_stand_in(&cors));
        assert_eq!(cors.fields().count(), 0);
    }
}
