//! Load balancing: `lb_policy` and its config, the typed `load_balancing_policy`, and
//! `common_lb_config`.

use super::hash_lb::{self, Maglev, RingHash};
use super::slow_start::{self, SlowStart};
use super::values;
use super::zone_aware::{self, ZoneAware};
use crate::core;
use crate::ctx::Ctx;
use crate::extensions;
use crate::path::Path;
use envoy_types::pb::envoy::config::cluster::v3 as pb;
use envoy_types::pb::envoy::config::core::v3::RuntimeDouble;
use envoy_types::pb::envoy::extensions::load_balancing_policies::common::v3::{
    LocalityLbConfig, locality_lb_config::LocalityConfigSpecifier,
};
use envoy_types::pb::envoy::extensions::load_balancing_policies::least_request::v3::LeastRequest;
use envoy_types::pb::envoy::extensions::load_balancing_policies::maglev::v3::Maglev as MaglevProto;
use envoy_types::pb::envoy::extensions::load_balancing_policies::random::v3::Random;
use envoy_types::pb::envoy::extensions::load_balancing_policies::ring_hash::v3::RingHash as RingHashProto;
use envoy_types::pb::envoy::extensions::load_balancing_policies::round_robin::v3::RoundRobin;
use envoy_types::pb::google::protobuf::UInt32Value;

/// Envoy's default `common_lb_config.healthy_panic_threshold` (percent).
pub const DEFAULT_PANIC_THRESHOLD: f64 = 50.0;
/// Envoy's default `least_request_lb_config.choice_count`.
pub const DEFAULT_CHOICE_COUNT: u32 = 2;
/// Envoy's default `least_request_lb_config.active_request_bias`.
pub const DEFAULT_ACTIVE_REQUEST_BIAS: f64 = 1.0;

/// How a host is picked within a priority level.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LbPolicy {
    /// ROUND_ROBIN: rotate over hosts (weighted EDF when weights differ).
    RoundRobin,
    /// LEAST_REQUEST: best of `choice_count` random hosts by active requests when
    /// weights are equal; else weighted by `weight / (active + 1)^active_request_bias`.
    LeastRequest {
        /// Hosts sampled per pick (at least 2).
        choice_count: u32,
        /// Exponent of the active-request penalty with unequal weights (>= 0).
        active_request_bias: f64,
    },
    /// RANDOM: uniform.
    Random,
    /// RING_HASH: a ketama ring of the level's hosts, looked up by the
    /// request's hash (random without one).
    RingHash(RingHash),
    /// MAGLEV: a Maglev table of the level's hosts, looked up by the
    /// request's hash (random without one).
    Maglev(Maglev),
    /// CLUSTER_PROVIDED (or the typed `ClusterProvided`): the cluster type
    /// picks the host itself (the dynamic forward proxy: the request's host).
    ClusterProvided,
}

impl LbPolicy {
    /// Whether it picks by the request's hash (RING_HASH, MAGLEV): only then
    /// is a hash computed (and a hash cookie set), as Envoy computes it only
    /// when the balancer asks.
    pub fn uses_hash(&self) -> bool {
        matches!(self, Self::RingHash(_) | Self::Maglev(_))
    }
}

/// A cluster's load balancer settings.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadBalancer {
    /// The algorithm.
    pub policy: LbPolicy,
    /// Percentage of healthy hosts in a priority level below which the level balances
    /// over all its hosts ("panic"); 0 disables panic mode. Default 50.
    pub healthy_panic_threshold: f64,
    /// Locality-weighted balancing (`locality_weighted_lb_config` in the typed
    /// policy's `locality_lb_config`, or in `common_lb_config` with `lb_policy`):
    /// within a priority level not in panic, a locality is picked by its
    /// `load_balancing_weight` scaled by its health, then a host within it by
    /// `policy`.
    pub locality_weighted: bool,
    /// Zone-aware routing settings (`zone_aware_lb_config`, else Envoy's
    /// defaults): used when the bootstrap names a local cluster.
    pub zone_aware: ZoneAware,
    /// The cluster's own hash policies (`HttpProtocolOptions.hash_policy`):
    /// when set, a consistent-hashing balancer hashes requests by these
    /// instead of their route's.
    pub cluster_hash_policy: Vec<crate::route::hash_policy::HashPolicy>,
    /// Slow start (`slow_start_config` of ROUND_ROBIN or LEAST_REQUEST, typed
    /// or legacy): none when not configured or with a window under 1 ms.
    pub slow_start: Option<SlowStart>,
}

