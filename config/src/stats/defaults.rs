//! Envoy's default tag extractors (`source/common/config/well_known_names.cc`),
//! in Envoy's order: the RE2 patterns first, then the token patterns (Envoy
//! keeps them in two lists and adds the first list before the second). The
//! set is Envoy 1.40's: its binary holds these patterns and tag names (for
//! example `envoy.health_check_name`, and no `_rq_status` response code).

use super::tags::{Extractor, Pattern};

/// Placeholders Envoy's patterns are written with, and what they stand for.
const EXPANSIONS: &[(&str, &str)] = &[
    // An IPv4 or bracketed IPv6 address, then `_` and a port.
    (
        "<ADDRESS>",
        r"(?:(?:\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[[a-fA-F_\d]+\])_\d+)",
    ),
    ("<CIPHER>", r"[\w-]+"),
    ("<TLS_VERSION>", r"TLSv\d\.\d"),
    ("<TAG_VALUE>", r"[^\.]+"),
    // RE2 reads the `-` after `\w` as a literal; the `regex` crate needs it escaped.
    ("<ROUTE_CONFIG_NAME>", r"[\w\-\./]+"),
    ("<SCOPED_ROUTE_CONFIG_NAME>", r"[\w\-\.]+"),
    (
        "<LISTENER_OR_CLUSTER_WITH_NAME>",
        r"(?:listener|cluster)\..*?",
    ),
    ("<PROXY_PROTOCOL_VERSION>", r"\d"),
];

/// `(tag name, RE2 pattern, required substring, value that voids a match)`.
const RE2: &[(&str, &str, &str, &str)] = &[
    ("envoy.response_code", r"_rq(_(\d{3}))$", "_rq_", ""),
    ("envoy.response_code_class", r"_rq_((\d))xx$", "_rq_", ""),
    (
        "envoy.dynamo_partition_id",
        r"^http\.<TAG_VALUE>\.dynamodb\.table\.<TAG_VALUE>\.capacity\.<TAG_VALUE>(\.__partition_id=(\w{7}))$",
        ".dynamodb.table.",
        "",
    ),
    (
        "envoy.dynamo_operation",
        r"^http\.<TAG_VALUE>\.dynamodb.(?:operation|table\.<TAG_VALUE>\.capacity)(\.(<TAG_VALUE>))(?:\.|$)",
        ".dynamodb.",
        "",
    ),
    (
        "envoy.dynamo_table",
        r"^http\.<TAG_VALUE>\.dynamodb.(?:table|error)\.((<TAG_VALUE>)\.)",
        ".dynamodb.",
        "",
    ),
    (
        "envoy.ssl_cipher",
        r"^listener\..*?\.ssl\.ciphers(\.(<CIPHER>))$",
        ".ssl.ciphers.",
        "",
    ),
    (
        "envoy.ssl_curve",
        r"^<LISTENER_OR_CLUSTER_WITH_NAME>\.ssl\.curves(\.(<CIPHER>))$",
        ".ssl.curves.",
        "",
    ),
    (
        "envoy.ssl_sigalg",
        r"^<LISTENER_OR_CLUSTER_WITH_NAME>\.ssl\.sigalgs(\.(<CIPHER>))$",
        ".ssl.sigalgs.",
        "",
    ),
    (
        "envoy.ssl_version",
        r"^<LISTENER_OR_CLUSTER_WITH_NAME>\.ssl\.versions(\.(<TLS_VERSION>))$",
        ".ssl.versions.",
        "",
    ),
    (
        "cipher_suite",
        r"^cluster\.<TAG_VALUE>\.ssl\.ciphers(\.(<CIPHER>))$",
        ".ssl.ciphers.",
        "",
    ),
    (
        "envoy.http_conn_manager_prefix",
        r"^listener\..*?\.http\.((<TAG_VALUE>)\.)",
        ".http.",
        "",
    ),
    (
        "envoy.worker_id",
        r"^(?:listener\.(?:<ADDRESS>|<TAG_VALUE>)|server|listener_manager|thread_local_cluster_manager)\.worker_((\d+)\.)",
        "",
        "",
    ),
    (
        "envoy.listener_address",
        r"^listener\.((<ADDRESS>|<TAG_VALUE>)\.)",
        "",
        "admin",
    ),
    (
        "envoy.rds_route_config",
        r"^http\.<TAG_VALUE>\.rds\.((<ROUTE_CONFIG_NAME>)\.)\w+?$",
        ".rds.",
        "",
    ),
    (
        "envoy.scoped_rds_config",
        r"^http\.<TAG_VALUE>\.scoped_rds\.((<SCOPED_ROUTE_CONFIG_NAME>)\.)\w+?$",
        ".scoped_rds.",
        "",
    ),
    (
        "envoy.rbac_policy_name",
        r"^http\.<TAG_VALUE>\.rbac\.(?:<TAG_VALUE>\.)?policy\.((<TAG_VALUE>)\.)(allowed|shadow_allowed|denied|shadow_denied)$",
        "",
        "",
    ),
    (
        "envoy.rbac_http_prefix",
        r"^http\.<TAG_VALUE>\.rbac\.((<TAG_VALUE>)\.).*?",
        "",
        "policy",
    ),
    (
        "envoy.proxy_protocol_prefix",
        r"^proxy_proto\.((<TAG_VALUE>)\.).+$",
        "",
        "versions",
    ),
    (
        "envoy.proxy_protocol_version",
        r"^proxy_proto\.((?:<TAG_VALUE>\.)?versions\.v(<PROXY_PROTOCOL_VERSION>)\.)\w+$",
        "",
        "",
    ),
    (
        "envoy.tls_certificate",
        r"^<LISTENER_OR_CLUSTER_WITH_NAME>\.ssl\.certificate\.((<TAG_VALUE>)\.).*$",
        ".ssl.certificate",
        "",
    ),
    (
        "envoy.xds_resource_name",
        r"^sds\.((<TAG_VALUE>)\.).+",
        "",
        "",
    ),
    (
        "envoy.health_check_name",
        r"^cluster\.<TAG_VALUE>\.health_check(\.name\.(<TAG_VALUE>))\..+",
        ".health_check.name.",
        "",
    ),
];

