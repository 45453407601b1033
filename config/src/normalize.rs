//! The lenient half of reading Envoy JSON/YAML: a pass over the parsed document,
//! guided by the proto descriptors, before the strict proto3 JSON decoder runs.
//!
//! It does what Envoy's own loader tolerates and the proto3 JSON mapping does not:
//! enum names in any case (`strict_dns`), a `Duration` written as
//! `{seconds: 300}`, a single value where the proto has a repeated field (a list
//! of that one value), YAML nulls (a field set to null is absent), and HTTP filters
//! without a `typed_config` (resolved by filter name, as Envoy does for the
//! router). It also finds the structural errors (unknown fields, unknown
//! `@type`s, wrong JSON types, bad enum names, malformed durations) and reports
//! *all* of them with their paths, where a decoder would stop at the first.
//! Keys written in lowerCamelCase are renamed to the proto field names, so
//! error paths and `--config-yaml` merges see one spelling.

use crate::ctx::Ctx;
use crate::descriptors;
use crate::extensions;
use crate::path::Path;
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{Map, Value};

/// Normalises `value`, a JSON rendering of message `desc`, in place.
pub(crate) fn message(value: &mut Value, desc: &MessageDescriptor, path: &Path<'_>, ctx: &mut Ctx) {
    match desc.full_name() {
        "google.protobuf.Duration" => return duration(value, path, ctx),
        "google.protobuf.Any" => return any(value, path, ctx),
        // Free-form JSON: nothing to check, and nulls inside are real values.
        "google.protobuf.Struct" | "google.protobuf.Value" | "google.protobuf.ListValue" => return,
        "google.protobuf.Timestamp" | "google.protobuf.FieldMask" => {
            if !value.is_string() {
                ctx.error(path, format!("expected a string for {}", desc.full_name()));
            }
            return;
        }
        _ => {}
    }
    if let Some(inner) = wrapped_field(desc) {
        return scalar(value, &inner, path, ctx);
    }
    let Value::Object(object) = value else {
        ctx.error(
            path,
            format!(
                "expected an object ({}), found {}",
                desc.full_name(),
                kind_of(value)
            ),
        );
        return;
    };
    if desc.full_name() == "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter"
    {
        resolve_filter_by_name(object);
    }
    fields(object, desc, path, ctx);
}

/// Normalises the fields of a message object (also used for the body of an `Any`).
fn fields(
    object: &mut Map<String, Value>,
    desc: &MessageDescriptor,
    path: &Path<'_>,
    ctx: &mut Ctx,
) {
    let empty_config =
        desc.full_name() == "envoy.config.route.v3.FilterConfig" && take_empty_config(object);
    let entries: Vec<(String, Value)> = std::mem::take(object).into_iter().collect();
    for (key, mut value) in entries {
        if value.is_null() {
            continue;
        }
        let field = desc
            .get_field_by_name(&key)
            .or_else(|| desc.get_field_by_json_name(&key));
        let Some(field) = field else {
            ctx.error(
                &path.field(&key),
                format!("unknown field in {}", desc.full_name()),
            );
            continue;
        };
        let name = field.name().to_string();
        let field_path = path.field(&name);
        if object.contains_key(&name) {
            ctx.error(
                &field_path,
                "field given twice (snake_case and lowerCamelCase)",
            );
            continue;
        }
        field_value(&mut value, &field, &field_path, ctx);
        object.insert(name, value);
    }
    if empty_config {
        object.insert("config".into(), empty_any());
    }
}

fn field_value(value: &mut Value, field: &FieldDescriptor, path: &Path<'_>, ctx: &mut Ctx) {
    if field.is_map() {
        let Value::Object(map) = value else {
            ctx.error(
                path,
                format!("expected a map (object), found {}", kind_of(value)),
            );
            return;
        };
        let Kind::Message(entry) = field.kind() else {
            return;
        };
        let value_field = entry.map_entry_value_field();
        map.retain(|_, v| !v.is_null());
        for (k, v) in map.iter_mut() {
            single(v, &value_field, &path.key(k), ctx);
        }
    } else if field.is_list() {
        // Envoy's JSON parser reads a single value where the proto has a repeated
        // field as a list of that one value (`filters: {name: ...}`); Envoy's own
        // examples depend on it.
        if !value.is_array() {
            *value = Value::Array(vec![std::mem::take(value)]);
        }
        let Value::Array(items) = value else {
            return;
        };
        for (i, item) in items.iter_mut().enumerate() {
            single(item, field, &path.index(i), ctx);
        }
    } else {
        single(value, field, path, ctx);
    }
}

