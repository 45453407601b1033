//! `RouteAction` (forward to a cluster) and `DirectResponseAction`.

use super::headers::{self, HeaderMutations};
use super::retry::{self, HedgePolicy, RetryPolicy};
use super::rewrite::{self, RegexRewrite};
use super::{PerFilterConfigs, Settings, per_filter_configs};
use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::route::v3 as pb;
use std::time::Duration;

/// Which cluster a request goes to.
#[derive(Debug, Clone)]
pub enum ClusterSpecifier {
    /// A named cluster.
    Cluster(String),
    /// The cluster named by this request header (lower-cased name; first value).
    Header(String),
    /// One of several clusters, chosen at random by weight.
    Weighted(WeightedClusters),
}

/// `weighted_clusters`.
#[derive(Debug, Clone)]
pub struct WeightedClusters {
    /// The clusters, in config order.
    pub clusters: Vec<ClusterWeight>,
    /// Sum of the weights (> 0).
    pub total_weight: u64,
    /// Running sums of the weights: `cumulative[i]` is the end of cluster `i`'s range.
    cumulative: Vec<u64>,
    /// `use_hash_policy`: the route's hash (when its policies produce one)
    /// picks the cluster instead of the random value.
    pub use_hash_policy: bool,
}

impl WeightedClusters {
    /// The cluster for a random value, as Envoy picks: `random % total`, then the
    /// first cluster whose cumulative range contains it.
    pub fn pick(&self, random: u64) -> Option<&ClusterWeight> {
        let v = random % self.total_weight.max(1);
        let i = self.cumulative.partition_point(|&end| end <= v);
        self.clusters.get(i)
    }
}

/// One weighted cluster.
#[derive(Debug, Clone)]
pub struct ClusterWeight {
    /// Cluster name.
    pub name: String,
    /// Weight (may be 0: never picked).
    pub weight: u32,
    /// Request header mutations applied when this cluster is picked (most specific level).
    pub request_headers: HeaderMutations,
    /// Response header mutations applied when this cluster is picked.
    pub response_headers: HeaderMutations,
    /// Overrides the route's host rewrite.
    pub host_rewrite_literal: Option<String>,
    /// Per-filter configs (most specific level).
    pub typed_per_filter_config: PerFilterConfigs,
}

/// How the upstream request's path is rewritten.
#[derive(Debug, Clone)]
pub enum PathRewrite {
    /// Replace the matched prefix (or the whole path for `path`/`safe_regex` routes).
    Prefix(String),
    /// Replace every regex match.
    Regex(RegexRewrite),
}

/// How the upstream request's host (`:authority`) is rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRewrite {
    /// This literal.
    Literal(String),
    /// The picked upstream host's hostname (DNS clusters).
    Auto,
    /// The value of this request header (lower-cased name), when present.
    Header(String),
    /// `host_rewrite_path_regex`: the substitution's result on the path
    /// (without query and fragment).
    PathRegex(RegexRewrite),
}

/// `RouteAction.cluster_not_found_response_code` and `priority` as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoutingPriority {
    /// `DEFAULT` circuit-breaker thresholds.
    Default,
    /// `HIGH` circuit-breaker thresholds.
    High,
}

