use super::test_pem::{CERT, KEY};
use super::*;
use crate::listener::test_util::{chain, errors, load};
use crate::path::Path;
use serde_json::{Value, json};

const TS: &str = "static_resources.listeners[0].filter_chains[0].transport_socket";

fn downstream_socket(ctx: Value) -> Value {
    json!({"transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": {
        "@type": DOWNSTREAM_TLS, "common_tls_context": ctx}}})
}

fn cert() -> Value {
    json!({"certificate_chain": {"inline_string": CERT}, "private_key": {"inline_string": KEY}})
}

fn loaded(v: &Value) -> DownstreamTls {
    let b = load(v).unwrap_or_else(|e| panic!("{e}"));
    b.listeners[0].filter_chains[0]
        .tls
        .as_deref()
        .cloned()
        .unwrap_or_else(|| panic!("no TLS"))
}

#[test]
fn downstream_inline_certificate_and_defaults() {
    let t = loaded(&chain(downstream_socket(json!({
        "tls_certificates": [cert()],
        "alpn_protocols": ["h2,http/1.1"],
    }))));
    assert_eq!(t.certificates[0].certificate_chain.len(), 1);
    assert_eq!(t.certificates[0].certificate_chain[0].first(), Some(&0x30));
    assert!(matches!(
        *t.certificates[0].private_key,
        PrivateKeyDer::Pkcs8(_)
    ));
    assert_eq!(t.common.alpn_protocols, ["h2", "http/1.1"]);
    assert_eq!(t.common.min_version, TlsVersion::Tls12);
    assert_eq!(t.common.max_version, TlsVersion::Tls13);
    assert!(t.common.validation.is_none());
    assert!(!t.require_client_certificate);
    assert!(
        t.stateless_resumption && t.stateful_resumption,
        "Envoy resumes by default"
    );
}

#[test]
fn session_resumption_switches() {
    let mut v = chain(downstream_socket(json!({"tls_certificates": [cert()]})));
    let tc = &mut v["static_resources"]["listeners"][0]["filter_chains"][0]["transport_socket"]["typed_config"];
    tc["disable_stateless_session_resumption"] = json!(true);
    tc["disable_stateful_session_resumption"] = json!(true);
    let t = loaded(&v);
    assert!(!t.stateless_resumption && !t.stateful_resumption);
    let tc = &mut v["static_resources"]["listeners"][0]["filter_chains"][0]["transport_socket"]["typed_config"];
    tc["disable_stateless_session_resumption"] = json!(false);
    let t = loaded(&v);
    assert!(t.stateless_resumption && !t.stateful_resumption);
    // Ticket keys of one's own stay refused: rustls makes and rotates its own.
    let tc = &mut v["static_resources"]["listeners"][0]["filter_chains"][0]["transport_socket"]["typed_config"];
    tc.as_object_mut()
        .unwrap()
        .remove("disable_stateless_session_resumption");
    tc["session_timeout"] = json!("60s");
    assert_eq!(
        errors(&v),
        [format!(
            "{TS}.typed_config.session_timeout: session_timeout is not supported"
        )]
    );
}

#[test]
fn downstream_client_validation() {
    let mut v = chain(downstream_socket(json!({
        "tls_certificates": [cert()],
        "validation_context": {
            "trusted_ca": {"inline_string": CERT},
            "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": "courier.test"}}],
            "match_subject_alt_names": [{"suffix": ".test"}],
        },
        "tls_params": {"tls_minimum_protocol_version": "TLSv1_3"},
    })));
    v["static_resources"]["listeners"][0]["filter_chains"][0]["transport_socket"]["typed_config"]
        ["require_client_certificate"] = json!(true);
    let t = loaded(&v);
    assert!(t.require_client_certificate);
    let val = t.common.validation.as_ref().unwrap();
    assert_eq!(val.trusted_ca.len(), 1);
    assert_eq!(val.san_matchers.len(), 2);
    assert_eq!(val.san_matchers[0].san_type, SanType::Dns);
    assert!(val.san_matchers[0].matcher.matches("courier.test"));
    assert_eq!(val.san_matchers[1].san_type, SanType::Any);
    assert_eq!(t.common.min_version, TlsVersion::Tls13);
}

