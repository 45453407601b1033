//! SDS references in TLS contexts: what is accepted, and the refusals with
//! their paths (Envoy 1.40's `--mode validate` verdicts noted per case).

use super::test_pem::{CERT, KEY};
use super::*;
use crate::listener::test_util::{chain, errors, load, merge};
use serde_json::{Value, json};

const TC: &str = "static_resources.listeners[0].filter_chains[0].transport_socket.typed_config.common_tls_context";

/// A listener TLS context `ctx`, in a bootstrap with a node (SDS needs one)
/// and an `sds` cluster for gRPC sources.
fn with_node(ctx: Value) -> Value {
    let mut v = chain(
        json!({"transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": {
        "@type": DOWNSTREAM_TLS, "common_tls_context": ctx}}}),
    );
    merge(
        &mut v,
        json!({"node": {"id": "n", "cluster": "c"}, "static_resources": {"clusters": [{
            "name": "sds", "type": "STATIC", "connect_timeout": "1s",
            "load_assignment": {"cluster_name": "sds", "endpoints": [{"lb_endpoints": [{"endpoint": {
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": 1}}}}]}]}}]}}),
    );
    v
}

fn grpc(api_type: &str) -> Value {
    json!({"api_config_source": {"api_type": api_type, "transport_api_version": "V3",
        "grpc_services": [{"envoy_grpc": {"cluster_name": "sds"}}]}, "resource_api_version": "V3"})
}

/// An SDS file holding `secrets`.
fn sds_file(secrets: Value) -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new().suffix(".json").tempfile().unwrap();
    std::fs::write(f.path(), json!({"resources": secrets}).to_string()).unwrap();
    f
}

fn cert_secret(name: &str) -> Value {
    json!({"@type": sds::SECRET_TYPE_URL, "name": name, "tls_certificate": {
        "certificate_chain": {"inline_string": CERT}, "private_key": {"inline_string": KEY}}})
}

fn tls_of(v: &Value) -> DownstreamTls {
    let b = load(v).unwrap_or_else(|e| panic!("{e}"));
    b.listeners[0].filter_chains[0]
        .tls
        .as_deref()
        .cloned()
        .unwrap()
}

#[test]
fn grpc_certificate_and_validation_context() {
    let t = tls_of(&with_node(json!({
        "tls_certificate_sds_secret_configs": [{"name": "default", "sds_config": grpc("GRPC")}],
        "validation_context_sds_secret_config": {"name": "ROOTCA", "sds_config": grpc("GRPC")},
    })));
    assert!(t.certificates.is_empty());
    let sds = t.common.sds.as_deref().unwrap();
    assert_eq!(sds.certificates.len(), 1);
    assert_eq!(sds.certificates[0].1.name, "default");
    assert_eq!(sds.validation.as_ref().unwrap().secret.name, "ROOTCA");
    assert!(matches!(
        sds.certificates[0].1.source.kind,
        crate::config_source::ConfigSourceKind::Api(_)
    ));
    // DELTA_GRPC too (Envoy accepts it; the xDS client speaks it).
    assert!(load(&with_node(json!({
        "tls_certificate_sds_secret_configs": [{"name": "default", "sds_config": grpc("DELTA_GRPC")}],
    })))
    .is_ok());
}

#[test]
fn combined_validation_context_keeps_its_default() {
    let t = tls_of(&with_node(json!({
        "tls_certificates": [{"certificate_chain": {"inline_string": CERT}, "private_key": {"inline_string": KEY}}],
        "combined_validation_context": {
            "default_validation_context": {"match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": "example.com"}}]},
            "validation_context_sds_secret_config": {"name": "ROOTCA", "sds_config": grpc("GRPC")},
        },
    })));
    let v = t.common.sds.as_deref().unwrap().validation.clone().unwrap();
    let default = v.default.unwrap();
    assert_eq!(default.san_matchers.len(), 1);
    // SAN matchers without a CA are fine until merged: the secret brings the CA.
    let secret = sds::ValidationFields {
        trusted_ca: Some(vec![CertificateDer::from(vec![0x30])]),
        san_matchers: Vec::new(),
        allow_expired_certificate: true,
        accept_untrusted: false,
    };
    let merged = sds::resolve_validation(Some(&default), &secret)
        .unwrap()
        .unwrap();
    assert_eq!(merged.san_matchers.len(), 1);
    assert_eq!(merged.trusted_ca.len(), 1);
    assert!(merged.allow_expired_certificate, "the secret's flag holds");
    // Without one, the merged context is refused with Envoy's reason.
    let e = sds::resolve_validation(Some(&default), &sds::ValidationFields::default());
    assert!(e.unwrap_err().contains("without trusted CA"));
}

#[test]
fn file_sources_are_read_up_front() {
    let f = sds_file(json!([cert_secret("server")]));
    let path = f.path().display().to_string();
    let t = tls_of(&with_node(json!({
        "tls_certificate_sds_secret_configs": [{"name": "server", "sds_config": {"path_config_source": {"path": path}}}],
    })));
    assert_eq!(t.common.sds.as_deref().unwrap().certificates.len(), 1);
    // The deprecated `path` is a file source too (Envoy 1.40 accepts it).
    assert!(load(&with_node(json!({
        "tls_certificate_sds_secret_configs": [{"name": "server", "sds_config": {"path": path}}],
    })))
    .is_ok());
    // A secret of another name, or another kind, in the file.
    let e = errors(&with_node(json!({
        "tls_certificate_sds_secret_configs": [{"name": "other", "sds_config": {"path_config_source": {"path": path}}}],
    })));
    assert_eq!(
        e,
        [format!(
            "{TC}.tls_certificate_sds_secret_configs[0].sds_config.path_config_source.path: in {path}: Unexpected SDS secret (expecting other): server"
        )]
    );
    let e = errors(&with_node(json!({
        "tls_certificates": [{"certificate_chain": {"inline_string": CERT}, "private_key": {"inline_string": KEY}}],
        "validation_context_sds_secret_config": {"name": "server", "sds_config": {"path_config_source": {"path": path}}},
    })));
    assert_eq!(e.len(), 1);
    assert!(
        e[0].contains("want VALIDATION_CONTEXT, got TLS_CERTIFICATE"),
        "{e:?}"
    );
    // Two secrets in one file: Envoy's "Unexpected SDS secrets length".
    let two = sds_file(json!([cert_secret("server"), cert_secret("b")]));
    let e = errors(&with_node(json!({
        "tls_certificate_sds_secret_configs": [{"name": "server", "sds_config": {"path_config_source": {"path": two.path()}}}],
    })));
    assert!(e[0].ends_with("Unexpected SDS secrets length: 2"), "{e:?}");
}

#[test]
fn refusals_with_their_paths() {
    let at = format!("{TC}.tls_certificate_sds_secret_configs[0]");
    let one = |sds_config: Value| {
        errors(&with_node(json!({
            "tls_certificate_sds_secret_configs": [{"name": "a", "sds_config": sds_config}],
        })))
    };
    // Envoy: "paths must refer to an existing path in the system: ... does not exist".
    assert_eq!(
        one(json!({"path_config_source": {"path": "/nonexistent/sds.json"}})),
        [format!(
            "{at}.sds_config.path_config_source.path: paths must refer to an existing path in the system: '/nonexistent/sds.json' does not exist"
        )]
    );
    // Envoy: "Missing config source specifier".
    assert_eq!(
        one(json!({"self": {}})),
        [format!(
            "{at}.sds_config.self: a self config source for SDS is not supported"
        )]
    );
    assert_eq!(
        one(
            json!({"api_config_source": {"api_type": "REST", "cluster_names": ["sds"], "refresh_delay": "1s"}})
        ),
        [format!(
            "{at}.sds_config.api_config_source.api_type: REST for SDS is not supported"
        )]
    );
    // PGV (Envoy: "SdsSecretConfigValidationError.Name: value length must be at least 1").
    let e = errors(&with_node(json!({
        "tls_certificate_sds_secret_configs": [{"sds_config": grpc("GRPC")}],
    })));
    assert_eq!(
        e,
        [format!(
            "{at}.name: value length must be at least 1 characters"
        )]
    );
    // Envoy's own rule for client contexts holds for SDS certificates too;
    // here on a server context two are fine.
    assert!(load(&with_node(json!({
        "tls_certificate_sds_secret_configs": [
            {"name": "a", "sds_config": grpc("GRPC")}, {"name": "b", "sds_config": grpc("GRPC")}],
    })))
    .is_ok());
    // The xDS-TP locator is refused by the support table.
    let e = errors(&with_node(json!({
        "tls_certificate_sds_secret_configs": [{"name": "a", "sds_resource_locator": {"scheme": "XDSTP"}}],
    })));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("sds_resource_locator"), "{e:?}");
}

#[test]
fn sds_needs_a_node() {
    // Envoy 1.40: "TlsCertificateSdsApi: node 'id' and 'cluster' are required. ..."
    let mut v = with_node(json!({
        "tls_certificate_sds_secret_configs": [{"name": "a", "sds_config": grpc("GRPC")}],
        "validation_context_sds_secret_config": {"name": "v", "sds_config": grpc("GRPC")},
    }));
    v["node"] = json!({"id": "n"});
    assert_eq!(
        errors(&v),
        [
            format!(
                "{TC}.tls_certificate_sds_secret_configs[0].sds_config: TlsCertificateSdsApi: node 'id' and 'cluster' are required. Set it either in 'node' config or via --service-node and --service-cluster options."
            ),
            format!(
                "{TC}.validation_context_sds_secret_config.sds_config: CertificateValidationContextSdsApi: node 'id' and 'cluster' are required. Set it either in 'node' config or via --service-node and --service-cluster options."
            ),
        ]
    );
}

#[test]
fn secret_resources() {
    let mut ctx = crate::Ctx::new();
    let s: pb::Secret = crate::load::typed_from_dynamic(
        &crate::load::dynamic_from_json(
            {
                let mut v = cert_secret("server");
                v.as_object_mut().unwrap().remove("@type");
                v
            },
            "envoy.extensions.transport_sockets.tls.v3.Secret",
        )
        .unwrap(),
    )
    .unwrap();
    let r = sds::secret_resource(&s, &crate::path::Path::ROOT, &mut ctx).unwrap();
    assert!(ctx.finish(()).is_ok());
    assert_eq!(r.name, "server");
    assert!(matches!(r.value, sds::SecretValue::Certificate(_)));
    assert!(r.files.is_empty());
}
