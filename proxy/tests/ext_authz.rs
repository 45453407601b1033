//! ext_authz through the real binary: a tonic Authorization server and a plain HTTP
//! authz server on loopback decide; a counting upstream shows what got through.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod ext_authz_support;
mod support;

use bytes::Bytes;
use envoy_types::pb::envoy::service::auth::v3::CheckRequest;
use ext_authz_support::*;
use http::Request;
use http_body_util::Full;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::*;

const H2: &str = r#"typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    explicit_http_config:
      http2_protocol_options: {}
"#;

const PER_ROUTE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute";

fn routes() -> String {
    format!(
        r#"- match: {{prefix: "/open"}}
  route: {{cluster: up}}
  typed_per_filter_config:
    envoy.filters.http.ext_authz:
      "@type": {PER_ROUTE}
      disabled: true
- match: {{prefix: "/ctx"}}
  route: {{cluster: up}}
  typed_per_filter_config:
    envoy.filters.http.ext_authz:
      "@type": {PER_ROUTE}
      check_settings: {{context_extensions: {{route_key: r, shared: route}}}}
- match: {{prefix: "/"}}
  route: {{cluster: up}}
"#
    )
}

fn vhost() -> String {
    format!(
        r#"typed_per_filter_config:
  envoy.filters.http.ext_authz:
    "@type": {PER_ROUTE}
    check_settings: {{context_extensions: {{vhost_key: v, shared: vhost}}}}
"#
    )
}

/// The ext_authz filter with `service` (YAML under typed_config) and `extra` fields.
fn filter(service: &str, extra: &str) -> String {
    let body: String = format!("{service}\n{extra}")
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| format!("    {l}\n"))
        .collect();
    format!(
        "- name: envoy.filters.http.ext_authz\n  typed_config:\n    \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz\n{body}"
    )
}

fn envoy_grpc(timeout: &str) -> String {
    format!("grpc_service: {{envoy_grpc: {{cluster_name: authz}}{timeout}}}")
}

struct Setup {
    courier: Courier,
    hits: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

async fn start(authz: SocketAddr, authz_extra: &str, filters: &str, hcm: &str) -> Setup {
    let (up, hits) = counting_upstream().await;
    let clusters = format!(
        "{}{}",
        static_cluster("up", &[up], ""),
        static_cluster("authz", &[authz], authz_extra)
    );
    let courier = courier_filters(
        &["--concurrency", "1"],
        hcm,
        &vhost(),
        &routes(),
        &clusters,
        filters,
    )
    .await;
    Setup { courier, hits }
}

async fn get(c: &Courier, path: &str, headers: &[(&str, &str)]) -> Reply {
    H1::connect(c.listener).await.get(path, headers).await
}

/// A port nothing listens on.
async fn closed_port() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

#[tokio::test]
async fn grpc_allow_injects_headers_removes_and_adds_response_headers() {
    let mut authz = grpc_authz().await;
    let s = start(authz.addr, H2, &filter(&envoy_grpc(""), ""), "").await;
    let r = get(
        &s.courier,
        "/a?x=1",
        &[
            ("x-remove", "x-secret,:path,host"),
            ("x-secret", "s"),
            ("x-existing", "one"),
            ("x-qset", "k=v"),
        ],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.seen("x-authz-user"), Some("alice"));
    assert_eq!(r.seen("x-existing"), Some("one,more"));
    assert_eq!(r.seen("x-secret"), None, "{}", r.body);
    // Envoy rebuilds the query in key order.
    assert!(r.body.starts_with("GET /a?k=v&x=1\n"), "{}", r.body);
    assert_eq!(r.header("x-resp"), Some("r1"));
    assert!(authz.seen.recv().await.is_some());
    assert_eq!(stat(&s.courier, "http.ingress.ext_authz.ok").await, 1);
}

#[tokio::test]
async fn grpc_deny_reaches_the_client_and_not_the_upstream() {
    let authz = grpc_authz().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("a.log");
    let hcm = format!(
        "access_log:\n- name: envoy.access_loggers.file\n  typed_config:\n    \"@type\": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog\n    path: {}\n    log_format: {{text_format_source: {{inline_string: \"%RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS%\\n\"}}}}\n",
        log.display()
    );
    let s = start(authz.addr, H2, &filter(&envoy_grpc(""), ""), &hcm).await;
    let r = get(&s.courier, "/a", &[("x-mode", "deny")]).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.body, "go away");
    assert_eq!(r.header("x-deny"), Some("yes"));
    let r = get(&s.courier, "/a", &[("x-mode", "deny-bare")]).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.body, "");
    assert_eq!(s.hits.load(Ordering::SeqCst), 0);
    assert_eq!(stat(&s.courier, "http.ingress.ext_authz.denied").await, 2);
    let mut text = String::new();
    for _ in 0..250 {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(text.starts_with("401 UAEX ext_authz_denied\n"), "{text}");
}

