//! Access logs through the real binary: a file log in a custom text format, one
//! in Envoy's default format and one in JSON, for a forwarded request, a direct
//! response and a request no route takes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::*;

const TEXT: &str = "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL% %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %UPSTREAM_HOST% %UPSTREAM_CLUSTER% %ROUTE_NAME% %REQ(X-MISSING)% %REQ(USER-AGENT):3% %START_TIME(%s)%\\n";

const H2_UPSTREAM: &str = r#"typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    explicit_http_config:
      http2_protocol_options: {}
"#;

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
        inline_string: "{TEXT}"
- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: {d}/default.log
- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: {d}/json.log
    log_format:
      json_format:
        code: "%RESPONSE_CODE%"
        flags: "%RESPONSE_FLAGS%"
        path: "%REQ(:PATH)%"
        upstream: "%UPSTREAM_HOST%"
        sent: "%BYTES_SENT%"
        received: "%BYTES_RECEIVED%"
        combo: "%REQ(:METHOD)% %REQ(X-MISSING)%"
        start: "%START_TIME%"
        nested: {{trailer: "%TRAILER(grpc-status)%"}}
        details: "%RESPONSE_CODE_DETAILS%"
        conn: "%CONNECTION_ID%"
        rq_ms: "%REQUEST_DURATION%"
        sni: "%REQUESTED_SERVER_NAME%"
        port: "%DOWNSTREAM_LOCAL_PORT%"
"#
    )
}

/// Reads `path` until it has `n` lines (the writer flushes on a timer).
async fn lines(path: &Path, n: usize) -> Vec<String> {
    for _ in 0..250 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "{} has not {n} lines: {:?}",
        path.display(),
        std::fs::read_to_string(path)
    );
}

#[tokio::test]
async fn file_logs_in_text_default_and_json_forms() {
    let dir = tempfile::tempdir().unwrap();
    let up = echo_upstream("one").await;
    let routes = r#"- match: {prefix: "/direct"}
  direct_response: {status: 200, body: {inline_string: "hi"}}
- name: to-web
  match: {prefix: "/up"}
  route: {cluster: web}
"#;
    let c = courier(
        &logs(dir.path()),
        routes,
        &static_cluster("web", &[up], H2_UPSTREAM),
    )
    .await;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();

    // HTTP/2 both sides, so the upstream's trailers reach the client.
    let mut h2 = H2::connect(c.listener).await;
    let req = Request::post("http://example.com/up/trailers")
        .header("host", "example.com")
        .header("user-agent", "curl/8.0")
        .body(Full::new(Bytes::from_static(b"hello")))
        .unwrap();
    let forwarded = h2.send(req).await;
    assert_eq!(forwarded.status, 200);
    assert!(forwarded.trailers.is_some());
    let mut h1 = H1::connect(c.listener).await;
    let direct = h1.get("/direct", &[]).await;
    assert_eq!(direct.body, "hi");
    let missing = h1.get("/nope", &[]).await;
    assert_eq!(missing.status, 404);

    let text = lines(&dir.path().join("text.log"), 3).await;
    let strip_time = |l: &str| -> (String, u64) {
        let (rest, t) = l.rsplit_once(' ').unwrap();
        (rest.to_string(), t.parse().unwrap())
    };
    let (first, t) = strip_time(&text[0]);
    assert!(t.abs_diff(now) < 30, "start time {t} vs {now}");
    assert_eq!(
        first,
        format!(
            "POST /up/trailers HTTP/2 200 - 5 {} {up} web to-web - cur",
            forwarded.body.len()
        )
    );
    assert_eq!(
        strip_time(&text[1]).0,
        "GET /direct HTTP/1.1 200 - 0 2 - - - - -"
    );
    assert_eq!(
        strip_time(&text[2]).0,
        "GET /nope HTTP/1.1 404 NR 0 0 - - - - -"
    );

    let default = lines(&dir.path().join("default.log"), 3).await;
    // [2026-12-02T16:13:12.464Z] "GET /direct HTTP/1.1" 200 - 0 2 ...
    let (stamp, rest) = default[1].split_once("] ").unwrap();
    let stamp = stamp.trim_start_matches('[');
    assert_eq!(stamp.len(), 24, "{stamp}");
    assert!(
        stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
        "{stamp}"
    );
    assert!(
        rest.starts_with("\"GET /direct HTTP/1.1\" 200 - 0 2 "),
        "{rest}"
    );
    // No x-forwarded-for, no user-agent, no upstream host.
    assert!(rest.contains(" \"-\" \"-\" \""), "{rest}");
    assert!(rest.ends_with("\"example.com\" \"-\""), "{rest}");
    assert!(default[2].contains("\" 404 NR 0 0 "), "{}", default[2]);
    assert!(
        default[0].ends_with(&format!("\"example.com\" \"{up}\"")),
        "{}",
        default[0]
    );

    let json = lines(&dir.path().join("json.log"), 3).await;
    let v: Vec<serde_json::Value> = json
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(v[0]["code"], 200);
    assert_eq!(v[0]["received"], 5);
    assert_eq!(v[0]["sent"], forwarded.body.len() as u64);
    assert_eq!(v[0]["upstream"], up.to_string());
    // As Envoy: no flags is the string "-", not null.
    assert_eq!(v[0]["flags"], "-");
    assert_eq!(v[0]["details"], "via_upstream");
    assert_eq!(v[1]["details"], "direct_response");
    assert_eq!(v[2]["details"], "route_not_found");
    assert_eq!(v[1]["port"], u64::from(c.listener.port()));
    // Two connections: the HTTP/2 one, then the HTTP/1.1 one for two requests.
    assert!(v[0]["conn"].is_u64());
    assert_ne!(v[0]["conn"], v[1]["conn"]);
    assert_eq!(v[1]["conn"], v[2]["conn"]);
    assert!(v[0]["rq_ms"].is_u64() && v[1]["rq_ms"].is_u64());
    assert_eq!(v[0]["sni"], serde_json::Value::Null);
    assert_eq!(v[0]["nested"]["trailer"], "0");
    assert_eq!(v[0]["combo"], "POST -");
    assert_eq!(v[2]["code"], 404);
    assert_eq!(v[2]["flags"], "NR");
    assert_eq!(v[2]["path"], "/nope");
    assert_eq!(v[2]["upstream"], serde_json::Value::Null);
    assert_eq!(v[2]["nested"]["trailer"], serde_json::Value::Null);
    assert_eq!(v[2]["start"].as_str().map(str::len), Some(24));
}

#[tokio::test]
async fn a_request_the_client_abandons_is_logged_with_dc() {
    let dir = tempfile::tempdir().unwrap();
    let up = echo_upstream("one").await;
    let routes = "- name: to-web\n  match: {prefix: \"/\"}\n  route: {cluster: web}\n";
    let c = courier(&logs(dir.path()), routes, &static_cluster("web", &[up], "")).await;
    let mut h2 = H2::connect(c.listener).await;
    let req = Request::get("http://example.com/slow")
        .body(Full::new(Bytes::new()))
        .unwrap();
    // The upstream takes 2 s: give up (RST_STREAM) well before.
    let abandoned = tokio::time::timeout(Duration::from_millis(300), h2.send(req)).await;
    assert!(abandoned.is_err());
    let text = lines(&dir.path().join("text.log"), 1).await;
    let (line, _) = text[0].rsplit_once(' ').unwrap();
    assert_eq!(line, "GET /slow HTTP/2 0 DC 0 0 - - - - -");
}
