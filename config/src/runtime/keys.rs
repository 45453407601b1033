//! What each runtime key means to courier. One check serves the bootstrap's
//! static layers and admin's `/runtime_modify`, so a key means the same from
//! either. A key courier does not give a meaning to is refused, never kept and
//! ignored; the exceptions are the keys Envoy 1.40 itself keeps without acting
//! on them (feature flags it no longer has), which only show in `/runtime`.

use super::envoy_flags::ENVOY_1_40_FLAGS;

/// What a runtime key (with its value) does in courier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Meaning {
    /// Shown in `/runtime` only: Envoy 1.40 does nothing else with it either
    /// (a feature flag it no longer has, or one set to the behaviour courier has).
    Kept,
    /// `envoy.resource_limits.listener.<name>.connection_limit`.
    ListenerConnectionLimit(String, u64),
    /// `overload.global_downstream_max_connections`.
    GlobalDownstreamMaxConnections(u64),
    /// `envoy.reloadable_features.http_reject_path_with_fragment`: a request
    /// target with a `#fragment` is refused (400), or the fragment stripped.
    RejectPathWithFragment(bool),
    /// `tracing.opentelemetry.min_flush_spans`: an OpenTelemetry tracer exports when
    /// this many spans wait (Envoy's default 5).
    OtelMinFlushSpans(u64),
    /// `tracing.opentelemetry.flush_interval_ms`: and on this timer (default 5000).
    OtelFlushIntervalMs(u64),
    /// `tracing.zipkin.min_flush_spans`: a Zipkin tracer reports when this many
    /// spans wait (Envoy's default 5).
    ZipkinMinFlushSpans(u64),
    /// `tracing.zipkin.flush_interval_ms`: and on this timer (default 5000).
    ZipkinFlushIntervalMs(u64),
    /// `tracing.zipkin.request_timeout`: a report's timeout in ms (default 5000).
    ZipkinRequestTimeoutMs(u64),
    /// `envoy.reloadable_features.fixed_heap_use_allocated`: the fixed_heap
    /// monitor measures the bytes allocated (true) rather than the heap the
    /// process holds (false, Envoy 1.40's default).
    FixedHeapUseAllocated(bool),
    /// `re2.max_program_size.error_level`: a regex whose RE2 program is bigger
    /// is refused (Envoy's default 100).
    Re2ErrorLevel(u32),
    /// `re2.max_program_size.warn_level`: a regex whose RE2 program is bigger
    /// is logged (Envoy's default: no warning).
    Re2WarnLevel(u32),
    /// `upstream.zone_routing.enabled`: percent of picks that route by zone,
    /// in place of every cluster's `routing_enabled`.
    ZoneRoutingEnabled(u64),
    /// `upstream.zone_routing.min_cluster_size`: in place of every cluster's
    /// `min_cluster_size`, read when the zone routing is next computed.
    ZoneMinClusterSize(u64),
}

/// Why a key or its value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Nothing in courier reads the key.
    #[error("runtime key {0} is not supported")]
    Unsupported(String),
    /// The key is an integer.
    #[error("must be a non-negative integer, found \"{0}\"")]
    NotAnInteger(String),
    /// The key is a boolean feature flag.
    #[error("must be true or false, found \"{0}\"")]
    NotABoolean(String),
    /// courier has the behaviour of one value of the flag only.
    #[error("{key}: {value} is not supported ({why})")]
    Value {
        /// The flag.
        key: String,
        /// The value asked for.
        value: String,
        /// What courier does instead.
        why: &'static str,
    },
}

/// Feature flags whose behaviour courier has one way: the value that selects it,
/// and what courier does.
const ONE_WAY_FLAGS: &[(&str, bool, &str)] = &[
    // Envoy 1.40's default (false): a batch host update rebuilds per priority.
    // The rebuilt balancers are the same either way; courier has the default.
    (
        "envoy.reloadable_features.coalesce_lb_rebuilds_on_batch_update",
        false,
        "only false, Envoy 1.40's default, is supported",
    ),
];

