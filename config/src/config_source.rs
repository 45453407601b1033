//! `ConfigSource`, `ApiConfigSource` and `GrpcService`: where xDS resources come from,
//! and how courier reaches gRPC services (xDS servers, ext_authz).

use crate::core;
use crate::ctx::Ctx;
use crate::filters::http_uri::{self, CallRetryPolicy};
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::core::v3 as pb;
use std::time::Duration;

/// Fields of the config-source messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.config.core.v3.ConfigSource",
        &[
            "path_config_source",
            // The deprecated form: served for SDS, refused elsewhere with its path.
            "path",
            "api_config_source",
            "ads",
            "self",
            "initial_fetch_timeout",
            "resource_api_version",
        ],
    ),
    (
        "envoy.config.core.v3.PathConfigSource",
        &["path", "watched_directory"],
    ),
    ("envoy.config.core.v3.WatchedDirectory", &["path"]),
    ("envoy.config.core.v3.AggregatedConfigSource", &[]),
    (
        "envoy.config.core.v3.SelfConfigSource",
        &["transport_api_version"],
    ),
    (
        "envoy.config.core.v3.ApiConfigSource",
        &[
            "api_type",
            "transport_api_version",
            "cluster_names",
            "grpc_services",
            "refresh_delay",
            "request_timeout",
            "set_node_on_first_message_only",
        ],
    ),
    (
        // `retry_policy`: ext_authz's service only; every other user refuses it in code.
        "envoy.config.core.v3.GrpcService",
        &[
            "envoy_grpc",
            "google_grpc",
            "timeout",
            "initial_metadata",
            "retry_policy",
        ],
    ),
    (
        "envoy.config.core.v3.GrpcService.EnvoyGrpc",
        &["cluster_name", "authority"],
    ),
    (
        "envoy.config.core.v3.GrpcService.GoogleGrpc",
        &["target_uri", "stat_prefix", "channel_credentials"],
    ),
    (
        // None of its credentials is implemented (google_grpc runs plaintext).
        "envoy.config.core.v3.GrpcService.GoogleGrpc.ChannelCredentials",
        &[],
    ),
    (
        "envoy.config.core.v3.HeaderValue",
        &["key", "value", "raw_value"],
    ),
];

/// Default `initial_fetch_timeout` of a config source.
pub const DEFAULT_INITIAL_FETCH_TIMEOUT: Duration = Duration::from_secs(15);

/// Where a kind of xDS resource comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigSource {
    /// The transport.
    pub kind: ConfigSourceKind,
    /// How long initialisation waits for the first response; `None` = forever (`0s`).
    pub initial_fetch_timeout: Option<Duration>,
}

/// The transport of a [`ConfigSource`].
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigSourceKind {
    /// Through the bootstrap's `ads_config` stream.
    Ads,
    /// Its own stream or REST poll.
    Api(ApiConfigSource),
    /// A file holding a `DiscoveryResponse`, reloaded when it is moved into place.
    Path {
        /// The file.
        path: String,
        /// A directory whose moves trigger a reload (Kubernetes ConfigMap style).
        watched_directory: Option<String>,
    },
    /// The same server that delivered the resource naming this source.
    SelfSource,
}

/// The protocol of an [`ApiConfigSource`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiType {
    /// REST-JSON polling.
    Rest,
    /// State-of-the-world gRPC.
    Grpc,
    /// Incremental (delta) gRPC.
    DeltaGrpc,
}

/// `ApiConfigSource`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiConfigSource {
    /// Protocol.
    pub api_type: ApiType,
    /// gRPC services (gRPC types; the first one is used, as in Envoy).
    pub grpc_services: Vec<GrpcService>,
    /// Clusters to poll (REST).
    pub cluster_names: Vec<String>,
    /// REST poll period (default 1 s, as Envoy).
    pub refresh_delay: Duration,
    /// REST request timeout (default 1 s).
    pub request_timeout: Duration,
    /// Send the node only on the first request of a stream.
    pub set_node_on_first_message_only: bool,
}

