//! The compressor filter's config (`envoy.extensions.filters.http.compressor.v3.Compressor`),
//! its per-route config (`CompressorPerRoute`) and its libraries (gzip, brotli, zstd).
//!
//! Both directions. Refused at their paths: `content_type_matcher` and
//! `status_header_enabled` (left out of the support table), a `runtime_key` on an
//! `enabled` flag (courier has no runtime layer for it), the per-route
//! `compressor_library` override, and library options the Rust libraries cannot honour (gzip `memory_level`, a gzip
//! `window_bits` other than 15, gzip `compression_strategy`, a zstd `dictionary`).

use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig;
use envoy_types::pb::envoy::extensions::compression::brotli::compressor::v3 as brotli_pb;
use envoy_types::pb::envoy::extensions::compression::gzip::compressor::v3 as gzip_pb;
use envoy_types::pb::envoy::extensions::compression::zstd::compressor::v3 as zstd_pb;
use envoy_types::pb::envoy::extensions::filters::http::compressor::v3 as pb;

/// The content types compressed when a config lists none (Envoy's list).
pub const DEFAULT_CONTENT_TYPES: &[&str] = &[
    "text/html",
    "text/plain",
    "text/css",
    "application/javascript",
    "application/x-javascript",
    "text/javascript",
    "text/x-javascript",
    "text/ecmascript",
    "text/js",
    "text/jscript",
    "text/x-js",
    "application/ecmascript",
    "application/x-json",
    "application/xml",
    "application/json",
    "image/svg+xml",
    "text/xml",
    "application/xhtml+xml",
    "application/grpc-web",
    "application/grpc-web+proto",
];

/// Envoy's default `min_content_length` (a configured 0 also means this).
pub const DEFAULT_MIN_CONTENT_LENGTH: u32 = 30;

const GZIP: &str = "type.googleapis.com/envoy.extensions.compression.gzip.compressor.v3.Gzip";
const BROTLI: &str = "type.googleapis.com/envoy.extensions.compression.brotli.compressor.v3.Brotli";
const ZSTD: &str = "type.googleapis.com/envoy.extensions.compression.zstd.compressor.v3.Zstd";

/// A validated compressor filter.
#[derive(Debug, Clone)]
pub struct Compressor {
    /// The library and its options.
    pub library: Library,
    /// `compressor_library.name`: part of the stat names.
    pub library_name: String,
    /// Whether responses are compressed (`common_config.enabled.default_value`, default true).
    pub enabled: bool,
    /// Responses with a smaller `content-length` are left alone.
    pub min_content_length: u32,
    /// Lower-cased content types (without parameters) that are compressed.
    pub content_types: Vec<String>,
    /// Leave responses with an `etag` alone.
    pub disable_on_etag_header: bool,
    /// Compress responses with a strong `etag` and weaken it (`W/`) rather than remove
    /// it; overrides `disable_on_etag_header`.
    pub weaken_etag_on_compress: bool,
    /// Remove `accept-encoding` from the request before it goes upstream.
    pub remove_accept_encoding_header: bool,
    /// Status codes whose responses are never compressed.
    pub uncompressible_response_codes: Vec<u16>,
    /// `response_direction_config` was given: the direction's counters then live under
    /// `response.` (Envoy's naming).
    pub response_direction_set: bool,
    /// On equal q-values, this filter's encoding wins.
    pub choose_first: bool,
    /// `request_direction_config`: request bodies are compressed too.
    pub request: Option<RequestDirection>,
}

/// The request direction of a compressor filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestDirection {
    /// `common_config.enabled.default_value` (default true).
    pub enabled: bool,
    /// Requests with a smaller `content-length` are left alone.
    pub min_content_length: u32,
    /// Lower-cased content types (without parameters) that are compressed.
    pub content_types: Vec<String>,
}

