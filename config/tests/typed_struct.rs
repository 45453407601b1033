//! `TypedStruct` (`udpa.type.v1` and `xds.type.v3`) wrappers read as the
//! messages they name, and the bootstrap extensions courier takes.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_config::load::Format;
use courier_config::{ConfigError, bootstrap_from_str};

fn errors(yaml: &str) -> Vec<String> {
    match bootstrap_from_str(yaml, Format::Yaml) {
        Ok(_) => vec![],
        Err(ConfigError { errors, .. }) => errors.iter().map(ToString::to_string).collect(),
    }
}

/// A listener whose router and RBAC filter are written as `TypedStruct`s.
const FILTERS: &str = r#"
static_resources:
  listeners:
  - name: l
    address: {socket_address: {address: 127.0.0.1, port_value: 10000}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/xds.type.v3.TypedStruct
          type_url: type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          value:
            stat_prefix: ingress
            route_config: {virtual_hosts: [{name: a, domains: ["*"], routes: [{match: {prefix: /}, direct_response: {status: 200}}]}]}
            http_filters:
            - name: envoy.filters.http.rbac
              typed_config:
                "@type": type.googleapis.com/udpa.type.v1.TypedStruct
                type_url: type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
                value: {rules: {action: DENY, policies: {all: {permissions: [{any: true}], principals: [{any: true}]}}}}
            - name: envoy.filters.http.router
              typed_config:
                "@type": type.googleapis.com/udpa.type.v1.TypedStruct
                type_url: type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#;

#[test]
fn typed_structs_are_the_messages_they_name() {
    let b = bootstrap_from_str(FILTERS, Format::Yaml).unwrap_or_else(|e| panic!("{e}"));
    let hcm = b.listeners[0].filter_chains[0].hcm().expect("an HCM");
    assert_eq!(hcm.stat_prefix, "ingress");
    assert_eq!(hcm.http_filters.len(), 2, "RBAC, then the router");
    assert!(!hcm.implicit_router);
    // Fields of the named message are checked as if written plainly.
    let bad = FILTERS.replace(
        "stat_prefix: ingress",
        "stat_prefix: ingress\n            no_such_field: 1",
    );
    let e = errors(&bad);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with(
            "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.no_such_field:"
        ),
        "{e:?}"
    );
    let no_type = FILTERS.replacen(
        "          type_url: type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n",
        "",
        1,
    );
    assert_eq!(
        errors(&no_type),
        [
            "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.type_url: a TypedStruct needs a type_url"
        ]
    );
}

#[test]
fn the_internal_listener_bootstrap_extension_is_accepted() {
    let ext = |body: &str| {
        format!(
            "bootstrap_extensions:\n- name: envoy.bootstrap.internal_listener\n  typed_config:\n    \"@type\": type.googleapis.com/udpa.type.v1.TypedStruct\n    type_url: type.googleapis.com/envoy.extensions.bootstrap.internal_listener.v3.InternalListener\n    value: {body}\n"
        )
    };
    assert_eq!(errors(&ext("{buffer_size_kb: 64}")), Vec::<String>::new());
    assert_eq!(errors(&ext("{}")), Vec::<String>::new());
    assert_eq!(
        errors(&ext("{buffer_size_kb: 0}")),
        [
            "bootstrap_extensions[0].typed_config.buffer_size_kb: must be between 1 and 8192, found 0"
        ]
    );
    // Other bootstrap extensions are refused by name.
    assert_eq!(
        errors(
            "bootstrap_extensions:\n- name: envoy.bootstrap.wasm\n  typed_config: {\"@type\": type.googleapis.com/envoy.extensions.wasm.v3.WasmService}\n"
        ),
        ["bootstrap_extensions[0]: bootstrap extension envoy.bootstrap.wasm is not supported"]
    );
}
