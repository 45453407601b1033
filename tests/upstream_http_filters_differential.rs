//! A cluster's upstream HTTP filters (`HttpProtocolOptions.http_filters`,
//! Envoy Gateway's backend credential injection and admission control) beside
//! real Envoy: the same requests through both proxies from one bootstrap.
//!
//! - `credential_injector` (generic credential from a static generic secret):
//!   what the upstream received (the injected `authorization`, a client's own
//!   `authorization` kept with `overwrite: false`, replaced with `overwrite:
//!   true` into a custom header with a value prefix), a secret that is only a
//!   newline (401 `Failed to inject credential.`, or the request sent without
//!   it under `allow_request_without_credential`);
//! - `admission_control` before an upstream that answers 503 to everything,
//!   with an aggression so high that any failure in the window makes rejection
//!   certain: the first request reaches the upstream, every later one is
//!   rejected (503, empty body, no `x-envoy-upstream-service-time`) without
//!   reaching it; beside an upstream that succeeds, nothing is rejected; with
//!   `rps_threshold`, nothing until the window's average rate reaches it;
//!
//! - `admission_control` before an h2c gRPC upstream whose responses fail in
//!   their trailers (`grpc-status: 14`): the status is read from the trailers,
//!   so the second call is rejected;
//! - and `credential_injector` as a connection manager's filter (Envoy runs
//!   it downstream too), counting under `http.<stat_prefix>.`;
//!
//! comparing statuses, bodies, headers, what the upstreams saw, the access
//! log's flags and details, and the `cluster.<name>.credential_injector.*`,
//! `.admission_control.*` and `http.d.credential_injector.*` counters.
//! Without Envoy (`COURIER_ENVOY`) only courier is checked.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test upstream_http_filters_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{
    bootstrap, hcm_listener, hcm_listener_filters, indent, loopback_cluster,
};
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::{courier_bin, echo_upstream, envoy_bin, status_upstream};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A response body: data frames then trailers.
struct Frames(VecDeque<hyper::body::Frame<Bytes>>);

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }
}

/// An h2c gRPC upstream failing every call in its trailers: one empty message,
/// then `grpc-status: 14`. Counts the calls it saw.
fn grpc_upstream() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    l.set_nonblocking(true).unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&seen);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            loop {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                let count = Arc::clone(&count);
                let service =
                    hyper::service::service_fn(move |_: http::Request<hyper::body::Incoming>| {
                        count.fetch_add(1, Ordering::Relaxed);
                        let mut trailers = http::HeaderMap::new();
                        trailers.insert("grpc-status", http::HeaderValue::from_static("14"));
                        let frames = VecDeque::from([
                            hyper::body::Frame::data(Bytes::from_static(&[0, 0, 0, 0, 0])),
                            hyper::body::Frame::trailers(trailers),
                        ]);
                        let resp = http::Response::builder()
                            .header("content-type", "application/grpc")
                            .body(Frames(frames))
                            .unwrap();
                        async move { Ok::<_, std::convert::Infallible>(resp) }
                    });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(s), service),
                );
            }
        });
    });
    (addr, seen)
}

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/cred-over" }
    route: { cluster: cred_over }
  - match: { prefix: "/cred-empty" }
    route: { cluster: cred_empty }
  - match: { prefix: "/cred-allow" }
    route: { cluster: cred_allow }
  - match: { prefix: "/cred" }
    route: { cluster: cred }
  - match: { prefix: "/fail" }
    route: { cluster: ac_fail }
  - match: { prefix: "/rps" }
    route: { cluster: ac_rps }
  - match: { prefix: "/ok" }
    route: { cluster: ac_ok }
  - match: { prefix: "/pkg." }
    route: { cluster: ac_grpc }
"#;

/// The access log: each reply's flags and details.
const LOG: &str = r#"access_log:
- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: l.log
    log_format:
      text_format_source:
        inline_string: "%REQ(:PATH)% %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS%\n"
"#;

const SECRETS: &str = r#"  secrets:
  - name: token
    generic_secret: { secret: { inline_string: "Bearer s3cret\n" } }
  - name: key
    generic_secret: { secret: { inline_bytes: "a2V5LTEyMw==" } }
  - name: blank
    generic_secret: { secret: { inline_string: "\n" } }