#[test]
fn downstream_errors() {
    let tc = format!("{TS}.typed_config.common_tls_context");
    assert_eq!(
        errors(&chain(downstream_socket(json!({})))),
        [format!(
            "{tc}.tls_certificates: a downstream TLS context needs a certificate"
        )]
    );
    assert_eq!(
        errors(&chain(downstream_socket(json!({"tls_certificates": [
            {"certificate_chain": {"inline_string": "garbage"}, "private_key": {"inline_string": CERT}}
        ]})))),
        [
            format!(
                "{tc}.tls_certificates[0].certificate_chain.inline_string: no PEM certificate (BEGIN CERTIFICATE) found in the inline value"
            ),
            format!(
                "{tc}.tls_certificates[0].private_key.inline_string: no unencrypted PEM private key (BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY) found in the inline value"
            ),
        ]
    );
    assert_eq!(
        errors(&chain(downstream_socket(json!({"tls_certificates": [
            {"certificate_chain": {"filename": "/nonexistent/c.pem"}}
        ]})))),
        [
            format!(
                "{tc}.tls_certificates[0].certificate_chain.filename: cannot read \"/nonexistent/c.pem\": No such file or directory (os error 2)"
            ),
            format!("{tc}.tls_certificates[0].private_key: a data source is required"),
        ]
    );
    assert_eq!(
        errors(&chain(downstream_socket(json!({
            "tls_certificates": [cert(), cert()],
            "validation_context": {"match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": "a"}}]},
            "tls_params": {"tls_minimum_protocol_version": "TLSv1_1", "cipher_suites": ["AES128-SHA"]},
            "tls_certificate_sds_secret_configs": [{"name": "s"}],
        })))),
        [
            format!("{tc}.tls_params.cipher_suites: cipher_suites is not supported"),
            // Several certificates are served; a named one must exist.
            format!("{tc}.tls_certificate_sds_secret_configs[0].name: Unknown static secret: s"),
            format!(
                "{tc}.validation_context: SAN-based verification of peer certificates without trusted CA is insecure and not allowed"
            ),
            format!(
                "{tc}.tls_params.tls_minimum_protocol_version: TLSv1_1 (rustls implements TLS 1.2 and 1.3) is not supported"
            ),
        ]
    );
}

#[test]
fn transport_socket_kinds() {
    let raw = chain(
        json!({"transport_socket": {"name": "envoy.transport_sockets.raw_buffer", "typed_config": {
        "@type": RAW_BUFFER}}}),
    );
    let b = load(&raw).unwrap();
    assert!(b.listeners[0].filter_chains[0].tls.is_none());
    let alts = chain(
        json!({"transport_socket": {"name": "envoy.transport_sockets.alts", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.alts.v3.Alts",
        "handshaker_service": "x"}}}),
    );
    assert_eq!(
        errors(&alts),
        [format!(
            "{TS}: transport socket envoy.transport_sockets.alts is not supported"
        )]
    );
    let wrong = chain(
        json!({"transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": {
        "@type": UPSTREAM_TLS}}}),
    );
    assert_eq!(
        errors(&wrong),
        [format!(
            "{TS}.typed_config: a listener needs a DownstreamTlsContext, found {UPSTREAM_TLS}"
        )]
    );
}

fn upstream_of(v: Value) -> (Option<UpstreamTls>, Vec<String>) {
    use envoy_types::pb::envoy::config::core::v3::TransportSocket;
    let json = json!({"name": "envoy.transport_sockets.tls", "typed_config": v});
    let proto =
        crate::load::dynamic_from_json(json, "envoy.config.core.v3.TransportSocket").unwrap();
    let mut ctx = Ctx::new();
    let root = Path::ROOT;
    let p = root.field("ts");
    crate::support::check(&proto, &p, &mut ctx);
    let ts: TransportSocket = crate::load::typed_from_dynamic(&proto).unwrap();
    let out = upstream(&ts, &p, &mut ctx);
    let errs = match ctx.finish(()) {
        Ok(()) => Vec::new(),
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
    };
    (out, errs)
}

