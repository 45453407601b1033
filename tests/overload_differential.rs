//! The overload manager's `reduce_timeouts` with a scaled trigger, against
//! real Envoy and courier from one bootstrap: with the heap monitor saturated
//! (a 1 MiB limit both are far over), an idle keep-alive connection is closed
//! after the scaled `idle_timeout` (0.3 s instead of 60 s) and a stream whose
//! upstream is silent times out after the scaled `stream_idle_timeout` (1% of
//! 60 s) instead of waiting for the upstream; the action's stats agree.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client;
use courier_tests::differential::{bootstrap, hcm_listener};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes: [{ match: { prefix: "/" }, route: { cluster: up, timeout: 30s } }]
"#;

/// An HTTP/1.1 upstream: `200 ok` at once, or after 8 s for paths with `silent`.
fn upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut w = s;
                // Bounded by count: at most 100 requests per connection.
                for _ in 0..100 {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let silent = line.contains("silent");
                    for _ in 0..200 {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                    }
                    if silent {
                        std::thread::sleep(Duration::from_secs(8));
                    }
                    if w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn config(up: SocketAddr) -> String {
    let mut yaml = bootstrap(&[hcm_listener(
        "idle",
        "common_http_protocol_options: {idle_timeout: 60s}\nstream_idle_timeout: 60s",
        VHOSTS,
    )]);
    yaml.push_str(&format!(
        "  clusters:
  - name: up
    connect_timeout: 2s
    load_assignment:
      cluster_name: up
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}}}]}}]
overload_manager:
  refresh_interval: 0.05s
  resource_monitors:
  - name: envoy.resource_monitors.fixed_heap
    typed_config:
      \"@type\": type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig
      max_heap_size_bytes: 1048576
  actions:
  - name: envoy.overload_actions.reduce_timeouts
    triggers:
    - name: envoy.resource_monitors.fixed_heap
      scaled: {{scaling_threshold: 0.5, saturation_threshold: 0.6}}
    typed_config:
      \"@type\": type.googleapis.com/envoy.config.overload.v3.ScaleTimersOverloadActionConfig
      timer_scale_factors:
      - {{timer: HTTP_DOWNSTREAM_CONNECTION_IDLE, min_timeout: 0.3s}}
      - {{timer: HTTP_DOWNSTREAM_STREAM_IDLE, min_scale: {{value: 1}}}}
",
        up.port()
    ));
    yaml
}

fn stat(p: &Proxy, name: &str) -> u64 {
    let text = client::get(&p.admin, "/stats").unwrap();
    String::from_utf8_lossy(&text.body)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[derive(Debug, PartialEq)]
struct Observed {
    /// The first response on a keep-alive connection.
    first: String,
    /// Whether the proxy closed the idle connection within 10 s.
    idle_closed: bool,
    /// A request whose upstream is silent for 8 s: status line and body.
    silent: (String, String),
    scale_percent: u64,
}

fn observe(p: &Proxy) -> Observed {
    let addr = p.listener("idle").unwrap();
    // Let the monitor read the heap once.
    std::thread::sleep(Duration::from_millis(300));
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /one HTTP/1.1\r\nhost: a\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    let first = String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    // Scaled to 0.3 s, the idle timer starts Envoy's drain sequence
    // (`drain_timeout` 5 s, then a delayed close of 1 s); unscaled it is 60 s.
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let idle_closed = match s.read(&mut buf) {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(_) => false,
    };

    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.write_all(b"GET /silent HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out).into_owned();
    let silent = (
        out.lines().next().unwrap_or("").to_string(),
        out.split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_string(),
    );
    Observed {
        first,
        idle_closed,
        silent,
        scale_percent: stat(
            p,
            "overload.envoy.overload_actions.reduce_timeouts.scale_percent",
        ),
    }
}

#[test]
fn reduce_timeouts_scales_idle_timers_as_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let yaml = config(upstream());
    let e = observe(&Proxy::start(Kind::Envoy, &envoy, &yaml, &["idle"]).unwrap());
    let c = observe(&Proxy::start(Kind::Courier, &courier_bin(), &yaml, &["idle"]).unwrap());
    println!("envoy:   {e:?}\ncourier: {c:?}");
    // What Envoy does, stated, so a change on either side shows.
    assert_eq!(
        e,
        Observed {
            first: "HTTP/1.1 200 OK".to_string(),
            idle_closed: true,
            silent: (
                "HTTP/1.1 504 Gateway Timeout".to_string(),
                "stream timeout".to_string()
            ),
            scale_percent: 100,
        }
    );
    assert_eq!(e, c);
}
