//! `pipe` addresses (Unix domain sockets): where they load, and Envoy's checks.

use super::{Address, Pipe};
use crate::listener::test_util::{errors, listener, load, merge};
use serde_json::{Value, json};

/// A Contour-style bootstrap: admin on `admin`, a listener on `listen`, and a
/// STATIC cluster `envoy-admin` whose one endpoint is `endpoint`.
fn bootstrap(admin: Value, listen: Value, endpoint: Value) -> Value {
    let mut b = with_address(listen);
    merge(
        &mut b,
        json!({
            "admin": {"address": admin},
            "static_resources": {"clusters": [{
                "name": "envoy-admin",
                "type": "STATIC",
                "load_assignment": {"cluster_name": "envoy-admin", "endpoints": [
                    {"lb_endpoints": [{"endpoint": {"address": endpoint}}]}]},
            }]},
        }),
    );
    b
}

/// The test listener on `address` (replaced, not merged: `address` is a oneof).
fn with_address(address: Value) -> Value {
    let mut b = listener(json!({}));
    b["static_resources"]["listeners"][0]["address"] = address;
    b
}

fn pipe(path: &str, mode: Option<u32>) -> Value {
    match mode {
        Some(m) => json!({"pipe": {"path": path, "mode": m}}),
        None => json!({"pipe": {"path": path}}),
    }
}

fn tcp() -> Value {
    json!({"socket_address": {"address": "127.0.0.1", "port_value": 10000}})
}

#[test]
fn admin_listener_and_static_endpoint_take_pipes() {
    let b = load(&bootstrap(
        pipe("/admin/admin.sock", Some(420)),
        pipe("/run/l.sock", None),
        pipe("/admin/admin.sock", None),
    ))
    .unwrap();
    assert_eq!(
        b.admin.unwrap().address,
        Address::Pipe(Pipe {
            path: "/admin/admin.sock".into(),
            mode: 0o644
        })
    );
    assert_eq!(b.listeners[0].address.to_string(), "/run/l.sock");
    let la = b.clusters[0].load_assignment.as_ref().unwrap();
    let e = &la.priorities[0].localities[0].endpoints[0];
    assert_eq!(e.address.pipe().unwrap().path, "/admin/admin.sock");
    assert_eq!(e.address.socket(), None);
}

#[test]
fn an_abstract_socket_loads_without_a_mode() {
    let b = load(&bootstrap(pipe("@admin", None), tcp(), pipe("@up", None))).unwrap();
    assert!(b.admin.unwrap().address.pipe().unwrap().is_abstract());
}

#[test]
fn a_mode_over_0777_is_refused_with_its_path() {
    assert_eq!(
        errors(&bootstrap(
            pipe("/a.sock", Some(512)),
            tcp(),
            pipe("/u.sock", None)
        )),
        ["admin.address.pipe.mode: value must be less than or equal to 511 (0777), found 512"]
    );
    // 0777 itself is Envoy's limit, and loads.
    load(&bootstrap(
        pipe("/a.sock", Some(511)),
        tcp(),
        pipe("/u.sock", None),
    ))
    .unwrap();
}

#[test]
fn envoys_pipe_checks_are_refused_with_their_paths() {
    let long = format!("/tmp/{}", "a".repeat(110));
    assert_eq!(
        errors(&bootstrap(tcp(), pipe("@l", Some(420)), pipe("", None))),
        [
            "static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.pipe.path: value length must be at least 1 characters",
            "static_resources.listeners[0].address.pipe.mode: Cannot set mode for Abstract AF_UNIX sockets",
        ]
    );
    assert_eq!(
        errors(&bootstrap(pipe(&long, None), tcp(), pipe("/u.sock", None))),
        [format!(
            "admin.address.pipe.path: Path \"{long}\" exceeds maximum UNIX domain socket path size of 108."
        )]
    );
}

#[test]
fn two_listeners_on_one_pipe_are_refused() {
    let mut b = with_address(pipe("/l.sock", None));
    let mut second = b["static_resources"]["listeners"][0].clone();
    second["name"] = json!("m");
    b["static_resources"]["listeners"]
        .as_array_mut()
        .unwrap()
        .push(second);
    assert_eq!(
        errors(&b),
        [
            "static_resources.listeners[1].address: address /l.sock is already used by static_resources.listeners[0]"
        ]
    );
}

#[test]
fn a_pipe_in_a_dns_cluster_is_refused() {
    let mut b = bootstrap(tcp(), tcp(), pipe("/u.sock", None));
    b["static_resources"]["clusters"][0]["type"] = json!("STRICT_DNS");
    assert_eq!(
        errors(&b),
        [
            "static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.pipe: a pipe address in a STRICT_DNS or LOGICAL_DNS cluster (which resolve names; Envoy resolves a pipe to no host)"
        ]
    );
}

#[test]
fn a_health_check_port_on_a_pipe_endpoint_is_refused() {
    let mut b = bootstrap(tcp(), tcp(), pipe("/u.sock", None));
    b["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
        ["health_check_config"] = json!({"port_value": 8080});
    assert_eq!(
        errors(&b),
        [
            "static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint.health_check_config.port_value: Invalid host configuration: non-zero port for non-IP address"
        ]
    );
}