#[test]
fn upstream_contexts() {
    let (t, e) = upstream_of(json!({"@type": UPSTREAM_TLS, "sni": "www.example.com"}));
    assert!(e.is_empty(), "{e:?}");
    let t = t.unwrap();
    assert_eq!(t.sni.as_deref(), Some("www.example.com"));
    assert_eq!(t.max_session_keys, 1);
    assert!(t.client_certificate.is_none() && t.common.validation.is_none());
    assert_eq!(t.common.max_version, TlsVersion::Tls12);

    let (t, e) = upstream_of(json!({"@type": UPSTREAM_TLS, "max_session_keys": 0,
        "common_tls_context": {"tls_certificates": [cert()], "validation_context": {"trusted_ca": {"inline_string": CERT}}}}));
    assert!(e.is_empty(), "{e:?}");
    let t = t.unwrap();
    assert_eq!(t.max_session_keys, 0);
    assert!(t.client_certificate.is_some() && t.common.validation.is_some());

    let (_, e) = upstream_of(
        json!({"@type": UPSTREAM_TLS, "allow_renegotiation": true, "sni": "a b",
        "common_tls_context": {"tls_certificates": [cert(), cert()]}}),
    );
    assert_eq!(
        e,
        [
            "ts.typed_config.allow_renegotiation: allow_renegotiation is not supported",
            "ts.typed_config.common_tls_context.tls_certificates[1]: Multiple TLS certificates are not supported for client contexts",
            "ts.typed_config.sni: \"a b\" is not a DNS name or IP address",
        ]
    );
}

/// A private key that is not the certificate's is refused at its path, as
/// Envoy refuses it (`KEY_VALUES_MISMATCH`); the certificate's own loads.
#[test]
fn a_private_key_of_another_certificate_is_refused() {
    let other = rcgen::KeyPair::generate().unwrap();
    let mismatched = json!({
        "certificate_chain": {"inline_string": CERT},
        "private_key": {"inline_string": other.serialize_pem()},
    });
    let e = errors(&chain(downstream_socket(
        json!({"tls_certificates": [mismatched]}),
    )));
    assert_eq!(
        e,
        [format!(
            "{TS}.typed_config.common_tls_context.tls_certificates[0].private_key: does not match the certificate's public key (KEY_VALUES_MISMATCH)"
        )]
    );
    loaded(&chain(downstream_socket(
        json!({"tls_certificates": [cert()]}),
    )));
}

#[test]
fn a_static_certificate_without_its_key_fails_only_where_used() {
    let with_secret = |ctx: Value| {
        let mut b = chain(downstream_socket(ctx));
        b["static_resources"]["secrets"] = json!([
            {"name": "nokey", "tls_certificate": {"certificate_chain": {"inline_string": CERT}}},
            {"name": "full", "tls_certificate": {"certificate_chain": {"inline_string": CERT}, "private_key": {"inline_string": KEY}}},
        ]);
        b
    };
    // Unused (Envoy Gateway's jsonpatch cases): loads, as in Envoy.
    assert!(
        load(&with_secret(
            json!({"tls_certificate_sds_secret_configs": [{"name": "full"}]})
        ))
        .is_ok()
    );
    let tc = format!("{TS}.typed_config.common_tls_context");
    assert_eq!(
        errors(&with_secret(
            json!({"tls_certificate_sds_secret_configs": [{"name": "nokey"}]})
        )),
        [format!(
            "{tc}.tls_certificate_sds_secret_configs[0]: Failed to load incomplete private key from path: "
        )]
    );
}
