use super::negotiate::{HeaderStat, choose};
use courier_config::filters::Compressor;
use courier_config::filters::compressor::{DEFAULT_CONTENT_TYPES, Library};
use std::sync::Arc;

fn filter(library: Library, types: &[&str], choose_first: bool) -> Arc<Compressor> {
    Arc::new(Compressor {
        library,
        library_name: "x".into(),
        enabled: true,
        min_content_length: 30,
        content_types: if types.is_empty() {
            DEFAULT_CONTENT_TYPES
                .iter()
                .map(|t| t.to_string())
                .collect()
        } else {
            types.iter().map(|t| t.to_string()).collect()
        },
        disable_on_etag_header: false,
        remove_accept_encoding_header: false,
        uncompressible_response_codes: Vec::new(),
        response_direction_set: true,
        choose_first,
    })
}

fn gzip() -> Library {
    Library::Gzip {
        level: 6,
        chunk_size: 4096,
    }
}
fn br() -> Library {
    Library::Brotli {
        quality: 3,
        window_bits: 18,
        input_block_bits: 24,
        mode: 0,
        disable_literal_context_modeling: false,
        chunk_size: 4096,
    }
}
fn zstd() -> Library {
    Library::Zstd {
        level: 3,
        checksum: false,
        strategy: 0,
        chunk_size: 4096,
    }
}

/// Istio's order: brotli, zstd, gzip.
fn istio() -> Vec<Arc<Compressor>> {
    vec![
        filter(br(), &[], false),
        filter(zstd(), &[], false),
        filter(gzip(), &[], false),
    ]
}

fn pick(chain: &[Arc<Compressor>], accept: &str, ct: &str) -> (String, HeaderStat) {
    let d = choose(chain, accept, ct);
    (d.encoding, d.stat)
}

#[test]
fn highest_q_wins_and_ties_go_to_the_first_listed() {
    let c = istio();
    assert_eq!(
        pick(&c, "gzip, br", "text/plain"),
        ("gzip".into(), HeaderStat::ValidCompressor)
    );
    assert_eq!(pick(&c, "gzip;q=0.5, br;q=0.8", "").0, "br");
    assert_eq!(pick(&c, "gzip;q=1, zstd;Q=1.0", "").0, "gzip");
    assert_eq!(
        pick(&c, "deflate", ""),
        ("identity".into(), HeaderStat::NotValid)
    );
}

#[test]
fn wildcard_takes_the_first_registered_not_refused() {
    let c = istio();
    assert_eq!(pick(&c, "*", ""), ("br".into(), HeaderStat::Wildcard));
    assert_eq!(
        pick(&c, "br;q=0, *", ""),
        ("zstd".into(), HeaderStat::Wildcard)
    );
    assert_eq!(
        pick(&c, "identity", ""),
        ("identity".into(), HeaderStat::Identity)
    );
    assert_eq!(
        pick(&c, "gzip;q=0", ""),
        ("identity".into(), HeaderStat::NotValid)
    );
    // An unreadable q-value drops its token.
    assert_eq!(pick(&c, "br;q=x, gzip;q=0.1", "").0, "gzip");
}

#[test]
fn a_filter_that_excludes_the_content_type_steps_aside() {
    let c = vec![
        filter(gzip(), &["text/html"], false),
        filter(br(), &["application/json"], false),
    ];
    assert_eq!(pick(&c, "gzip;q=1, br;q=0.5", "application/json").0, "br");
    assert_eq!(pick(&c, "gzip;q=1, br;q=0.5", "text/html").0, "gzip");
}

#[test]
fn choose_first_breaks_ties() {
    let c = vec![filter(gzip(), &[], false), filter(br(), &[], true)];
    assert_eq!(pick(&c, "gzip, br", "").0, "br");
}