/// How a gRPC service is reached.
#[derive(Debug, Clone, PartialEq)]
pub enum GrpcTarget {
    /// Through a courier cluster.
    EnvoyGrpc {
        /// The cluster.
        cluster_name: String,
        /// `:authority` to send; default the cluster name.
        authority: Option<String>,
    },
    /// Directly to a target URI (`host:port`, plaintext).
    GoogleGrpc {
        /// The target, e.g. `127.0.0.1:9000` or `dns:///authz:9000`.
        target_uri: String,
        /// Stats prefix.
        stat_prefix: String,
    },
}

/// `GrpcService`.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpcService {
    /// Where to send calls.
    pub target: GrpcTarget,
    /// Per-call deadline, if set.
    pub timeout: Option<Duration>,
    /// Metadata added to every call.
    pub initial_metadata: Vec<(String, String)>,
    /// `retry_policy` of an `envoy_grpc` service whose user retries (ext_authz); `None`
    /// otherwise (Envoy's `google_grpc` client ignores the field).
    pub retry_policy: Option<CallRetryPolicy>,
}

/// An `envoy_grpc` service courier's own calls go through (tracers, stats sinks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvoyGrpcService {
    /// The cluster.
    pub cluster: String,
    /// `:authority` of the calls (the cluster's name when unset).
    pub authority: String,
    /// `initial_metadata`, sent with every call.
    pub initial_metadata: Vec<(String, String)>,
}

/// Translates a `GrpcService` that courier serves only as `envoy_grpc` and without
/// a `timeout`; `what` names its user in the refusals (`timeout on the <what>`,
/// `google_grpc for the <what> (envoy_grpc is)`).
pub fn envoy_grpc_only(
    g: &pb::GrpcService,
    path: &Path<'_>,
    what: &str,
    ctx: &mut Ctx,
) -> Option<EnvoyGrpcService> {
    if g.timeout.is_some() {
        ctx.unsupported(&path.field("timeout"), format!("timeout on the {what}"));
    }
    let service = grpc_service(g, path, ctx)?;
    match service.target {
        GrpcTarget::EnvoyGrpc {
            cluster_name,
            authority,
        } => Some(EnvoyGrpcService {
            authority: authority.unwrap_or_else(|| cluster_name.clone()),
            cluster: cluster_name,
            initial_metadata: service.initial_metadata,
        }),
        GrpcTarget::GoogleGrpc { .. } => {
            ctx.unsupported(
                &path.field("google_grpc"),
                format!("google_grpc for the {what} (envoy_grpc is)"),
            );
            None
        }
    }
}

/// Translates a `ConfigSource`.
pub fn translate(cs: &pb::ConfigSource, path: &Path<'_>, ctx: &mut Ctx) -> Option<ConfigSource> {
    use pb::config_source::ConfigSourceSpecifier as S;
    check_api_version(
        cs.resource_api_version,
        &path.field("resource_api_version"),
        ctx,
    );
    let initial_fetch_timeout = core::optional_timeout(
        cs.initial_fetch_timeout.as_ref(),
        Some(DEFAULT_INITIAL_FETCH_TIMEOUT),
        &path.field("initial_fetch_timeout"),
        ctx,
    );
    let kind = match &cs.config_source_specifier {
        Some(S::Ads(_)) => ConfigSourceKind::Ads,
        Some(S::ApiConfigSource(api)) => ConfigSourceKind::Api(api_config_source(
            api,
            &path.field("api_config_source"),
            ctx,
        )?),
        Some(S::PathConfigSource(p)) => {
            let pp = path.field("path_config_source");
            if p.path.is_empty() {
                ctx.error(&pp.field("path"), "must not be empty");
            }
            ConfigSourceKind::Path {
                path: p.path.clone(),
                watched_directory: p.watched_directory.as_ref().map(|w| w.path.clone()),
            }
        }
        Some(S::Self_(s)) => {
            check_api_version(
                s.transport_api_version,
                &path.field("self").field("transport_api_version"),
                ctx,
            );
            ConfigSourceKind::SelfSource
        }
        #[allow(deprecated)]
        Some(S::Path(_)) => {
            ctx.unsupported(
                &path.field("path"),
                "the deprecated ConfigSource.path (use path_config_source)",
            );
            return None;
        }
        None => {
            ctx.error(
                path,
                "one of ads, api_config_source, path_config_source or self is required",
            );
            return None;
        }
    };
    Some(ConfigSource {
        kind,
        initial_fetch_timeout,
    })
}

