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
        weaken_etag_on_compress: false,
        remove_accept_encoding_header: false,
        uncompressible_response_codes: Vec::new(),
        response_direction_set: true,
        choose_first,
        request: None,
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

mod body_path {
    use super::*;
    use crate::chain::{ChainEntry, FilterChain, ResponseHead};
    use crate::compressor::CompressorFilter;
    use crate::test_support::{head, plain_conn, state};
    use bytes::Bytes;
    use http::{HeaderMap, StatusCode};
    use std::io::Read;

    fn chain(filters: Vec<Arc<Compressor>>) -> FilterChain {
        FilterChain::new(
            filters
                .into_iter()
                .map(|c| ChainEntry {
                    name: format!("envoy.filters.http.compressor.{}", c.library.stats_prefix()),
                    disabled: false,
                    filter: Box::new(CompressorFilter::new(c)),
                })
                .collect(),
        )
    }

    fn response_headers(ct: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("content-type", ct.parse().unwrap());
        h.insert("content-length", "5000".parse().unwrap());
        h
    }

    #[test]
    fn chunks_and_trailers_flow_through_the_winner_only() {
        let chain = chain(istio());
        assert!(chain.has_body_filters());
        let conn = plain_conn();
        let mut req = state(
            &conn,
            head("GET", "/", &[("accept-encoding", "gzip;q=0.9, br;q=0.1")]),
        );
        let verdict = futures_lite(chain.decode_headers(&mut req, |_| None));
        assert!(matches!(verdict, crate::chain::Verdict::Continue));
        let mut headers = response_headers("text/plain; charset=utf-8");
        let mut h = ResponseHead {
            status: StatusCode::OK,
            headers: &mut headers,
            end_stream: false,
            local_body: None,
            local: false,
            replacement: None,
        };
        let mut encoders = chain.encode_response(&mut req, &mut h);
        assert!(!encoders.is_empty());
        assert_eq!(headers.get("content-encoding").unwrap(), "gzip");
        assert_eq!(headers.get("vary").unwrap(), "Accept-Encoding");
        assert!(headers.get("content-length").is_none());
        let mut wire = Vec::new();
        let mut plain = Vec::new();
        for i in 0..50 {
            let chunk = Bytes::from(format!("chunk {i} of a streamed body\n"));
            plain.extend_from_slice(&chunk);
            let out = encoders.data(chunk, false).unwrap();
            // Each chunk is flushed: what arrived so far decodes.
            assert!(!out.is_empty());
            wire.extend_from_slice(&out);
        }
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        wire.extend_from_slice(&encoders.trailers(&mut trailers).unwrap());
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&wire[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, plain);
    }

    #[test]
    fn headers_only_responses_and_chains_without_body_filters_get_no_encoder() {
        let chain = chain(istio());
        let conn = plain_conn();
        let mut req = state(&conn, head("HEAD", "/", &[("accept-encoding", "gzip")]));
        futures_lite(chain.decode_headers(&mut req, |_| None));
        let mut headers = response_headers("text/plain");
        let mut h = ResponseHead {
            status: StatusCode::OK,
            headers: &mut headers,
            end_stream: true,
            local_body: None,
            local: false,
            replacement: None,
        };
        assert!(chain.encode_response(&mut req, &mut h).is_empty());
        // Compressible, so a cache must still vary on it; the length stays.
        assert_eq!(headers.get("vary").unwrap(), "Accept-Encoding");
        assert_eq!(headers.get("content-length").unwrap(), "5000");
        assert!(!FilterChain::default().has_body_filters());
    }

    /// Drives a future that never waits (the compressor's decode path is synchronous).
    fn futures_lite<F: std::future::Future>(f: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(f)
    }
}

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a client sends as `accept-encoding` and an upstream as `content-type`,
        /// negotiation answers (it runs on every compressible response).
        #[test]
        fn any_accept_encoding(accept in "[ -~]{0,80}", ct in "[ -~]{0,30}") {
            let d = choose(&istio(), &accept, &ct);
            prop_assert!(!d.encoding.is_empty());
        }
    }
}