/// `(tag name, token pattern)`.
const TOKENS: &[(&str, &str)] = &[
    (
        "envoy.mongo_callsite",
        "mongo.*.collection.*.callsite.$.query.**",
    ),
    ("envoy.mongo_collection", "mongo.*.collection.$.**.query.*"),
    ("envoy.mongo_cmd", "mongo.*.cmd.$.**"),
    ("envoy.grpc_bridge_method", "cluster.*.grpc.*.$.**"),
    ("envoy.http_user_agent", "http.*.user_agent.$.**"),
    ("envoy.virtual_cluster", "vhost.*.vcluster.$.**"),
    ("envoy.fault_downstream_cluster", "http.*.fault.$.**"),
    ("envoy.grpc_bridge_service", "cluster.*.grpc.$.**"),
    ("envoy.tcp_prefix", "tcp.$.**"),
    ("envoy.udp_prefix", "udp.$.**"),
    ("envoy.clientssl_prefix", "auth.clientssl.$.**"),
    ("envoy.ratelimit_prefix", "ratelimit.$.**"),
    ("envoy.cluster_name", "cluster.$.**"),
    ("envoy.ext_authz_prefix", "cluster.*.ext_authz.$.**"),
    ("envoy.ext_authz_prefix", "http.*.ext_authz.$.**"),
    ("envoy.http_conn_manager_prefix", "http.$.**"),
    ("envoy.virtual_host", "vhost.$.**"),
    ("envoy.mongo_prefix", "mongo.$.**"),
    ("envoy.route", "vhost.*.route.$.**"),
    ("envoy.thrift_prefix", "thrift.$.**"),
    ("envoy.redis_prefix", "redis.$.**"),
    (
        "envoy.local_http_ratelimit_prefix",
        "$.http_local_rate_limit.**",
    ),
    (
        "envoy.local_network_ratelimit_prefix",
        "local_rate_limit.$.**",
    ),
    (
        "envoy.local_listener_ratelimit_prefix",
        "listener_local_ratelimit.$.**",
    ),
    ("envoy.dns_filter_prefix", "dns_filter.$.**"),
    ("envoy.connection_limit_prefix", "connection_limit.$.**"),
    ("envoy.rbac_prefix", "$.rbac.**"),
    ("envoy.google_grpc_client_prefix", "grpc.$.**"),
];

fn expand(pattern: &str) -> String {
    EXPANSIONS
        .iter()
        .fold(pattern.to_string(), |p, (from, to)| p.replace(from, to))
}

/// Envoy's default extractors named `name` (all of them for `None`), in order.
/// A built-in pattern that does not compile is skipped: they are constants
/// checked by this module's tests.
pub(crate) fn extractors(name: Option<&str>) -> Vec<Extractor> {
    let wanted = |n: &str| name.is_none_or(|w| w == n);
    let regexes =
        RE2.iter()
            .filter(|(n, ..)| wanted(n))
            .filter_map(|&(n, re, substr, negative)| {
                let re = regex::Regex::new(&expand(re)).ok()?;
                Some(Extractor::new(n, Pattern::Re2 { re, negative }, substr))
            });
    let tokens = TOKENS.iter().filter(|(n, _)| wanted(n)).map(|&(n, t)| {
        let tokens = t.split('.').map(str::to_string).collect();
        Extractor::new(n, Pattern::Tokens(tokens), "")
    });
    regexes.chain(tokens).collect()
}

#[cfg(test)]
pub(crate) fn count() -> usize {
    RE2.len() + TOKENS.len()
}
