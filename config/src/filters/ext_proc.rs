//! The external processing HTTP filter
//! (`envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor`) and its per-route config
//! (`ExtProcPerRoute`).
//!
//! courier implements the filter for processing modes that send the processor nothing:
//! request and response headers `SKIP`, trailers `SKIP` (or their default, which is
//! `SKIP`), bodies `NONE`. Envoy then never opens a stream to the processor, so requests
//! pass untouched and the filter's counters stay at 0 (as Envoy Gateway's
//! `EnvoyExtensionPolicy` emits it when no phase is processed). A mode that would send
//! something (including the default `SEND` of both header modes) is refused with its
//! path, as is every field that only matters for what courier does not implement
//! (through the support table): `http_service`, `request_attributes`,
//! `response_attributes`, `mutation_rules`, `max_message_timeout`, `forward_rules`,
//! `filter_metadata`, `disable_immediate_response`, `metadata_options`,
//! `observability_mode`, `disable_clear_route_cache`, `route_cache_action`,
//! `deferred_close_timeout`, `send_body_without_waiting_for_header_response`,
//! `allowed_override_modes`, `processing_request_modifier`, `on_processing_response`,
//! `status_on_error`, `allow_content_length_header`, `emit_client_span`; in a route's
//! `overrides`, all but `processing_mode`, `grpc_service` and `failure_mode_allow`.

use crate::config_source::{self, GrpcService};
use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::{ALL, Support};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3 as pb;
use std::time::Duration;

/// Fields of the ext_proc messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
        &[
            "grpc_service",
            "failure_mode_allow",
            "processing_mode",
            "message_timeout",
            "stat_prefix",
            "allow_mode_override",
        ],
    ),
    // Each mode is checked in code ([`processing_mode`]).
    (
        "envoy.extensions.filters.http.ext_proc.v3.ProcessingMode",
        ALL,
    ),
    (
        "envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute",
        &["disabled", "overrides"],
    ),
    (
        "envoy.extensions.filters.http.ext_proc.v3.ExtProcOverrides",
        &["processing_mode", "grpc_service", "failure_mode_allow"],
    ),
];

/// Envoy's default `message_timeout`.
pub const DEFAULT_MESSAGE_TIMEOUT: Duration = Duration::from_millis(200);

/// The longest `message_timeout` Envoy accepts.
const MAX_MESSAGE_TIMEOUT: Duration = Duration::from_secs(3600);

/// A validated `ExternalProcessor`.
#[derive(Debug, Clone)]
pub struct ExtProc {
    /// `grpc_service`: the processor (`envoy.service.ext_proc.v3.ExternalProcessor`).
    pub grpc_service: GrpcService,
    /// `failure_mode_allow`: a failed processor lets the request go on.
    pub failure_mode_allow: bool,
    /// `message_timeout` (default 200 ms).
    pub message_timeout: Duration,
    /// `stat_prefix`: counters under `http.<hcm>.ext_proc.<stat_prefix>.` (empty: none).
    pub stat_prefix: String,
    /// `allow_mode_override`: the processor may change the processing mode.
    pub allow_mode_override: bool,
}

/// A validated `ExtProcPerRoute`.
#[derive(Debug, Clone)]
pub enum ExtProcPerRoute {
    /// `disabled: true`: the filter does nothing on the route.
    Disabled,
    /// `overrides`.
    Overrides(ExtProcOverrides),
}

/// A validated `ExtProcOverrides`.
#[derive(Debug, Clone, Default)]
pub struct ExtProcOverrides {
    /// `grpc_service`: the route's processor instead of the filter's.
    pub grpc_service: Option<GrpcService>,
    /// `failure_mode_allow`: the route's instead of the filter's.
    pub failure_mode_allow: Option<bool>,
}

/// Translates an `ExternalProcessor`.
pub fn translate(e: &pb::ExternalProcessor, path: &Path<'_>, ctx: &mut Ctx) -> Option<ExtProc> {
    let before = ctx.error_count();
    let grpc_service = match e.grpc_service.as_ref() {
        Some(g) => grpc_service(g, &path.field("grpc_service"), ctx),
        None => {
            // `http_service` is refused by the support table; Envoy's message otherwise.
            if e.http_service.is_none() {
                ctx.error(
                    path,
                    "One and only one of grpc_service or http_service must be configured",
                );
            }
            None
        }
    };
    processing_mode(
        e.processing_mode.as_ref(),
        &path.field("processing_mode"),
        ctx,
    );
    let tp = path.field("message_timeout");
    let message_timeout = match e.message_timeout.as_ref() {
        None => DEFAULT_MESSAGE_TIMEOUT,
        Some(d) => match crate::core::duration(d, &tp, ctx) {
            Some(d) if d <= MAX_MESSAGE_TIMEOUT => d,
            Some(_) => {
                ctx.error(&tp, "value must be inside range [0s, 1h0m0s]");
                DEFAULT_MESSAGE_TIMEOUT
            }
            None => DEFAULT_MESSAGE_TIMEOUT,
        },
    };
    if ctx.error_count() > before {
        return None;
    }
    Some(ExtProc {
        grpc_service: grpc_service?,
        failure_mode_allow: e.failure_mode_allow,
        message_timeout,
        stat_prefix: e.stat_prefix.clone(),
        allow_mode_override: e.allow_mode_override,
    })
}

