//! `google.protobuf.Struct` <-> JSON: dynamic metadata crosses the authorization API as
//! protobuf Structs, courier keeps it as JSON objects.

use envoy_types::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};
use serde_json::{Map, Value as Json};

/// A JSON object as a Struct.
pub fn to_struct(obj: &Map<String, Json>) -> Struct {
    Struct {
        fields: obj.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
    }
}

fn to_value(v: &Json) -> Value {
    let kind = match v {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(*b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => Kind::StringValue(s.clone()),
        Json::Array(a) => Kind::ListValue(ListValue {
            values: a.iter().map(to_value).collect(),
        }),
        Json::Object(o) => Kind::StructValue(to_struct(o)),
    };
    Value { kind: Some(kind) }
}

/// A Struct as a JSON object.
pub fn from_struct(s: &Struct) -> Map<String, Json> {
    s.fields
        .iter()
        .map(|(k, v)| (k.clone(), from_value(v)))
        .collect()
}

fn from_value(v: &Value) -> Json {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(*b),
        Some(Kind::NumberValue(n)) => {
            serde_json::Number::from_f64(*n).map_or(Json::Null, Json::Number)
        }
        Some(Kind::StringValue(s)) => Json::String(s.clone()),
        Some(Kind::ListValue(l)) => Json::Array(l.values.iter().map(from_value).collect()),
        Some(Kind::StructValue(s)) => Json::Object(from_struct(s)),
    }
}
