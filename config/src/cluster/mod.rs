//! Clusters: discovery type, endpoints, load balancing, circuit breakers, outlier
//! detection, health checks, upstream HTTP and TLS.
//!
//! [`translate`] checks a `Cluster` against Envoy's PGV rules and config-time checks
//! and builds a [`Cluster`] with every default applied, so the data plane never looks
//! at a proto. Each part lives in its own submodule.

mod circuit_breaker;
mod dfp;
mod endpoint;
mod hash_lb;
mod health_check;
mod keepalive;
mod lb;
mod outlier;
mod protocol;
mod proxy_socket;
mod slow_start;
mod socket_match;
mod table;
pub mod upstream_filters;
mod values;
mod zone_aware;

pub use circuit_breaker::{CircuitBreakers, RetryBudget, Thresholds};
pub use dfp::DynamicForwardProxy;
pub use endpoint::{
    Endpoint, HealthStatus, LoadAssignment, Locality, LocalityEndpoints, Priority, load_assignment,
};
pub use hash_lb::{Maglev, RingHash, RingHashFunction};
pub use health_check::{
    DEFAULT_RESPONSE_BUFFER_SIZE, GrpcHealthCheck, HeaderAppend, HealthCheck, HealthCheckCodec,
    HealthCheckKind, HttpHealthCheck, RequestHeader, StatusRange, TcpHealthCheck, payloads_match,
};
pub use keepalive::Http2Keepalive;
pub use lb::{LbPolicy, LoadBalancer};
pub use outlier::OutlierDetection;
pub use protocol::{AutoSni, Http2Options, HttpCommonOptions, UpstreamHttp, UpstreamProtocol};
pub use proxy_socket::{ProxyProtocolVersion, UpstreamSocket};
pub use slow_start::SlowStart;
pub use socket_match::{
    DEFAULT_SOCKET, SocketIndex, TransportSocketMatch, resolve as resolve_socket,
};
pub(crate) use table::SUPPORT;
pub use zone_aware::{LocalityBasis, ZoneAware};

use crate::config_source::{self, ConfigSource};
use crate::core::{self, MetadataMap};
use crate::ctx::Ctx;
use crate::path::Path;
use crate::tls::UpstreamTls;
use envoy_types::pb::envoy::config::cluster::v3 as pb;
use envoy_types::pb::envoy::extensions::clusters::dns::v3::DnsCluster;
use std::time::Duration;

/// Envoy's default `connect_timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Envoy's default `per_connection_buffer_limit_bytes` (1 MiB).
pub const DEFAULT_BUFFER_LIMIT: u32 = 1024 * 1024;
/// Envoy's default `dns_refresh_rate`.
pub const DEFAULT_DNS_REFRESH_RATE: Duration = Duration::from_secs(5);

/// A validated cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Name.
    pub name: String,
    /// `alt_stat_name`: the name used in stats instead of `name`, if set.
    pub alt_stat_name: Option<String>,
    /// How the cluster's hosts are found.
    pub discovery: Discovery,
    /// The endpoints given inline (`load_assignment`); `None` for EDS clusters, whose
    /// endpoints arrive as `ClusterLoadAssignment` resources, and for clusters without one.
    pub load_assignment: Option<LoadAssignment>,
    /// Timeout for new upstream connections (default 5 s).
    pub connect_timeout: Duration,
    /// Soft limit on each connection's read and write buffers (default 1 MiB).
    pub per_connection_buffer_limit_bytes: u32,
    /// Load balancing.
    pub lb: LoadBalancer,
    /// Circuit breakers for the DEFAULT and HIGH routing priorities.
    pub circuit_breakers: CircuitBreakers,
    /// Outlier detection, if configured.
    pub outlier_detection: Option<Box<OutlierDetection>>,
    /// Active health checks.
    pub health_checks: Vec<HealthCheck>,
    /// The HTTP protocol spoken to upstream hosts and its options.
    pub http: UpstreamHttp,
    /// Upstream TLS, when the cluster has a TLS `transport_socket`.
    pub tls: Option<Box<UpstreamTls>>,
    /// `upstream_proxy_protocol` around the cluster's `transport_socket`: the
    /// PROXY header version each new connection starts with.
    pub proxy_protocol: Option<ProxyProtocolVersion>,
    /// `transport_socket_matches`: the sockets of hosts whose metadata match
    /// (host socket index `i + 1` is match `i`; 0 is [`Self::tls`]).
    pub transport_socket_matches: Vec<TransportSocketMatch>,
    /// `metadata.filter_metadata`.
    pub metadata: MetadataMap,
    /// `ignore_health_on_host_removal`: a host that leaves the EDS assignment
    /// goes at once even while active health checks pass it (by default it
    /// stays until one fails it).
    pub ignore_health_on_host_removal: bool,
    /// `upstream_connection_options.tcp_keepalive`: TCP keepalive on the
    /// cluster's upstream connections, when set.
    pub tcp_keepalive: Option<TcpKeepalive>,
    /// `track_cluster_stats.per_endpoint_stats`: each host's stats are also
    /// listed as `cluster.<name>.endpoint.<address>.*` by admin's stats
    /// endpoints (Envoy's names and Prometheus labels).
    pub per_endpoint_stats: bool,
    /// `track_cluster_stats.request_response_sizes`: the cluster keeps the
    /// `upstream_{rq,rs}_{headers,body}_size` and `upstream_{rq,rs}_headers_count`
    /// histograms.
    pub request_response_sizes: bool,
}

