//! The buffer HTTP filter and its per-route config, as Envoy Gateway emits them
//! (the filter disabled in the connection manager, a route's `BufferPerRoute`
//! turning it on): real Envoy and courier from one bootstrap, the same raw
//! HTTP/1.1 requests, comparing each answer and what the upstream got (its
//! `content-length`, `transfer-encoding` and body length).

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{bootstrap, hcm_listener_filters, same_lines};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::raw_http1::exchange;
use http_body_util::BodyExt;
use std::net::SocketAddr;

fn buffer(max: u32, disabled: bool) -> String {
    format!(
        r#"- name: envoy.filters.http.buffer
  disabled: {disabled}
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer
    max_request_bytes: {max}
"#
    )
}

const PER_ROUTE: &str = r#"
- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/off" }
    route: { cluster: echo }
    typed_per_filter_config:
      envoy.filters.http.buffer:
        "@type": type.googleapis.com/envoy.extensions.filters.http.buffer.v3.BufferPerRoute
        disabled: true
  - match: { prefix: "/big" }
    route: { cluster: echo }
    typed_per_filter_config:
      envoy.filters.http.buffer:
        "@type": type.googleapis.com/envoy.extensions.filters.http.buffer.v3.BufferPerRoute
        buffer: { max_request_bytes: 64 }
  - match: { prefix: "/" }
    route: { cluster: echo }
"#;

fn config(echo: SocketAddr) -> String {
    let mut yaml = bootstrap(&[
        hcm_listener_filters("buf", "", &buffer(16, false), PER_ROUTE),
        hcm_listener_filters("eg", "", &buffer(16, true), PER_ROUTE),
    ]);
    yaml.push_str(&format!(
        "  clusters:
  - name: echo
    connect_timeout: 2s
    load_assignment:
      cluster_name: echo
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}}}]}}]
",
        echo.port()
    ));
    yaml
}

/// An HTTP/1.1 upstream answering with how the request's body came.
fn echo() -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            while let Ok((s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        |req: hyper::Request<hyper::body::Incoming>| async move {
                            let h = |n: &str| {
                                req.headers()
                                    .get(n)
                                    .map_or("-".to_string(), |v| v.to_str().unwrap().to_string())
                            };
                            let head = format!(
                                "content-length={} transfer-encoding={}",
                                h("content-length"),
                                h("transfer-encoding")
                            );
                            let body = req.into_body().collect().await?.to_bytes();
                            Ok::<_, hyper::Error>(hyper::Response::new(http_body_util::Full::new(
                                bytes::Bytes::from(format!("{head} got={}", body.len())),
                            )))
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                        .await;
                });
            }
        });
    });
    rx.recv().unwrap()
}

/// (name, listener, request bytes).
fn cases() -> Vec<(&'static str, &'static str, String)> {
    let sized = |path: &str, n: usize| {
        format!(
            "POST {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\ncontent-length: {n}\r\n\r\n{}",
            "x".repeat(n)
        )
    };
    let chunked = |path: &str, n: usize| {
        format!(
            "POST {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n{n:x}\r\n{}\r\n0\r\n\r\n",
            "x".repeat(n)
        )
    };
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n");
    let mut out = Vec::new();
    for l in ["buf", "eg"] {
        out.extend([
            ("small", l, sized("/", 10)),
            ("small chunked", l, chunked("/", 10)),
            ("over the limit", l, sized("/", 40)),
            ("over the limit chunked", l, chunked("/", 40)),
            ("route limit", l, chunked("/big", 40)),
            ("over the route limit", l, sized("/big", 80)),
            ("route disabled", l, chunked("/off", 40)),
            ("no body", l, get("/")),
        ]);
    }
    out
}

fn observe(kind: Kind, bin: &std::path::Path) -> Vec<String> {
    let proxy = Proxy::start(kind, bin, &config(echo()), &["buf", "eg"])
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
    cases()
        .into_iter()
        .map(|(name, listener, request)| {
            let a = exchange(proxy.listener(listener).unwrap(), &request);
            format!("{listener} {name}: {} {:?}", a.status_line, a.body)
        })
        .collect()
}

#[test]
fn buffer_filter_matches_envoy() {
    let Some(courier_lines) = same_lines(observe) else {
        return;
    };
    // What Envoy does, spelled out, so the comparison cannot pass on two wrong answers.
    let line = |prefix: &str| {
        courier_lines
            .iter()
            .find(|l| l.starts_with(prefix))
            .unwrap()
    };
    assert!(line("buf small chunked:").contains("content-length=10 transfer-encoding=- got=10"));
    assert!(line("buf over the limit:").contains("413"));
    assert!(line("buf route disabled:").contains("transfer-encoding=chunked got=40"));
    // Disabled in the connection manager, and no route turns it on for `/`.
    assert!(line("eg over the limit:").contains("200"));
    assert!(line("eg over the route limit:").contains("413"));
}
