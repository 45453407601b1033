use super::*;
use crate::filters::test_util::{errors, filter, per_route};
use crate::filters::{HttpFilterConfig, PerRouteFilterConfig};

fn compressor(body: &str) -> Result<Compressor, crate::ConfigError> {
    let yaml = format!(
        "name: gz\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.compressor.v3.Compressor\n{}",
        body.lines().map(|l| format!("  {l}\n")).collect::<String>()
    );
    filter(&yaml).map(|f| match f.config {
        HttpFilterConfig::Compressor(c) => *c,
        other => panic!("not a compressor: {other:?}"),
    })
}

const GZIP: &str = "compressor_library:\n  name: text\n  typed_config:\n    \"@type\": type.googleapis.com/envoy.extensions.compression.gzip.compressor.v3.Gzip\n";

#[test]
fn defaults_are_envoys() {
    let c = compressor(GZIP).unwrap();
    assert_eq!(
        c.library,
        Library::Gzip {
            level: 6,
            chunk_size: 4096
        }
    );
    assert_eq!(c.library_name, "text");
    assert!(c.enabled);
    assert_eq!(c.min_content_length, 30);
    assert_eq!(c.content_types.len(), DEFAULT_CONTENT_TYPES.len());
    assert!(!c.response_direction_set);
}

#[test]
fn response_direction_config_is_read() {
    let c = compressor(&format!(
        "{GZIP}response_direction_config:\n  common_config:\n    min_content_length: 100\n    content_type: [Text/Plain]\n    enabled: {{ default_value: false, runtime_key: k }}\n  disable_on_etag_header: true\n  uncompressible_response_codes: [206]\n"
    ));
    // `runtime_key` is refused: there is no runtime layer behind it.
    let e = errors(c);
    assert!(e.iter().any(|e| e.contains("runtime_key")), "{e:?}");
    let c = compressor(&format!(
        "{GZIP}response_direction_config:\n  common_config:\n    min_content_length: 100\n    content_type: [Text/Plain]\n    enabled: {{ default_value: false }}\n  disable_on_etag_header: true\n  uncompressible_response_codes: [206]\n"
    ))
    .unwrap();
    assert!(!c.enabled);
    assert_eq!(c.min_content_length, 100);
    assert_eq!(c.content_types, vec!["text/plain".to_string()]);
    assert!(c.disable_on_etag_header && c.response_direction_set);
    assert_eq!(c.uncompressible_response_codes, vec![206]);
}

#[test]
fn options_courier_cannot_honour_are_refused_at_their_paths() {
    let e = errors(compressor(
        "compressor_library:\n  name: x\n  typed_config:\n    \"@type\": type.googleapis.com/envoy.extensions.compression.gzip.compressor.v3.Gzip\n    memory_level: 9\n    window_bits: 12\n    compression_strategy: RLE\n",
    ));
    for field in ["memory_level", "window_bits", "compression_strategy"] {
        assert!(
            e.iter().any(|e| e.starts_with(&format!(
                "typed_config.compressor_library.typed_config.{field}"
            ))),
            "{field}: {e:?}"
        );
    }
    let c = compressor(&format!(
        "{GZIP}request_direction_config:\n  common_config:\n    min_content_length: 10\n"
    ))
    .unwrap();
    let r = c.request.unwrap();
    assert!(r.enabled);
    assert_eq!(r.min_content_length, 10);
    assert_eq!(r.content_types.len(), DEFAULT_CONTENT_TYPES.len());
    let e = errors(compressor(&format!(
        "{GZIP}response_direction_config:\n  status_header_enabled: true\n"
    )));
    assert!(
        e.iter().any(|e| e.contains("status_header_enabled")),
        "{e:?}"
    );
}

#[test]
fn brotli_and_zstd_options() {
    let c = compressor(
        "compressor_library:\n  name: b\n  typed_config:\n    \"@type\": type.googleapis.com/envoy.extensions.compression.brotli.compressor.v3.Brotli\n    quality: 5\n    window_bits: 20\n    encoder_mode: TEXT\n",
    )
    .unwrap();
    assert!(matches!(
        c.library,
        Library::Brotli {
            quality: 5,
            window_bits: 20,
            input_block_bits: 24,
            mode: 2,
            ..
        }
    ));
    let c = compressor(
        "compressor_library:\n  name: z\n  typed_config:\n    \"@type\": type.googleapis.com/envoy.extensions.compression.zstd.compressor.v3.Zstd\n    compression_level: 7\n    strategy: LAZY\n    enable_checksum: true\n",
    )
    .unwrap();
    assert!(matches!(
        c.library,
        Library::Zstd {
            level: 7,
            strategy: 4,
            checksum: true,
            ..
        }
    ));
}

#[test]
fn per_route_disabled_and_overrides() {
    let r = per_route(
        "gz",
        "\"@type\": type.googleapis.com/envoy.extensions.filters.http.compressor.v3.CompressorPerRoute\ndisabled: true\n",
    )
    .unwrap();
    assert!(matches!(
        r.config,
        Some(PerRouteFilterConfig::Compressor(CompressorPerRoute {
            response_enabled: Some(false),
            ..
        }))
    ));
    let r = per_route(
        "gz",
        "\"@type\": type.googleapis.com/envoy.extensions.filters.http.compressor.v3.CompressorPerRoute\noverrides:\n  response_direction_config:\n    remove_accept_encoding_header: true\n",
    )
    .unwrap();
    assert!(matches!(
        r.config,
        Some(PerRouteFilterConfig::Compressor(CompressorPerRoute {
            response_enabled: Some(true),
            remove_accept_encoding_header: Some(true)
        }))
    ));
}
