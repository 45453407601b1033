//! Config generators shared by courier's benchmarks: large but realistic
//! bootstraps, built as JSON so each benchmark measures only what it names.

use serde_json::{Value, json};

/// A bootstrap with `clusters` STATIC clusters (three endpoints, circuit breakers
/// and outlier detection each) and one listener whose route config holds `routes`
/// routes over 100-route virtual hosts, mixing prefix, path, regex and header matches.
pub fn bootstrap_json(clusters: usize, routes: usize) -> Value {
    let clusters_json: Vec<Value> = (0..clusters).map(cluster).collect();
    let per_vhost = 100;
    let vhosts: Vec<Value> = (0..routes.div_ceil(per_vhost))
        .map(|v| {
            let count = per_vhost.min(routes - v * per_vhost);
            let routes: Vec<Value> = (0..count)
                .map(|r| route(v * per_vhost + r, clusters.max(1)))
                .collect();
            json!({
                "name": format!("vhost{v}"),
                "domains": [format!("svc{v}.example.com"), format!("*.svc{v}.example.net")],
                "routes": routes,
            })
        })
        .collect();
    json!({
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 9901}}},
        "static_resources": {
            "clusters": clusters_json,
            "listeners": [{
                "name": "ingress",
                "address": {"socket_address": {"address": "0.0.0.0", "port_value": 10000}},
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": "ingress",
                        "route_config": {"name": "big", "virtual_hosts": vhosts},
                        "http_filters": [{
                            "name": "envoy.filters.http.router",
                            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}
                        }]
                    }
                }]}]
            }]
        }
    })
}

fn cluster(i: usize) -> Value {
    let endpoints: Vec<Value> = (0..3)
        .map(|e| json!({"endpoint": {"address": {"socket_address": {"address": format!("10.{}.{}.{e}", i / 250, i % 250), "port_value": 8080}}}}))
        .collect();
    json!({
        "name": format!("cluster{i}"),
        "type": "STATIC",
        "connect_timeout": "0.25s",
        "lb_policy": if i.is_multiple_of(2) { "ROUND_ROBIN" } else { "LEAST_REQUEST" },
        "circuit_breakers": {"thresholds": [{"max_connections": 100, "max_pending_requests": 100, "retry_budget": {}}]},
        "outlier_detection": {"consecutive_5xx": 5, "interval": "10s"},
        "load_assignment": {"cluster_name": format!("cluster{i}"), "endpoints": [{"lb_endpoints": endpoints}]}
    })
}

fn route(i: usize, clusters: usize) -> Value {
    let action = json!({"cluster": format!("cluster{}", i % clusters), "timeout": "5s"});
    let m = match i % 4 {
        0 => json!({"prefix": format!("/api/v{i}/")}),
        1 => json!({"path": format!("/exact/{i}")}),
        2 => json!({"safe_regex": {"regex": format!("/re/{i}/[0-9]+")}}),
        _ => {
            json!({"prefix": format!("/h/{i}"), "headers": [{"name": "x-tenant", "string_match": {"exact": format!("t{i}")}}]})
        }
    };
    json!({"name": format!("r{i}"), "match": m, "route": action})
}

/// The routing benchmark's route table: one virtual host (`*`) with `routes`
/// routes, cycling through prefix (`/api/v{i}/`), exact path (`/exact/{i}`),
/// path-separated prefix (`/sep/{i}`) and header-qualified prefix (`/h/{i}/`
/// with `x-tenant: t{i}`) matches, then two regex routes after them (kept few:
/// regex routes are tested one by one, so a table full of them is linear by design).
pub fn route_table_json(routes: usize) -> Value {
    let mut list: Vec<Value> = (0..routes)
        .map(|i| {
            let m = match i % 4 {
                0 => json!({"prefix": format!("/api/v{i}/")}),
                1 => json!({"path": format!("/exact/{i}")}),
                2 => json!({"path_separated_prefix": format!("/sep/{i}")}),
                _ => json!({
                    "prefix": format!("/h/{i}/"),
                    "headers": [{"name": "x-tenant", "string_match": {"exact": format!("t{i}")}}]
                }),
            };
            json!({"name": format!("r{i}"), "match": m, "direct_response": {"status": 200}})
        })
        .collect();
    for (i, re) in ["/re/[0-9]+/a", "/re/[a-z]+/b"].iter().enumerate() {
        list.push(json!({
            "name": format!("regex{i}"),
            "match": {"safe_regex": {"regex": re}},
            "direct_response": {"status": 200}
        }));
    }
    single_listener(json!([{"name": "all", "domains": ["*"], "routes": list}]))
}