/// Translates `lb_policy`, `least_request_lb_config`, `load_balancing_policy` and
/// `common_lb_config`.
pub(super) fn translate(c: &pb::Cluster, path: &Path<'_>, ctx: &mut Ctx) -> LoadBalancer {
    let mut slow_start = None;
    let (policy, (locality_weighted, zone_aware)) = match &c.load_balancing_policy {
        Some(lbp) => {
            // The typed policy supersedes lb_policy; refuse a conflicting setting rather
            // than ignore it.
            let lp = c.lb_policy;
            if lp != pb::cluster::LbPolicy::RoundRobin as i32
                && lp != pb::cluster::LbPolicy::LoadBalancingPolicyConfig as i32
            {
                ctx.error(
                    &path.field("lb_policy"),
                    "cannot be combined with load_balancing_policy, which supersedes it",
                );
            }
            if matches!(
                c.lb_config,
                Some(pb::cluster::LbConfig::LeastRequestLbConfig(_))
            ) {
                ctx.error(
                    &path.field("least_request_lb_config"),
                    "cannot be combined with load_balancing_policy, which supersedes it",
                );
            }
            if matches!(
                c.lb_config,
                Some(pb::cluster::LbConfig::RoundRobinLbConfig(_))
            ) {
                ctx.error(
                    &path.field("round_robin_lb_config"),
                    "cannot be combined with load_balancing_policy, which supersedes it",
                );
            }
            // Envoy refuses this too: the typed policy carries its own
            // locality_lb_config and would not read common_lb_config's.
            if let Some(common) = &c.common_lb_config
                && matches!(
                    common.locality_config_specifier,
                    Some(pb::cluster::common_lb_config::LocalityConfigSpecifier::LocalityWeightedLbConfig(_))
                )
            {
                ctx.error(
                    &path.field("common_lb_config.locality_weighted_lb_config"),
                    "cannot be combined with load_balancing_policy (set locality_lb_config in the policy)",
                );
            }
            if let Some(common) = &c.common_lb_config
                && matches!(
                    common.locality_config_specifier,
                    Some(
                        pb::cluster::common_lb_config::LocalityConfigSpecifier::ZoneAwareLbConfig(
                            _
                        )
                    )
                )
            {
                ctx.error(
                    &path.field("common_lb_config.zone_aware_lb_config"),
                    "cannot be combined with load_balancing_policy (set locality_lb_config in the policy)",
                );
            }
            match typed_policy(lbp, &path.field("load_balancing_policy"), ctx) {
                Some((policy, locality, slow)) => {
                    slow_start = slow;
                    (Some(policy), locality)
                }
                None => (None, (false, ZoneAware::default())),
            }
        }
        None => {
            use pb::cluster::common_lb_config::LocalityConfigSpecifier as S;
            let locality = match c
                .common_lb_config
                .as_ref()
                .and_then(|common| common.locality_config_specifier.as_ref())
            {
                Some(S::LocalityWeightedLbConfig(_)) => (true, ZoneAware::default()),
                Some(S::ZoneAwareLbConfig(z)) => (
                    false,
                    zone_aware::common(
                        z,
                        &path.field("common_lb_config.zone_aware_lb_config"),
                        ctx,
                    ),
                ),
                None => (false, ZoneAware::default()),
            };
            let policy = lb_policy(c, path, ctx);
            slow_start = legacy_slow_start(c, policy.as_ref(), path, ctx);
            (policy, locality)
        }
    };
    let use_hostname = match &policy {
        Some(LbPolicy::RingHash(r)) => r.use_hostname_for_hashing,
        Some(LbPolicy::Maglev(m)) => m.use_hostname_for_hashing,
        _ => false,
    };
    let strict_dns = matches!(
        c.cluster_discovery_type,
        Some(pb::cluster::ClusterDiscoveryType::Type(t)) if t == pb::cluster::DiscoveryType::StrictDns as i32
    );
    if use_hostname && !strict_dns {
        // Envoy refuses it too: only a STRICT_DNS cluster's hosts have names
        // of their own (courier refuses the DNS extension's form as well).
        ctx.error(
            path,
            "use_hostname_for_hashing needs a STRICT_DNS cluster (Cannot use hostname for consistent hashing loadbalancing)",
        );
    }
    let mut healthy_panic_threshold = DEFAULT_PANIC_THRESHOLD;
    if let Some(common) = &c.common_lb_config {
        healthy_panic_threshold = values::percent(
            common.healthy_panic_threshold.as_ref(),
            DEFAULT_PANIC_THRESHOLD,
            &path.field("common_lb_config.healthy_panic_threshold"),
            ctx,
        );
    }
    LoadBalancer {
        cluster_hash_policy: cluster_hash_policy(c, path, ctx),
        policy: policy.unwrap_or(LbPolicy::RoundRobin),
        healthy_panic_threshold,
        locality_weighted,
        zone_aware,
        slow_start,
    }
}

