//! HTTP tracing: the connection manager's `tracing` (sampling, custom tags, the
//! `envoy.tracers.opentelemetry`, `envoy.tracers.zipkin` and `envoy.tracers.datadog`
//! providers), the
//! bootstrap's default provider, and a route's `tracing` overrides.
//!
//! What is served is what Envoy 1.40 does with these fields; everything else under
//! `tracing` (other providers, `verbose`, `operation`, metadata tags, other samplers,
//! resource detectors and exporters) is refused with its path.

pub mod datadog;
pub mod zipkin;

pub use datadog::Datadog;
pub use zipkin::Zipkin;

use crate::config_source;
use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig;
use envoy_types::pb::envoy::config::trace::v3 as trace_pb;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::Tracing as HcmTracingPb;
use envoy_types::pb::envoy::extensions::tracers::opentelemetry::resource_detectors::v3 as detectors_pb;
use envoy_types::pb::envoy::extensions::tracers::opentelemetry::samplers::v3 as samplers_pb;
use envoy_types::pb::envoy::r#type::tracing::v3 as tag_pb;
use envoy_types::pb::envoy::r#type::v3::{FractionalPercent, Percent};
use std::sync::Arc;

/// Fields of the tracing messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        // `verbose` (span logs), `operation` / `upstream_operation` (formatters) are
        // refused by their absence.
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.Tracing",
        &[
            "client_sampling",
            "random_sampling",
            "overall_sampling",
            "max_path_tag_length",
            "custom_tags",
            "provider",
            "spawn_upstream_span",
        ],
    ),
    (
        "envoy.config.route.v3.Tracing",
        &[
            "client_sampling",
            "random_sampling",
            "overall_sampling",
            "custom_tags",
        ],
    ),
    // `metadata` tags are refused by their absence.
    (
        "envoy.type.tracing.v3.CustomTag",
        &["tag", "literal", "environment", "request_header"],
    ),
    ("envoy.type.tracing.v3.CustomTag.Literal", &["value"]),
    (
        "envoy.type.tracing.v3.CustomTag.Environment",
        &["name", "default_value"],
    ),
    (
        "envoy.type.tracing.v3.CustomTag.Header",
        &["name", "default_value"],
    ),
    (
        "envoy.config.trace.v3.Tracing.Http",
        &["name", "typed_config"],
    ),
    ("envoy.config.trace.v3.Tracing", &["http"]),
    (
        // `http_service`, `exporter`, `max_cache_size` and
        // `set_telemetry_sdk_resource_attributes` are refused by their absence.
        "envoy.config.trace.v3.OpenTelemetryConfig",
        &[
            "grpc_service",
            "service_name",
            "resource_detectors",
            "sampler",
        ],
    ),
    (
        "envoy.extensions.tracers.opentelemetry.samplers.v3.ParentBasedSamplerConfig",
        &["wrapped_sampler"],
    ),
    (
        "envoy.extensions.tracers.opentelemetry.samplers.v3.TraceIdRatioBasedSamplerConfig",
        &["sampling_percentage"],
    ),
    (
        "envoy.extensions.tracers.opentelemetry.resource_detectors.v3.StaticConfigResourceDetectorConfig",
        &["attributes"],
    ),
];

/// The OpenTelemetry tracer's name.
pub const OPENTELEMETRY: &str = "envoy.tracers.opentelemetry";
/// The Zipkin tracer's name.
pub const ZIPKIN: &str = "envoy.tracers.zipkin";
/// The Datadog tracer's name.
pub const DATADOG: &str = "envoy.tracers.datadog";
const PARENT_BASED: &str = "envoy.tracers.opentelemetry.samplers.parent_based";
const TRACE_ID_RATIO: &str = "envoy.tracers.opentelemetry.samplers.trace_id_ratio_based";
const STATIC_DETECTOR: &str = "envoy.tracers.opentelemetry.resource_detectors.static_config";