/// Each failure (server down, slow past the timeout, UNAVAILABLE) is an error: 403 empty
/// fail-closed, `status_on_error` when set, and through with the header fail-open.
#[tokio::test]
async fn grpc_failures_fail_closed_or_open() {
    let authz = grpc_authz().await;
    let down = closed_port().await;
    for (addr, mode) in [
        (authz.addr, "slow"),
        (authz.addr, "unavailable"),
        (down, ""),
    ] {
        let closed = start(addr, H2, &filter(&envoy_grpc(""), ""), "").await;
        let r = get(&closed.courier, "/a", &[("x-mode", mode)]).await;
        assert_eq!((r.status, r.body.as_str()), (403, ""), "{mode} {addr}");
        assert_eq!(
            stat(&closed.courier, "http.ingress.ext_authz.error").await,
            1
        );

        let custom = start(
            addr,
            H2,
            &filter(&envoy_grpc(""), "status_on_error: {code: 503}"),
            "",
        )
        .await;
        let r = get(&custom.courier, "/a", &[("x-mode", mode)]).await;
        assert_eq!(r.status, 503, "{mode}");

        let open = start(
            addr,
            H2,
            &filter(
                &envoy_grpc(""),
                "failure_mode_allow: true\nfailure_mode_allow_header_add: true",
            ),
            "",
        )
        .await;
        let r = get(&open.courier, "/a", &[("x-mode", mode)]).await;
        assert_eq!(r.status, 200, "{mode}");
        assert_eq!(r.seen("x-envoy-auth-failure-mode-allowed"), Some("true"));
        assert_eq!(
            stat(&open.courier, "http.ingress.ext_authz.failure_mode_allowed").await,
            1
        );
        assert_eq!(open.hits.load(Ordering::SeqCst), 1);
    }
}

fn http_service(timeout: &str) -> String {
    format!(
        r#"http_service:
  server_uri: {{uri: "http://authz.test", cluster: authz, timeout: {timeout}}}
  path_prefix: /check
  authorization_request:
    allowed_headers: {{patterns: [{{exact: x-mode}}, {{prefix: x-pass}}]}}
    headers_to_add: [{{key: x-from-proxy, value: courier}}]
  authorization_response:
    allowed_upstream_headers: {{patterns: [{{exact: x-authz-user}}]}}
    allowed_upstream_headers_to_append: {{patterns: [{{exact: x-append}}]}}
    allowed_client_headers_on_success: {{patterns: [{{exact: x-resp}}]}}"#
    )
}