/// `TcpKeepalive`: `SO_KEEPALIVE` on, and each setting the kernel's default
/// when unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpKeepalive {
    /// Unanswered probes before the connection is dropped (`TCP_KEEPCNT`).
    pub probes: Option<u32>,
    /// Idle time before the first probe (`TCP_KEEPIDLE`).
    pub time: Option<Duration>,
    /// Time between probes (`TCP_KEEPINTVL`).
    pub interval: Option<Duration>,
}

impl Cluster {
    /// The name used in stats: `alt_stat_name` if set, else `name`.
    pub fn stat_name(&self) -> &str {
        self.alt_stat_name.as_deref().unwrap_or(&self.name)
    }
}

/// How a cluster's hosts are found (`type`).
#[derive(Debug, Clone, PartialEq)]
pub enum Discovery {
    /// STATIC: the IP addresses of `load_assignment`.
    Static,
    /// STRICT_DNS: every address each name resolves to, re-resolved periodically.
    StrictDns(Dns),
    /// LOGICAL_DNS: the first address the single name resolves to, re-resolved periodically.
    LogicalDns(Dns),
    /// EDS: endpoints from `ClusterLoadAssignment` resources.
    Eds {
        /// Where the assignments come from (boxed: a cluster manager holds
        /// thousands of clusters, most without it).
        config: Box<ConfigSource>,
        /// The resource name to ask for (`service_name`, default the cluster name).
        service_name: String,
    },
    /// `envoy.clusters.dynamic_forward_proxy`: each request's host, resolved
    /// through the named DNS cache (boxed: rare, and large).
    DynamicForwardProxy(Box<DynamicForwardProxy>),
}

/// DNS settings of STRICT_DNS and LOGICAL_DNS clusters.
#[derive(Debug, Clone, PartialEq)]
pub struct Dns {
    /// Which address families to ask for.
    pub lookup_family: DnsLookupFamily,
    /// Re-resolution period (default 5 s).
    pub refresh_rate: Duration,
    /// Use the records' TTL as the refresh period instead of `refresh_rate`.
    pub respect_dns_ttl: bool,
}

/// `dns_lookup_family`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DnsLookupFamily {
    /// IPv6 if the name has AAAA records, else IPv4 (Envoy's default).
    Auto,
    /// IPv4 only.
    V4Only,
    /// IPv6 only.
    V6Only,
    /// IPv4 if the name has A records, else IPv6.
    V4Preferred,
    /// Both families, all addresses.
    All,
}

impl DnsLookupFamily {
    /// Keeps the addresses the family asks for, in Envoy's preference.
    pub fn filter(self, addrs: Vec<std::net::SocketAddr>) -> Vec<std::net::SocketAddr> {
        let (v4, v6): (Vec<_>, Vec<_>) = addrs.into_iter().partition(|a| a.is_ipv4());
        match self {
            Self::V4Only => v4,
            Self::V6Only => v6,
            Self::Auto if v6.is_empty() => v4,
            Self::Auto => v6,
            Self::V4Preferred if v4.is_empty() => v6,
            Self::V4Preferred => v4,
            Self::All => v4.into_iter().chain(v6).collect(),
        }
    }
}

