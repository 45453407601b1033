use super::test_util::{errors, filter};
use super::*;

#[test]
fn router_by_name_alone_and_defaults() {
    let f = filter("name: envoy.filters.http.router").unwrap();
    assert_eq!(f.name, "envoy.filters.http.router");
    assert!(!f.disabled && !f.is_optional);
    let HttpFilterConfig::Router(r) = f.config else {
        panic!("{f:?}")
    };
    assert_eq!(r, Router::default());
    assert!(r.dynamic_stats && !r.suppress_envoy_headers);
    let f = filter("name: envoy.router\ntyped_config: {}").unwrap();
    assert!(matches!(f.config, HttpFilterConfig::Router(_)));
}

#[test]
fn router_fields() {
    let f = filter(
        r#"
name: router
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  dynamic_stats: false
  suppress_envoy_headers: true
"#,
    )
    .unwrap();
    assert!(matches!(
        f.config,
        HttpFilterConfig::Router(Router {
            dynamic_stats: false,
            suppress_envoy_headers: true
        })
    ));
    let mut e = errors(filter(
        r#"
name: router
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  start_child_span: true
  respect_expected_rq_timeout: true
"#,
    ));
    e.sort();
    assert_eq!(
        e,
        [
            "typed_config.respect_expected_rq_timeout: respect_expected_rq_timeout is not supported",
            "typed_config.start_child_span: start_child_span is not supported",
        ]
    );
}

#[test]
fn disabled_filter_keeps_its_flag() {
    let f = filter(
        r#"
name: authz
disabled: true
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
  grpc_service: {google_grpc: {target_uri: "127.0.0.1:9000", stat_prefix: authz}}
"#,
    )
    .unwrap();
    assert!(f.disabled);
    assert!(matches!(f.config, HttpFilterConfig::ExtAuthz(_)));
}

#[test]
fn unknown_filters_are_refused_at_the_element() {
    let cors = r#"
name: envoy.filters.http.cors
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors
"#;
    assert_eq!(
        errors(filter(cors)),
        [
            "HTTP filter envoy.filters.http.cors (envoy.extensions.filters.http.cors.v3.Cors) is not supported"
        ]
    );
    assert_eq!(
        errors(filter(&format!("{cors}is_optional: true\n"))),
        [
            "HTTP filter envoy.filters.http.cors (envoy.extensions.filters.http.cors.v3.Cors) is not supported (is_optional does not make courier skip it)"
        ]
    );
    assert_eq!(
        errors(filter("name: my.custom.filter")),
        ["HTTP filter my.custom.filter is not supported"]
    );
    assert_eq!(
        errors(filter(
            "name: x\nconfig_discovery: {config_source: {ads: {}}, type_urls: [type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC]}"
        )),
        ["config_discovery: config_discovery is not supported"]
    );
}
