//! `ClusterLoadAssignment`: priorities, localities and weighted endpoints, given inline
//! in a cluster or delivered by EDS.

use super::values;
use crate::core::{self, Address};
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::core::v3 as cpb;
use envoy_types::pb::envoy::config::endpoint::v3 as epb;

/// Envoy's default `policy.overprovisioning_factor` (percent).
pub const DEFAULT_OVERPROVISIONING_FACTOR: u32 = 140;
/// The highest priority level Envoy accepts (PGV `lte: 128`).
pub const MAX_PRIORITY: u32 = 128;

/// A validated `ClusterLoadAssignment`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadAssignment {
    /// The cluster (or EDS service) it is for.
    pub cluster_name: String,
    /// Priority levels, indexed by priority (0 is the highest). A level that no
    /// locality names is present and empty, as in Envoy, so failover skips it.
    pub priorities: Vec<Priority>,
    /// `policy.overprovisioning_factor` in percent (default 140): a priority level
    /// takes `min(100, factor x healthy / total)` percent of the load.
    pub overprovisioning_factor: u32,
}

impl LoadAssignment {
    /// Every endpoint, in priority then config order.
    pub fn endpoints(&self) -> impl Iterator<Item = &Endpoint> {
        self.priorities
            .iter()
            .flat_map(|p| p.localities.iter())
            .flat_map(|l| l.endpoints.iter())
    }
}

/// One priority level.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Priority {
    /// The localities of this level, in config order.
    pub localities: Vec<LocalityEndpoints>,
}

/// The endpoints of one locality at one priority.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalityEndpoints {
    /// Where they are, if given.
    pub locality: Option<Locality>,
    /// The locality's `load_balancing_weight`, used only when the cluster
    /// balances by locality weight (`LoadBalancer::locality_weighted`); there a
    /// locality without one takes no traffic, as in Envoy.
    pub load_balancing_weight: Option<u32>,
    /// The endpoints.
    pub endpoints: Vec<Endpoint>,
    /// `metadata`, kept for what reads it (Envoy's readers, such as subset
    /// balancing, `transport_socket_matches` and `%UPSTREAM_METADATA%`, are
    /// refused where configured).
    pub metadata: crate::core::MetadataMap,
}

/// `core.v3.Locality`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Locality {
    /// Region.
    pub region: String,
    /// Zone.
    pub zone: String,
    /// Sub-zone.
    pub sub_zone: String,
}

/// One upstream host.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// Its address: an IP literal, or a DNS name in STRICT_DNS / LOGICAL_DNS
    /// clusters; or a Unix domain socket (STATIC and EDS clusters).
    pub address: Address,
    /// `hostname`: used by `auto_host_rewrite` and as the health-check `Host` default.
    pub hostname: Option<String>,
    /// Port for active health checks (`health_check_config.port_value`); `None` = `address`'s.
    pub health_check_port: Option<u16>,
    /// `Host` for active health checks (`health_check_config.hostname`).
    pub health_check_hostname: Option<String>,
    /// The health status given by the control plane.
    pub health_status: HealthStatus,
    /// Load-balancing weight (default 1, at least 1).
    pub weight: u32,
    /// The `LbEndpoint`'s `metadata`, kept as a locality's is.
    pub metadata: crate::core::MetadataMap,
}

/// The health status of an endpoint as given in the assignment (`health_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthStatus {
    /// UNKNOWN (the default): healthy unless active health checking says otherwise.
    Unknown,
    /// HEALTHY.
    Healthy,
    /// UNHEALTHY.
    Unhealthy,
    /// DRAINING: not used for new requests.
    Draining,
    /// TIMEOUT: treated as unhealthy.
    Timeout,
}

impl HealthStatus {
    /// Whether the load balancer may pick the host (before health checks and outlier
    /// detection have their say).
    pub fn is_healthy(self) -> bool {
        matches!(self, HealthStatus::Unknown | HealthStatus::Healthy)
    }
}

