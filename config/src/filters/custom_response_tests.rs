use super::*;
use crate::filters::HttpFilterConfig;
use crate::filters::test_util::{errors, filter};

fn custom(matcher: &str) -> Result<Arc<CustomResponse>, crate::ConfigError> {
    let yaml = format!(
        "name: envoy.filters.http.custom_response\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.custom_response.v3.CustomResponse\n  custom_response_matcher: {matcher}\n"
    );
    filter(&yaml).map(|f| match f.config {
        HttpFilterConfig::CustomResponse(c) => c,
        other => panic!("not custom_response: {other:?}"),
    })
}

const STATUS_404: &str = r#"{single_predicate: {input: {name: s, typed_config: {"@type": type.googleapis.com/envoy.type.matcher.v3.HttpResponseStatusCodeMatchInput}}, value_match: {exact: "404"}}}"#;

fn local(fields: &str) -> String {
    format!(
        r#"{{action: {{name: a, typed_config: {{"@type": type.googleapis.com/envoy.extensions.http.custom_response.local_response_policy.v3.LocalResponsePolicy, {fields}}}}}}}"#
    )
}

#[test]
fn local_response_policies_compile() {
    let c = custom(&format!(
        "{{matcher_list: {{matchers: [{{predicate: {STATUS_404}, on_match: {}}}]}}, on_no_match: {}}}",
        local(r#"status_code: 410, body_format: {text_format: "gone"}, response_headers_to_add: [{header: {key: X-A, value: b}, append_action: OVERWRITE_IF_EXISTS_OR_ADD}, {header: {key: x-empty, value: ""}}]"#),
        local(r#"body: {inline_string: "other"}"#),
    ))
    .expect("valid");
    let (pred, resp) = &c.rules[0];
    assert!(matches!(pred, Predicate::Value(Input::Status, _)));
    assert_eq!(resp.status, Some(410));
    assert_eq!(resp.body, "gone");
    // The empty value is dropped, as Envoy drops it without keep_empty_value.
    assert_eq!(
        resp.headers,
        [(
            "x-a".to_string(),
            "b".to_string(),
            AppendAction::OverwriteIfExistsOrAdd
        )]
    );
    let other = c.on_no_match.as_ref().expect("on_no_match");
    assert_eq!(
        (other.status, other.body.as_ref()),
        (None, b"other".as_ref())
    );
}

#[test]
fn what_is_not_built_is_refused_at_its_path() {
    let p = "typed_config.custom_response_matcher";
    let redirect = r#"{action: {name: r, typed_config: {"@type": type.googleapis.com/envoy.extensions.http.custom_response.redirect_policy.v3.RedirectPolicy, uri: "https://x/y"}}}"#;
    let e = errors(custom(&format!(
        "{{matcher_list: {{matchers: [{{predicate: {STATUS_404}, on_match: {redirect}}}, {{predicate: {STATUS_404}, on_match: {}}}, {{predicate: {STATUS_404}, on_match: {}}}]}}}}",
        local(r#"body_format: {text_format: "%RESPONSE_CODE%"}"#),
        local("status_code: 100"),
    )));
    assert_eq!(
        e,
        [
            format!(
                "{p}.matcher_list.matchers[0].on_match.action.typed_config: the RedirectPolicy action (an internal redirect) is not supported"
            ),
            format!(
                "{p}.matcher_list.matchers[1].on_match.action.typed_config.body_format: a body format that is not plain text (command operators, JSON) is not supported"
            ),
            format!(
                "{p}.matcher_list.matchers[2].on_match.action.typed_config.status_code.value: value must be inside range [200, 600)"
            ),
        ]
    );
}
