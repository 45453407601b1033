//! The registry's bookkeeping: versions replace by name, stat slots persist
//! across versions and are shared by address and prefix, retired versions are
//! told to drain, counters follow Envoy's listener manager.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

fn listener(name: &str, port: u16, prefix: &str) -> Arc<Listener> {
    let yaml = format!(
        r#"
static_resources:
  listeners:
  - name: {name}
    address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {prefix}
          route_config: {{virtual_hosts: [{{name: all, domains: ["*"]}}]}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
"#
    );
    let b = courier_config::bootstrap_from_str(&yaml, courier_config::load::Format::Yaml).unwrap();
    Arc::clone(&b.listeners[0])
}

fn parts(config: Arc<Listener>) -> Parts {
    Parts {
        config,
        tls: Arc::default(),
        http_filters: (Arc::default(), 0),
        background: Vec::new(),
        dynamic: Some(Dynamic {
            version_info: "1".into(),
            last_updated: SystemTime::now(),
            raw: Any::default(),
        }),
    }
}

fn samples(r: &Registry) -> std::collections::HashMap<String, u64> {
    let mut out = Vec::new();
    r.samples(&mut out);
    out.into_iter().collect()
}

#[test]
fn versions_replace_by_name_keep_their_port_and_stats_and_drain_the_old() {
    let workers: Vec<Arc<WorkerStats>> = (0..2).map(|_| Arc::default()).collect();
    let snapshot = Arc::new(ArcSwap::from_pointee(Snapshot::default()));
    let r = Registry::new(workers.clone(), Arc::clone(&snapshot));
    let mut set = r.subscribe();

    let a1 = r.build(parts(listener("a", 0, "ing"))).unwrap();
    let b1 = r.build(parts(listener("b", 0, "ing"))).unwrap();
    assert_ne!(a1.address.port(), Some(0), "port 0 resolved");
    r.publish(vec![Arc::clone(&a1), Arc::clone(&b1)], &[]);
    assert!(set.has_changed().unwrap());
    let names: Vec<String> = set
        .borrow_and_update()
        .listeners
        .iter()
        .map(|l| l.name().to_string())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(snapshot.load().listeners.len(), 2);
    // Both connection managers count under one prefix; the listeners count
    // under their configured address, which is the same (`127.0.0.1_0`, as
    // Envoy names them), so they share its slot.
    assert_eq!(a1.hcm_stats, b1.hcm_stats);
    assert_eq!(a1.listener_stats, b1.listener_stats);
    for w in &workers {
        assert_eq!(w.listener_cx.load().len(), 1);
        assert_eq!(w.listeners.load().len(), 1);
    }

    // A new version of `a` at the same config address: same port, same slots;
    // the old version is told to drain, the new one is not.
    let old_drain = a1.drain_signal(0);
    let a2 = r.build(parts(listener("a", 0, "ing"))).unwrap();
    assert_eq!(a2.address, a1.address);
    assert_eq!(a2.listener_stats, a1.listener_stats);
    r.publish(vec![Arc::clone(&a2)], &[]);
    assert!(*old_drain.borrow());
    assert!(!*a2.drain_signal(0).borrow());
    assert!(Arc::ptr_eq(&r.get("a").unwrap(), &a2));
    assert_eq!(r.current().listeners[0].name(), "a", "in place");

    // Removed: gone from the set and the snapshot, and drained.
    let b_drain = b1.drain_signal(0);
    r.publish(Vec::new(), &["b".to_string()]);
    assert!(r.get("b").is_none());
    assert!(*b_drain.borrow());
    assert_eq!(snapshot.load().listeners.len(), 1);

    let s = samples(&r);
    assert_eq!(s["listener_manager.listener_added"], 2);
    assert_eq!(s["listener_manager.listener_modified"], 1);
    assert_eq!(s["listener_manager.listener_removed"], 1);
    assert_eq!(s["listener_manager.total_listeners_active"], 1);
    assert_eq!(s["listener_manager.total_listeners_warming"], 0);
}

#[test]
fn an_address_that_cannot_be_bound_is_an_error() {
    let r = Registry::new(
        vec![Arc::default()],
        Arc::new(ArcSwap::from_pointee(Snapshot::default())),
    );
    // TEST-NET-1 is not a local address.
    let yaml_listener = listener("x", 0, "x");
    let mut l = Listener::clone(&yaml_listener);
    let courier_config::core::Address::Socket(sa) = &mut l.address else {
        unreachable!()
    };
    sa.ip = Some("192.0.2.1".parse().unwrap());
    sa.host = "192.0.2.1".into();
    let err = r.build(parts(Arc::new(l))).unwrap_err();
    assert!(err.contains("bind 192.0.2.1:0"), "{err}");
}

fn pipe_listener(name: &str, path: &std::path::Path) -> Arc<Listener> {
    let yaml_listener = listener(name, 0, name);
    let mut l = Listener::clone(&yaml_listener);
    l.address = courier_config::core::Address::Pipe(courier_config::core::Pipe {
        path: path.display().to_string(),
        mode: 0o600,
    });
    Arc::new(l)
}

/// A pipe listener is bound once by the registry (a stale file at its path
/// unlinked, the mode set) and its socket handed to the workers; a new
/// version at the same path keeps that socket (connections queued on it are
/// not lost), one at another path binds anew.
#[test]
fn pipe_listeners_keep_their_socket_across_versions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sock");
    // A stale socket file from an earlier run.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let r = Registry::new(
        vec![Arc::default()],
        Arc::new(ArcSwap::from_pointee(Snapshot::default())),
    );
    let p1 = r.build(parts(pipe_listener("p", &path))).unwrap();
    assert_eq!(p1.address.to_string(), path.display().to_string());
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    r.publish(vec![Arc::clone(&p1)], &[]);
    // Queued before any worker accepts.
    let _queued = std::os::unix::net::UnixStream::connect(&path).unwrap();
    let p2 = r.build(parts(pipe_listener("p", &path))).unwrap();
    assert_eq!(p2.address, p1.address);
    assert!(Arc::ptr_eq(&p1.reserved, &p2.reserved));
    let worker_copy = p2.pipe_socket().unwrap().unwrap();
    worker_copy.set_nonblocking(false).unwrap();
    assert!(worker_copy.accept().is_ok(), "the queued connection");
    // Another path: a socket of its own.
    let other = dir.path().join("m.sock");
    let p3 = r.build(parts(pipe_listener("p", &other))).unwrap();
    assert!(!Arc::ptr_eq(&p1.reserved, &p3.reserved));
    assert!(std::os::unix::net::UnixStream::connect(&other).is_ok());
    // A TCP listener has no shared socket.
    let t = r.build(parts(listener("t", 0, "t"))).unwrap();
    assert!(t.pipe_socket().is_none());
}
