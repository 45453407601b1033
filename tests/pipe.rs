//! `pipe` addresses (Unix domain sockets) through the real binary: cluster
//! endpoints on a pipe spoken to over HTTP/1.1 and HTTP/2 (a hyper server on a
//! `UnixListener`), health-checked over their socket; a `tcp_proxy` listener
//! on a pipe in front of a pipe upstream; the admin and a listener on Linux
//! abstract sockets; and the features refused on pipe listeners.
//!
//! ```text
//! cargo build -p courier
//! cargo test -p courier-tests --test pipe
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::courier_bin;
use courier_tests::proxies::{Kind, Proxy, poll};
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

/// A hyper server (HTTP/1.1 and h2c, by what the client speaks) on the Unix
/// socket `path`: answers `<version> <path>`.
fn hyper_upstream(path: &Path) {
    let std_listener = UnixListener::bind(path).unwrap();
    std_listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::UnixListener::from_std(std_listener).unwrap();
            loop {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        |req: http::Request<hyper::body::Incoming>| async move {
                            let body = format!("{:?} {}", req.version(), req.uri().path());
                            Ok::<_, std::convert::Infallible>(http::Response::new(
                                http_body_util::Full::new(bytes::Bytes::from(body)),
                            ))
                        },
                    );
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                    .await;
                });
            }
        });
    });
}

/// A raw upstream on the Unix socket `path`: reads to the client's end, then
/// answers `got:<bytes>` and closes.
fn echo_after_eof(path: &Path) {
    let l = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got);
                let _ = s.write_all(b"got:");
                let _ = s.write_all(&got);
            });
        }
    });
}

fn pipe_cluster(name: &str, path: &Path, extra: &str) -> String {
    format!(
        r#"  - name: {name}
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: {name}
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{pipe: {{path: "{path}"}}}}}}}}]}}]
{extra}"#,
        path = path.display()
    )
}

const H2: &str = r#"    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
"#;

const HEALTH_CHECK: &str = r#"    health_checks:
    - timeout: 1s
      interval: 0.05s
      no_traffic_interval: 0.05s
      unhealthy_threshold: 1
      healthy_threshold: 1
      http_health_check: {path: /healthz}
"#;

fn http_listener(name: &str, address: &str, routes: &str) -> String {
    format!(
        r#"  - name: {name}
    address: {address}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
{routes}"#
    )
}

fn get(path: &str) -> Request {
    Request {
        method: "GET".into(),
        path: path.into(),
        authority: "example.com".into(),
        headers: Vec::new(),
        body: Vec::new(),
    }
}

#[test]
fn pipe_endpoints_speak_http1_and_h2_and_are_health_checked() {
    let dir = tempfile::tempdir().unwrap();
    let up = dir.path().join("up.sock");
    hyper_upstream(&up);
    let missing = dir.path().join("nobody.sock");
    let routes = r#"              - match: {prefix: /h1}
                route: {cluster: h1}
              - match: {prefix: /h2}
                route: {cluster: h2}
              - match: {prefix: /checked}
                route: {cluster: checked}
"#;
    let checked = format!(
        "  - name: checked\n    type: STATIC\n    connect_timeout: 1s\n    load_assignment:\n      cluster_name: checked\n      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{pipe: {{path: \"{}\"}}}}}}}}, {{endpoint: {{address: {{pipe: {{path: \"{}\"}}}}}}}}]}}]\n{HEALTH_CHECK}",
        up.display(),
        missing.display()
    );
    let yaml = format!(
        "admin:\n  address: {{pipe: {{path: \"{admin}\"}}}}\nstatic_resources:\n  listeners:\n{l}\n  clusters:\n{h1}{h2}{checked}",
        admin = dir.path().join("admin.sock").display(),
        l = http_listener(
            "in",
            "{socket_address: {address: 127.0.0.1, port_value: 0}}",
            routes
        ),
        h1 = pipe_cluster("h1", &up, ""),
        h2 = pipe_cluster("h2", &up, H2),
    );
    let p = Proxy::start(Kind::Courier, &courier_bin(), &yaml, &["in"]).unwrap();
    let addr = p.listener("in").unwrap().to_string();
    for protocol in [Protocol::Http1, Protocol::H2c] {
        let r = client::send(&addr, protocol, &get("/h1/x")).unwrap();
        assert_eq!((r.status, &r.body[..]), (200, &b"HTTP/1.1 /h1/x"[..]));
        let r = client::send(&addr, protocol, &get("/h2/y")).unwrap();
        assert_eq!((r.status, &r.body[..]), (200, &b"HTTP/2.0 /h2/y"[..]));
    }
    // The health checker reaches the live pipe and fails the missing one:
    // once checked, every request goes to the live one.
    let all_ok = poll(500, || {
        (0..20)
            .all(|_| {
                client::send(&addr, Protocol::Http1, &get("/checked"))
                    .is_ok_and(|r| r.status == 200 && r.body == b"HTTP/1.1 /checked")
            })
            .then_some(())
    });
    assert!(all_ok.is_some(), "the missing pipe host stayed in rotation");
    // The pipe host's counters in /clusters.
    let text =
        String::from_utf8_lossy(&client::get(&p.admin, "/clusters").unwrap().body).to_string();
    assert!(
        text.contains(&format!("h2::{}::rq_total::2", up.display())),
        "{text}"
    );
}