"#;

const CODEC: &str = r#"- name: envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec
  typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec }
"#;

/// A credential_injector filter of the generic credential `secret`; `extra`:
/// the filter's other fields, `generic`: the credential's.
fn credential(secret: &str, extra: &str, generic: &str) -> String {
    format!(
        r#"- name: envoy.filters.http.credential_injector
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.credential_injector.v3.CredentialInjector
{extra}    credential:
      name: envoy.http.injected_credentials.generic
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.http.injected_credentials.generic.v3.Generic
        credential: {{ name: {secret} }}
{generic}"#
    )
}

/// An admission_control filter: `extra` are its fields besides the criteria.
fn admission(extra: &str) -> String {
    format!(
        r#"- name: envoy.filters.http.admission_control
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.admission_control.v3.AdmissionControl
    success_criteria: {{}}
{extra}"#
    )
}

/// The `typed_extension_protocol_options` of a cluster with `filters` (and the codec).
fn with_filters(filters: &[String]) -> String {
    let list: String = filters.iter().map(String::as_str).chain([CODEC]).collect();
    format!(
        "  typed_extension_protocol_options:\n    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n      \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n      explicit_http_config: {{ http_protocol_options: {{}} }}\n      http_filters:\n{}\n",
        indent(&list, 6)
    )
}

