//! `%DYNAMIC_METADATA(...)%` in access logs through the real binary: the payload
//! jwt_authn verified (`payload_in_metadata`) is visible in text and JSON lines.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod jwt_support;
mod support;

use jwt_support::*;
use std::path::Path;
use std::time::Duration;
use support::*;

const NS: &str = "envoy.filters.http.jwt_authn";

fn logs(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"access_log:
- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: {d}/text.log
    log_format:
      text_format_source:
        inline_string: "%RESPONSE_CODE% %DYNAMIC_METADATA({NS}:p:sub)% %DYNAMIC_METADATA({NS}:p:iss):8% %DYNAMIC_METADATA({NS}:p:nested)% %DYNAMIC_METADATA({NS}:p:missing)% %DYNAMIC_METADATA(other.ns)%\n"
- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: {d}/json.log
    log_format:
      json_format:
        sub: "%DYNAMIC_METADATA({NS}:p:sub)%"
        n: "%DYNAMIC_METADATA({NS}:p:nested)%"
        missing: "%DYNAMIC_METADATA({NS}:p:missing)%"
"#
    )
}

async fn lines(path: &Path, n: usize) -> Vec<String> {
    for _ in 0..250 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{} has not {n} lines", path.display());
}

#[tokio::test]
async fn the_verified_payload_is_visible_in_access_logs() {
    let key = Key::p256("k");
    let (jwks_addr, _state) = jwks_server(jwks(&[&key])).await;
    let up = echo_upstream("up").await;
    let clusters = format!(
        "{}{}",
        static_cluster("web", &[up], ""),
        static_cluster("jwks", &[jwks_addr], "")
    );
    let filter = remote_filter("").replace(
        "        remote_jwks:",
        "        payload_in_metadata: p\n        remote_jwks:",
    );
    let dir = tempfile::tempdir().unwrap();
    let c = courier_filters(
        &["--concurrency", "1", "--drain-time-s", "1"],
        &logs(dir.path()),
        "",
        "- match: {prefix: \"/\"}\n  route: {cluster: web}\n",
        &clusters,
        &filter,
    )
    .await;
    let mut h1 = H1::connect(c.listener).await;
    let token = key.token_with(serde_json::json!({"sub": "alice", "nested": {"a": 1}}));
    let r = h1
        .get("/x", &[("authorization", &format!("Bearer {token}"))])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    // Refused: no metadata.
    let r = h1.get("/x", &[]).await;
    assert_eq!(r.status, 401);
    let text = lines(&dir.path().join("text.log"), 2).await;
    assert_eq!(text[0], r#"200 alice https:// {"a":1} - -"#);
    assert_eq!(text[1], "401 - - - - -");
    let json = lines(&dir.path().join("json.log"), 2).await;
    let first: serde_json::Value = serde_json::from_str(&json[0]).unwrap();
    assert_eq!(
        first,
        serde_json::json!({"sub": "alice", "n": {"a": 1}, "missing": null})
    );
}