/// Translates a `Cluster`.
pub fn translate(c: &pb::Cluster, path: &Path<'_>, ctx: &mut Ctx) -> Option<Cluster> {
    if c.name.is_empty() {
        ctx.error(&path.field("name"), "must not be empty");
    }
    // Without a discovery type the cluster cannot be built, but its other fields are
    // still checked so that every error is reported in one run.
    let discovery = discovery(c, path, ctx);
    let load_assignment = match &discovery {
        Some(d) => inline_endpoints(c, d, path, ctx),
        None => c.load_assignment.as_ref().and_then(|cla| {
            endpoint::translate(
                cla,
                endpoint::Hosts::Names,
                &path.field("load_assignment"),
                ctx,
            )
        }),
    };
    let connect_timeout = values::positive_duration(
        c.connect_timeout.as_ref(),
        DEFAULT_CONNECT_TIMEOUT,
        &path.field("connect_timeout"),
        ctx,
    );
    let UpstreamSocket {
        proxy_protocol,
        tls,
    } = c
        .transport_socket
        .as_ref()
        .map(|ts| proxy_socket::translate(ts, &path.field("transport_socket"), ctx))
        .unwrap_or_default();
    let transport_socket_matches = socket_match::translate(c, path, ctx);
    let http = protocol::translate(c, path, ctx);
    let lb = lb::translate(c, path, ctx);
    let circuit_breakers = circuit_breaker::translate(c.circuit_breakers.as_ref(), path, ctx);
    let outlier_detection = c
        .outlier_detection
        .as_ref()
        .map(|o| Box::new(outlier::translate(o, &path.field("outlier_detection"), ctx)));
    let hp = path.field("health_checks");
    let health_checks = c
        .health_checks
        .iter()
        .enumerate()
        .filter_map(|(i, h)| {
            health_check::translate(h, &http, &transport_socket_matches, &hp.index(i), ctx)
        })
        .collect();
    // Unknown when the type was refused (ORIGINAL_DST provides one too).
    if let Some(d) = &discovery {
        let dynamic = matches!(d, Discovery::DynamicForwardProxy(_));
        check_cluster_provided(c, &lb, dynamic, path, ctx);
    }
    let mut cluster = Cluster {
        name: c.name.clone(),
        alt_stat_name: (!c.alt_stat_name.is_empty()).then(|| c.alt_stat_name.clone()),
        discovery: discovery?,
        load_assignment,
        connect_timeout,
        per_connection_buffer_limit_bytes: core::u32_or(
            c.per_connection_buffer_limit_bytes.as_ref(),
            DEFAULT_BUFFER_LIMIT,
        ),
        lb,
        circuit_breakers,
        outlier_detection,
        health_checks,
        http,
        tls,
        proxy_protocol,
        transport_socket_matches,
        metadata: core::metadata(c.metadata.as_ref()),
        ignore_health_on_host_removal: c.ignore_health_on_host_removal,
        tcp_keepalive: c
            .upstream_connection_options
            .as_ref()
            .and_then(|o| o.tcp_keepalive.as_ref())
            .map(|k| TcpKeepalive {
                probes: k.keepalive_probes.as_ref().map(|v| v.value),
                time: k
                    .keepalive_time
                    .as_ref()
                    .map(|v| Duration::from_secs(v.value.into())),
                interval: k
                    .keepalive_interval
                    .as_ref()
                    .map(|v| Duration::from_secs(v.value.into())),
            }),
        per_endpoint_stats: c
            .track_cluster_stats
            .as_ref()
            .is_some_and(|t| t.per_endpoint_stats),
        request_response_sizes: c
            .track_cluster_stats
            .as_ref()
            .is_some_and(|t| t.request_response_sizes),
    };
    dfp::finish(c, &mut cluster, path, ctx);
    Some(cluster)
}

/// Envoy's cluster manager check: a cluster-provided balancer for exactly the
/// cluster types that provide one (here, the dynamic forward proxy).
fn check_cluster_provided(
    c: &pb::Cluster,
    lb: &LoadBalancer,
    dynamic: bool,
    path: &Path<'_>,
    ctx: &mut Ctx,
) {
    let provided = lb.policy == LbPolicy::ClusterProvided;
    let at = if c.load_balancing_policy.is_some() {
        path.field("load_balancing_policy")
    } else {
        path.field("lb_policy")
    };
    // Envoy's wording.
    if provided && !dynamic {
        ctx.error(
            &at,
            format!(
                "cluster provided LB specified but cluster '{}' did not provide one. Check cluster documentation.",
                c.name
            ),
        );
    } else if dynamic && !provided {
        ctx.error(
            &at,
            format!(
                "cluster provided LB not specified but cluster '{}' provided one. Check cluster documentation.",
                c.name
            ),
        );
    }
}