#[tokio::test]
async fn http_service_allows_denies_and_errors() {
    let (addr, mut seen) = http_authz().await;
    let s = start(addr, "", &filter(&http_service("1s"), ""), "").await;
    let r = get(
        &s.courier,
        "/a?q=1",
        &[
            ("x-pass-me", "1"),
            ("x-not", "2"),
            ("authorization", "Bearer t"),
            ("x-secret", "s"),
            ("x-append", "a1"),
        ],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.seen("x-authz-user"), Some("bob"));
    // `allowed_upstream_headers_to_append` adds a value, as Envoy.
    assert!(
        r.body.contains("x-append: a1\nx-append: a2\n"),
        "{}",
        r.body
    );
    assert_eq!(r.seen("x-secret"), None);
    assert_eq!(r.header("x-resp"), Some("r2"));
    let check = seen.recv().await.unwrap();
    assert_eq!(check.method, "GET");
    assert_eq!(check.path, "/check/a?q=1");
    assert_eq!(check.headers.get("host").unwrap(), "example.com");
    assert_eq!(check.headers.get("x-pass-me").unwrap(), "1");
    assert_eq!(check.headers.get("authorization").unwrap(), "Bearer t");
    assert_eq!(check.headers.get("x-from-proxy").unwrap(), "courier");
    assert!(check.headers.get("x-not").is_none());

    let r = get(&s.courier, "/a", &[("x-mode", "deny")]).await;
    assert_eq!((r.status, r.body.as_str()), (403, "nope"));
    assert_eq!(r.header("x-deny"), Some("yes"));
    let r = get(&s.courier, "/a", &[("x-mode", "error")]).await;
    assert_eq!((r.status, r.body.as_str()), (403, ""));
    assert_eq!(s.hits.load(Ordering::SeqCst), 1);
    assert_eq!(stat(&s.courier, "http.ingress.ext_authz.ok").await, 1);
    assert_eq!(stat(&s.courier, "http.ingress.ext_authz.denied").await, 1);
    assert_eq!(stat(&s.courier, "http.ingress.ext_authz.error").await, 1);

    let open = start(
        addr,
        "",
        &filter(
            &http_service("1s"),
            "failure_mode_allow: true\nfailure_mode_allow_header_add: true",
        ),
        "",
    )
    .await;
    let r = get(&open.courier, "/a", &[("x-mode", "error")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.seen("x-envoy-auth-failure-mode-allowed"), Some("true"));
}

fn check_http(
    c: &CheckRequest,
) -> &envoy_types::pb::envoy::service::auth::v3::attribute_context::HttpRequest {
    c.attributes
        .as_ref()
        .unwrap()
        .request
        .as_ref()
        .unwrap()
        .http
        .as_ref()
        .unwrap()
}

#[tokio::test]
async fn check_request_carries_request_context_and_jwt_payload() {
    let mut authz = grpc_authz().await;
    let jwt = r#"- name: envoy.filters.http.jwt_authn
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
    providers:
      test:
        issuer: https://issuer.test
        payload_in_metadata: jwt_payload
        local_jwks: {inline_string: '{"keys":[{"kty":"oct","alg":"HS256","k":"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA"}]}'}
    rules:
    - match: {prefix: "/"}
      requires: {provider_name: test}
"#;
    let filters = format!(
        "{jwt}{}",
        filter(
            &envoy_grpc(""),
            "metadata_context_namespaces: [envoy.filters.http.jwt_authn]"
        )
    );
    let s = start(authz.addr, H2, &filters, "").await;
    let claims =
        serde_json::json!({"iss": "https://issuer.test", "sub": "carol", "exp": 4_000_000_000u64});
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(b"secret-secret-secret-secret-secret").unwrap(),
    )
    .unwrap();
    let auth = format!("Bearer {token}");
    let r = get(
        &s.courier,
        "/ctx/x?y=2",
        &[("authorization", &auth), ("x-custom", "c1")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let c = authz.seen.recv().await.unwrap();
    let h = check_http(&c);
    assert_eq!(h.method, "GET");
    assert_eq!(h.path, "/ctx/x?y=2");
    assert_eq!(h.host, "example.com");
    assert_eq!(h.scheme, "http");
    assert_eq!(h.protocol, "HTTP/1.1");
    assert_eq!(h.headers.get("x-custom").map(String::as_str), Some("c1"));
    assert_eq!(h.headers.get(":method").map(String::as_str), Some("GET"));
    assert!(!h.id.is_empty());
    let a = c.attributes.as_ref().unwrap();
    let ctx = &a.context_extensions;
    assert_eq!(ctx.get("vhost_key").map(String::as_str), Some("v"));
    assert_eq!(ctx.get("route_key").map(String::as_str), Some("r"));
    assert_eq!(ctx.get("shared").map(String::as_str), Some("route"));
    assert!(a.source.as_ref().unwrap().address.is_some());
    let md = &a.metadata_context.as_ref().unwrap().filter_metadata;
    let payload = &md["envoy.filters.http.jwt_authn"].fields["jwt_payload"];
    let sub = match &payload.kind {
        Some(envoy_types::pb::google::protobuf::value::Kind::StructValue(s)) => {
            s.fields["sub"].clone()
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(
        sub.kind,
        Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(
            "carol".into()
        ))
    );
}

/// While 200 checks wait on the authz server, the single worker keeps answering requests
/// on a route where ext_authz is disabled.
#[tokio::test]
async fn held_checks_do_not_block_the_worker() {
    let authz = grpc_authz().await;
    let s = start(
        authz.addr,
        H2,
        &filter(&envoy_grpc(", timeout: 60s"), ""),
        "",
    )
    .await;
    let listener = s.courier.listener;
    let mut held = Vec::new();
    for _ in 0..200 {
        held.push(tokio::spawn(async move {
            H1::connect(listener)
                .await
                .get("/a", &[("x-mode", "hold")])
                .await
                .status
        }));
    }
    for _ in 0..1000 {
        if authz.calls.load(Ordering::SeqCst) == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(authz.calls.load(Ordering::SeqCst), 200);
    for _ in 0..20 {
        let r = get(&s.courier, "/open", &[]).await;
        assert_eq!(r.status, 200);
    }
    assert!(held.iter().all(|h| !h.is_finished()));
    authz.release.add_permits(200);
    for h in held {
        assert_eq!(h.await.unwrap(), 200);
    }
    assert_eq!(s.hits.load(Ordering::SeqCst), 220);
}

#[tokio::test]
async fn with_request_body_sends_the_body_and_refuses_larger_ones() {
    let mut authz = grpc_authz().await;
    let s = start(
        authz.addr,
        H2,
        &filter(
            &envoy_grpc(""),
            "with_request_body: {max_request_bytes: 10}",
        ),
        "",
    )
    .await;
    let post = |body: &'static str| {
        Request::post("/a")
            .header("host", "example.com")
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    let mut c = H1::connect(s.courier.listener).await;
    let r = c.send(post("hello")).await;
    assert_eq!(r.status, 200);
    assert!(r.body.ends_with("body: hello\n"), "{}", r.body);
    let check = authz.seen.recv().await.unwrap();
    assert_eq!(check_http(&check).body, "hello");
    assert_eq!(check_http(&check).size, 5);
    let r = H1::connect(s.courier.listener)
        .await
        .send(post("much more than ten bytes"))
        .await;
    assert_eq!(r.status, 413);
    assert_eq!(s.hits.load(Ordering::SeqCst), 1);
    // Where the filter is off, nothing is buffered and nothing refused.
    let open = Request::post("/open")
        .header("host", "example.com")
        .body(Full::new(Bytes::from("much more than ten bytes")))
        .unwrap();
    let r = H1::connect(s.courier.listener).await.send(open).await;
    assert_eq!(r.status, 200);
    assert!(
        r.body.ends_with("body: much more than ten bytes\n"),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn google_grpc_target_is_called_directly() {
    let mut authz = grpc_authz().await;
    let service = format!(
        "grpc_service: {{google_grpc: {{target_uri: \"{}\", stat_prefix: authz}}}}",
        authz.addr
    );
    let s = start(authz.addr, H2, &filter(&service, ""), "").await;
    let r = get(&s.courier, "/a", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.seen("x-authz-user"), Some("alice"));
    assert!(authz.seen.recv().await.is_some());
    let r = get(&s.courier, "/a", &[("x-mode", "deny")]).await;
    assert_eq!(r.status, 401);
}

/// With `allow_partial_message`, the check goes out once `max_request_bytes` are held, not
/// when the body ends (a large body is never held whole); the upstream then gets all of it.
#[tokio::test]
async fn partial_body_is_checked_before_the_rest_arrives() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut authz = grpc_authz().await;
    let s = start(
        authz.addr,
        H2,
        &filter(
            &envoy_grpc(""),
            "with_request_body: {max_request_bytes: 10, allow_partial_message: true}",
        ),
        "",
    )
    .await;
    let mut c = tokio::net::TcpStream::connect(s.courier.listener)
        .await
        .unwrap();
    c.write_all(b"POST /a HTTP/1.1\r\nhost: example.com\r\ncontent-length: 30\r\n\r\n0123456789ab")
        .await
        .unwrap();
    // The rest of the body is still with the client: the check must not wait for it.
    let check = tokio::time::timeout(Duration::from_secs(20), authz.seen.recv())
        .await
        .expect("no check while the body is incomplete")
        .unwrap();
    let http = check_http(&check);
    assert_eq!(http.body, "0123456789");
    assert_eq!(http.headers["x-envoy-auth-partial-body"], "true");
    c.write_all(b"cdefghijklmnopqrst").await.unwrap();
    let mut got = Vec::new();
    let want = "body: 0123456789abcdefghijklmnopqrst\n";
    for _ in 0..100 {
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(20), c.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        got.extend_from_slice(&buf[..n]);
        if n == 0 || String::from_utf8_lossy(&got).contains(want) {
            break;
        }
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains(want), "{text}");
}

/// `filter_enabled` at 0 %: requests pass unchecked and count as `disabled`.
#[tokio::test]
async fn filter_enabled_zero_counts_disabled() {
    let authz = grpc_authz().await;
    let s = start(
        authz.addr,
        H2,
        &filter(
            &envoy_grpc(""),
            "filter_enabled: {default_value: {numerator: 0}}",
        ),
        "",
    )
    .await;
    let r = get(&s.courier, "/a", &[("x-mode", "deny")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(authz.calls.load(Ordering::SeqCst), 0);
    let stats = get_text(&s.courier.admin, "/stats").await;
    assert!(
        stats.lines().any(|l| l.ends_with("ext_authz.disabled: 1")),
        "{stats}"
    );
}