#[test]
fn tcp_proxy_over_pipes_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let up = dir.path().join("raw.sock");
    echo_after_eof(&up);
    let listen = dir.path().join("in.sock");
    let log = dir.path().join("tcp.log");
    let yaml = format!(
        r#"admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
static_resources:
  listeners:
  - name: raw_in
    address: {{pipe: {{path: "{listen}", mode: 432}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: raw
          cluster: raw
          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: "{log}"
              log_format: {{text_format_source: {{inline_string: "%DOWNSTREAM_REMOTE_ADDRESS% %UPSTREAM_HOST% %BYTES_RECEIVED% %BYTES_SENT%\n"}}}}
  clusters:
{cluster}"#,
        listen = listen.display(),
        log = log.display(),
        cluster = pipe_cluster("raw", &up, ""),
    );
    let p = Proxy::start(Kind::Courier, &courier_bin(), &yaml, &["raw_in"]).unwrap();
    assert_eq!(p.listener("raw_in"), Some(listen.to_str().unwrap()));
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&listen).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
    }
    let mut s = UnixStream::connect(&listen).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    s.write_all(b"hello over pipes").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"got:hello over pipes");
    let line = poll(250, || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|t| t.ends_with('\n'))
    })
    .unwrap();
    assert_eq!(
        line,
        format!("{} {} 16 20\n", listen.display(), up.display())
    );
}

#[test]
fn admin_and_a_listener_on_abstract_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let up = dir.path().join("up.sock");
    hyper_upstream(&up);
    let tag = format!("courier-pipe-test-{}", std::process::id());
    let routes = "              - match: {prefix: /}\n                route: {cluster: up}\n";
    let yaml = format!(
        "admin:\n  address: {{pipe: {{path: \"@{tag}-admin\"}}}}\nstatic_resources:\n  listeners:\n{l}\n  clusters:\n{c}",
        l = http_listener("abs", &format!("{{pipe: {{path: \"@{tag}-in\"}}}}"), routes),
        c = pipe_cluster("up", &up, ""),
    );
    let p = Proxy::start(Kind::Courier, &courier_bin(), &yaml, &["abs"]).unwrap();
    assert_eq!(p.admin, format!("@{tag}-admin"));
    let r = client::get(&p.admin, "/ready").unwrap();
    assert_eq!((r.status, &r.body[..]), (200, &b"LIVE\n"[..]));
    let r = client::send(&format!("@{tag}-in"), Protocol::H2c, &get("/abstract")).unwrap();
    assert_eq!((r.status, &r.body[..]), (200, &b"HTTP/1.1 /abstract"[..]));
}

/// What a pipe listener does not serve is refused by `--mode serve` with its
/// path (TLS, chain matching, and the filters that need the peer's IP).
#[test]
fn what_pipe_listeners_do_not_serve_is_refused_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let listen = dir.path().join("in.sock");
    let config = dir.path().join("c.yaml");
    let yaml = format!(
        r#"static_resources:
  listeners:
  - name: p
    address: {{pipe: {{path: "{listen}"}}}}
    filter_chains:
    - filter_chain_match: {{server_names: [a.example]}}
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: p
          http_filters:
          - name: envoy.filters.http.rbac
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
          route_config: {{virtual_hosts: [{{name: a, domains: ["*"], routes: [{{match: {{prefix: /}}, direct_response: {{status: 200}}}}]}}]}}
"#,
        listen = listen.display()
    );
    std::fs::write(&config, yaml).unwrap();
    let out = std::process::Command::new(courier_bin())
        .arg("-c")
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("static_resources.listeners[0].filter_chains[0].filter_chain_match: filter chain matching on a pipe listener is not served yet"),
        "{err}"
    );
    assert!(
        err.contains("static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0]: envoy.filters.http.rbac (it matches on or sends the peer's IP address) on a pipe listener is not served yet"),
        "{err}"
    );
    // `--mode validate` says the config is valid (Envoy's verdict) but fails,
    // since courier could not serve it.
    let out = std::process::Command::new(courier_bin())
        .args(["--mode", "validate", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("is valid, but courier cannot serve it yet"),
        "{err}"
    );
    assert!(
        err.contains("filter chain matching on a pipe listener is not served yet"),
        "{err}"
    );
}
