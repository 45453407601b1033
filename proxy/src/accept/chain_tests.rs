//! Chain selection order, in process, on listeners loaded from YAML.

use super::{ConnectionFacts, select};
use crate::codec::{Codec, codec};
use courier_config::listener::Listener;
use courier_config::listener::hcm::CodecType;

/// A filter chain whose direct response names it; `m` is its `filter_chain_match`.
fn chain(m: &str) -> String {
    format!(
        r#"
    - filter_chain_match: {m}
      filters:
      - name: hcm
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: s
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                direct_response: {{ status: 200 }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"#
    )
}

fn listener(matches: &[&str], default: bool) -> Listener {
    let chains: String = matches.iter().map(|m| chain(m)).collect();
    let default = if default {
        chain("{}").replacen(
            "    - filter_chain_match: {}\n      filters:",
            "    default_filter_chain:\n      filters:",
            1,
        )
    } else {
        String::new()
    };
    let yaml = format!(
        r#"
static_resources:
  listeners:
  - name: l
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }}
    filter_chains:{chains}
{default}
"#
    );
    let b = courier_config::bootstrap_from_str(&yaml, courier_config::load::Format::Yaml)
        .unwrap_or_else(|e| panic!("{e:?}\n{yaml}"));
    b.listeners[0].as_ref().clone()
}

fn tls(sni: &str) -> ConnectionFacts<'_> {
    ConnectionFacts {
        tls: true,
        server_name: Some(sni),
        alpn: &[],
    }
}

fn alpn(alpn: &[Vec<u8>]) -> ConnectionFacts<'_> {
    ConnectionFacts {
        tls: true,
        server_name: None,
        alpn,
    }
}

#[test]
fn exact_beats_wildcard_and_longest_wildcard_wins() {
    let l = listener(
        &[
            "{ server_names: [\"*.example.com\"] }",
            "{ server_names: [\"a.example.com\"] }",
            "{ server_names: [\"*.b.example.com\"] }",
            "{ server_names: [\"*.com\"] }",
            "{}",
        ],
        false,
    );
    assert_eq!(select(&l, &tls("a.example.com")), Some(1));
    assert_eq!(select(&l, &tls("x.example.com")), Some(0));
    // The wildcard does not cover the bare suffix: "*.com" does.
    assert_eq!(select(&l, &tls("example.com")), Some(3));
    assert_eq!(select(&l, &tls("x.b.example.com")), Some(2));
    assert_eq!(select(&l, &tls("x.y.b.example.com")), Some(2));
    assert_eq!(select(&l, &tls("b.example.com")), Some(0));
    assert_eq!(select(&l, &tls("a.example.org")), Some(4));
    // No SNI (or plaintext): only chains without server_names.
    assert_eq!(select(&l, &ConnectionFacts::default()), Some(4));
}

#[test]
fn default_chain_when_nothing_matches_and_none_without_it() {
    let matches = ["{ server_names: [\"a.example.com\"] }"];
    let with = listener(&matches, true);
    assert_eq!(select(&with, &tls("a.example.com")), Some(0));
    assert_eq!(select(&with, &tls("b.example.com")), Some(1));
    assert_eq!(select(&with, &ConnectionFacts::default()), Some(1));
    let without = listener(&matches, false);
    assert_eq!(select(&without, &tls("b.example.com")), None);
}

#[test]
fn transport_protocol_then_unconstrained_chains() {
    let l = listener(
        &[
            "{ transport_protocol: tls }",
            "{ transport_protocol: raw_buffer }",
        ],
        false,
    );
    assert_eq!(select(&l, &tls("x")), Some(0));
    assert_eq!(select(&l, &ConnectionFacts::default()), Some(1));
    let tls_only = listener(&["{ transport_protocol: tls }"], false);
    assert_eq!(select(&tls_only, &ConnectionFacts::default()), None);
}

#[test]
fn a_more_specific_step_never_backtracks() {
    // The exact name wins step 1; its transport protocol then fails, and the
    // wildcard chain is not tried (Envoy's rule): the default chain takes it.
    let l = listener(
        &[
            "{ server_names: [\"a.example.com\"], transport_protocol: raw_buffer }",
            "{ server_names: [\"*.example.com\"] }",
        ],
        true,
    );
    assert_eq!(select(&l, &tls("a.example.com")), Some(2));
    assert_eq!(select(&l, &tls("b.example.com")), Some(1));
}

#[test]
fn alpn_follows_the_client_order_then_chains_without_alpn() {
    let l = listener(
        &[
            "{ application_protocols: [h2] }",
            "{ application_protocols: [\"http/1.1\"] }",
            "{ transport_protocol: tls }",
        ],
        false,
    );
    let h2 = [b"h2".to_vec()];
    // Step 2 prefers the chain naming tls; the ALPN chains do not constrain
    // the transport, so they are out before ALPN is looked at.
    assert_eq!(select(&l, &alpn(&h2)), Some(2));
    let l = listener(
        &[
            "{ application_protocols: [h2] }",
            "{ application_protocols: [\"http/1.1\"] }",
            "{}",
        ],
        false,
    );
    let both = [b"http/1.1".to_vec(), b"h2".to_vec()];
    assert_eq!(select(&l, &alpn(&both)), Some(1));
    let both_h2_first = [b"h2".to_vec(), b"http/1.1".to_vec()];
    assert_eq!(select(&l, &alpn(&both_h2_first)), Some(0));
    assert_eq!(select(&l, &alpn(&[b"spdy/3".to_vec()])), Some(2));
    assert_eq!(select(&l, &ConnectionFacts::default()), Some(2));
}

#[test]
fn codec_type_fixes_the_codec_and_auto_follows_alpn() {
    assert_eq!(codec(CodecType::Auto, Some(b"h2")), Codec::Http2);
    assert_eq!(codec(CodecType::Auto, Some(b"http/1.1")), Codec::Http1);
    assert_eq!(codec(CodecType::Auto, None), Codec::Auto);
    assert_eq!(codec(CodecType::Http1, Some(b"h2")), Codec::Http1);
    assert_eq!(codec(CodecType::Http2, None), Codec::Http2);
}