fn single(value: &mut Value, field: &FieldDescriptor, path: &Path<'_>, ctx: &mut Ctx) {
    match field.kind() {
        Kind::Message(m) => message(value, &m, path, ctx),
        _ => scalar(value, field, path, ctx),
    }
}

fn scalar(value: &mut Value, field: &FieldDescriptor, path: &Path<'_>, ctx: &mut Ctx) {
    let ok = match field.kind() {
        Kind::Enum(e) => {
            if e.full_name() == "google.protobuf.NullValue" {
                return;
            }
            match value {
                Value::String(s) => {
                    if let Some(v) = e.values().find(|v| v.name().eq_ignore_ascii_case(s)) {
                        *s = v.name().to_string();
                        true
                    } else {
                        let names: Vec<String> = e.values().map(|v| v.name().to_string()).collect();
                        ctx.error(
                            path,
                            format!(
                                "unknown value '{s}' for {} (expected one of {})",
                                e.name(),
                                names.join(", ")
                            ),
                        );
                        return;
                    }
                }
                Value::Number(n) => n.as_i64().is_some_and(|n| e.get_value(n as i32).is_some()),
                _ => false,
            }
        }
        Kind::String | Kind::Bytes => value.is_string(),
        Kind::Bool => value.is_boolean(),
        Kind::Double | Kind::Float => match value {
            Value::Number(_) => true,
            Value::String(s) => {
                s.parse::<f64>().is_ok() || matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity")
            }
            _ => false,
        },
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            int_in(value, i32::MIN as i128, i32::MAX as i128)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            int_in(value, i64::MIN as i128, i64::MAX as i128)
        }
        Kind::Uint32 | Kind::Fixed32 => int_in(value, 0, u32::MAX as i128),
        Kind::Uint64 | Kind::Fixed64 => int_in(value, 0, u64::MAX as i128),
        Kind::Message(_) => true,
    };
    if !ok {
        ctx.error(
            path,
            format!("expected {}, found {}", expected(field), describe(value)),
        );
    }
}

fn int_in(value: &Value, min: i128, max: i128) -> bool {
    let n: Option<i128> = match value {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 1e19)
                    .map(|f| f as i128)
            }),
        Value::String(s) => s.parse::<i128>().ok(),
        _ => None,
    };
    n.is_some_and(|n| (min..=max).contains(&n))
}

fn expected(field: &FieldDescriptor) -> String {
    match field.kind() {
        Kind::Enum(e) => format!("an enum name of {}", e.name()),
        Kind::String => "a string".into(),
        Kind::Bytes => "a base64 string".into(),
        Kind::Bool => "true or false".into(),
        Kind::Double | Kind::Float => "a number".into(),
        Kind::Uint32 | Kind::Fixed32 => "an unsigned 32-bit integer".into(),
        Kind::Uint64 | Kind::Fixed64 => "an unsigned 64-bit integer".into(),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => "a 32-bit integer".into(),
        _ => "an integer".into(),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => format!("\"{s}\""),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => kind_of(other).to_string(),
    }
}

/// For the `google.protobuf.*Value` wrappers, the field of the wrapped scalar.
fn wrapped_field(desc: &MessageDescriptor) -> Option<FieldDescriptor> {
    match desc.full_name() {
        "google.protobuf.DoubleValue"
        | "google.protobuf.FloatValue"
        | "google.protobuf.Int64Value"
        | "google.protobuf.UInt64Value"
        | "google.protobuf.Int32Value"
        | "google.protobuf.UInt32Value"
        | "google.protobuf.BoolValue"
        | "google.protobuf.StringValue"
        | "google.protobuf.BytesValue" => desc.get_field_by_name("value"),
        _ => None,
    }
}