/// Translates an `ExtProcPerRoute`.
pub fn per_route(
    r: &pb::ExtProcPerRoute,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<ExtProcPerRoute> {
    use pb::ext_proc_per_route::Override;
    match r.r#override.as_ref() {
        Some(Override::Disabled(true)) => Some(ExtProcPerRoute::Disabled),
        Some(Override::Disabled(false)) => {
            ctx.error(&path.field("disabled"), "value must equal true");
            None
        }
        Some(Override::Overrides(o)) => {
            let op = path.field("overrides");
            let before = ctx.error_count();
            if o.processing_mode.is_some() {
                processing_mode(
                    o.processing_mode.as_ref(),
                    &op.field("processing_mode"),
                    ctx,
                );
            }
            let grpc_service = o
                .grpc_service
                .as_ref()
                .and_then(|g| grpc_service(g, &op.field("grpc_service"), ctx));
            if ctx.error_count() > before {
                return None;
            }
            Some(ExtProcPerRoute::Overrides(ExtProcOverrides {
                grpc_service,
                failure_mode_allow: o.failure_mode_allow.map(|b| b.value),
            }))
        }
        None => {
            ctx.error(path, "one of disabled or overrides is required");
            None
        }
    }
}

/// The processor's `GrpcService`: its `retry_policy` is honoured as for ext_authz, and an
/// `envoy_grpc` cluster need not exist when the config loads (Envoy resolves it when a
/// stream opens).
fn grpc_service(
    g: &envoy_types::pb::envoy::config::core::v3::GrpcService,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<GrpcService> {
    config_source::grpc_service_retrying_any_cluster(g, path, ctx)
}

/// Checks that `mode` sends the processor nothing, refusing each mode that would, at its
/// path. Without `processing_mode` both header modes are Envoy's default, `SEND`.
fn processing_mode(mode: Option<&pb::ProcessingMode>, path: &Path<'_>, ctx: &mut Ctx) {
    use pb::processing_mode::{BodySendMode, HeaderSendMode};
    let Some(m) = mode else {
        ctx.error(
            path,
            "is required: its header modes default to SEND, which is not supported \
             (courier implements the modes that never call the processor: headers and \
             trailers SKIP, bodies NONE)",
        );
        return;
    };
    for (field, value, default_skips) in [
        ("request_header_mode", m.request_header_mode, false),
        ("response_header_mode", m.response_header_mode, false),
        ("request_trailer_mode", m.request_trailer_mode, true),
        ("response_trailer_mode", m.response_trailer_mode, true),
    ] {
        let skips = match HeaderSendMode::try_from(value) {
            Ok(HeaderSendMode::Skip) => true,
            Ok(HeaderSendMode::Default) => default_skips,
            Ok(HeaderSendMode::Send) => false,
            Err(_) => {
                ctx.error(
                    &path.field(field),
                    format!("{value} is not a defined header send mode"),
                );
                continue;
            }
        };
        if !skips {
            let name = HeaderSendMode::try_from(value).map_or("", |v| v.as_str_name());
            ctx.error(
                &path.field(field),
                format!("{name} is not supported (only SKIP: courier never calls the processor)"),
            );
        }
    }
    for (field, value) in [
        ("request_body_mode", m.request_body_mode),
        ("response_body_mode", m.response_body_mode),
    ] {
        match BodySendMode::try_from(value) {
            Ok(BodySendMode::None) => {}
            Ok(v) => ctx.error(
                &path.field(field),
                format!(
                    "{} is not supported (only NONE: courier never calls the processor)",
                    v.as_str_name()
                ),
            ),
            Err(_) => ctx.error(
                &path.field(field),
                format!("{value} is not a defined body send mode"),
            ),
        }
    }
}

#[cfg(test)]
#[path = "ext_proc_tests.rs"]
mod tests;