/// Envoy's default `max_path_tag_length`.
pub const DEFAULT_MAX_PATH_TAG_LENGTH: u32 = 256;
/// The `service.name` of a tracer whose `service_name` is empty (Envoy's).
pub const DEFAULT_SERVICE_NAME: &str = "unknown_service:envoy";

/// A sampling percentage as Envoy evaluates it: `value % denominator < numerator`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fraction {
    /// Numerator.
    pub numerator: u64,
    /// Denominator: 100, 10 000 or 1 000 000.
    pub denominator: u64,
}

impl Fraction {
    /// 100 %.
    pub const ALL: Fraction = Fraction {
        numerator: 100,
        denominator: 100,
    };

    /// Whether `value` falls in the fraction (Envoy's `evaluateFractionalPercent`).
    pub fn admits(&self, value: u64) -> bool {
        self.numerator > 0 && value % self.denominator < self.numerator
    }

    /// A `FractionalPercent`.
    pub fn of(p: &FractionalPercent) -> Fraction {
        use envoy_types::pb::envoy::r#type::v3::fractional_percent::DenominatorType as D;
        let denominator = match D::try_from(p.denominator).unwrap_or(D::Hundred) {
            D::Hundred => 100,
            D::TenThousand => 10_000,
            D::Million => 1_000_000,
        };
        Fraction {
            numerator: u64::from(p.numerator),
            denominator,
        }
    }

    /// A `Percent` on the connection manager, rounded to `denominator` steps of 100 %
    /// (Envoy: `PROTOBUF_PERCENT_TO_ROUNDED_INTEGER_OR_DEFAULT`), 100 % when unset.
    fn percent(p: Option<&Percent>, denominator: u64) -> Fraction {
        let numerator = match p {
            // Rounded as Envoy's `std::round(value / 100 * denominator)`.
            Some(p) => ((p.value / 100.0) * denominator as f64).round().max(0.0) as u64,
            None => denominator,
        };
        Fraction {
            numerator,
            denominator,
        }
    }
}

/// Where a custom tag's value comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum TagValue {
    /// A fixed value (literals, and environment variables, read when the config is
    /// built, as Envoy reads them).
    Literal(String),
    /// A request header (lower-cased name), or the default when absent.
    RequestHeader {
        /// The header's name, lower-cased.
        name: String,
        /// The value when the header is absent; no tag when empty.
        default: String,
    },
}

/// A `custom_tags` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomTag {
    /// The tag's name.
    pub tag: String,
    /// Its value.
    pub value: TagValue,
}

/// An OpenTelemetry sampler.
#[derive(Debug, Clone, PartialEq)]
pub enum Sampler {
    /// `parent_based`: the parent's sampled flag, or the wrapped sampler for a root span.
    ParentBased(Box<Sampler>),
    /// `trace_id_ratio_based`: the first 8 bytes of the trace id against the fraction.
    TraceIdRatio(Fraction),
}

/// The `envoy.tracers.opentelemetry` provider.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenTelemetry {
    /// The collector's cluster (`grpc_service.envoy_grpc.cluster_name`).
    pub cluster: String,
    /// `:authority` of the export calls (the cluster name when unset).
    pub authority: String,
    /// `grpc_service.initial_metadata`, sent with every export call.
    pub initial_metadata: Vec<(String, String)>,
    /// Resource attributes: `service.name`, then the static detectors' (which override).
    pub resource: Vec<(String, String)>,
    /// The configured sampler, if any (it then decides instead of Envoy's decision).
    pub sampler: Option<Sampler>,
}

/// A tracer (`tracing.provider`), found as Envoy finds its factory: by the type of
/// its `typed_config`, whatever its name.
#[derive(Debug, Clone, PartialEq)]
pub enum Provider {
    /// `envoy.tracers.opentelemetry`.
    OpenTelemetry(Arc<OpenTelemetry>),
    /// `envoy.tracers.zipkin`.
    Zipkin(Arc<Zipkin>),
    /// `envoy.tracers.datadog`.
    Datadog(Arc<Datadog>),
}

