//! The RBAC HTTP filter's runtime (`envoy.filters.http.rbac`, envoy-reference 4): the shadow
//! engine is evaluated and reported, the enforced engine decides; deny answers 403
//! `RBAC: access denied`. Synchronous: never builds a future.

pub mod eval;

use crate::chain::{Decision, HttpFilter, LocalReply};
use crate::per_worker::PerWorker;
use crate::request::RequestState;
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::rbac::{RbacAction, RbacFilter as RbacConfig};
use http::StatusCode;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The dynamic-metadata namespace RBAC writes.
pub const METADATA_NAMESPACE: &str = "envoy.filters.http.rbac";
/// The namespace of the access-log hint the LOG action writes.
pub const COMMON_NAMESPACE: &str = "envoy.common";
/// The body of a denial.
pub const DENIED_BODY: &str = "RBAC: access denied";

/// RBAC counters, Envoy names `http.<hcm prefix>.rbac.<rules_stat_prefix><name>` (shadow ones
/// under `<shadow_rules_stat_prefix>`). Plain relaxed atomics: the proxy renders them.
#[derive(Debug, Default)]
pub struct RbacStats {
    /// Requests the enforced engine allowed.
    pub allowed: AtomicU64,
    /// Requests the enforced engine denied.
    pub denied: AtomicU64,
    /// Requests the shadow engine would have allowed.
    pub shadow_allowed: AtomicU64,
    /// Requests the shadow engine would have denied.
    pub shadow_denied: AtomicU64,
    /// LOG action: requests a policy matched.
    pub logged: AtomicU64,
    /// LOG action: requests no policy matched.
    pub not_logged: AtomicU64,
    /// With `track_per_rule_stats`: per policy of the filter-level enforced engine, in the
    /// engine's (name) order: `policy.<name>.allowed` / `.denied`.
    pub per_policy: Vec<PolicyStats>,
}

/// Per-policy counters (`track_per_rule_stats`).
#[derive(Debug, Default)]
pub struct PolicyStats {
    /// The policy's name.
    pub name: String,
    /// Requests allowed with this policy as the effective one.
    pub allowed: AtomicU64,
    /// Requests denied with this policy as the effective one.
    pub denied: AtomicU64,
}

fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The RBAC filter.
#[derive(Debug)]
pub struct RbacFilter {
    config: Arc<RbacConfig>,
    stats: Arc<PerWorker<RbacStats>>,
}

impl RbacFilter {
    /// A filter for this config.
    pub fn new(config: Arc<RbacConfig>) -> Self {
        let per_policy: Vec<String> = match (&config.rules, config.track_per_rule_stats) {
            (Some(e), true) => e.policies.iter().map(|p| p.name.clone()).collect(),
            _ => Vec::new(),
        };
        Self {
            config,
            stats: Arc::new(PerWorker::new(|| RbacStats {
                per_policy: per_policy
                    .iter()
                    .map(|name: &String| PolicyStats {
                        name: name.clone(),
                        ..PolicyStats::default()
                    })
                    .collect(),
                ..RbacStats::default()
            })),
        }
    }

    /// The filter's counters.
    pub fn stats(&self) -> &Arc<PerWorker<RbacStats>> {
        &self.stats
    }

    /// The filter's config (stat prefixes for rendering).
    pub fn config(&self) -> &RbacConfig {
        &self.config
    }

    /// Evaluates a request with `config` (the filter's own or a route's override) and
    /// returns the local reply when it is denied.
    fn check(
        &self,
        config: &RbacConfig,
        own: bool,
        req: &mut RequestState<'_>,
    ) -> Option<LocalReply> {
        let stats = self.stats.get(req.conn.worker);
        if let Some(shadow) = &config.shadow_rules {
            let r = eval::evaluate(shadow, req);
            inc(if r.allowed {
                &stats.shadow_allowed
            } else {
                &stats.shadow_denied
            });
            let prefix = &config.shadow_rules_stat_prefix;
            let mut md = serde_json::Map::new();
            if let Some(p) = r.matched {
                md.insert(
                    format!("{prefix}shadow_effective_policy_id"),
                    Value::String(p.name.clone()),
                );
            }
            md.insert(
                format!("{prefix}shadow_engine_result"),
                Value::String(if r.allowed { "allowed" } else { "denied" }.into()),
            );
            req.merge_metadata(METADATA_NAMESPACE, md);
        } else if let Some(shadow) = &config.shadow_matcher {
            let matched = eval::evaluate_matcher(shadow, req);
            let allowed = matched.is_some_and(|a| a.action == RbacAction::Allow);
            inc(if allowed {
                &stats.shadow_allowed
            } else {
                &stats.shadow_denied
            });
            let prefix = &config.shadow_rules_stat_prefix;
            let mut md = serde_json::Map::new();
            if let Some(a) = matched.filter(|a| !a.name.is_empty()) {
                md.insert(
                    format!("{prefix}shadow_effective_policy_id"),
                    Value::String(a.name.clone()),
                );
            }
            md.insert(
                format!("{prefix}shadow_engine_result"),
                Value::String(if allowed { "allowed" } else { "denied" }.into()),
            );
            req.merge_metadata(METADATA_NAMESPACE, md);
        }
        if let Some(m) = &config.matcher {
            // The unified matcher: the action of the first predicate that
            // matches, else `on_no_match`, else denied (Envoy's default).
            let matched = eval::evaluate_matcher(m, req);
            if matched.is_some_and(|a| a.action == RbacAction::Allow) {
                inc(&stats.allowed);
                return None;
            }
            inc(&stats.denied);
            let name = matched.map_or("none", |a| a.name.as_str());
            return Some(denied(name));
        }
        let engine = config.rules.as_ref()?;
        let r = eval::evaluate(engine, req);
        if engine.action == RbacAction::Log {
            inc(if r.matched.is_some() {
                &stats.logged
            } else {
                &stats.not_logged
            });
            req.set_metadata(
                COMMON_NAMESPACE,
                "access_log_hint",
                Value::Bool(r.matched.is_some()),
            );
            return None;
        }
        // per_policy follows the filter's own engine order: a position, not a name search.
        let policy_stats = match (own, r.position) {
            (true, Some(i)) => stats.per_policy.get(i),
            _ => None,
        };
        if r.allowed {
            inc(&stats.allowed);
            if let Some(s) = policy_stats {
                inc(&s.allowed);
            }
            return None;
        }
        inc(&stats.denied);
        if let Some(s) = policy_stats {
            inc(&s.denied);
        }
        let name = r.matched.map_or("none", |p| p.name.as_str());
        Some(denied(name))
    }
}

/// The 403 for a request denied with effective policy `name`.
fn denied(name: &str) -> LocalReply {
    let details = format!(
        "rbac_access_denied_matched_policy[{}]",
        name.replace(char::is_whitespace, "_")
    );
    LocalReply::new(StatusCode::FORBIDDEN, DENIED_BODY, details)
}

impl HttpFilter for RbacFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        let (config, own) = match per_route {
            // RBACPerRoute replaces the enforced and shadow config; without `rbac` the
            // filter is off on the route.
            Some(PerRouteFilterConfig::Rbac(r)) => match &r.rbac {
                Some(c) => (c, false),
                None => return Decision::Continue,
            },
            _ => (&*self.config, true),
        };
        match self.check(config, own, req) {
            Some(reply) => Decision::Respond(reply),
            None => Decision::Continue,
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod index_tests;
