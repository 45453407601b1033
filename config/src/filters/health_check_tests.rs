use crate::filters::HttpFilterConfig;
use crate::filters::test_util::{errors, filter};

const TYPE: &str = "type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck";

#[test]
fn headers_and_mode() {
    let f = filter(&format!(
        "name: envoy.filters.http.health_check\ntyped_config:\n  \"@type\": {TYPE}\n  pass_through_mode: false\n  headers: [{{name: \":path\", string_match: {{exact: /ready}}}}]\n"
    ))
    .unwrap();
    let HttpFilterConfig::HealthCheck(h) = f.config else {
        panic!("{f:?}")
    };
    assert!(!h.pass_through_mode);
    assert_eq!(h.headers.len(), 1);
    assert_eq!(h.headers[0].name, ":path");
    assert!(h.headers[0].matches(Some("/ready")));
    assert!(!h.headers[0].matches(Some("/ready?x=1")));
}

#[test]
fn refusals_and_required_fields() {
    let mut e = errors(filter(&format!(
        "name: hc\ntyped_config:\n  \"@type\": {TYPE}\n  headers: [{{name: \"\"}}]\n  cache_time: 1s\n  cluster_min_healthy_percentages: {{backend: {{value: 50}}}}\n"
    )));
    e.sort();
    assert_eq!(
        e,
        [
            "typed_config.cache_time: cache_time is not supported",
            "typed_config.cluster_min_healthy_percentages: cluster_min_healthy_percentages is not supported",
            "typed_config.pass_through_mode: is required",
        ]
    );
    let e = errors(filter(&format!(
        "name: hc\ntyped_config:\n  \"@type\": {TYPE}\n  pass_through_mode: true\n  headers: [{{name: \"\"}}]\n"
    )));
    assert_eq!(e, ["typed_config.headers[0].name: must not be empty"]);
}