/// A compression library with the options courier honours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Library {
    /// gzip (`content-encoding: gzip`).
    Gzip {
        /// zlib level 1..=9 (`DEFAULT_COMPRESSION`: 6).
        level: u32,
        /// Output chunk size.
        chunk_size: u32,
    },
    /// brotli (`content-encoding: br`).
    Brotli {
        /// 0..=11 (default 3).
        quality: u32,
        /// log2 of the window, 10..=24 (default 18).
        window_bits: u32,
        /// log2 of the input block, 16..=24 (default 24).
        input_block_bits: u32,
        /// `encoder_mode`: 0 default (generic), 1 generic, 2 text, 3 font.
        mode: i32,
        /// `disable_literal_context_modeling`.
        disable_literal_context_modeling: bool,
        /// Output chunk size.
        chunk_size: u32,
    },
    /// zstd (`content-encoding: zstd`).
    Zstd {
        /// The level (0: the library's default, 3).
        level: u32,
        /// `enable_checksum`.
        checksum: bool,
        /// `strategy` (0: the library's choice).
        strategy: i32,
        /// Output chunk size.
        chunk_size: u32,
    },
}

impl Library {
    /// The `content-encoding` token.
    pub fn encoding(&self) -> &'static str {
        match self {
            Library::Gzip { .. } => "gzip",
            Library::Brotli { .. } => "br",
            Library::Zstd { .. } => "zstd",
        }
    }

    /// The library's part of the stat names (`gzip`, `brotli`, `zstd`).
    pub fn stats_prefix(&self) -> &'static str {
        match self {
            Library::Gzip { .. } => "gzip",
            Library::Brotli { .. } => "brotli",
            Library::Zstd { .. } => "zstd",
        }
    }
}

/// A validated `CompressorPerRoute`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompressorPerRoute {
    /// `disabled` (false) or `overrides.response_direction_config` present (true); `None`:
    /// the filter's own setting.
    pub response_enabled: Option<bool>,
    /// `overrides.response_direction_config.remove_accept_encoding_header`.
    pub remove_accept_encoding_header: Option<bool>,
}

