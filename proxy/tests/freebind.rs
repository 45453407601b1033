//! A listener's `freebind`: courier binds an address the host does not have
//! (192.0.2.1, TEST-NET-1), as Envoy does with `IP_FREEBIND`; without it the bind
//! fails and courier does not start.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::{Command, Stdio};
use support::get_text;

fn config(freebind: &str) -> String {
    format!(
        r#"admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
static_resources:
  listeners:
  - name: nonlocal
    address: {{socket_address: {{address: 192.0.2.1, port_value: 0}}}}
    {freebind}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: x
          route_config: {{virtual_hosts: [{{name: v, domains: ["*"], routes: [{{match: {{prefix: /}}, direct_response: {{status: 200}}}}]}}]}}
          http_filters: [{{name: envoy.filters.http.router, typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}}}]
"#
    )
}

#[tokio::test]
async fn freebind_binds_an_address_the_host_does_not_have() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("courier.yaml");
    let admin_path = dir.path().join("admin");

    // Without freebind: the bind fails, courier exits with the reason.
    std::fs::write(&path, config("")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(["--concurrency", "1", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("listener nonlocal: bind 192.0.2.1:0: Cannot assign requested address"),
        "{stderr}"
    );

    // With it: serving, the port resolved on the non-local address.
    std::fs::write(&path, config("freebind: true")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(["--concurrency", "1", "-c"])
        .arg(&path)
        .arg("--admin-address-path")
        .arg(&admin_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut admin = String::new();
    for _ in 0..500 {
        if let Ok(a) = std::fs::read_to_string(&admin_path)
            && !a.is_empty()
        {
            admin = a;
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "courier exited");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(!admin.is_empty(), "no admin address");
    let listeners = get_text(&admin, "/listeners").await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(listeners.starts_with("nonlocal::192.0.2.1:"), "{listeners}");
    assert!(!listeners.ends_with(":0\n"), "{listeners}");
}
