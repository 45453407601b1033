//! The compressor filter end to end: courier in front of a real upstream on loopback,
//! responses decoded with real gzip, brotli and zstd decoders, over HTTP/1.1 and h2c.
//!
//! ```text
//! cargo test -p courier-tests --test compressor
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "compressor_support.rs"]
mod compressor_support;

use compressor_support::{
    cluster, decode_as, decoded, filter, get, h2_upstream, istio_filters, post, text_body, upstream,
};
use courier_tests::client::{Protocol, Response};
use courier_tests::courier_bin;
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent};
use courier_tests::proxies::{Kind, Proxy};

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
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

fn start() -> Proxy {
    let up = upstream();
    let single = filter(
        "gzip",
        "Gzip",
        "response_direction_config:\n  remove_accept_encoding_header: true\nrequest_direction_config: {}\n",
    );
    let yaml = format!(
        "{}{}\n",
        bootstrap(&[
            hcm_listener_filters("istio", "", &istio_filters(), VHOSTS),
            hcm_listener_filters("gzip", "", &single, VHOSTS),
        ]),
        indent(&cluster(up, h2_upstream()), 2)
    );
    Proxy::start(Kind::Courier, &courier_bin(), &yaml, &["istio", "gzip"]).unwrap()
}

/// The response was compressed with `encoding` and decodes to the upstream's text.
fn assert_compressed(r: &Response, encoding: &str, what: &str) {
    assert_eq!(r.status, 200, "{what}");
    assert_eq!(
        r.header("content-encoding").as_deref(),
        Some(encoding),
        "{what}"
    );
    assert_eq!(
        r.header("vary").as_deref(),
        Some("Accept-Encoding"),
        "{what}"
    );
    assert_eq!(
        r.header("content-length"),
        None,
        "{what}: the length changed"
    );
    assert!(r.body.len() < text_body().len(), "{what}: not smaller");
    assert_eq!(decoded(r), text_body(), "{what}: decoded body");
}

fn assert_plain(r: &Response, vary: bool, what: &str) {
    assert_eq!(r.header("content-encoding"), None, "{what}");
    assert_eq!(
        r.header("vary").is_some(),
        vary,
        "{what}: vary {:?}",
        r.header("vary")
    );
}

#[test]
fn each_library_compresses_and_negotiation_picks_as_envoy() {
    let p = start();
    let istio = p.listener("istio").unwrap();
    for proto in [Protocol::Http1, Protocol::H2c] {
        let what = |w: &str| format!("{w} ({proto})");
        assert_compressed(
            &get(istio, proto, "/text", Some("gzip")),
            "gzip",
            &what("gzip"),
        );
        assert_compressed(&get(istio, proto, "/text", Some("br")), "br", &what("br"));
        assert_compressed(
            &get(istio, proto, "/text", Some("zstd")),
            "zstd",
            &what("zstd"),
        );
        // Highest q wins; on equal q the first listed by the client.
        let r = get(
            istio,
            proto,
            "/text",
            Some("gzip;q=0.5, br;q=0.9, zstd;q=0.7"),
        );
        assert_compressed(&r, "br", &what("q-values"));
        let r = get(istio, proto, "/json", Some("zstd, gzip"));
        assert_compressed(&r, "zstd", &what("tie"));
        // `*` takes the first filter of the chain (brotli) unless the client refused it.
        assert_compressed(&get(istio, proto, "/text", Some("*")), "br", &what("*"));
        let r = get(istio, proto, "/text", Some("br;q=0, *"));
        assert_compressed(&r, "zstd", &what("br refused, *"));
        // A chunked upstream body (no length) is compressed chunk by chunk.
        let r = get(istio, proto, "/chunked", Some("gzip"));
        assert_compressed(&r, "gzip", &what("chunked"));
        // An h2 upstream's trailers come after the encoder's last bytes (h2c clients see
        // them; HTTP/1.1 responses drop them, as Envoy's codec does by default).
        let r = get(istio, proto, "/trailers", Some("br"));
        assert_compressed(&r, "br", &what("trailers"));
        if proto == Protocol::H2c {
            assert_eq!(r.trailer("x-trailer").as_deref(), Some("done"));
        }
        // identity, nothing acceptable, no header: not compressed, but Vary says
        // another client could get it compressed.
        assert_plain(
            &get(istio, proto, "/text", Some("identity")),
            true,
            &what("identity"),
        );
        assert_plain(
            &get(istio, proto, "/text", Some("deflate")),
            true,
            &what("deflate"),
        );
        let r = get(istio, proto, "/text", None);
        assert_plain(&r, true, &what("no accept-encoding"));
        assert_eq!(r.body, text_body());
        assert_eq!(
            r.header("content-length"),
            Some(text_body().len().to_string())
        );
    }
}