/// A `RuntimeFeatureFlag`'s value (`None` flag: `default`).
fn feature_flag(
    f: Option<&envoy_types::pb::envoy::config::core::v3::RuntimeFeatureFlag>,
    default: bool,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> bool {
    let Some(f) = f else { return default };
    match f.default_value {
        Some(v) => v.value,
        None => {
            ctx.error(&path.field("default_value"), "is required");
            default
        }
    }
}

/// Translates a `Compressor`.
pub fn translate(c: &pb::Compressor, path: &Path<'_>, ctx: &mut Ctx) -> Option<Compressor> {
    let before = ctx.error_count();
    let lib_path = path.field("compressor_library");
    let library = match c.compressor_library.as_ref() {
        Some(l) => library(l, &lib_path, ctx),
        None => {
            ctx.error(&lib_path, "is required");
            None
        }
    };
    // Envoy compresses request bodies only when the direction is configured (and its
    // `enabled` flag is on).
    let request = c.request_direction_config.as_ref().map(|r| {
        let common = r.common_config.clone().unwrap_or_default();
        let rpath = path.field("request_direction_config");
        let cpath = rpath.field("common_config");
        RequestDirection {
            enabled: feature_flag(common.enabled.as_ref(), true, &cpath.field("enabled"), ctx),
            min_content_length: match common.min_content_length.map(|v| v.value) {
                Some(n) if n > 0 => n,
                _ => DEFAULT_MIN_CONTENT_LENGTH,
            },
            content_types: content_types(&common.content_type),
        }
    });
    let set = c.response_direction_config.is_some();
    // Without `response_direction_config`, Envoy takes the deprecated top-level fields.
    let weaken = c
        .response_direction_config
        .as_ref()
        .is_some_and(|r| r.weaken_etag_on_compress);
    let (enabled, min_len, types, etag, remove, codes) = match &c.response_direction_config {
        Some(r) => {
            let rpath = path.field("response_direction_config");
            let cpath = rpath.field("common_config");
            let common = r.common_config.clone().unwrap_or_default();
            (
                feature_flag(common.enabled.as_ref(), true, &cpath.field("enabled"), ctx),
                common.min_content_length.map(|v| v.value),
                common.content_type,
                r.disable_on_etag_header,
                r.remove_accept_encoding_header,
                codes(&r.uncompressible_response_codes, &rpath, ctx),
            )
        }
        None => (
            feature_flag(
                c.runtime_enabled.as_ref(),
                true,
                &path.field("runtime_enabled"),
                ctx,
            ),
            c.content_length.map(|v| v.value),
            c.content_type.clone(),
            c.disable_on_etag_header,
            c.remove_accept_encoding_header,
            Vec::new(),
        ),
    };
    let content_types = content_types(&types);
    let library = library?;
    if ctx.error_count() > before {
        return None;
    }
    Some(Compressor {
        library,
        library_name: c
            .compressor_library
            .as_ref()
            .map(|l| l.name.clone())
            .unwrap_or_default(),
        enabled,
        min_content_length: match min_len {
            Some(n) if n > 0 => n,
            _ => DEFAULT_MIN_CONTENT_LENGTH,
        },
        content_types,
        disable_on_etag_header: etag,
        weaken_etag_on_compress: weaken,
        remove_accept_encoding_header: remove,
        uncompressible_response_codes: codes,
        response_direction_set: set,
        request,
        choose_first: c.choose_first,
    })
}

/// The content types a direction compresses: lower-cased, or Envoy's list when none.
fn content_types(types: &[String]) -> Vec<String> {
    if types.is_empty() {
        DEFAULT_CONTENT_TYPES
            .iter()
            .map(|t| t.to_string())
            .collect()
    } else {
        types.iter().map(|t| t.to_ascii_lowercase()).collect()
    }
}

/// `uncompressible_response_codes`: unique, in 200..600 (Envoy's validation).
fn codes(list: &[u32], path: &Path<'_>, ctx: &mut Ctx) -> Vec<u16> {
    let p = path.field("uncompressible_response_codes");
    let mut out = Vec::new();
    for (i, &c) in list.iter().enumerate() {
        match u16::try_from(c) {
            Ok(c) if (200..600).contains(&c) && !out.contains(&c) => out.push(c),
            _ => ctx.error(
                &p.index(i),
                format!("{c}: must be unique and in [200, 600)"),
            ),
        }
    }
    out
}

/// Translates `compressor_library`.
fn library(l: &TypedExtensionConfig, path: &Path<'_>, ctx: &mut Ctx) -> Option<Library> {
    let tp = path.field("typed_config");
    let Some(any) = l.typed_config.as_ref() else {
        ctx.error(&tp, "is required");
        return None;
    };
    let chunk = |v: Option<&envoy_types::pb::google::protobuf::UInt32Value>,
                 p: &Path<'_>,
                 ctx: &mut Ctx| {
        let n = crate::core::u32_or(v, 4096);
        if !(4096..=65536).contains(&n) {
            ctx.error(&p.field("chunk_size"), "must be in [4096, 65536]");
        }
        n
    };
    match any.type_url.as_str() {
        GZIP => {
            let g = crate::core::unpack::<gzip_pb::Gzip>(any, &tp, ctx)?;
            if let Some(m) = g.memory_level {
                // miniz_oxide (flate2's pure-Rust backend) has no memory level.
                ctx.error(
                    &tp.field("memory_level"),
                    format!("{}: not supported by courier's gzip library", m.value),
                );
            }
            if let Some(w) = g.window_bits
                && w.value != 15
            {
                ctx.error(
                    &tp.field("window_bits"),
                    format!(
                        "{}: courier's gzip library always uses a 32 KiB window (15)",
                        w.value
                    ),
                );
            }
            if g.compression_strategy != 0 {
                ctx.error(
                    &tp.field("compression_strategy"),
                    "only DEFAULT_STRATEGY is supported",
                );
            }
            let level = match g.compression_level {
                0 => 6,
                n @ 1..=9 => n as u32,
                n => {
                    ctx.error(&tp.field("compression_level"), format!("{n}: not a level"));
                    6
                }
            };
            Some(Library::Gzip {
                level,
                chunk_size: chunk(g.chunk_size.as_ref(), &tp, ctx),
            })
        }
        BROTLI => {
            let b = crate::core::unpack::<brotli_pb::Brotli>(any, &tp, ctx)?;
            let quality = crate::core::u32_or(b.quality.as_ref(), 3);
            if quality > 11 {
                ctx.error(&tp.field("quality"), "must be at most 11");
            }
            let window_bits = crate::core::u32_or(b.window_bits.as_ref(), 18);
            if !(10..=24).contains(&window_bits) {
                ctx.error(&tp.field("window_bits"), "must be in [10, 24]");
            }
            let input_block_bits = crate::core::u32_or(b.input_block_bits.as_ref(), 24);
            if !(16..=24).contains(&input_block_bits) {
                ctx.error(&tp.field("input_block_bits"), "must be in [16, 24]");
            }
            if !(0..=3).contains(&b.encoder_mode) {
                ctx.error(&tp.field("encoder_mode"), "not a mode");
            }
            Some(Library::Brotli {
                quality,
                window_bits,
                input_block_bits,
                mode: b.encoder_mode,
                disable_literal_context_modeling: b.disable_literal_context_modeling,
                chunk_size: chunk(b.chunk_size.as_ref(), &tp, ctx),
            })
        }
        ZSTD => {
            let z = crate::core::unpack::<zstd_pb::Zstd>(any, &tp, ctx)?;
            if z.dictionary.is_some() {
                ctx.error(
                    &tp.field("dictionary"),
                    "zstd dictionaries are not supported",
                );
            }
            if !(0..=9).contains(&z.strategy) {
                ctx.error(&tp.field("strategy"), "not a strategy");
            }
            let level = crate::core::u32_or(z.compression_level.as_ref(), 3);
            if level > 22 {
                ctx.error(&tp.field("compression_level"), "must be at most 22");
            }
            Some(Library::Zstd {
                level,
                checksum: z.enable_checksum,
                strategy: z.strategy,
                chunk_size: chunk(z.chunk_size.as_ref(), &tp, ctx),
            })
        }
        other => {
            ctx.unsupported(
                &tp,
                format!(
                    "compressor library {}",
                    other.rsplit_once('/').map_or(other, |(_, n)| n)
                ),
            );
            None
        }
    }
}

/// Translates a `CompressorPerRoute`.
pub fn per_route(
    c: &pb::CompressorPerRoute,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<CompressorPerRoute> {
    use pb::compressor_per_route::Override;
    match &c.r#override {
        Some(Override::Disabled(true)) => Some(CompressorPerRoute {
            response_enabled: Some(false),
            remove_accept_encoding_header: None,
        }),
        Some(Override::Disabled(false)) => {
            ctx.error(&path.field("disabled"), "must be true");
            None
        }
        Some(Override::Overrides(o)) => {
            if o.compressor_library.is_some() {
                ctx.error(
                    &path.field("overrides").field("compressor_library"),
                    "a per-route compressor library is not supported",
                );
                return None;
            }
            // An empty `response_direction_config` enables response compression, as its
            // presence in `Compressor` would (Envoy's rule).
            let r = o.response_direction_config.as_ref();
            Some(CompressorPerRoute {
                response_enabled: r.map(|_| true),
                remove_accept_encoding_header: r
                    .and_then(|r| r.remove_accept_encoding_header.map(|v| v.value)),
            })
        }
        None => {
            ctx.error(path, "one of disabled or overrides is required");
            None
        }
    }
}

#[cfg(test)]
#[path = "compressor_tests.rs"]
mod tests;