fn discovery(c: &pb::Cluster, path: &Path<'_>, ctx: &mut Ctx) -> Option<Discovery> {
    use pb::cluster::ClusterDiscoveryType as T;
    use pb::cluster::DiscoveryType as D;
    let tp = path.field("type");
    let kind = match &c.cluster_discovery_type {
        None => D::Static,
        Some(T::ClusterType(ct)) => return custom_type(c, ct, path, ctx),
        Some(T::Type(t)) => match D::try_from(*t) {
            Ok(d) => d,
            Err(_) => {
                ctx.error(&tp, format!("unknown cluster type {t}"));
                return None;
            }
        },
    };
    if kind != D::Eds && c.eds_cluster_config.is_some() {
        ctx.error(
            &path.field("eds_cluster_config"),
            "is only used by EDS clusters",
        );
    }
    Some(match kind {
        D::Static => Discovery::Static,
        D::StrictDns => Discovery::StrictDns(dns(c, path, ctx)),
        D::LogicalDns => Discovery::LogicalDns(dns(c, path, ctx)),
        D::Eds => {
            let ep = path.field("eds_cluster_config");
            let Some(eds) = c.eds_cluster_config.as_ref() else {
                ctx.error(
                    &ep,
                    "is required: cannot create an EDS cluster without an EDS config",
                );
                return None;
            };
            let cp = ep.field("eds_config");
            let Some(source) = eds.eds_config.as_ref() else {
                ctx.error(&cp, "is required");
                return None;
            };
            let config = config_source::translate(source, &cp, ctx)?;
            let service_name = if eds.service_name.is_empty() {
                c.name.clone()
            } else {
                eds.service_name.clone()
            };
            Discovery::Eds {
                config: Box::new(config),
                service_name,
            }
        }
        D::OriginalDst => {
            ctx.unsupported(&tp, "ORIGINAL_DST");
            return None;
        }
    })
}