/// A validated `RouteAction` with Envoy's defaults applied.
#[derive(Debug, Clone)]
pub struct RouteAction {
    /// Where requests go.
    pub cluster: ClusterSpecifier,
    /// Status sent when the cluster does not exist: 503 (default), 404 or 500.
    pub cluster_not_found_response_code: u16,
    /// Path rewrite, if any (the original goes to `x-envoy-original-path`).
    pub path_rewrite: Option<PathRewrite>,
    /// Host rewrite, if any.
    pub host_rewrite: Option<HostRewrite>,
    /// Append the original host to `x-forwarded-host` when the host is rewritten.
    pub append_x_forwarded_host: bool,
    /// Whole-request timeout (default 15 s); `None` = disabled (`0s` in config).
    pub timeout: Option<Duration>,
    /// Stream idle timeout for this route: `None` = the connection manager's;
    /// `Some(Duration::ZERO)` = disabled.
    pub idle_timeout: Option<Duration>,
    /// Retry policy; replaces the virtual host's when set.
    pub retry_policy: Option<RetryPolicy>,
    /// Hedge policy; replaces the virtual host's when set.
    pub hedge_policy: Option<HedgePolicy>,
    /// Circuit-breaker priority.
    pub priority: RoutingPriority,
    /// `max_stream_duration`: replaces the connection manager's for this route.
    pub max_stream_duration: Option<MaxStreamDuration>,
    /// `upgrade_configs`: upgrade types this route enables or disables, over
    /// the connection manager's.
    pub upgrade_configs: Vec<RouteUpgrade>,
    /// `request_mirror_policies`: copies of each request sent elsewhere.
    pub request_mirror_policies: Vec<super::mirror::MirrorPolicy>,
    /// `rate_limits`: descriptors for the rate limit filters.
    pub rate_limits: Vec<crate::filters::rate_limit_actions::RateLimitPolicy>,
    /// `include_vh_rate_limits`: the virtual host's `rate_limits` apply too.
    pub include_vh_rate_limits: bool,
    /// `hash_policy`: the request's hash for consistent-hashing balancers and
    /// `weighted_clusters.use_hash_policy`.
    pub hash_policy: Vec<super::hash_policy::HashPolicy>,
}

/// A route's word on one upgrade type (`RouteAction.UpgradeConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteUpgrade {
    /// The upgrade type, lower-cased (Envoy compares case-insensitively).
    pub upgrade_type: String,
    /// Allowed on this route (default true), whatever the connection manager
    /// says; `false` refuses it here even when the connection manager enables it.
    pub enabled: bool,
}

impl RouteAction {
    /// The route's say on upgrades of `kind`: `Some(enabled)` when it names
    /// that type, `None` to leave it to the connection manager.
    pub fn upgrade(&self, kind: &str) -> Option<bool> {
        self.upgrade_configs
            .iter()
            .find(|u| u.upgrade_type.eq_ignore_ascii_case(kind))
            .map(|u| u.enabled)
    }
}

/// A route's `max_stream_duration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaxStreamDuration {
    /// The stream's limit: `None` = the connection manager's,
    /// `Some(Duration::ZERO)` = none.
    pub max_stream_duration: Option<Duration>,
    /// When set and the request carries `grpc-timeout`, that value is the
    /// stream's limit, capped at this (`ZERO`: not capped).
    pub grpc_timeout_header_max: Option<Duration>,
    /// Subtracted from the `grpc-timeout` value (floored at zero).
    pub grpc_timeout_header_offset: Option<Duration>,
}

impl MaxStreamDuration {
    /// The stream's limit for a request whose `grpc-timeout` header is
    /// `grpc_timeout`: `None` = the connection manager's, `Some(None)` = no
    /// limit, as Envoy's `refreshDurationTimeout`. A `grpc-timeout` of zero
    /// (or one the offset uses up) is a limit already reached, not none.
    pub fn limit(&self, grpc_timeout: Option<Duration>) -> Option<Option<Duration>> {
        let (Some(max), Some(mut t)) = (self.grpc_timeout_header_max, grpc_timeout) else {
            return self
                .max_stream_duration
                .map(|d| (!d.is_zero()).then_some(d));
        };
        if !max.is_zero() && t > max {
            t = max;
        }
        if !t.is_zero()
            && let Some(offset) = self.grpc_timeout_header_offset
        {
            t = t.saturating_sub(offset);
        }
        Some(Some(t))
    }
}

/// A validated `DirectResponseAction`.
#[derive(Debug, Clone)]
pub struct DirectResponse {
    /// Status, 200..=599.
    pub status: u16,
    /// Body, if any (at most `max_direct_response_body_size_bytes`); `Bytes` so
    /// each response shares it instead of copying it.
    pub body: Option<bytes::Bytes>,
    /// `body_format`: the body is this rendered per request (with `body` as
    /// `%LOCAL_REPLY_BODY%`) instead of `body`.
    pub body_format: Option<BodyFormat>,
}