#[test]
fn responses_that_do_not_qualify_pass_unchanged() {
    let p = start();
    let istio = p.listener("istio").unwrap();
    for proto in [Protocol::Http1, Protocol::H2c] {
        let what = |w: &str| format!("{w} ({proto})");
        let r = get(istio, proto, "/small", Some("gzip"));
        assert_plain(&r, false, &what("below min_content_length"));
        assert_eq!(r.body, b"tiny body");
        let r = get(istio, proto, "/image", Some("gzip"));
        assert_plain(&r, false, &what("content type not listed"));
        // Already encoded upstream: passed through as the upstream encoded it.
        let r = get(istio, proto, "/encoded", Some("br"));
        assert_eq!(r.header("content-encoding").as_deref(), Some("gzip"));
        assert_eq!(r.body, text_body(), "{}", what("encoded"));
        let r = get(istio, proto, "/no-transform", Some("gzip"));
        assert_plain(&r, false, &what("no-transform"));
        // A strong etag goes with compression; a weak one stays.
        let r = get(istio, proto, "/etag", Some("gzip"));
        assert_compressed(&r, "gzip", &what("etag"));
        assert_eq!(r.header("etag"), None);
        let r = get(istio, proto, "/weak-etag", Some("gzip"));
        assert_eq!(r.header("etag").as_deref(), Some("W/\"abc123\""));
        // An upstream vary keeps its value, Accept-Encoding added.
        let r = get(istio, proto, "/vary", Some("gzip"));
        assert_eq!(r.header("vary").as_deref(), Some("Origin, Accept-Encoding"));
        assert_eq!(decoded(&r), text_body());
    }
}

#[test]
fn single_gzip_filter_per_route_disabled_and_accept_encoding_removed() {
    let p = start();
    let gzip = p.listener("gzip").unwrap();
    for proto in [Protocol::Http1, Protocol::H2c] {
        let what = |w: &str| format!("{w} ({proto})");
        let r = get(gzip, proto, "/text", Some("br, gzip;q=0.8"));
        assert_compressed(&r, "gzip", &what("gzip only"));
        // remove_accept_encoding_header: the upstream never saw the header.
        assert_eq!(r.header("x-seen-accept-encoding").as_deref(), Some("-"));
        let r = get(gzip, proto, "/off", Some("gzip"));
        assert_plain(&r, false, &what("per-route disabled"));
        assert_eq!(r.body, text_body());
        // Disabled on the route, the filter leaves accept-encoding alone.
        assert_eq!(r.header("x-seen-accept-encoding").as_deref(), Some("gzip"));
        // courier's own replies go through the filter as Envoy's local replies do.
        let r = get(gzip, proto, "/local", Some("gzip"));
        assert_eq!(r.header("content-encoding").as_deref(), Some("gzip"));
        assert_eq!(
            decoded(&r),
            b"a direct response long enough to be compressed by the filter"
        );
    }
}

#[test]
fn request_bodies_are_compressed_on_their_way_upstream() {
    let p = start();
    let gzip = p.listener("gzip").unwrap();
    let istio = p.listener("istio").unwrap();
    for proto in [Protocol::Http1, Protocol::H2c] {
        let r = post(gzip, proto, "/echo", &text_body());
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-seen-content-encoding").as_deref(), Some("gzip"));
        assert_eq!(
            decode_as("gzip", &r.body).as_deref(),
            Some(&text_body()[..]),
            "{proto}"
        );
        // Too short for the direction's minimum: sent as it is.
        let r = post(gzip, proto, "/echo", b"short");
        assert_eq!(r.header("x-seen-content-encoding").as_deref(), Some("-"));
        assert_eq!(r.body, b"short");
        // Without request_direction_config, request bodies pass unchanged.
        let r = post(istio, proto, "/echo", &text_body());
        assert_eq!(r.header("x-seen-content-encoding").as_deref(), Some("-"));
        assert_eq!(r.body, text_body());
    }
}

#[test]
fn counters_have_envoys_names() {
    let p = start();
    let gzip = p.listener("gzip").unwrap();
    get(gzip, Protocol::Http1, "/text", Some("gzip"));
    get(gzip, Protocol::Http1, "/small", Some("gzip"));
    get(gzip, Protocol::Http1, "/text", None);
    post(gzip, Protocol::Http1, "/echo", &text_body());
    let stats = courier_tests::client::get(&p.admin, "/stats").unwrap();
    let stats = String::from_utf8_lossy(&stats.body).into_owned();
    let value = |name: &str| {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {name} in\n{stats}"))
    };
    let p = "http.gzip.compressor.text_gzip.gzip.";
    assert_eq!(value(&format!("{p}response.compressed")), "1");
    // The echo's octet-stream answer is not compressed either.
    assert_eq!(value(&format!("{p}response.not_compressed")), "3");
    assert_eq!(value(&format!("{p}request.compressed")), "1");
    assert_eq!(value(&format!("{p}request.not_compressed")), "3");
    assert_eq!(
        value(&format!("{p}request.total_uncompressed_bytes")),
        text_body().len().to_string()
    );
    assert_eq!(value(&format!("{p}response.content_length_too_small")), "1");
    // The POST sent none either (Envoy counts before it looks at the content type).
    assert_eq!(value(&format!("{p}no_accept_header")), "2");
    assert_eq!(value(&format!("{p}header_compressor_used")), "1");
    assert_eq!(
        value(&format!("{p}response.total_uncompressed_bytes")),
        text_body().len().to_string()
    );
}