fn check_api_version(v: i32, path: &Path<'_>, ctx: &mut Ctx) {
    // AUTO (0) and V3 (2) both mean v3 today; V2 (1) is long gone.
    if v == pb::ApiVersion::V2 as i32 {
        ctx.unsupported(path, "the v2 xDS API");
    }
}

/// Translates an `ApiConfigSource` (also the bootstrap's `ads_config`).
pub fn api_config_source(
    api: &pb::ApiConfigSource,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<ApiConfigSource> {
    use pb::api_config_source::ApiType as T;
    check_api_version(
        api.transport_api_version,
        &path.field("transport_api_version"),
        ctx,
    );
    let api_type = match T::try_from(api.api_type) {
        Ok(T::Rest) => ApiType::Rest,
        Ok(T::Grpc) => ApiType::Grpc,
        Ok(T::DeltaGrpc) => ApiType::DeltaGrpc,
        Ok(other) => {
            ctx.unsupported(&path.field("api_type"), other.as_str_name());
            return None;
        }
        Err(_) => {
            ctx.error(&path.field("api_type"), "unknown api_type");
            return None;
        }
    };
    let gp = path.field("grpc_services");
    let grpc_services: Vec<GrpcService> = api
        .grpc_services
        .iter()
        .enumerate()
        .filter_map(|(i, g)| grpc_service(g, &gp.index(i), ctx))
        .collect();
    match api_type {
        ApiType::Grpc | ApiType::DeltaGrpc => {
            if api.grpc_services.is_empty() {
                ctx.error(
                    &gp,
                    "a gRPC api_config_source needs one grpc_services entry",
                );
            }
            if !api.cluster_names.is_empty() {
                ctx.error(
                    &path.field("cluster_names"),
                    "is for REST; gRPC sources use grpc_services",
                );
            }
        }
        ApiType::Rest => {
            if api.cluster_names.len() != 1 {
                ctx.error(
                    &path.field("cluster_names"),
                    "a REST api_config_source needs exactly one cluster",
                );
            }
            if !api.grpc_services.is_empty() {
                ctx.error(&gp, "is for gRPC; REST sources use cluster_names");
            }
            for (i, c) in api.cluster_names.iter().enumerate() {
                if ctx.cluster_known(c) == Some(false) {
                    ctx.error(
                        &path.field("cluster_names").index(i),
                        format!("unknown cluster '{c}'"),
                    );
                }
            }
        }
    }
    Some(ApiConfigSource {
        api_type,
        grpc_services,
        cluster_names: api.cluster_names.clone(),
        refresh_delay: core::duration_or(
            api.refresh_delay.as_ref(),
            Duration::from_secs(1),
            &path.field("refresh_delay"),
            ctx,
        ),
        request_timeout: core::duration_or(
            api.request_timeout.as_ref(),
            Duration::from_secs(1),
            &path.field("request_timeout"),
            ctx,
        ),
        set_node_on_first_message_only: api.set_node_on_first_message_only,
    })
}

/// Translates a `GrpcService`. An `envoy_grpc` cluster must exist when the cluster set is known
/// (Envoy requires a statically defined cluster there).
pub fn grpc_service(g: &pb::GrpcService, path: &Path<'_>, ctx: &mut Ctx) -> Option<GrpcService> {
    grpc_service_checked(g, path, ctx, true, false)
}

/// [`grpc_service`] for a user whose calls retry under the service's `retry_policy`
/// (ext_authz); the other users refuse that field.
pub fn grpc_service_retrying(
    g: &pb::GrpcService,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<GrpcService> {
    grpc_service_checked(g, path, ctx, true, true)
}

/// [`grpc_service`] without requiring the `envoy_grpc` cluster to exist: Envoy's rate limit
/// client skips that check (a call to a missing cluster fails at run time).
pub fn grpc_service_any_cluster(
    g: &pb::GrpcService,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<GrpcService> {
    grpc_service_checked(g, path, ctx, false, false)
}

/// [`grpc_service_retrying`] without requiring the `envoy_grpc` cluster to exist: Envoy's
/// ext_proc filter resolves its processor's cluster when it opens a stream.
pub fn grpc_service_retrying_any_cluster(
    g: &pb::GrpcService,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<GrpcService> {
    grpc_service_checked(g, path, ctx, false, true)
}

fn grpc_service_checked(
    g: &pb::GrpcService,
    path: &Path<'_>,
    ctx: &mut Ctx,
    check_cluster: bool,
    retrying: bool,
) -> Option<GrpcService> {
    use pb::grpc_service::TargetSpecifier as T;
    let rp = path.field("retry_policy");
    let retry_policy = match g.retry_policy.as_ref() {
        None => None,
        Some(_) if !retrying => {
            ctx.unsupported(
                &rp,
                "retry_policy on this gRPC service (ext_authz's retries)",
            );
            return None;
        }
        Some(r) => Some(http_uri::call_retry_policy(r, &rp, ctx)?),
    };
    let timeout = match g.timeout.as_ref() {
        Some(d) => core::duration(d, &path.field("timeout"), ctx),
        None => None,
    };
    let mp = path.field("initial_metadata");
    let mut initial_metadata = Vec::new();
    for (i, h) in g.initial_metadata.iter().enumerate() {
        let key = h.key.to_ascii_lowercase();
        if key.is_empty() || key.starts_with(':') || http_header_name_invalid(&key) {
            ctx.error(
                &mp.index(i).field("key"),
                format!("\"{}\" is not a valid metadata key", h.key),
            );
        }
        let value = if h.value.is_empty() {
            String::from_utf8_lossy(&h.raw_value).into_owned()
        } else {
            h.value.clone()
        };
        initial_metadata.push((key, value));
    }
    let target = match &g.target_specifier {
        Some(T::EnvoyGrpc(e)) => {
            let ep = path.field("envoy_grpc");
            if e.cluster_name.is_empty() {
                ctx.error(&ep.field("cluster_name"), "must not be empty");
            } else if check_cluster && ctx.cluster_known(&e.cluster_name) == Some(false) {
                ctx.error(
                    &ep.field("cluster_name"),
                    format!("unknown cluster '{}'", e.cluster_name),
                );
            }
            GrpcTarget::EnvoyGrpc {
                cluster_name: e.cluster_name.clone(),
                authority: (!e.authority.is_empty()).then(|| e.authority.clone()),
            }
        }
        Some(T::GoogleGrpc(gg)) => {
            let gp = path.field("google_grpc");
            if gg.target_uri.is_empty() {
                ctx.error(&gp.field("target_uri"), "must not be empty");
            }
            GrpcTarget::GoogleGrpc {
                target_uri: gg.target_uri.clone(),
                stat_prefix: gg.stat_prefix.clone(),
            }
        }
        None => {
            ctx.error(path, "one of envoy_grpc or google_grpc is required");
            return None;
        }
    };
    // Envoy's Google gRPC client ignores `retry_policy` (documented on the field).
    let retry_policy = retry_policy.filter(|_| matches!(target, GrpcTarget::EnvoyGrpc { .. }));
    Some(GrpcService {
        target,
        timeout,
        initial_metadata,
        retry_policy,
    })
}

fn http_header_name_invalid(name: &str) -> bool {
    !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