/// A direct response's `body_format` (a `SubstitutionFormatString`).
#[derive(Debug, Clone)]
pub struct BodyFormat {
    /// What the body is made of.
    pub template: BodyTemplate,
    /// `omit_empty_values`: missing values render as nothing instead of `-`.
    pub omit_empty_values: bool,
    /// The `content-type` of a non-empty body: `content_type`, or Envoy's
    /// default for the format (`text/plain`, `application/json`).
    pub content_type: String,
}

/// The body a [`BodyFormat`] produces.
#[derive(Debug, Clone)]
pub enum BodyTemplate {
    /// A format without commands, kept as bytes: Envoy sends inline bytes that
    /// are not UTF-8 (an image) as they are.
    Literal(bytes::Bytes),
    /// A text or JSON format rendered per request with the access-log formatter.
    Format(crate::listener::access_log::LogFormat),
}

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// Translates a `RouteAction`; `path` is the `route` field.
pub(crate) fn route_action(
    ra: &pb::RouteAction,
    path: &Path<'_>,
    settings: &Settings,
    ctx: &mut Ctx,
) -> Option<RouteAction> {
    use pb::route_action::ClusterSpecifier as C;
    use pb::route_action::HostRewriteSpecifier as H;
    let before = ctx.error_count();
    let cluster = match &ra.cluster_specifier {
        Some(C::Cluster(name)) => {
            let p = path.field("cluster");
            if name.is_empty() {
                ctx.error(&p, "must not be empty");
            } else {
                check_cluster(name, &p, settings, ctx);
            }
            Some(ClusterSpecifier::Cluster(name.clone()))
        }
        Some(C::ClusterHeader(h)) => {
            let p = path.field("cluster_header");
            if h.is_empty() {
                ctx.error(&p, "must not be empty");
            } else if !headers::valid_name_chars(h) {
                ctx.error(&p, "must not contain NUL, CR or LF");
            }
            Some(ClusterSpecifier::Header(h.to_ascii_lowercase()))
        }
        Some(C::WeightedClusters(w)) => {
            weighted(w, &path.field("weighted_clusters"), settings, ctx)
                .map(ClusterSpecifier::Weighted)
        }
        // Refused by the support walker.
        Some(C::ClusterSpecifierPlugin(_) | C::InlineClusterSpecifierPlugin(_)) => None,
        None => {
            ctx.error(
                path,
                "one of cluster, cluster_header or weighted_clusters is required",
            );
            None
        }
    };
    use pb::route_action::ClusterNotFoundResponseCode as Nf;
    let cluster_not_found_response_code = match Nf::try_from(ra.cluster_not_found_response_code) {
        Ok(Nf::ServiceUnavailable) => 503,
        Ok(Nf::NotFound) => 404,
        Ok(Nf::InternalServerError) => 500,
        Err(_) => {
            ctx.error(
                &path.field("cluster_not_found_response_code"),
                format!("unknown code {}", ra.cluster_not_found_response_code),
            );
            503
        }
    };
    let regex = ra
        .regex_rewrite
        .as_ref()
        .and_then(|r| rewrite::regex_rewrite(r, &path.field("regex_rewrite"), ctx));
    let path_rewrite = match (ra.prefix_rewrite.is_empty(), ra.regex_rewrite.is_some()) {
        (false, true) => {
            ctx.error(
                &path.field("regex_rewrite"),
                "prefix_rewrite and regex_rewrite cannot both be set",
            );
            None
        }
        (false, false) => {
            if !headers::valid_name_chars(&ra.prefix_rewrite) {
                ctx.error(
                    &path.field("prefix_rewrite"),
                    "must not contain NUL, CR or LF",
                );
            }
            Some(PathRewrite::Prefix(ra.prefix_rewrite.clone()))
        }
        (true, _) => regex.map(PathRewrite::Regex),
    };
    let host_rewrite = match &ra.host_rewrite_specifier {
        None => None,
        Some(H::HostRewriteLiteral(h)) => {
            if !headers::valid_name_chars(h) {
                ctx.error(
                    &path.field("host_rewrite_literal"),
                    "must not contain NUL, CR or LF",
                );
            }
            Some(HostRewrite::Literal(h.clone()))
        }
        Some(H::AutoHostRewrite(b)) => b.value.then_some(HostRewrite::Auto),
        Some(H::HostRewriteHeader(h)) => {
            let p = path.field("host_rewrite_header");
            if h.is_empty() {
                ctx.error(&p, "must not be empty");
            } else if !headers::valid_name_chars(h) {
                ctx.error(&p, "must not contain NUL, CR or LF");
            }
            Some(HostRewrite::Header(h.to_ascii_lowercase()))
        }
        Some(H::HostRewritePathRegex(r)) => {
            rewrite::regex_rewrite(r, &path.field("host_rewrite_path_regex"), ctx)
                .map(HostRewrite::PathRegex)
        }
        // Refused by the support walker.
        Some(H::HostRewrite(_)) => None,
    };
    let timeout = core::optional_timeout(
        ra.timeout.as_ref(),
        Some(DEFAULT_TIMEOUT),
        &path.field("timeout"),
        ctx,
    );
    let idle_timeout = ra
        .idle_timeout
        .as_ref()
        .and_then(|d| core::duration(d, &path.field("idle_timeout"), ctx));
    let retry_policy = ra
        .retry_policy
        .as_ref()
        .and_then(|r| retry::retry_policy(r, &path.field("retry_policy"), ctx));
    let hedge_policy = ra
        .hedge_policy
        .as_ref()
        .and_then(|h| retry::hedge_policy(h, &path.field("hedge_policy"), ctx));
    let max_stream_duration = ra.max_stream_duration.as_ref().map(|m| {
        let p = path.field("max_stream_duration");
        let field =
            |d: Option<&envoy_types::pb::google::protobuf::Duration>, name: &str, ctx: &mut Ctx| {
                d.and_then(|d| core::duration(d, &p.field(name), ctx))
            };
        MaxStreamDuration {
            max_stream_duration: field(m.max_stream_duration.as_ref(), "max_stream_duration", ctx),
            grpc_timeout_header_max: field(
                m.grpc_timeout_header_max.as_ref(),
                "grpc_timeout_header_max",
                ctx,
            ),
            grpc_timeout_header_offset: field(
                m.grpc_timeout_header_offset.as_ref(),
                "grpc_timeout_header_offset",
                ctx,
            ),
        }
    });
    let upgrade_configs = route_upgrades(&ra.upgrade_configs, &path.field("upgrade_configs"), ctx);
    let request_mirror_policies = super::mirror::translate(
        &ra.request_mirror_policies,
        &path.field("request_mirror_policies"),
        settings,
        ctx,
    );
    use envoy_types::pb::envoy::config::core::v3::RoutingPriority as Rp;
    let priority = match Rp::try_from(ra.priority) {
        Ok(Rp::Default) => RoutingPriority::Default,
        Ok(Rp::High) => RoutingPriority::High,
        Err(_) => {
            ctx.error(
                &path.field("priority"),
                format!("unknown priority {}", ra.priority),
            );
            RoutingPriority::Default
        }
    };
    let rate_limits = crate::filters::rate_limit_actions::route_policies(
        &ra.rate_limits,
        &path.field("rate_limits"),
        ctx,
    );
    let hash_policy =
        super::hash_policy::translate(&ra.hash_policy, &path.field("hash_policy"), ctx);
    if ctx.error_count() != before {
        return None;
    }
    Some(RouteAction {
        hash_policy,
        rate_limits: rate_limits.unwrap_or_default(),
        #[allow(deprecated)] // Envoy 1.40 still honours it.
        include_vh_rate_limits: ra.include_vh_rate_limits.as_ref().is_some_and(|b| b.value),
        cluster: cluster?,
        cluster_not_found_response_code,
        path_rewrite,
        host_rewrite,
        append_x_forwarded_host: ra.append_x_forwarded_host,
        timeout,
        idle_timeout,
        retry_policy,
        hedge_policy,
        priority,
        max_stream_duration,
        upgrade_configs,
        request_mirror_policies,
    })
}

