//! Circuit breakers (`circuit_breakers.thresholds[]`, one per routing priority) and
//! retry budgets.

use super::values;
use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::cluster::v3 as pb;
use envoy_types::pb::envoy::config::core::v3::RoutingPriority;

/// Envoy's default for `max_connections`, `max_pending_requests` and `max_requests`.
pub const DEFAULT_MAX: u32 = 1024;
/// Envoy's default `max_retries`.
pub const DEFAULT_MAX_RETRIES: u32 = 3;
/// Envoy's default `retry_budget.budget_percent`.
pub const DEFAULT_BUDGET_PERCENT: f64 = 20.0;
/// Envoy's default `retry_budget.min_retry_concurrency`.
pub const DEFAULT_MIN_RETRY_CONCURRENCY: u32 = 3;

/// Circuit breakers of a cluster, per routing priority.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CircuitBreakers {
    /// For requests of routes with the DEFAULT priority.
    pub default: Thresholds,
    /// For requests of routes with the HIGH priority.
    pub high: Thresholds,
}

impl CircuitBreakers {
    /// The thresholds for a route of HIGH (`true`) or DEFAULT (`false`) priority.
    pub fn for_priority(&self, high: bool) -> &Thresholds {
        if high { &self.high } else { &self.default }
    }
}

/// The limits of one routing priority. Counters are cluster-wide.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// Upstream connections (default 1024).
    pub max_connections: u32,
    /// Requests waiting for a connection (default 1024).
    pub max_pending_requests: u32,
    /// Requests in flight (default 1024).
    pub max_requests: u32,
    /// Retries in flight (default 3); replaced by `retry_budget` when that is set.
    pub max_retries: u32,
    /// Connection pools; `None` = unlimited (the default).
    pub max_connection_pools: Option<u32>,
    /// Publish `remaining_*` gauges.
    pub track_remaining: bool,
    /// The retry budget; its presence (even empty) enables it.
    pub retry_budget: Option<RetryBudget>,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX,
            max_pending_requests: DEFAULT_MAX,
            max_requests: DEFAULT_MAX,
            max_retries: DEFAULT_MAX_RETRIES,
            max_connection_pools: None,
            track_remaining: false,
            retry_budget: None,
        }
    }
}

/// A retry budget: a retry may start iff
/// `active_retries < max(budget_percent / 100 x (active + pending requests), min_retry_concurrency)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryBudget {
    /// Percentage of active plus pending requests (default 20).
    pub budget_percent: f64,
    /// Floor on concurrent retries (default 3).
    pub min_retry_concurrency: u32,
}

/// Translates `circuit_breakers`.
pub(super) fn translate(
    cb: Option<&pb::CircuitBreakers>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> CircuitBreakers {
    let mut out = CircuitBreakers::default();
    let Some(cb) = cb else { return out };
    let tp = path.field("circuit_breakers.thresholds");
    let mut seen: [Option<usize>; 2] = [None, None];
    for (i, t) in cb.thresholds.iter().enumerate() {
        let ip = tp.index(i);
        let (slot, name) = match RoutingPriority::try_from(t.priority) {
            Ok(RoutingPriority::Default) => (0, "DEFAULT"),
            Ok(RoutingPriority::High) => (1, "HIGH"),
            Err(_) => {
                ctx.error(
                    &ip.field("priority"),
                    format!("unknown routing priority {}", t.priority),
                );
                continue;
            }
        };
        // Envoy silently uses the first entry; a second one is a mistake worth naming.
        if let Some(first) = seen[slot] {
            ctx.error(
                &ip.field("priority"),
                format!("duplicate thresholds for priority {name} (also thresholds[{first}])"),
            );
            continue;
        }
        seen[slot] = Some(i);
        let th = thresholds(t, &ip, ctx);
        if slot == 0 {
            out.default = th;
        } else {
            out.high = th;
        }
    }
    out
}

fn thresholds(t: &pb::circuit_breakers::Thresholds, path: &Path<'_>, ctx: &mut Ctx) -> Thresholds {
    let retry_budget = t.retry_budget.as_ref().map(|b| {
        let bp = path.field("retry_budget");
        RetryBudget {
            budget_percent: values::percent(
                b.budget_percent.as_ref(),
                DEFAULT_BUDGET_PERCENT,
                &bp.field("budget_percent"),
                ctx,
            ),
            min_retry_concurrency: core::u32_or(
                b.min_retry_concurrency.as_ref(),
                DEFAULT_MIN_RETRY_CONCURRENCY,
            ),
        }
    });
    Thresholds {
        max_connections: core::u32_or(t.max_connections.as_ref(), DEFAULT_MAX),
        max_pending_requests: core::u32_or(t.max_pending_requests.as_ref(), DEFAULT_MAX),
        max_requests: core::u32_or(t.max_requests.as_ref(), DEFAULT_MAX),
        max_retries: core::u32_or(t.max_retries.as_ref(), DEFAULT_MAX_RETRIES),
        max_connection_pools: t.max_connection_pools.as_ref().map(|v| v.value),
        track_remaining: t.track_remaining,
        retry_budget,
    }
}
