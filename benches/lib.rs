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