/// A `Duration` is `"1.5s"`; Envoy's own docs also write `{seconds: 300, nanos: 0}`.
fn duration(value: &mut Value, path: &Path<'_>, ctx: &mut Ctx) {
    match value {
        Value::String(s) => {
            if parse_duration_text(s).is_none() {
                ctx.error(
                    path,
                    format!("invalid duration \"{s}\" (expected a string such as \"1.5s\")"),
                );
            }
        }
        Value::Object(o) => {
            let mut seconds: i64 = 0;
            let mut nanos: i64 = 0;
            for (k, v) in o.iter() {
                let n = match v {
                    Value::Number(n) => n.as_i64(),
                    Value::String(s) => s.parse::<i64>().ok(),
                    _ => None,
                };
                match (k.as_str(), n) {
                    ("seconds", Some(n)) if (-315_576_000_000..=315_576_000_000).contains(&n) => {
                        seconds = n
                    }
                    ("nanos", Some(n)) if (-999_999_999..=999_999_999).contains(&n) => nanos = n,
                    ("seconds" | "nanos", _) => {
                        ctx.error(
                            &path.field(k),
                            format!("expected an integer in range, found {}", describe(v)),
                        );
                        return;
                    }
                    _ => {
                        ctx.error(&path.field(k), "unknown field in google.protobuf.Duration");
                        return;
                    }
                }
            }
            if (seconds > 0 && nanos < 0) || (seconds < 0 && nanos > 0) {
                ctx.error(path, "duration seconds and nanos must have the same sign");
                return;
            }
            let negative = seconds < 0 || nanos < 0;
            let text = if nanos == 0 {
                format!("{seconds}s")
            } else {
                format!(
                    "{}{}.{:09}s",
                    if negative { "-" } else { "" },
                    seconds.unsigned_abs(),
                    nanos.unsigned_abs()
                )
            };
            *value = Value::String(text);
        }
        other => ctx.error(
            path,
            format!(
                "expected a duration string such as \"1.5s\", found {}",
                describe(other)
            ),
        ),
    }
}

/// Parses the proto3 JSON form of a duration (`"-1.5s"`) into (seconds, nanos).
pub(crate) fn parse_duration_text(s: &str) -> Option<(i64, i32)> {
    let body = s.strip_suffix('s')?;
    let (negative, body) = match body.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, body),
    };
    let (whole, frac) = body.split_once('.').unwrap_or((body, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds: i64 = whole.parse().ok()?;
    let nanos: i32 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().ok()?
    };
    if seconds > 315_576_000_000 {
        return None;
    }
    Some(if negative {
        (-seconds, -nanos)
    } else {
        (seconds, nanos)
    })
}

fn any(value: &mut Value, path: &Path<'_>, ctx: &mut Ctx) {
    let Value::Object(object) = value else {
        ctx.error(
            path,
            format!(
                "expected an object with \"@type\", found {}",
                kind_of(value)
            ),
        );
        return;
    };
    let Some(Value::String(type_url)) = object.get("@type").cloned() else {
        ctx.error(path, "missing \"@type\"");
        return;
    };
    if TYPED_STRUCTS.contains(&type_url.as_str()) {
        if typed_struct(object, path, ctx) {
            any(value, path, ctx);
        }
        return;
    }
    let Some(desc) = descriptors::message_for_type_url(&type_url) else {
        ctx.error(path, format!("unknown @type \"{type_url}\""));
        return;
    };
    // A message courier does not read: only its type is kept, for the code that
    // dispatches on it to refuse it by name.
    if descriptors::is_stand_in(&desc) {
        object.retain(|k, _| k == "@type");
        return;
    }
    let mut body = std::mem::take(object);
    body.remove("@type");
    let special = matches!(
        desc.full_name(),
        "google.protobuf.Duration"
            | "google.protobuf.Struct"
            | "google.protobuf.Value"
            | "google.protobuf.ListValue"
            | "google.protobuf.Timestamp"
            | "google.protobuf.FieldMask"
            | "google.protobuf.Any"
    ) || wrapped_field(&desc).is_some();
    if special {
        // Well-known types keep their JSON form under "value".
        if let Some(inner) = body.get_mut("value") {
            message(inner, &desc, &path.field("value"), ctx);
        }
    } else {
        fields(&mut body, &desc, path, ctx);
    }
    *object = body;
    object.insert("@type".into(), Value::String(type_url));
}

