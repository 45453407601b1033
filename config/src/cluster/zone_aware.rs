//! Zone-aware routing settings: `common_lb_config.zone_aware_lb_config` and the
//! typed policies' `locality_lb_config.zone_aware_lb_config`. They act only when
//! the bootstrap names a local cluster (`cluster_manager.local_cluster_name`);
//! Envoy then routes by zone with these settings, or with their defaults when a
//! cluster sets none.

use super::values;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::cluster::v3 as pb;
use envoy_types::pb::envoy::extensions::load_balancing_policies::common::v3::locality_lb_config::{
    ZoneAwareLbConfig as TypedZoneAware, zone_aware_lb_config::LocalityBasis as PbBasis,
};

/// Envoy's default `min_cluster_size`.
pub const DEFAULT_MIN_CLUSTER_SIZE: u64 = 6;
/// Envoy's default `routing_enabled` (percent).
pub const DEFAULT_ROUTING_ENABLED: u32 = 100;

/// How a locality's share of a cluster is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LocalityBasis {
    /// `HEALTHY_HOSTS_NUM`: by its number of healthy hosts (the default).
    #[default]
    HealthyHosts,
    /// `HEALTHY_HOSTS_WEIGHT`: by the sum of its healthy hosts' weights.
    HealthyWeight,
}

/// A cluster's zone-aware routing settings (Envoy's defaults when it sets none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneAware {
    /// `routing_enabled`: percent of picks that consider zones (rounded, as Envoy).
    pub routing_enabled: u32,
    /// `min_cluster_size`: fewer healthy hosts in priority 0 than this and
    /// zones are not considered (`lb_zone_cluster_too_small`).
    pub min_cluster_size: u64,
    /// `fail_traffic_on_panic`: a level in panic (or a local cluster in panic
    /// while routing by zone) fails the pick instead of using every host.
    pub fail_traffic_on_panic: bool,
    /// `force_local_zone.min_size` (1 when `force_local_zone` is set without
    /// it, or with the deprecated `force_locality_direct_routing`): with at
    /// least this many healthy upstream hosts in the local zone, everything
    /// goes there.
    pub force_local_zone_min_size: Option<u32>,
    /// `locality_basis`.
    pub locality_basis: LocalityBasis,
}

impl Default for ZoneAware {
    fn default() -> Self {
        Self {
            routing_enabled: DEFAULT_ROUTING_ENABLED,
            min_cluster_size: DEFAULT_MIN_CLUSTER_SIZE,
            fail_traffic_on_panic: false,
            force_local_zone_min_size: None,
            locality_basis: LocalityBasis::HealthyHosts,
        }
    }
}

/// Envoy's `PROTOBUF_PERCENT_TO_ROUNDED_INTEGER_OR_DEFAULT` on a checked percent.
fn routing_enabled(
    p: Option<&envoy_types::pb::envoy::r#type::v3::Percent>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> u32 {
    let v = values::percent(p, f64::from(DEFAULT_ROUTING_ENABLED), path, ctx);
    v.round() as u32
}

/// `common_lb_config.zone_aware_lb_config` (the older message: Envoy reads its
/// three fields only).
pub(super) fn common(
    z: &pb::cluster::common_lb_config::ZoneAwareLbConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> ZoneAware {
    ZoneAware {
        routing_enabled: routing_enabled(
            z.routing_enabled.as_ref(),
            &path.field("routing_enabled"),
            ctx,
        ),
        min_cluster_size: z
            .min_cluster_size
            .map_or(DEFAULT_MIN_CLUSTER_SIZE, |v| v.value),
        fail_traffic_on_panic: z.fail_traffic_on_panic,
        ..ZoneAware::default()
    }
}

/// A typed policy's `routing_enabled`: Envoy checks no bounds on the typed
/// policies' messages; above 100 acts as 100 (every pick), and a negative or
/// non-finite value, whose meaning Envoy leaves to a float-to-integer cast, is
/// refused.
fn typed_routing_enabled(
    p: Option<&envoy_types::pb::envoy::r#type::v3::Percent>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> u32 {
    let Some(p) = p else {
        return DEFAULT_ROUTING_ENABLED;
    };
    if !p.value.is_finite() || p.value < 0.0 {
        ctx.error(
            &path.field("value"),
            format!("must be a non-negative percentage, found {}", p.value),
        );
        return DEFAULT_ROUTING_ENABLED;
    }
    p.value.round().min(100.0) as u32
}

/// A typed policy's `locality_lb_config.zone_aware_lb_config`.
pub(super) fn typed(z: &TypedZoneAware, path: &Path<'_>, ctx: &mut Ctx) -> ZoneAware {
    #[allow(deprecated)]
    let force_direct = z.force_locality_direct_routing;
    // `force_local_zone` supersedes the deprecated flag, as in Envoy.
    let force_local_zone_min_size = match &z.force_local_zone {
        Some(f) => Some(f.min_size.map_or(1, |v| v.value)),
        None => force_direct.then_some(1),
    };
    let locality_basis = match PbBasis::try_from(z.locality_basis) {
        Ok(PbBasis::HealthyHostsNum) => LocalityBasis::HealthyHosts,
        Ok(PbBasis::HealthyHostsWeight) => LocalityBasis::HealthyWeight,
        Err(_) => {
            ctx.error(
                &path.field("locality_basis"),
                format!("unknown locality_basis {}", z.locality_basis),
            );
            LocalityBasis::HealthyHosts
        }
    };
    ZoneAware {
        routing_enabled: typed_routing_enabled(
            z.routing_enabled.as_ref(),
            &path.field("routing_enabled"),
            ctx,
        ),
        min_cluster_size: z
            .min_cluster_size
            .map_or(DEFAULT_MIN_CLUSTER_SIZE, |v| v.value),
        fail_traffic_on_panic: z.fail_traffic_on_panic,
        force_local_zone_min_size,
        locality_basis,
    }
}
