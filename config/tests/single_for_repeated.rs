//! A single value where the proto has a repeated field is read as a list of that
//! one value, as Envoy's JSON parser does (Envoy 1.40 accepts every document
//! here; envoyproxy/examples' file-based dynamic configuration writes an LDS
//! listener's `filters` that way).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_config::load::Format;

fn load(text: &str) -> Result<courier_config::Bootstrap, courier_config::ConfigError> {
    courier_config::bootstrap_from_str(text, Format::Yaml)
}

/// One listener whose repeated fields are written as lists (`LIST`) or as single
/// values (`ONE`).
fn bootstrap(one: bool) -> String {
    let text = r#"
static_resources:
  listeners:
    L name: l
      address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
      filter_chains:
        L filters:
            L name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: x
                route_config:
                  virtual_hosts:
                    L name: v
                      domains: DOMAINS
                      routes:
                        L match: { prefix: / }
                          direct_response: { status: 200 }
                http_filters:
                  L name: envoy.filters.http.router
                    typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
"#;
    if one {
        text.replace("L ", "  ").replace("DOMAINS", "\"*\"")
    } else {
        text.replace("L ", "- ").replace("DOMAINS", "[\"*\"]")
    }
}

#[test]
fn a_single_object_or_scalar_is_a_one_element_list() {
    let lists = load(&bootstrap(false)).unwrap();
    let singles = load(&bootstrap(true)).unwrap();
    assert_eq!(singles.listeners.len(), 1);
    assert_eq!(format!("{lists:?}"), format!("{singles:?}"));
}

#[test]
fn an_error_inside_a_single_object_is_reported_at_its_element() {
    let text =
        bootstrap(true).replace("stat_prefix: x", "stat_prefix: x\n                bogus: 1");
    let err = load(&text).unwrap_err();
    assert_eq!(
        err.paths(),
        vec!["static_resources.listeners[0].filter_chains[0].filters[0].typed_config.bogus"]
    );
}

#[test]
fn lds_file_listener_with_a_single_filter_object() {
    let dir = tempfile::tempdir().unwrap();
    // The shape of envoyproxy/examples' dynamic-config-fs lds.yaml: `filters` is
    // one mapping, not a list.
    let lds = r#"
resources:
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: listener_0
  address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
  filter_chains:
  - filters:
      name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: ingress_http
        http_filters:
        - name: envoy.filters.http.router
          typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
        route_config:
          virtual_hosts:
          - name: v
            domains: ["*"]
            routes:
            - match: { prefix: / }
              direct_response: { status: 200 }
"#;
    let lds_path = dir.path().join("lds.yaml");
    std::fs::write(&lds_path, lds).unwrap();
    let text = format!(
        "dynamic_resources:\n  lds_config: {{ path_config_source: {{ path: {} }} }}\n",
        lds_path.display()
    );
    load(&text).unwrap();
    // The resource itself, as the file-based LDS subscription reads it.
    let response = courier_config::resource::read_path_source(&lds_path).unwrap();
    assert_eq!(response.resources.len(), 1);
    let mut ctx = courier_config::Ctx::new();
    let resource = courier_config::resource::translate(&response.resources[0], &mut ctx);
    ctx.finish(()).unwrap();
    let Some(courier_config::resource::Resource::Listener(listener)) = resource else {
        panic!("not a listener");
    };
    assert_eq!(listener.name, "listener_0");
}
