use super::*;
use crate::listener::test_util::{errors, listener, load};
use serde_json::json;

const FILE: &str = "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog";

fn log_with(filter: serde_json::Value) -> serde_json::Value {
    json!({"name": "f", "filter": filter, "typed_config": {"@type": FILE, "path": "/dev/null"}})
}

/// A finished entry as the filters see it.
struct Seen {
    flags: Option<&'static str>,
    headers: Vec<(&'static str, &'static str)>,
}

impl Subject for Seen {
    fn flags(&self) -> Option<&str> {
        self.flags
    }
    fn request_header(&self, name: &str) -> Option<String> {
        let v: Vec<&str> = self
            .headers
            .iter()
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| *v)
            .collect();
        (!v.is_empty()).then(|| v.join(","))
    }
}

fn listener_filter(b: &crate::Bootstrap) -> LogFilter {
    b.listeners[0].access_log[0].filter.clone().expect("filter")
}

#[test]
fn listener_access_log_with_response_flag_filter() {
    let b = load(&listener(json!({"access_log": [
        log_with(json!({"response_flag_filter": {"flags": ["NR"]}}))
    ]})))
    .unwrap();
    let f = listener_filter(&b);
    let nr = Seen {
        flags: Some("NR"),
        headers: vec![],
    };
    let uf = Seen {
        flags: Some("UF,URX"),
        headers: vec![],
    };
    let none = Seen {
        flags: None,
        headers: vec![],
    };
    assert!(f.passes(&nr));
    assert!(!f.passes(&uf));
    assert!(!f.passes(&none));
    // No flags listed: any flag passes, none does not.
    let b = load(&listener(json!({"access_log": [
        log_with(json!({"response_flag_filter": {}}))
    ]})))
    .unwrap();
    let any = listener_filter(&b);
    assert!(any.passes(&uf) && any.passes(&nr) && !any.passes(&none));
}

#[test]
fn and_or_header_and_health_check_filters() {
    let b = load(&listener(
        json!({"access_log": [log_with(json!({"or_filter": {"filters": [
            {"and_filter": {"filters": [
                {"header_filter": {"header": {"name": "X-Debug", "string_match": {"exact": "1"}}}},
                {"not_health_check_filter": {}},
            ]}},
            {"response_flag_filter": {"flags": ["UF", "UH"]}},
        ]}}))]}),
    ))
    .unwrap();
    let f = listener_filter(&b);
    let debug = Seen {
        flags: None,
        headers: vec![("x-debug", "1")],
    };
    let other = Seen {
        flags: None,
        headers: vec![("x-debug", "2")],
    };
    let failed = Seen {
        flags: Some("UF,URX"),
        headers: vec![],
    };
    assert!(f.passes(&debug));
    assert!(!f.passes(&other));
    assert!(f.passes(&failed));
}

#[test]
fn filter_errors_name_their_field() {
    let p = "static_resources.listeners[0].access_log";
    let e = errors(&listener(json!({"access_log": [
        log_with(json!({"response_flag_filter": {"flags": ["NR", "XX"]}})),
        log_with(json!({"and_filter": {"filters": [{"not_health_check_filter": {}}]}})),
        log_with(json!({"header_filter": {}})),
        log_with(json!({"status_code_filter": {"comparison": {"op": "GE", "value": {"default_value": 400, "runtime_key": "k"}}}})),
        log_with(json!({"or_filter": {"filters": [{"traceable_filter": {}}, {"not_health_check_filter": {}}]}})),
    ]})));
    assert_eq!(
        e,
        [
            format!("{p}[3].filter.status_code_filter: status_code_filter is not supported"),
            format!(
                "{p}[4].filter.or_filter.filters[0].traceable_filter: traceable_filter is not supported"
            ),
            format!(
                "{p}[0].filter.response_flag_filter.flags[1]: value must be in list {}",
                FLAGS.join(", ")
            ),
            format!("{p}[1].filter.and_filter.filters: value must contain at least 2 item(s)"),
            format!("{p}[2].filter.header_filter.header: is required"),
        ]
    );
}

const CEL: &str =
    "type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter";

/// An entry whose CEL attributes are a response code only.
struct Coded(i64);

impl Subject for Coded {
    fn flags(&self) -> Option<&str> {
        None
    }
    fn request_header(&self, _: &str) -> Option<String> {
        None
    }
    fn attribute(&self, root: &str) -> Option<crate::cel::Value> {
        (root == "response").then(|| crate::cel::map([("code", crate::cel::Value::Int(self.0))]))
    }
}

#[test]
fn cel_extension_filter_passes_what_its_expression_selects() {
    let b = load(&listener(
        json!({"access_log": [log_with(json!({"extension_filter": {
            "name": "envoy.access_loggers.extension_filters.cel",
            "typed_config": {"@type": CEL, "expression": "response.code >= 400"}
        }}))]}),
    ))
    .unwrap();
    let f = listener_filter(&b);
    assert!(f.passes(&Coded(503)));
    assert!(!f.passes(&Coded(200)));
    // No attributes (a subject that has none): an error, no line.
    let none = Seen {
        flags: None,
        headers: vec![],
    };
    assert!(!f.passes(&none));
}

#[test]
fn cel_extension_filter_errors_name_their_field() {
    let p = "static_resources.listeners[0].access_log";
    let e = errors(&listener(json!({"access_log": [
        log_with(json!({"extension_filter": {"name": "cel", "typed_config": {"@type": CEL, "expression": "response.code >="}}})),
        log_with(json!({"extension_filter": {"name": "x", "typed_config": {"@type": FILE, "path": "/dev/null"}}})),
        log_with(json!({"extension_filter": {"name": "x"}})),
    ]})));
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(
        e[0].starts_with(&format!(
            "{p}[0].filter.extension_filter.typed_config.expression: invalid CEL expression"
        )),
        "{e:?}"
    );
    assert_eq!(
        e[1],
        format!(
            "{p}[1].filter.extension_filter.typed_config: access log filter {FILE} is not supported"
        )
    );
    assert_eq!(
        e[2],
        format!("{p}[2].filter.extension_filter.typed_config: is required")
    );
}