/// `cluster_type`: the DNS cluster extension (Envoy's own form of STRICT_DNS and
/// LOGICAL_DNS) is served; other extensions are refused at `cluster_type`.
fn custom_type(
    c: &pb::Cluster,
    ct: &pb::cluster::CustomClusterType,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Discovery> {
    let cp = path.field("cluster_type");
    let any = ct.typed_config.as_ref();
    if let Some(a) = any
        && a.type_url == crate::extensions::DFP_CLUSTER
    {
        return dfp::translate(a, &cp.field("typed_config"), ctx);
    }
    if any.map(|a| a.type_url.as_str()) != Some(crate::extensions::DNS_CLUSTER) {
        ctx.unsupported(&cp, format!("cluster type {}", ct.name));
        return None;
    }
    let d: DnsCluster = core::unpack(any?, &cp.field("typed_config"), ctx)?;
    let dns = dns_cluster(c, &d, path, &cp.field("typed_config"), ctx);
    Some(if d.all_addresses_in_single_endpoint {
        Discovery::LogicalDns(dns)
    } else {
        Discovery::StrictDns(dns)
    })
}

/// A `DnsCluster`'s settings. Envoy takes them from the extension and ignores
/// the cluster's own `dns_*` fields; courier accepts those only where they say
/// the same (control planes such as Envoy Gateway set both), and refuses a
/// conflicting one rather than ignore it.
fn dns_cluster(
    c: &pb::Cluster,
    d: &DnsCluster,
    path: &Path<'_>,
    tp: &Path<'_>,
    ctx: &mut Ctx,
) -> Dns {
    use envoy_types::pb::envoy::extensions::clusters::common::dns::v3::DnsLookupFamily as F;
    // Envoy reads UNSPECIFIED as AUTO.
    let name = F::try_from(d.dns_lookup_family).ok().map(|f| {
        if f == F::Unspecified {
            "AUTO"
        } else {
            f.as_str_name()
        }
    });
    let lookup_family = lookup_family(
        name,
        d.dns_lookup_family,
        &tp.field("dns_lookup_family"),
        ctx,
    );
    let refresh_rate = refresh_rate(
        d.dns_refresh_rate.as_ref(),
        &tp.field("dns_refresh_rate"),
        ctx,
    );
    let own = dns(c, path, ctx);
    let conflict = |field: &str, ctx: &mut Ctx| {
        ctx.error(
            &path.field(field),
            format!("differs from cluster_type's {field}, which Envoy uses instead; remove it"),
        );
    };
    if c.dns_lookup_family != pb::cluster::DnsLookupFamily::Auto as i32
        && own.lookup_family != lookup_family
    {
        conflict("dns_lookup_family", ctx);
    }
    if c.dns_refresh_rate.is_some() && own.refresh_rate != refresh_rate {
        conflict("dns_refresh_rate", ctx);
    }
    if c.respect_dns_ttl && !d.respect_dns_ttl {
        conflict("respect_dns_ttl", ctx);
    }
    Dns {
        lookup_family,
        refresh_rate,
        respect_dns_ttl: d.respect_dns_ttl,
    }
}

/// `dns_refresh_rate` (PGV: more than 1 ms; default 5 s).
pub(crate) fn refresh_rate(
    d: Option<&envoy_types::pb::google::protobuf::Duration>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Duration {
    match d {
        None => DEFAULT_DNS_REFRESH_RATE,
        Some(d) => match core::duration(d, path, ctx) {
            Some(d) if d > Duration::from_millis(1) => d,
            Some(_) => {
                ctx.error(path, "must be greater than 1ms");
                DEFAULT_DNS_REFRESH_RATE
            }
            None => DEFAULT_DNS_REFRESH_RATE,
        },
    }
}

/// A `dns_lookup_family` by its enum name (the cluster's enum and the DNS
/// extension's share them); `value` is the number, for the error when the
/// name is unknown.
pub(crate) fn lookup_family(
    name: Option<&str>,
    value: i32,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> DnsLookupFamily {
    match name {
        Some("AUTO") => DnsLookupFamily::Auto,
        Some("V4_ONLY") => DnsLookupFamily::V4Only,
        Some("V6_ONLY") => DnsLookupFamily::V6Only,
        Some("V4_PREFERRED") => DnsLookupFamily::V4Preferred,
        Some("ALL") => DnsLookupFamily::All,
        _ => {
            ctx.error(path, format!("unknown dns_lookup_family {value}"));
            DnsLookupFamily::Auto
        }
    }
}

fn dns(c: &pb::Cluster, path: &Path<'_>, ctx: &mut Ctx) -> Dns {
    let name = pb::cluster::DnsLookupFamily::try_from(c.dns_lookup_family)
        .ok()
        .map(|f| f.as_str_name());
    let lookup_family = lookup_family(
        name,
        c.dns_lookup_family,
        &path.field("dns_lookup_family"),
        ctx,
    );
    let refresh_rate = refresh_rate(
        c.dns_refresh_rate.as_ref(),
        &path.field("dns_refresh_rate"),
        ctx,
    );
    Dns {
        lookup_family,
        refresh_rate,
        respect_dns_ttl: c.respect_dns_ttl,
    }
}

/// The inline `load_assignment`, checked against what the discovery type allows.
fn inline_endpoints(
    c: &pb::Cluster,
    discovery: &Discovery,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<LoadAssignment> {
    let lp = path.field("load_assignment");
    let cla = c.load_assignment.as_ref();
    match discovery {
        Discovery::Eds { .. } => {
            if cla.is_some() {
                // Envoy ignores it; courier says so rather than ignore it silently.
                ctx.error(
                    &lp,
                    "is not used by EDS clusters (their endpoints come from EDS); remove it",
                );
            }
            None
        }
        // Refused by `dfp::finish`, which names the cluster's other checks.
        Discovery::DynamicForwardProxy(_) => {
            endpoint::translate(cla?, endpoint::Hosts::Names, &lp, ctx)
        }
        Discovery::Static => {
            endpoint::translate(cla?, endpoint::Hosts::IpOnly("a STATIC cluster"), &lp, ctx)
        }
        Discovery::StrictDns(_) => endpoint::translate(cla?, endpoint::Hosts::Names, &lp, ctx),
        Discovery::LogicalDns(_) => {
            let single = cla.is_some_and(|cla| {
                cla.endpoints.len() == 1 && cla.endpoints[0].lb_endpoints.len() == 1
            });
            if !single {
                ctx.error(
                    &lp,
                    "LOGICAL_DNS clusters must have a single locality_lb_endpoint and a single lb_endpoint",
                );
            }
            endpoint::translate(cla?, endpoint::Hosts::Names, &lp, ctx)
        }
    }
}

#[cfg(test)]
mod tests;