/// `RouteAction.upgrade_configs`, with Envoy's checks: a type at least one
/// character long, named once per route.
fn route_upgrades(
    list: &[pb::route_action::UpgradeConfig],
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Vec<RouteUpgrade> {
    let mut out: Vec<RouteUpgrade> = Vec::with_capacity(list.len());
    for (i, u) in list.iter().enumerate() {
        let at = path.index(i);
        let p = at.field("upgrade_type");
        if u.upgrade_type.is_empty() {
            ctx.error(&p, "must not be empty");
            continue;
        }
        if !headers::valid_name_chars(&u.upgrade_type) {
            ctx.error(&p, "must not contain NUL, CR or LF");
            continue;
        }
        // Envoy forwards CONNECT through its own CONNECT support (connect_config),
        // which courier does not have; the request would not be what was asked.
        if u.upgrade_type.eq_ignore_ascii_case("CONNECT") {
            ctx.unsupported(&p, "a CONNECT upgrade on a route");
            continue;
        }
        let upgrade_type = u.upgrade_type.to_ascii_lowercase();
        if out.iter().any(|o| o.upgrade_type == upgrade_type) {
            // Envoy's wording.
            ctx.error(&p, format!("Duplicate upgrade {}", u.upgrade_type));
            continue;
        }
        out.push(RouteUpgrade {
            upgrade_type,
            enabled: u.enabled.as_ref().is_none_or(|b| b.value),
        });
    }
    out
}

fn check_cluster(name: &str, path: &Path<'_>, settings: &Settings, ctx: &mut Ctx) {
    if settings.validate_clusters && ctx.cluster_known(name) == Some(false) {
        ctx.error(path, format!("unknown cluster '{name}'"));
    }
}

fn weighted(
    w: &pb::WeightedCluster,
    path: &Path<'_>,
    settings: &Settings,
    ctx: &mut Ctx,
) -> Option<WeightedClusters> {
    let cp = path.field("clusters");
    if w.clusters.is_empty() {
        ctx.error(&cp, "at least one cluster is required");
        return None;
    }
    let before = ctx.error_count();
    let mut clusters = Vec::with_capacity(w.clusters.len());
    let mut cumulative = Vec::with_capacity(w.clusters.len());
    let mut total: u64 = 0;
    for (i, c) in w.clusters.iter().enumerate() {
        let p = cp.index(i);
        // A cluster_header entry is refused by the support walker; do not also
        // complain about its missing name.
        if c.name.is_empty() && c.cluster_header.is_empty() {
            ctx.error(&p.field("name"), "must not be empty");
        } else if !c.name.is_empty() {
            check_cluster(&c.name, &p.field("name"), settings, ctx);
        }
        let Some(weight) = c.weight.as_ref().map(|v| v.value) else {
            ctx.error(&p.field("weight"), "is required");
            continue;
        };
        total += u64::from(weight);
        cumulative.push(total);
        let (request_headers, response_headers) = headers::both(
            &p,
            (&c.request_headers_to_add, &c.request_headers_to_remove),
            (&c.response_headers_to_add, &c.response_headers_to_remove),
            ctx,
        );
        use pb::weighted_cluster::cluster_weight::HostRewriteSpecifier as H;
        let host_rewrite_literal = match &c.host_rewrite_specifier {
            Some(H::HostRewriteLiteral(h)) => {
                if !headers::valid_name_chars(h) {
                    ctx.error(
                        &p.field("host_rewrite_literal"),
                        "must not contain NUL, CR or LF",
                    );
                }
                Some(h.clone())
            }
            None => None,
        };
        clusters.push(ClusterWeight {
            name: c.name.clone(),
            weight,
            request_headers,
            response_headers,
            host_rewrite_literal,
            typed_per_filter_config: per_filter_configs(&c.typed_per_filter_config, &p, ctx),
        });
    }
    if ctx.error_count() != before {
        return None;
    }
    if total == 0 {
        ctx.error(path, "the sum of weights must be greater than 0");
        return None;
    }
    if total > u64::from(u32::MAX) {
        ctx.error(
            path,
            format!("the sum of weights must not exceed {}", u32::MAX),
        );
        return None;
    }
    // total_weight is deprecated and Envoy 1.40 no longer checks it against the
    // sum: the sum is the modulus, as here.
    use pb::weighted_cluster::RandomValueSpecifier as R;
    let use_hash_policy = match &w.random_value_specifier {
        Some(R::UseHashPolicy(b)) => b.value,
        // Refused by the support walker.
        Some(R::HeaderName(_)) | None => false,
    };
    Some(WeightedClusters {
        clusters,
        total_weight: total,
        cumulative,
        use_hash_policy,
    })
}

/// Translates a `DirectResponseAction`; `path` is the `direct_response` field.
pub(crate) fn direct_response(
    dr: &pb::DirectResponseAction,
    path: &Path<'_>,
    settings: &Settings,
    ctx: &mut Ctx,
) -> Option<DirectResponse> {
    let status = match u16::try_from(dr.status) {
        Ok(s) if (200..=599).contains(&s) => Some(s),
        _ => {
            ctx.error(
                &path.field("status"),
                format!("{} is not a status between 200 and 599", dr.status),
            );
            None
        }
    };
    let bp = path.field("body");
    let body = match dr.body.as_ref() {
        None => None,
        Some(b) => match core::data_source(Some(b), &bp, ctx) {
            Some(bytes) if bytes.len() > settings.max_direct_response_body_size as usize => {
                ctx.error(
                    &bp,
                    format!(
                        "response body size is {} bytes; maximum is {} (max_direct_response_body_size_bytes)",
                        bytes.len(),
                        settings.max_direct_response_body_size
                    ),
                );
                return None;
            }
            Some(bytes) => Some(bytes::Bytes::from(bytes)),
            None => return None,
        },
    };
    let body_format = match &dr.body_format {
        None => None,
        Some(f) => Some(body_format(f, &path.field("body_format"), ctx)?),
    };
    Some(DirectResponse {
        status: status?,
        body,
        body_format,
    })
}

/// Translates a direct response's `body_format`.
pub(crate) fn body_format(
    f: &envoy_types::pb::envoy::config::core::v3::SubstitutionFormatString,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<BodyFormat> {
    use crate::listener::access_log::{LogFormat, Use, substitution_format};
    use envoy_types::pb::envoy::config::core::v3::data_source::Specifier;
    use envoy_types::pb::envoy::config::core::v3::substitution_format_string::Format as F;
    let template = match &f.format {
        // Bytes that are not text: sent as they are when nothing in them
        // looks like a command (an image); the formatter works on text.
        Some(F::TextFormatSource(ds)) => match &ds.specifier {
            Some(Specifier::InlineBytes(b)) if std::str::from_utf8(b).is_err() => {
                if b.contains(&b'%') {
                    ctx.unsupported(
                        &path.field("text_format_source").field("inline_bytes"),
                        "a format in bytes that are not UTF-8 and contain '%'",
                    );
                    return None;
                }
                BodyTemplate::Literal(bytes::Bytes::from(b.clone()))
            }
            _ => BodyTemplate::Format(substitution_format(f, path, ctx, Use::LocalReply)?),
        },
        _ => BodyTemplate::Format(substitution_format(f, path, ctx, Use::LocalReply)?),
    };
    let content_type = if !f.content_type.is_empty() {
        f.content_type.clone()
    } else if matches!(template, BodyTemplate::Format(LogFormat::Json(_))) {
        "application/json".to_string()
    } else {
        "text/plain".to_string()
    };
    // What a header value may hold (no control characters but tab).
    if !content_type
        .bytes()
        .all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
    {
        ctx.error(&path.field("content_type"), "is not a valid header value");
        return None;
    }
    Some(BodyFormat {
        template,
        omit_empty_values: f.omit_empty_values,
        content_type,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_pick_follows_envoy() {
        let cw = |name: &str, weight| ClusterWeight {
            name: name.into(),
            weight,
            request_headers: HeaderMutations::default(),
            response_headers: HeaderMutations::default(),
            host_rewrite_literal: None,
            typed_per_filter_config: PerFilterConfigs::new(),
        };
        let w = WeightedClusters {
            clusters: vec![cw("a", 1), cw("zero", 0), cw("b", 3)],
            total_weight: 4,
            cumulative: vec![1, 1, 4],
            use_hash_policy: false,
        };
        let names: Vec<&str> = (0..8).map(|r| w.pick(r).unwrap().name.as_str()).collect();
        assert_eq!(names, ["a", "b", "b", "b", "a", "b", "b", "b"]);
    }
}