/// A request path (and `x-tenant` value) that the `index`th route of
/// [`route_table_json`] matches, and no earlier route does.
pub fn route_table_request(index: usize) -> (String, String) {
    let path = match index % 4 {
        0 => format!("/api/v{index}/items?page=2"),
        1 => format!("/exact/{index}"),
        2 => format!("/sep/{index}/more"),
        _ => format!("/h/{index}/x"),
    };
    (path, format!("t{index}"))
}

/// The virtual-host benchmark's route config: `domains` virtual hosts with one
/// domain each, cycling through exact (`e{i}.example.com`), suffix wildcard
/// (`*.s{i}.example.net`) and prefix wildcard (`p{i}.example.*`) domains; no `*`.
pub fn vhost_table_json(domains: usize) -> Value {
    let vhosts: Vec<Value> = (0..domains)
        .map(|i| {
            json!({
                "name": format!("vh{i}"),
                "domains": [vhost_domain(i)],
                "routes": [{"match": {"prefix": "/"}, "direct_response": {"status": 200}}]
            })
        })
        .collect();
    single_listener(Value::Array(vhosts))
}

/// The domain of the `i`th virtual host of [`vhost_table_json`].
pub fn vhost_domain(i: usize) -> String {
    match i % 3 {
        0 => format!("e{i}.example.com"),
        1 => format!("*.s{i}.example.net"),
        _ => format!("p{i}.example.*"),
    }
}

/// A host that the `i`th virtual host of [`vhost_table_json`] is picked for.
pub fn vhost_host(i: usize) -> String {
    match i % 3 {
        0 => format!("e{i}.example.com"),
        1 => format!("api.eu.s{i}.example.net"),
        _ => format!("p{i}.example.org"),
    }
}

/// A bootstrap with one listener whose inline route config holds `vhosts`.
fn single_listener(vhosts: Value) -> Value {
    json!({
        "static_resources": {
            "listeners": [{
                "name": "ingress",
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": "ingress",
                        "route_config": {"name": "bench", "virtual_hosts": vhosts},
                        "http_filters": [{
                            "name": "envoy.filters.http.router",
                            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}
                        }]
                    }
                }]}]
            }]
        }
    })
}

/// The HTTP filters of a bootstrap's first listener, translated through the same loader
/// as a real config file (so RBAC indexes, JWKS and caches are the ones a config builds).
pub fn http_filters_from_bootstrap(yaml: &str) -> Vec<courier_config::filters::HttpFilter> {
    let bootstrap =
        match courier_config::bootstrap_from_str(yaml, courier_config::load::Format::Yaml) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("bench config is invalid: {e:?}");
                std::process::exit(2);
            }
        };
    bootstrap
        .listeners
        .first()
        .and_then(|l| l.filter_chains.first())
        .and_then(|c| c.hcm())
        .map(|h| h.http_filters.clone())
        .unwrap_or_default()
}

/// A bootstrap with one listener whose connection manager runs `filters` (YAML list items,
/// indented for `http_filters:`), then the router, to a direct response.
pub fn filters_bootstrap_yaml(filters: &str) -> String {
    format!(
        r#"static_resources:
  listeners:
  - name: ingress
    address: {{socket_address: {{address: 127.0.0.1, port_value: 10000}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                direct_response: {{status: 200}}
          http_filters:
{filters}          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#
    )
}

/// Polls a future once with a no-op waker: the filters measured here never suspend
/// (local JWKS, synchronous RBAC), so one poll finishes the chain without a runtime.
pub fn poll_once<F: std::future::Future>(fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}
