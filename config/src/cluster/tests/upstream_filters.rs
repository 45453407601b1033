//! A cluster's upstream HTTP filters (`HttpProtocolOptions.http_filters`).

use super::EP;
use crate::cluster::upstream_filters::UpstreamFilterConfig;
use crate::load::Format;

const HPO: &str = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";
const CODEC: &str = "{name: codec, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec}}";
const CRED: &str = "{name: cred, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.credential_injector.v3.CredentialInjector, credential: {name: envoy.http.injected_credentials.generic, typed_config: {'@type': type.googleapis.com/envoy.extensions.http.injected_credentials.generic.v3.Generic, credential: {name: s}, header: X-Key}}}}";

/// A bootstrap with the generic secret `s` and one cluster whose
/// `http_filters` are `filters` (a YAML flow list's items).
fn load(filters: &str) -> Result<crate::Bootstrap, crate::ConfigError> {
    let text = format!(
        "static_resources:\n  secrets:\n  - name: s\n    generic_secret: {{secret: {{inline_string: \"tok\\n\"}}}}\n  clusters:\n  - name: a\n{}    typed_extension_protocol_options:\n      {HPO}:\n        '@type': type.googleapis.com/{HPO}\n        explicit_http_config: {{http_protocol_options: {{}}}}\n        http_filters: [{filters}]\n",
        EP.lines().map(|l| format!("  {l}\n")).collect::<String>()
    );
    crate::bootstrap_from_str(&text, Format::Yaml)
}

fn errors(filters: &str) -> Vec<String> {
    match load(filters) {
        Ok(_) => Vec::new(),
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
    }
}

const AT: &str = "static_resources.clusters[0].typed_extension_protocol_options[\"envoy.extensions.upstreams.http.v3.HttpProtocolOptions\"].http_filters";

fn admission(fields: &str) -> String {
    format!(
        "{{name: ac, typed_config: {{'@type': type.googleapis.com/envoy.extensions.filters.http.admission_control.v3.AdmissionControl, {fields}}}}}"
    )
}

#[test]
fn credential_injector_and_admission_control_before_the_codec() {
    let b = load(&format!(
        "{CRED}, {}, {CODEC}",
        admission("success_criteria: {}, sampling_window: 10.5s, sr_threshold: {default_value: {value: 150}}, rps_threshold: {default_value: 3}")
    ))
    .unwrap();
    let f = &b.clusters[0].http.http_filters;
    assert_eq!(f.len(), 2);
    let UpstreamFilterConfig::CredentialInjector(c) = &f[0].config else {
        panic!("{f:?}");
    };
    assert_eq!(c.header, "x-key");
    // The secret's trailing newline is dropped, as Envoy does.
    assert_eq!(c.value, b"tok");
    assert!(!c.overwrite);
    let UpstreamFilterConfig::AdmissionControl(a) = &f[1].config else {
        panic!("{f:?}");
    };
    assert!(a.enabled);
    assert_eq!(a.sampling_window.as_secs(), 10);
    assert_eq!(a.sr_threshold, 1.0);
    assert_eq!(a.rps_threshold, 3);
    assert_eq!(a.aggression, 1.0);
    assert_eq!(a.max_rejection_probability, 0.8);
    assert!(a.criteria.http_success(499) && !a.criteria.http_success(500));
    assert!(a.criteria.grpc_success(0) && !a.criteria.grpc_success(14));
}

#[test]
fn refusals_carry_envoys_words_and_the_path() {
    // Envoy's messages (`envoy --mode validate`).
    assert_eq!(
        errors(CRED),
        [format!(
            "{AT}[0]: The codec filter is the only valid terminal upstream HTTP filter, use 'envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec'"
        )]
    );
    assert_eq!(
        errors(&format!("{CODEC}, {CRED}")),
        [
            format!(
                "{AT}[0]: Error: terminal filter named codec of type envoy.filters.http.upstream_codec must be the last filter in a upstream http filter chain."
            ),
            format!(
                "{AT}[1]: The codec filter is the only valid terminal upstream HTTP filter, use 'envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec'"
            ),
        ]
    );
    assert_eq!(
        errors(&format!(
            "{}, {CODEC}",
            admission(
                "success_criteria: {http_criteria: {http_success_status: [{start: 100, end: 700}]}}"
            )
        )),
        [format!(
            "{AT}[0].typed_config.success_criteria.http_criteria.http_success_status[0]: invalid HTTP range: [100, 700)"
        )]
    );
    assert_eq!(
        errors(&format!(
            "{}, {CODEC}",
            admission("success_criteria: {grpc_criteria: {grpc_success_status: [17]}}")
        )),
        [format!(
            "{AT}[0].typed_config.success_criteria.grpc_criteria.grpc_success_status[0]: invalid gRPC code 17"
        )]
    );
    assert_eq!(
        errors(&format!(
            "{}, {CODEC}",
            admission("success_criteria: {}, sr_threshold: {default_value: {value: 0.5}}")
        )),
        [format!(
            "{AT}[0].typed_config.sr_threshold: Success rate threshold cannot be less than 1.0%."
        )]
    );
    // No runtime layer for these: a runtime key is refused at its path.
    assert_eq!(
        errors(&format!(
            "{}, {CODEC}",
            admission(
                "success_criteria: {}, max_rejection_probability: {default_value: {value: 50}, runtime_key: k}"
            )
        )),
        [format!(
            "{AT}[0].typed_config.max_rejection_probability.runtime_key: runtime_key is not supported"
        )]
    );
    // One bit per filter in an attempt: more are refused.
    let many = vec![CRED; 65].join(", ");
    assert_eq!(
        errors(&format!("{many}, {CODEC}")),
        [format!(
            "{AT}: more than 64 upstream HTTP filters is not supported"
        )]
    );
    assert!(errors(&format!("{}, {CODEC}", vec![CRED; 64].join(", "))).is_empty());
    // A filter courier does not run upstream.
    assert_eq!(
        errors(&format!(
            "{{name: b, typed_config: {{'@type': type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer, max_request_bytes: 10}}}}, {CODEC}"
        )),
        [format!(
            "{AT}[0]: upstream HTTP filter b (envoy.extensions.filters.http.buffer.v3.Buffer) is not supported"
        )]
    );
    assert_eq!(
        errors(&format!(
            "{}, {CODEC}",
            CRED.replace("name: s}", "name: nope}")
        )),
        [format!(
            "{AT}[0].typed_config.credential.typed_config.credential.name: Unknown static secret: nope"
        )]
    );
}
