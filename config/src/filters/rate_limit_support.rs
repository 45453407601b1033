//! The support table of the rate limit filters (`local_ratelimit`, `ratelimit`) and the
//! rate-limit actions they share with routes and virtual hosts.

use crate::support::{ALL, Support};

/// Fields of the rate limit messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    // local_ratelimit.
    (
        "envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
        &[
            "stat_prefix",
            "status",
            "token_bucket",
            "filter_enabled",
            "filter_enforced",
            "descriptors",
            "stage",
            "enable_x_ratelimit_headers",
            "vh_rate_limits",
            "always_consume_default_token_bucket",
            "rate_limited_as_resource_exhausted",
            "rate_limits",
            "max_dynamic_descriptors",
        ],
    ),
    ("envoy.type.v3.TokenBucket", ALL),
    (
        "envoy.extensions.common.ratelimit.v3.LocalRateLimitDescriptor",
        ALL,
    ),
    (
        "envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry",
        ALL,
    ),
    // Rate-limit actions (filters/rate_limit_actions.rs).
    (
        "envoy.config.route.v3.RateLimit",
        &[
            "actions",
            "stage",
            "disable_key",
            "hits_addend",
            "apply_on_stream_done",
        ],
    ),
    ("envoy.config.route.v3.RateLimit.HitsAddend", ALL),
    (
        "envoy.config.route.v3.RateLimit.Action",
        &[
            "destination_cluster",
            "request_headers",
            "remote_address",
            "generic_key",
            "header_value_match",
            "query_parameter_value_match",
            "masked_remote_address",
            "remote_address_match",
        ],
    ),
    (
        "envoy.config.route.v3.RateLimit.Action.DestinationCluster",
        ALL,
    ),
    ("envoy.config.route.v3.RateLimit.Action.RequestHeaders", ALL),
    ("envoy.config.route.v3.RateLimit.Action.RemoteAddress", ALL),
    ("envoy.config.route.v3.RateLimit.Action.GenericKey", ALL),
    (
        "envoy.config.route.v3.RateLimit.Action.HeaderValueMatch",
        ALL,
    ),
    (
        "envoy.config.route.v3.RateLimit.Action.QueryParameterValueMatch",
        ALL,
    ),
    (
        "envoy.config.route.v3.RateLimit.Action.MaskedRemoteAddress",
        ALL,
    ),
    (
        "envoy.config.route.v3.RateLimit.Action.RemoteAddressMatch",
        ALL,
    ),
    ("envoy.type.matcher.v3.AddressMatcher", ALL),
    // ratelimit (filters/ratelimit.rs).
    (
        "envoy.extensions.filters.http.ratelimit.v3.RateLimit",
        &[
            "domain",
            "stage",
            "request_type",
            "timeout",
            "failure_mode_deny",
            "rate_limited_as_resource_exhausted",
            "rate_limit_service",
            "enable_x_ratelimit_headers",
            "disable_x_envoy_ratelimited_header",
            "rate_limited_status",
            "rate_limits",
        ],
    ),
    (
        "envoy.config.ratelimit.v3.RateLimitServiceConfig",
        &["grpc_service", "transport_api_version"],
    ),
    (
        "envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
        &["rate_limits", "domain"],
    ),
    ("xds.core.v3.CidrRange", ALL),
];