/// The legacy `round_robin_lb_config` / `least_request_lb_config`
/// `slow_start_config`, for the policy they belong to.
fn legacy_slow_start(
    c: &pb::Cluster,
    policy: Option<&LbPolicy>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<SlowStart> {
    match (&c.lb_config, policy) {
        (Some(pb::cluster::LbConfig::RoundRobinLbConfig(rr)), Some(LbPolicy::RoundRobin)) => {
            slow_start::legacy(
                rr.slow_start_config.as_ref(),
                &path.field("round_robin_lb_config"),
                ctx,
            )
        }
        (Some(pb::cluster::LbConfig::RoundRobinLbConfig(_)), Some(_)) => {
            // Envoy ignores it; say so instead.
            ctx.error(
                &path.field("round_robin_lb_config"),
                "only applies to lb_policy ROUND_ROBIN",
            );
            None
        }
        (
            Some(pb::cluster::LbConfig::LeastRequestLbConfig(lr)),
            Some(LbPolicy::LeastRequest { .. }),
        ) => slow_start::legacy(
            lr.slow_start_config.as_ref(),
            &path.field("least_request_lb_config"),
            ctx,
        ),
        _ => None,
    }
}

/// `typed_extension_protocol_options`' `HttpProtocolOptions.hash_policy`
/// (the options themselves are read, and their errors reported, with the
/// cluster's upstream HTTP settings).
fn cluster_hash_policy(
    c: &pb::Cluster,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Vec<crate::route::hash_policy::HashPolicy> {
    use envoy_types::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
    use prost::Message;
    let Some(any) = c
        .typed_extension_protocol_options
        .get(extensions::HTTP_PROTOCOL_OPTIONS_KEY)
    else {
        return Vec::new();
    };
    let Ok(o) = HttpProtocolOptions::decode(any.value.as_slice()) else {
        return Vec::new();
    };
    if o.hash_policy.is_empty() {
        return Vec::new();
    }
    let op = path.field("typed_extension_protocol_options");
    let kp = op.key(extensions::HTTP_PROTOCOL_OPTIONS_KEY);
    crate::route::hash_policy::translate(&o.hash_policy, &kp.field("hash_policy"), ctx)
}

fn lb_policy(c: &pb::Cluster, path: &Path<'_>, ctx: &mut Ctx) -> Option<LbPolicy> {
    use pb::cluster::LbPolicy as P;
    let pp = path.field("lb_policy");
    let least_request = match &c.lb_config {
        Some(pb::cluster::LbConfig::LeastRequestLbConfig(lr)) => Some(lr),
        // The other lb_config variants are refused by the support table.
        _ => None,
    };
    let policy = match P::try_from(c.lb_policy) {
        Ok(P::RoundRobin) => LbPolicy::RoundRobin,
        Ok(P::Random) => LbPolicy::Random,
        Ok(P::LeastRequest) => {
            let lp = path.field("least_request_lb_config");
            let (choice, bias) = least_request.map_or((None, None), |lr| {
                (lr.choice_count.as_ref(), lr.active_request_bias.as_ref())
            });
            least_request_policy(choice, bias, &lp, ctx)
        }
        Ok(P::LoadBalancingPolicyConfig) => {
            ctx.error(
                &pp,
                "LOAD_BALANCING_POLICY_CONFIG needs load_balancing_policy",
            );
            return None;
        }
        Ok(P::RingHash) => LbPolicy::RingHash(hash_lb::legacy_ring_hash(
            c,
            match &c.lb_config {
                Some(pb::cluster::LbConfig::RingHashLbConfig(r)) => Some(r),
                _ => None,
            },
            path,
            ctx,
        )),
        Ok(P::Maglev) => LbPolicy::Maglev(hash_lb::legacy_maglev(
            c,
            match &c.lb_config {
                Some(pb::cluster::LbConfig::MaglevLbConfig(m)) => Some(m),
                _ => None,
            },
            path,
            ctx,
        )),
        // Whether the cluster type provides one is checked with the cluster.
        Ok(P::ClusterProvided) => LbPolicy::ClusterProvided,
        Err(_) => {
            ctx.error(&pp, format!("unknown lb_policy {}", c.lb_policy));
            return None;
        }
    };
    if least_request.is_some() && !matches!(policy, LbPolicy::LeastRequest { .. }) {
        // Envoy ignores it; say so instead.
        ctx.error(
            &path.field("least_request_lb_config"),
            "only applies to lb_policy LEAST_REQUEST",
        );
    }
    match (&c.lb_config, &policy) {
        (Some(pb::cluster::LbConfig::RingHashLbConfig(_)), LbPolicy::RingHash(_))
        | (Some(pb::cluster::LbConfig::MaglevLbConfig(_)), LbPolicy::Maglev(_)) => {}
        (Some(pb::cluster::LbConfig::RingHashLbConfig(_)), _) => ctx.error(
            &path.field("ring_hash_lb_config"),
            "only applies to lb_policy RING_HASH",
        ),
        (Some(pb::cluster::LbConfig::MaglevLbConfig(_)), _) => ctx.error(
            &path.field("maglev_lb_config"),
            "only applies to lb_policy MAGLEV",
        ),
        _ => {}
    }
    if !policy.uses_hash()
        && c.common_lb_config
            .as_ref()
            .is_some_and(|common| common.consistent_hashing_lb_config.is_some())
    {
        ctx.error(
            &path
                .field("common_lb_config")
                .field("consistent_hashing_lb_config"),
            "only applies to lb_policy RING_HASH or MAGLEV",
        );
    }
    Some(policy)
}

fn least_request_policy(
    choice_count: Option<&UInt32Value>,
    bias: Option<&RuntimeDouble>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> LbPolicy {
    let choice_count = values::u32_in(
        choice_count,
        DEFAULT_CHOICE_COUNT,
        2,
        u32::MAX,
        &path.field("choice_count"),
        ctx,
    );
    let mut active_request_bias = DEFAULT_ACTIVE_REQUEST_BIAS;
    if let Some(b) = bias {
        let v = b.default_value;
        if !v.is_finite() || v < 0.0 {
            ctx.error(
                &path.field("active_request_bias.default_value"),
                format!("must be a non-negative number, found {v}"),
            );
        } else {
            active_request_bias = v;
        }
    }
    LbPolicy::LeastRequest {
        choice_count,
        active_request_bias,
    }
}

/// A typed policy's `locality_lb_config`: whether it asks for
/// locality-weighted balancing, and its zone-aware settings.
fn locality(
    config: Option<&LocalityLbConfig>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> (bool, ZoneAware) {
    match config.and_then(|c| c.locality_config_specifier.as_ref()) {
        Some(LocalityConfigSpecifier::LocalityWeightedLbConfig(_)) => (true, ZoneAware::default()),
        Some(LocalityConfigSpecifier::ZoneAwareLbConfig(z)) => (
            false,
            zone_aware::typed(
                z,
                &path
                    .field("locality_lb_config")
                    .field("zone_aware_lb_config"),
                ctx,
            ),
        ),
        None => (false, ZoneAware::default()),
    }
}

/// The first policy courier implements wins, as in Envoy; the others are not used.
/// Returns the policy, whether it balances by locality weight, its
/// zone-aware settings and its slow start.
fn typed_policy(
    lbp: &pb::LoadBalancingPolicy,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<(LbPolicy, (bool, ZoneAware), Option<SlowStart>)> {
    let pp = path.field("policies");
    if lbp.policies.is_empty() {
        ctx.error(&pp, "must name at least one policy");
        return None;
    }
    let mut unknown = Vec::new();
    for (i, p) in lbp.policies.iter().enumerate() {
        let ip = pp.index(i);
        let tp = ip.field("typed_extension_config");
        let Some(tec) = &p.typed_extension_config else {
            unknown.push((i, "(none)".to_string()));
            continue;
        };
        let Some(any) = &tec.typed_config else {
            unknown.push((i, tec.name.clone()));
            continue;
        };
        let cp = tp.field("typed_config");
        match any.type_url.as_str() {
            extensions::LB_ROUND_ROBIN => {
                let rr: RoundRobin = core::unpack(any, &cp, ctx)?;
                let locality = locality(rr.locality_lb_config.as_ref(), &cp, ctx);
                let slow = slow_start::typed(rr.slow_start_config.as_ref(), &cp, ctx);
                return Some((LbPolicy::RoundRobin, locality, slow));
            }
            extensions::LB_RANDOM => {
                let r: Random = core::unpack(any, &cp, ctx)?;
                let locality = locality(r.locality_lb_config.as_ref(), &cp, ctx);
                return Some((LbPolicy::Random, locality, None));
            }
            extensions::LB_LEAST_REQUEST => {
                let lr: LeastRequest = core::unpack(any, &cp, ctx)?;
                let policy = least_request_policy(
                    lr.choice_count.as_ref(),
                    lr.active_request_bias.as_ref(),
                    &cp,
                    ctx,
                );
                let locality = locality(lr.locality_lb_config.as_ref(), &cp, ctx);
                let slow = slow_start::typed(lr.slow_start_config.as_ref(), &cp, ctx);
                return Some((policy, locality, slow));
            }
            extensions::LB_RING_HASH => {
                let r: RingHashProto = core::unpack(any, &cp, ctx)?;
                let policy = LbPolicy::RingHash(hash_lb::typed_ring_hash(&r, &cp, ctx));
                let weighted = r.locality_weighted_lb_config.is_some();
                return Some((policy, (weighted, ZoneAware::default()), None));
            }
            extensions::LB_CLUSTER_PROVIDED => {
                return Some((
                    LbPolicy::ClusterProvided,
                    (false, ZoneAware::default()),
                    None,
                ));
            }
            extensions::LB_MAGLEV => {
                let m: MaglevProto = core::unpack(any, &cp, ctx)?;
                let policy = LbPolicy::Maglev(hash_lb::typed_maglev(&m, &cp, ctx));
                let weighted = m.locality_weighted_lb_config.is_some();
                return Some((policy, (weighted, ZoneAware::default()), None));
            }
            url => unknown.push((
                i,
                url.strip_prefix(extensions::TYPE_URL_PREFIX)
                    .unwrap_or(url)
                    .to_string(),
            )),
        }
    }
    for (i, what) in unknown {
        ctx.unsupported(&pp.index(i), format!("load balancing policy {what}"));
    }
    None
}