/// The meaning of `key` set to `value` (a layer's value in Envoy's text form:
/// `true`, `5000`, `1.5`, any string).
pub fn check(key: &str, value: &str) -> Result<Meaning, KeyError> {
    if key == "overload.global_downstream_max_connections" {
        return integer(value).map(Meaning::GlobalDownstreamMaxConnections);
    }
    if let Some(name) = key
        .strip_prefix("envoy.resource_limits.listener.")
        .and_then(|k| k.strip_suffix(".connection_limit"))
    {
        return integer(value).map(|n| Meaning::ListenerConnectionLimit(name.to_string(), n));
    }
    if key.starts_with("envoy.deprecated_features:") {
        // Allows a deprecated field Envoy would otherwise refuse. courier refuses
        // no field for being deprecated, so allowing is what it does already.
        return match boolean(value)? {
            true => Ok(Meaning::Kept),
            false => Err(KeyError::Value {
                key: key.to_string(),
                value: value.to_string(),
                why: "courier refuses no field for being deprecated",
            }),
        };
    }
    if key == "re2.max_program_size.error_level" {
        return integer(value).map(|n| Meaning::Re2ErrorLevel(envoy_u32(n)));
    }
    if key == "re2.max_program_size.warn_level" {
        return integer(value).map(|n| Meaning::Re2WarnLevel(envoy_u32(n)));
    }
    if key == "upstream.zone_routing.enabled" {
        return integer(value).map(Meaning::ZoneRoutingEnabled);
    }
    if key == "upstream.zone_routing.min_cluster_size" {
        return integer(value).map(Meaning::ZoneMinClusterSize);
    }
    if key == "tracing.opentelemetry.min_flush_spans" {
        return integer(value).map(Meaning::OtelMinFlushSpans);
    }
    if key == "tracing.opentelemetry.flush_interval_ms" {
        return integer(value).map(Meaning::OtelFlushIntervalMs);
    }
    if key == "tracing.zipkin.min_flush_spans" {
        return integer(value).map(Meaning::ZipkinMinFlushSpans);
    }
    if key == "tracing.zipkin.flush_interval_ms" {
        return integer(value).map(Meaning::ZipkinFlushIntervalMs);
    }
    if key == "tracing.zipkin.request_timeout" {
        return integer(value).map(Meaning::ZipkinRequestTimeoutMs);
    }
    if key == "envoy.reloadable_features.fixed_heap_use_allocated" {
        return boolean(value).map(Meaning::FixedHeapUseAllocated);
    }
    if key == "envoy.reloadable_features.google_grpc_disable_tls_13" {
        // Limits the TLS version of Google gRPC channels with TLS credentials.
        // courier's `google_grpc` channels run plaintext (their channel
        // credentials are refused), so either value leaves them as they are.
        return boolean(value).map(|_| Meaning::Kept);
    }
    if key == "envoy.reloadable_features.http_reject_path_with_fragment" {
        return boolean(value).map(Meaning::RejectPathWithFragment);
    }
    if key.starts_with("envoy.reloadable_features.") || key.starts_with("envoy.restart_features.") {
        return feature_flag(key, value);
    }
    Err(KeyError::Unsupported(key.to_string()))
}

fn feature_flag(key: &str, value: &str) -> Result<Meaning, KeyError> {
    if let Some(&(_, way, why)) = ONE_WAY_FLAGS.iter().find(|(k, _, _)| *k == key) {
        return if boolean(value)? == way {
            Ok(Meaning::Kept)
        } else {
            Err(KeyError::Value {
                key: key.to_string(),
                value: value.to_string(),
                why,
            })
        };
    }
    if ENVOY_1_40_FLAGS.binary_search(&key).is_ok() {
        return Err(KeyError::Unsupported(key.to_string()));
    }
    // A flag Envoy 1.40 does not have: it keeps the value and reads it nowhere.
    Ok(Meaning::Kept)
}

/// Envoy reads the RE2 thresholds with `getInteger` (64 bits) into a 32-bit
/// variable, so a value is taken modulo 2^32 (4294967296 is 0, refusing every
/// regex), as in Envoy.
fn envoy_u32(n: u64) -> u32 {
    // Truncation is the point: it is what Envoy's `uint32_t` assignment does.
    n as u32
}

/// Envoy reads integer keys from numbers and from strings that hold one.
fn integer(value: &str) -> Result<u64, KeyError> {
    value
        .parse::<u64>()
        .map_err(|_| KeyError::NotAnInteger(value.to_string()))
}

/// Envoy's feature flags take `true` / `false` (a boolean, or its text).
fn boolean(value: &str) -> Result<bool, KeyError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(KeyError::NotABoolean(other.to_string())),
    }
}