impl Provider {
    /// The collector's cluster.
    pub fn cluster(&self) -> &str {
        match self {
            Provider::OpenTelemetry(o) => &o.cluster,
            Provider::Zipkin(z) => &z.cluster,
            Provider::Datadog(d) => &d.cluster,
        }
    }
}

/// The connection manager's `tracing`.
#[derive(Debug, Clone, PartialEq)]
pub struct Tracing {
    /// `client_sampling` (of 100).
    pub client_sampling: Fraction,
    /// `random_sampling` (of 10 000).
    pub random_sampling: Fraction,
    /// `overall_sampling` (of 10 000).
    pub overall_sampling: Fraction,
    /// `custom_tags`.
    pub custom_tags: Vec<CustomTag>,
    /// `max_path_tag_length`: `http.url` is cut to this many bytes.
    pub max_path_tag_length: usize,
    /// `spawn_upstream_span`: a CLIENT span per upstream request.
    pub spawn_upstream_span: bool,
    /// The tracer; none is the bootstrap's (`Bootstrap.tracing`) or, without one,
    /// Envoy's null tracer (decisions and `x-request-id` marks, no spans).
    pub provider: Option<Provider>,
}

/// A route's `tracing`: sampling that replaces the connection manager's (100 % for
/// what it leaves unset, as Envoy) and tags added to its.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteTracing {
    /// `client_sampling`.
    pub client_sampling: Fraction,
    /// `random_sampling`.
    pub random_sampling: Fraction,
    /// `overall_sampling`.
    pub overall_sampling: Fraction,
    /// `custom_tags`.
    pub custom_tags: Vec<CustomTag>,
}

/// Translates the connection manager's `tracing`.
pub fn translate(t: &HcmTracingPb, path: &Path<'_>, ctx: &mut Ctx) -> Tracing {
    let provider = t
        .provider
        .as_ref()
        .and_then(|p| provider(p, &path.field("provider"), ctx));
    // Envoy's proto validation: a `Percent` is 0..=100.
    for (name, p) in [
        ("client_sampling", &t.client_sampling),
        ("random_sampling", &t.random_sampling),
        ("overall_sampling", &t.overall_sampling),
    ] {
        if let Some(p) = p
            && !(0.0..=100.0).contains(&p.value)
        {
            ctx.error(
                &path.field(name).field("value"),
                format!("{} is out of range 0..=100", p.value),
            );
        }
    }
    Tracing {
        client_sampling: Fraction::percent(t.client_sampling.as_ref(), 100),
        random_sampling: Fraction::percent(t.random_sampling.as_ref(), 10_000),
        overall_sampling: Fraction::percent(t.overall_sampling.as_ref(), 10_000),
        custom_tags: custom_tags(&t.custom_tags, &path.field("custom_tags"), ctx),
        max_path_tag_length: core::u32_or(
            t.max_path_tag_length.as_ref(),
            DEFAULT_MAX_PATH_TAG_LENGTH,
        ) as usize,
        spawn_upstream_span: core::bool_or(t.spawn_upstream_span.as_ref(), false),
        provider,
    }
}