/// The `TypedStruct` wrappers (`udpa.type.v1` and its successor `xds.type.v3`):
/// an `Any` that names its real type in `type_url` and carries the message as
/// a `Struct` in `value`, which is the message's JSON form.
const TYPED_STRUCTS: &[&str] = &[
    "type.googleapis.com/udpa.type.v1.TypedStruct",
    "type.googleapis.com/xds.type.v3.TypedStruct",
];

/// Rewrites a `TypedStruct` `Any` into the `Any` it stands for, as Envoy
/// unpacks one (the struct's JSON read as the named message). `false` when it
/// is malformed (the error is recorded).
fn typed_struct(object: &mut Map<String, Value>, path: &Path<'_>, ctx: &mut Ctx) -> bool {
    let Some(Value::String(inner)) = object.get("type_url").cloned() else {
        ctx.error(&path.field("type_url"), "a TypedStruct needs a type_url");
        return false;
    };
    let body = match object.remove("value") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => o,
        Some(other) => {
            ctx.error(
                &path.field("value"),
                format!("expected an object, found {}", kind_of(&other)),
            );
            return false;
        }
    };
    if let Some(unknown) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "@type" | "type_url"))
    {
        ctx.error(
            &path.field(unknown),
            format!("unknown field \"{unknown}\" of TypedStruct"),
        );
        return false;
    }
    *object = body;
    object.insert("@type".into(), Value::String(inner));
    true
}

/// Protobuf's JSON mapping reads `{}` as the empty `Any` (no type, no value), and Envoy
/// takes a route's `FilterConfig.config: {}` as "enable the HCM-disabled filter with its
/// HCM config". The JSON decoder needs a type for every `Any`, so the empty one is written
/// as [`extensions::EMPTY_ANY`] once the other fields are normalised, and the per-route
/// reader turns it back into "no config".
fn take_empty_config(object: &mut Map<String, Value>) -> bool {
    let empty = matches!(object.get("config"), Some(Value::Object(c)) if c.is_empty());
    if empty {
        object.remove("config");
    }
    empty
}

/// [`extensions::EMPTY_ANY`] as the JSON decoder reads it (`Empty` is a well-known type,
/// so its JSON sits under `value`).
fn empty_any() -> Value {
    serde_json::json!({"@type": extensions::EMPTY_ANY, "value": {}})
}

/// Envoy builds an HTTP filter that has no `typed_config` (or an empty one) from its
/// name alone, as for `- name: envoy.filters.http.router`. Fill in the `@type` the
/// name stands for, so the rest of the loader sees one form.
fn resolve_filter_by_name(object: &mut Map<String, Value>) {
    if object.contains_key("config_discovery") || object.contains_key("configDiscovery") {
        return;
    }
    let Some(Value::String(name)) = object.get("name") else {
        return;
    };
    let Some(type_url) = extensions::http_filter_type_by_name(name) else {
        return;
    };
    let key = if object.contains_key("typedConfig") {
        "typedConfig"
    } else {
        "typed_config"
    };
    match object.get_mut(key) {
        None | Some(Value::Null) => {
            object.insert(key.into(), serde_json::json!({ "@type": type_url }));
        }
        Some(Value::Object(o)) if !o.contains_key("@type") && o.is_empty() => {
            o.insert("@type".into(), Value::String(type_url.into()));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_text() {
        assert_eq!(parse_duration_text("0.25s"), Some((0, 250_000_000)));
        assert_eq!(parse_duration_text("300s"), Some((300, 0)));
        assert_eq!(parse_duration_text("-1.5s"), Some((-1, -500_000_000)));
        assert_eq!(parse_duration_text("1.5"), None);
        assert_eq!(parse_duration_text("s"), None);
        assert_eq!(parse_duration_text("1.0000000001s"), None);
    }
}