fn yaml(echo: u16, failing: u16, grpc: u16) -> String {
    // Rejection is certain once the window holds a failure: p^(1/1e9) rounds
    // to 1 at Envoy's four figures, and the cap is 100%.
    let certain = admission(
        "    aggression: { default_value: 1000000000 }\n    max_rejection_probability: { default_value: { value: 100 } }\n",
    );
    let clusters = [
        loopback_cluster("plain", echo, ""),
        loopback_cluster("cred", echo, &with_filters(&[credential("token", "", "")])),
        loopback_cluster(
            "cred_over",
            echo,
            &with_filters(&[credential(
                "key",
                "    overwrite: true\n",
                "        header: X-Api-Key\n        header_value_prefix: \"Key \"\n",
            )]),
        ),
        loopback_cluster(
            "cred_empty",
            echo,
            &with_filters(&[credential("blank", "", "")]),
        ),
        loopback_cluster(
            "cred_allow",
            echo,
            &with_filters(&[credential(
                "blank",
                "    allow_request_without_credential: true\n",
                "",
            )]),
        ),
        loopback_cluster(
            "ac_fail",
            failing,
            &with_filters(&[credential("token", "", ""), certain.clone()]),
        ),
        loopback_cluster(
            "ac_ok",
            echo,
            &with_filters(&[certain.clone(), credential("token", "", "")]),
        ),
        // Nothing rejected until the window's average rate (its requests over
        // the 2 s window) reaches 1 a second: the third request.
        loopback_cluster(
            "ac_rps",
            failing,
            &with_filters(&[admission(
                "    aggression: { default_value: 1000000000 }\n    max_rejection_probability: { default_value: { value: 100 } }\n    rps_threshold: { default_value: 1 }\n    sampling_window: 2s\n",
            )]),
        ),
        loopback_cluster(
            "ac_grpc",
            grpc,
            &with_filters(&[certain])
                .replace("http_protocol_options: {}", "http2_protocol_options: {}"),
        ),
    ];
    let downstream = credential("token", "", "");
    let b = bootstrap(&[
        hcm_listener("l", LOG, VHOSTS),
        hcm_listener_filters(
            "d",
            "",
            &downstream,
            "- name: all\n  domains: [\"*\"]\n  routes:\n  - match: { prefix: \"/\" }\n    route: { cluster: plain }\n",
        ),
    ]);
    format!(
        "{b}{SECRETS}  clusters:\n{}\n",
        clusters
            .iter()
            .map(|c| indent(c, 2))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

/// Requests: path, headers.
const CASES: &[(&str, &[(&str, &str)])] = &[
    ("/cred", &[]),
    ("/cred", &[("authorization", "Basic mine")]),
    ("/cred-over", &[]),
    (
        "/cred-over",
        &[("x-api-key", "old"), ("authorization", "Basic mine")],
    ),
    ("/cred-empty", &[]),
    ("/cred-empty", &[("authorization", "Basic mine")]),
    ("/cred-allow", &[]),
    ("/ok/1", &[]),
    ("/ok/2", &[]),
    ("/fail/1", &[]),
    ("/fail/2", &[]),
    ("/fail/3", &[]),
    ("/ok/3", &[]),
    ("/fail/4", &[]),
    ("/rps/1", &[]),
    ("/rps/2", &[]),
    ("/rps/3", &[]),
];

/// Requests to the listener with the filter downstream.
const DOWNSTREAM: &[(&str, &[(&str, &str)])] =
    &[("/x", &[]), ("/y", &[("authorization", "Basic mine")])];

fn run(kind: Kind, bin: &std::path::Path) -> (Vec<String>, usize) {
    let echo = echo_upstream::start(&["authorization", "x-api-key"]);
    let (failing, seen) = status_upstream::start(503);
    let (grpc, grpc_seen) = grpc_upstream();
    let p = Proxy::start(
        kind,
        bin,
        &yaml(echo.port(), failing.port(), grpc.port()),
        &["l", "d"],
    )
    .unwrap();
    let mut out = Vec::new();
    for (listener, (path, headers)) in CASES
        .iter()
        .map(|c| ("l", c))
        .chain(DOWNSTREAM.iter().map(|c| ("d", c)))
    {
        let r = client::send(
            p.listener(listener).unwrap(),
            Protocol::Http1,
            &Request {
                method: "GET".into(),
                path: (*path).into(),
                authority: "example.com".into(),
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                body: Vec::new(),
            },
        )
        .unwrap();
        out.push(format!(
            "{listener}{path} {headers:?} -> {} content-type={:?} upstream-time={} {:?}",
            r.status,
            r.header("content-type"),
            r.header("x-envoy-upstream-service-time").is_some(),
            String::from_utf8_lossy(&r.body)
        ));
    }
    for i in 0..3 {
        let r = client::send(
            p.listener("l").unwrap(),
            Protocol::H2c,
            &Request {
                method: "POST".into(),
                path: "/pkg.Svc/Call".into(),
                authority: "example.com".into(),
                headers: vec![
                    ("content-type".into(), "application/grpc".into()),
                    ("te".into(), "trailers".into()),
                ],
                body: vec![0, 0, 0, 0, 0],
            },
        )
        .unwrap();
        out.push(format!(
            "grpc {i} -> {} grpc-status={:?}/{:?} {:?}",
            r.status,
            r.header("grpc-status"),
            r.trailer("grpc-status"),
            String::from_utf8_lossy(&r.body)
        ));
    }
    out.push(format!(
        "grpc upstream saw {}",
        grpc_seen.load(Ordering::Relaxed)
    ));
    let stats = client::get(&p.admin, "/stats").unwrap();
    out.extend(
        String::from_utf8_lossy(&stats.body)
            .lines()
            .filter(|l| {
                l.contains("credential_injector.")
                    || l.contains(".admission_control.")
                    || l.starts_with("cluster.ac_fail.upstream_rq_503")
            })
            .map(str::to_string),
    );
    // Envoy flushes log files every 10 s, and on exit.
    let quit = Request {
        method: "POST".into(),
        path: "/quitquitquit".into(),
        authority: p.admin.clone(),
        headers: Vec::new(),
        body: Vec::new(),
    };
    client::send(&p.admin, Protocol::Http1, &quit).unwrap();
    let log = poll(500, || {
        let text = std::fs::read_to_string(p.dir().join("l.log")).ok()?;
        let lines: Vec<String> = text.lines().map(|l| format!("log: {l}")).collect();
        (lines.len() >= CASES.len() + 3).then_some(lines)
    })
    .unwrap_or_else(|| panic!("{kind:?}: l.log is short"));
    out.extend(log);
    (out, seen.load(Ordering::Relaxed))
}

#[test]
fn upstream_http_filters_as_envoy() {
    let (c, c_seen) = run(Kind::Courier, &courier_bin());
    println!("courier:\n{}", c.join("\n"));
    let expect = [
        "l/cred [] -> 200 content-type=None upstream-time=true \"/cred\\nauthorization: Bearer s3cret\\n\"",
        "l/cred [(\"authorization\", \"Basic mine\")] -> 200 content-type=None upstream-time=true \"/cred\\nauthorization: Basic mine\\n\"",
        "l/cred-over [] -> 200 content-type=None upstream-time=true \"/cred-over\\nx-api-key: Key key-123\\n\"",
        "l/cred-over [(\"x-api-key\", \"old\"), (\"authorization\", \"Basic mine\")] -> 200 content-type=None upstream-time=true \"/cred-over\\nauthorization: Basic mine\\nx-api-key: Key key-123\\n\"",
    ];
    for (i, e) in expect.iter().enumerate() {
        assert_eq!(c[i], *e);
    }
    assert_eq!(
        c[CASES.len()],
        "d/x [] -> 200 content-type=None upstream-time=true \"/x\\nauthorization: Bearer s3cret\\n\""
    );
    assert_eq!(
        c[CASES.len() + 1],
        "d/y [(\"authorization\", \"Basic mine\")] -> 200 content-type=None upstream-time=true \"/y\\nauthorization: Basic mine\\n\""
    );
    assert!(
        c[4].starts_with("l/cred-empty [] -> 401 ")
            && c[4].ends_with("\"Failed to inject credential.\""),
        "{}",
        c[4]
    );
    assert!(c[6].ends_with("\"/cred-allow\\n\""), "{}", c[6]);
    // The first failure reaches the upstream; then every request is rejected.
    assert!(
        c[9].starts_with("l/fail/1 [] -> 503 ") && c[9].contains("upstream-time=true"),
        "{}",
        c[9]
    );
    for i in [10, 11, 13] {
        assert!(
            c[i].ends_with("-> 503 content-type=None upstream-time=false \"\""),
            "{}",
            c[i]
        );
    }
    assert!(c[12].starts_with("l/ok/3 [] -> 200 "), "{}", c[12]);
    assert!(c[15].contains("upstream-time=true"), "{}", c[15]);
    assert!(
        c[16].ends_with("-> 503 content-type=None upstream-time=false \"\""),
        "{}",
        c[16]
    );
    // The failing upstream saw /fail/1, /rps/1 and /rps/2.
    assert_eq!(c_seen, 3);
    assert!(
        c.iter()
            .any(|l| l == "log: /fail/2 503 - denied_by_admission_control")
    );
    assert!(
        c.iter()
            .any(|l| l == "log: /cred-empty 401 - failed_to_inject_credential")
    );
    // The gRPC failure is read from the trailers: the next calls are rejected
    // with a trailers-only UNAVAILABLE.
    for line in [
        "grpc 0 -> 200 grpc-status=None/Some(\"14\") \"\\0\\0\\0\\0\\0\"",
        "grpc 1 -> 200 grpc-status=Some(\"14\")/None \"\"",
        "grpc upstream saw 1",
        "cluster.ac_grpc.admission_control.rq_failure: 1",
        "cluster.ac_grpc.admission_control.rq_rejected: 2",
    ] {
        assert!(c.iter().any(|l| l == line), "{line} missing");
    }
    for stat in [
        "cluster.ac_fail.admission_control.rq_failure: 1",
        "cluster.ac_fail.admission_control.rq_rejected: 3",
        "cluster.ac_fail.admission_control.rq_success: 0",
        "cluster.ac_rps.admission_control.rq_failure: 2",
        "cluster.ac_rps.admission_control.rq_rejected: 1",
        "cluster.ac_ok.admission_control.rq_success: 3",
        "cluster.cred.credential_injector.already_exists: 1",
        "cluster.cred.credential_injector.injected: 1",
        "cluster.cred_empty.credential_injector.failed: 1",
        "cluster.cred_empty.credential_injector.already_exists: 1",
        "cluster.cred_over.credential_injector.injected: 2",
        "http.d.credential_injector.injected: 1",
        "http.d.credential_injector.already_exists: 1",
    ] {
        assert!(c.iter().any(|l| l == stat), "{stat} missing");
    }
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED the Envoy comparison: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let (e, e_seen) = run(Kind::Envoy, &envoy);
    println!("envoy:\n{}", e.join("\n"));
    for (c, e) in c.iter().zip(&e) {
        assert_eq!(c, e);
    }
    assert_eq!(c.len(), e.len());
    assert_eq!(c_seen, e_seen);
}