/// Translates a route's `tracing`.
pub fn route(
    t: &envoy_types::pb::envoy::config::route::v3::Tracing,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> RouteTracing {
    let fraction = |p: Option<&FractionalPercent>| p.map_or(Fraction::ALL, Fraction::of);
    RouteTracing {
        client_sampling: fraction(t.client_sampling.as_ref()),
        random_sampling: fraction(t.random_sampling.as_ref()),
        overall_sampling: fraction(t.overall_sampling.as_ref()),
        custom_tags: custom_tags(&t.custom_tags, &path.field("custom_tags"), ctx),
    }
}

fn custom_tags(tags: &[tag_pb::CustomTag], path: &Path<'_>, ctx: &mut Ctx) -> Vec<CustomTag> {
    use tag_pb::custom_tag::Type as T;
    let mut out = Vec::with_capacity(tags.len());
    for (i, t) in tags.iter().enumerate() {
        let p = path.index(i);
        if t.tag.is_empty() {
            ctx.error(&p.field("tag"), "must not be empty");
            continue;
        }
        let value = match &t.r#type {
            Some(T::Literal(l)) => TagValue::Literal(l.value.clone()),
            Some(T::Environment(e)) => {
                if e.name.is_empty() {
                    ctx.error(&p.field("environment").field("name"), "must not be empty");
                    continue;
                }
                // Read once, when the config is built, as Envoy does; an unset
                // variable takes the default.
                TagValue::Literal(
                    std::env::var(&e.name)
                        .ok()
                        .filter(|v| !v.is_empty())
                        .unwrap_or_else(|| e.default_value.clone()),
                )
            }
            Some(T::RequestHeader(h)) => {
                let rp = p.field("request_header");
                let hp = rp.field("name");
                let name = h.name.to_ascii_lowercase();
                let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
                if name.is_empty() || !name.bytes().all(token) {
                    ctx.error(&hp, format!("\"{}\" is not a header name", h.name));
                    continue;
                }
                TagValue::RequestHeader {
                    name,
                    default: h.default_value.clone(),
                }
            }
            // Refused by the support walker.
            Some(T::Metadata(_) | T::Value(_)) => continue,
            None => {
                ctx.error(
                    &p,
                    "one of literal, environment or request_header is required",
                );
                continue;
            }
        };
        out.push(CustomTag {
            tag: t.tag.clone(),
            value,
        });
    }
    out
}

/// The bootstrap's `tracing`: the provider of connection managers whose `tracing`
/// names none (Envoy's fallback, kept for older configs).
pub fn bootstrap(t: &trace_pb::Tracing, path: &Path<'_>, ctx: &mut Ctx) -> Option<Provider> {
    provider(t.http.as_ref()?, &path.field("http"), ctx)
}

/// A tracer, by the type of its `typed_config`.
fn provider(p: &trace_pb::tracing::Http, path: &Path<'_>, ctx: &mut Ctx) -> Option<Provider> {
    use prost::Name;
    use trace_pb::tracing::http::ConfigType;
    let tp = path.field("typed_config");
    let Some(ConfigType::TypedConfig(any)) = &p.config_type else {
        ctx.error(&tp, "is required");
        return None;
    };
    if any.type_url == trace_pb::ZipkinConfig::type_url() {
        let c: trace_pb::ZipkinConfig = core::unpack(any, &tp, ctx)?;
        return zipkin::translate(&c, &tp, ctx).map(|z| Provider::Zipkin(Arc::new(z)));
    }
    if any.type_url == trace_pb::DatadogConfig::type_url() {
        let c: trace_pb::DatadogConfig = core::unpack(any, &tp, ctx)?;
        return datadog::translate(&c, &tp, ctx).map(|d| Provider::Datadog(Arc::new(d)));
    }
    if any.type_url != trace_pb::OpenTelemetryConfig::type_url() {
        ctx.unsupported(
            &path.field("name"),
            format!(
                "tracer {} (only {OPENTELEMETRY}, {ZIPKIN} and {DATADOG} are implemented)",
                if p.name.is_empty() { "\"\"" } else { &p.name }
            ),
        );
        return None;
    }
    opentelemetry(any, &tp, ctx).map(|o| Provider::OpenTelemetry(Arc::new(o)))
}