/// What endpoint addresses may be.
#[derive(Clone, Copy)]
pub(super) enum Hosts {
    /// IP literals only; the text names who requires it, for the error.
    IpOnly(&'static str),
    /// DNS names or IP literals.
    Names,
}

/// Translates a `ClusterLoadAssignment` delivered by EDS (endpoints must be IP literals).
pub fn load_assignment(
    cla: &epb::ClusterLoadAssignment,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<LoadAssignment> {
    translate(cla, Hosts::IpOnly("EDS"), path, ctx)
}

/// Translates a `ClusterLoadAssignment` whose addresses follow `hosts`.
pub(super) fn translate(
    cla: &epb::ClusterLoadAssignment,
    hosts: Hosts,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<LoadAssignment> {
    if cla.cluster_name.is_empty() {
        ctx.error(&path.field("cluster_name"), "must not be empty");
    }
    let mut overprovisioning_factor = DEFAULT_OVERPROVISIONING_FACTOR;
    if let Some(policy) = &cla.policy
        && let Some(f) = &policy.overprovisioning_factor
    {
        if f.value == 0 {
            ctx.error(
                &path.field("policy.overprovisioning_factor"),
                "must be greater than 0",
            );
        } else {
            overprovisioning_factor = f.value;
        }
    }
    let ep = path.field("endpoints");
    let mut priorities: Vec<Priority> = Vec::new();
    for (i, lle) in cla.endpoints.iter().enumerate() {
        let lp = ep.index(i);
        if lle.priority > MAX_PRIORITY {
            ctx.error(
                &lp.field("priority"),
                format!("must be at most {MAX_PRIORITY}, found {}", lle.priority),
            );
            continue;
        }
        let locality = locality_endpoints(lle, hosts, &lp, ctx);
        let level = lle.priority as usize;
        if priorities.len() <= level {
            priorities.resize_with(level + 1, Priority::default);
        }
        priorities[level].localities.push(locality);
    }
    Some(LoadAssignment {
        cluster_name: cla.cluster_name.clone(),
        priorities,
        overprovisioning_factor,
    })
}

fn locality_endpoints(
    lle: &epb::LocalityLbEndpoints,
    hosts: Hosts,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> LocalityEndpoints {
    let load_balancing_weight = lle.load_balancing_weight.as_ref().map(|w| w.value);
    if load_balancing_weight == Some(0) {
        ctx.error(&path.field("load_balancing_weight"), "must be at least 1");
    }
    let lp = path.field("lb_endpoints");
    let mut endpoints = Vec::with_capacity(lle.lb_endpoints.len());
    let mut total: u64 = 0;
    for (i, lb) in lle.lb_endpoints.iter().enumerate() {
        if let Some(e) = lb_endpoint(lb, hosts, &lp.index(i), ctx) {
            total += u64::from(e.weight);
            endpoints.push(e);
        }
    }
    // Envoy rejects a locality whose weights overflow 32 bits.
    if total > u64::from(u32::MAX) {
        ctx.error(
            &lp,
            format!(
                "the sum of the endpoints' weights ({total}) exceeds {}",
                u32::MAX
            ),
        );
    }
    LocalityEndpoints {
        locality: lle.locality.as_ref().map(locality),
        load_balancing_weight,
        endpoints,
        metadata: crate::core::metadata(lle.metadata.as_ref()),
    }
}

fn locality(l: &cpb::Locality) -> Locality {
    Locality {
        region: l.region.clone(),
        zone: l.zone.clone(),
        sub_zone: l.sub_zone.clone(),
    }
}

fn lb_endpoint(
    lb: &epb::LbEndpoint,
    hosts: Hosts,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Endpoint> {
    use epb::lb_endpoint::HostIdentifier as H;
    let health_status = health_status(lb.health_status, &path.field("health_status"), ctx);
    let weight = match &lb.load_balancing_weight {
        None => 1,
        Some(w) if w.value == 0 => {
            ctx.error(&path.field("load_balancing_weight"), "must be at least 1");
            1
        }
        Some(w) => w.value,
    };
    let ep = path.field("endpoint");
    let e = match &lb.host_identifier {
        Some(H::Endpoint(e)) => e,
        // Refused by the support table ("endpoint_name is not supported").
        Some(H::EndpointName(_)) => return None,
        None => {
            ctx.error(&ep, "is required");
            return None;
        }
    };
    let ap = ep.field("address");
    let address = core::address_any_protocol(e.address.as_ref(), &ap, ctx)?;
    match (&address, hosts) {
        (Address::Socket(sa), Hosts::IpOnly(who)) if sa.ip.is_none() => ctx.error(
            &ap.field("socket_address.address"),
            format!(
                "\"{}\" is not an IP address ({who} needs IP literals; STRICT_DNS and LOGICAL_DNS clusters resolve names)",
                sa.host
            ),
        ),
        // Envoy accepts the config and resolves the empty name to no host:
        // refused, so the cluster is not silently empty.
        (Address::Pipe(_), Hosts::Names) => ctx.error(
            &ap.field("pipe"),
            "a pipe address in a STRICT_DNS or LOGICAL_DNS cluster (which resolve names; Envoy resolves a pipe to no host)",
        ),
        _ => {}
    }
    let (mut health_check_port, mut health_check_hostname) = (None, None);
    if let Some(hc) = &e.health_check_config {
        if hc.port_value != 0 && address.pipe().is_some() {
            ctx.error(
                &ep.field("health_check_config.port_value"),
                "Invalid host configuration: non-zero port for non-IP address",
            );
        } else if hc.port_value != 0 {
            match u16::try_from(hc.port_value) {
                Ok(p) => health_check_port = Some(p),
                Err(_) => ctx.error(
                    &ep.field("health_check_config.port_value"),
                    format!("must be at most 65535, found {}", hc.port_value),
                ),
            }
        }
        if !hc.hostname.is_empty() {
            health_check_hostname = Some(hc.hostname.clone());
        }
    }
    if !values::is_header_value(&e.hostname) {
        ctx.error(&ep.field("hostname"), "is not a valid host name");
    }
    Some(Endpoint {
        address,
        hostname: (!e.hostname.is_empty()).then(|| e.hostname.clone()),
        health_check_port,
        health_check_hostname,
        health_status,
        weight,
        metadata: crate::core::metadata(lb.metadata.as_ref()),
    })
}

fn health_status(v: i32, path: &Path<'_>, ctx: &mut Ctx) -> HealthStatus {
    use cpb::HealthStatus as S;
    match S::try_from(v) {
        Ok(S::Unknown) => HealthStatus::Unknown,
        Ok(S::Healthy) => HealthStatus::Healthy,
        Ok(S::Unhealthy) => HealthStatus::Unhealthy,
        Ok(S::Draining) => HealthStatus::Draining,
        Ok(S::Timeout) => HealthStatus::Timeout,
        // Degraded hosts need Envoy's degraded-host load split, which courier lacks.
        Ok(S::Degraded) => {
            ctx.unsupported(path, "DEGRADED");
            HealthStatus::Unknown
        }
        Err(_) => {
            ctx.error(path, format!("unknown health status {v}"));
            HealthStatus::Unknown
        }
    }
}