fn opentelemetry(
    any: &envoy_types::pb::google::protobuf::Any,
    tp: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<OpenTelemetry> {
    let c: trace_pb::OpenTelemetryConfig = core::unpack(any, tp, ctx)?;
    let gp = tp.field("grpc_service");
    let Some(g) = c.grpc_service.as_ref() else {
        // Envoy accepts a tracer without an exporter (spans are dropped); courier
        // does not: a tracer that sends nothing is a mistake.
        ctx.unsupported(&gp, "an OpenTelemetry tracer without grpc_service");
        return None;
    };
    let service = config_source::envoy_grpc_only(g, &gp, "OpenTelemetry exporter", ctx)?;
    let mut resource = vec![(
        "service.name".to_string(),
        if c.service_name.is_empty() {
            DEFAULT_SERVICE_NAME.to_string()
        } else {
            c.service_name.clone()
        },
    )];
    detect_resource(
        &c.resource_detectors,
        &tp.field("resource_detectors"),
        &mut resource,
        ctx,
    );
    let sampler = c
        .sampler
        .as_ref()
        .and_then(|s| sampler(s, &tp.field("sampler"), ctx));
    Some(OpenTelemetry {
        cluster: service.cluster,
        authority: service.authority,
        initial_metadata: service.initial_metadata,
        resource,
        sampler,
    })
}

/// Adds the `static_config` detectors' attributes to `resource`, merged as Envoy's
/// resource provider does: a detector's attribute replaces one of the same key
/// (each detector's sorted, for a stable order).
pub(crate) fn detect_resource(
    detectors: &[TypedExtensionConfig],
    path: &Path<'_>,
    resource: &mut Vec<(String, String)>,
    ctx: &mut Ctx,
) {
    for (i, d) in detectors.iter().enumerate() {
        let Some(attrs) = static_detector(d, &path.index(i), ctx) else {
            continue;
        };
        let mut attrs: Vec<_> = attrs.into_iter().collect();
        attrs.sort();
        for (k, v) in attrs {
            match resource.iter_mut().find(|(key, _)| *key == k) {
                Some(slot) => slot.1 = v,
                None => resource.push((k, v)),
            }
        }
    }
}

fn static_detector(
    d: &TypedExtensionConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<std::collections::HashMap<String, String>> {
    use prost::Name;
    let tp = path.field("typed_config");
    let Some(any) = d.typed_config.as_ref() else {
        ctx.error(&tp, "is required");
        return None;
    };
    // Found by its config's type, as Envoy finds the detector's factory.
    if any.type_url != detectors_pb::StaticConfigResourceDetectorConfig::type_url() {
        ctx.unsupported(
            &tp,
            format!(
                "resource detector {} ({}; only {STATIC_DETECTOR} is implemented)",
                d.name, any.type_url
            ),
        );
        return None;
    }
    let c: detectors_pb::StaticConfigResourceDetectorConfig = core::unpack(any, &tp, ctx)?;
    Some(c.attributes)
}

fn sampler(s: &TypedExtensionConfig, path: &Path<'_>, ctx: &mut Ctx) -> Option<Sampler> {
    let tp = path.field("typed_config");
    let any = match s.typed_config.as_ref() {
        Some(any) => any,
        None => {
            ctx.error(&tp, "is required");
            return None;
        }
    };
    // Envoy finds a sampler's factory by its config's type, not by its name.
    use prost::Name;
    let parent = samplers_pb::ParentBasedSamplerConfig::type_url();
    let ratio = samplers_pb::TraceIdRatioBasedSamplerConfig::type_url();
    match any.type_url.as_str() {
        t if t == parent => {
            let c: samplers_pb::ParentBasedSamplerConfig = core::unpack(any, &tp, ctx)?;
            let wp = tp.field("wrapped_sampler");
            let Some(w) = c.wrapped_sampler.as_ref() else {
                ctx.error(&wp, "is required");
                return None;
            };
            Some(Sampler::ParentBased(Box::new(sampler(w, &wp, ctx)?)))
        }
        t if t == ratio => {
            let c: samplers_pb::TraceIdRatioBasedSamplerConfig = core::unpack(any, &tp, ctx)?;
            Some(Sampler::TraceIdRatio(
                c.sampling_percentage.as_ref().map_or(
                    Fraction {
                        numerator: 0,
                        denominator: 100,
                    },
                    Fraction::of,
                ),
            ))
        }
        other => {
            ctx.unsupported(
                &tp,
                format!(
                    "sampler {} ({other}; only {PARENT_BASED} and {TRACE_ID_RATIO} are implemented)",
                    s.name
                ),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests;
