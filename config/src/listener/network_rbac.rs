//! The network RBAC filter (`envoy.filters.network.rbac`): the HTTP RBAC
//! filter's engines (`rules` or the unified `matcher`, and their shadows),
//! judged once per connection on its first byte
//! (`ONE_TIME_ON_FIRST_BYTE`) with connection facts only, before a TCP
//! proxy or an HTTP connection manager.
//!
//! As Envoy: a `header` permission or principal in `rules` is refused
//! ("not supported by RBAC network filter"). Refused as courier's own
//! limits, with their paths: `enforcement_type: CONTINUOUS`, `delay_deny`,
//! the LOG action, `url_path` (it never matches a connection in Envoy) and
//! the matcher's request header and dynamic metadata inputs (HTTP inputs).

use crate::ctx::Ctx;
use crate::filters::rbac::{self, Permission, Principal, RbacAction, RbacEngine, RbacFilter};
use crate::filters::rbac_matcher::{Predicate, RbacMatcher};
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::extensions::filters::http::rbac::v3 as http_pb;
use envoy_types::pb::envoy::extensions::filters::network::rbac::v3 as pb;
use std::sync::Arc;

/// Fields of the network `RBAC` courier implements.
pub(crate) const SUPPORT: &[Support] = &[(
    "envoy.extensions.filters.network.rbac.v3.RBAC",
    &[
        "rules",
        "matcher",
        "shadow_rules",
        "shadow_matcher",
        "shadow_rules_stat_prefix",
        "stat_prefix",
        "enforcement_type",
    ],
)];

/// A validated network `RBAC`.
#[derive(Debug, Clone)]
pub struct NetworkRbac {
    /// Stats `<stat_prefix>.rbac.{allowed,denied}` and
    /// `<stat_prefix>.rbac.<shadow_rules_stat_prefix>.shadow_{allowed,denied}`
    /// (no dot added after a prefix ending in one), in the root scope.
    pub stat_prefix: String,
    /// The engines, compiled as the HTTP filter's (`rules_stat_prefix` and
    /// `track_per_rule_stats` unset: the network filter has neither).
    pub rbac: Arc<RbacFilter>,
}

/// Translates a network `RBAC` with Envoy's checks.
pub fn translate(m: &pb::Rbac, path: &Path<'_>, ctx: &mut Ctx) -> Option<NetworkRbac> {
    let before = ctx.error_count();
    if m.stat_prefix.is_empty() {
        ctx.error(
            &path.field("stat_prefix"),
            "value length must be at least 1 characters",
        );
    }
    match pb::rbac::EnforcementType::try_from(m.enforcement_type) {
        Ok(pb::rbac::EnforcementType::OneTimeOnFirstByte) => {}
        Ok(pb::rbac::EnforcementType::Continuous) => ctx.unsupported(
            &path.field("enforcement_type"),
            "enforcement_type CONTINUOUS",
        ),
        Err(_) => ctx.error(
            &path.field("enforcement_type"),
            format!("{} is not a defined enforcement type", m.enforcement_type),
        ),
    }
    // Envoy refuses header rules before it builds the engines.
    if let Some(r) = &m.rules {
        headerless(r, &path.field("rules"), ctx);
    }
    if let Some(r) = &m.shadow_rules {
        headerless(r, &path.field("shadow_rules"), ctx);
    }
    // The same fields (and paths) as the HTTP filter's config.
    let as_http = http_pb::Rbac {
        rules: m.rules.clone(),
        matcher: m.matcher.clone(),
        shadow_rules: m.shadow_rules.clone(),
        shadow_matcher: m.shadow_matcher.clone(),
        shadow_rules_stat_prefix: m.shadow_rules_stat_prefix.clone(),
        ..Default::default()
    };
    let compiled = rbac::translate(&as_http, path, ctx)?;
    connection_only(&compiled, path, ctx);
    (ctx.error_count() == before).then(|| NetworkRbac {
        stat_prefix: m.stat_prefix.clone(),
        rbac: Arc::new(compiled),
    })
}

/// Envoy's "Found header(...) rule,not supported by RBAC network filter".
fn headerless(r: &envoy_types::pb::envoy::config::rbac::v3::Rbac, path: &Path<'_>, ctx: &mut Ctx) {
    use envoy_types::pb::envoy::config::rbac::v3::{Permission as P, Principal as Q};
    fn perm(p: &P) -> bool {
        use envoy_types::pb::envoy::config::rbac::v3::permission::Rule as R;
        match &p.rule {
            Some(R::Header(_)) => true,
            Some(R::AndRules(s) | R::OrRules(s)) => s.rules.iter().any(perm),
            Some(R::NotRule(x)) => perm(x),
            _ => false,
        }
    }
    fn prin(p: &Q) -> bool {
        use envoy_types::pb::envoy::config::rbac::v3::principal::Identifier as I;
        match &p.identifier {
            Some(I::Header(_)) => true,
            Some(I::AndIds(s) | I::OrIds(s)) => s.ids.iter().any(prin),
            Some(I::NotId(x)) => prin(x),
            _ => false,
        }
    }
    let mut names: Vec<&String> = r.policies.keys().collect();
    names.sort();
    let policies = path.field("policies");
    for name in names {
        let Some(p) = r.policies.get(name) else {
            continue;
        };
        let pp = policies.key(name);
        if p.permissions.iter().any(perm) || p.principals.iter().any(prin) {
            ctx.error(
                &pp,
                "Found header rule, not supported by RBAC network filter",
            );
        }
    }
}

/// Refuses what courier cannot judge on a connection (see the module docs).
fn connection_only(f: &RbacFilter, path: &Path<'_>, ctx: &mut Ctx) {
    let engines = [("rules", &f.rules), ("shadow_rules", &f.shadow_rules)];
    for (field, e) in engines {
        if let Some(e) = e {
            engine(e, &path.field(field), ctx);
        }
    }
    let matchers = [
        ("matcher", &f.matcher),
        ("shadow_matcher", &f.shadow_matcher),
    ];
    for (field, m) in matchers {
        if let Some(m) = m {
            matcher(m, &path.field(field), ctx);
        }
    }
}

fn engine(e: &RbacEngine, path: &Path<'_>, ctx: &mut Ctx) {
    if e.action == RbacAction::Log {
        ctx.unsupported(&path.field("action"), "the LOG action on a connection");
    }
    let policies = path.field("policies");
    for p in &e.policies {
        let pp = policies.key(&p.name);
        // Header rules were refused above, as Envoy does.
        if p.permissions.iter().any(|x| perm_http(x, false))
            || p.principals.iter().any(|x| prin_http(x, false))
        {
            ctx.unsupported(&pp, "url_path on a connection");
        }
        if p.condition.is_some() {
            // courier's CEL attributes are a request's; a connection's are not built.
            ctx.unsupported(&pp, "a CEL condition on a connection");
        }
    }
}

fn matcher(m: &RbacMatcher, path: &Path<'_>, ctx: &mut Ctx) {
    let actions = m.rules.iter().map(|(_, a)| a).chain(&m.on_no_match);
    if actions.into_iter().any(|a| a.action == RbacAction::Log) {
        ctx.unsupported(path, "the LOG action on a connection");
    }
    if m.rules.iter().any(|(p, _)| pred_http(p)) {
        ctx.unsupported(
            &path.field("matcher_list"),
            "a request header, dynamic metadata or CEL input on a connection",
        );
    }
}

/// Whether a permission reads the request's path or, in a matcher (whose
/// header and dynamic metadata inputs are HTTP inputs, which Envoy's network
/// matcher does not have), a header or metadata: nothing a connection has.
fn perm_http(p: &Permission, headers: bool) -> bool {
    match p {
        Permission::UrlPath(_) => true,
        Permission::Header(_) | Permission::Metadata(_) => headers,
        // Request attributes: there is no request on a connection.
        Permission::Cel(_) => true,
        Permission::And(v) | Permission::Or(v) => v.iter().any(|x| perm_http(x, headers)),
        Permission::Not(x) => perm_http(x, headers),
        _ => false,
    }
}

fn prin_http(p: &Principal, headers: bool) -> bool {
    match p {
        Principal::UrlPath(_) => true,
        Principal::Header(_) | Principal::Metadata(_) => headers,
        Principal::And(v) | Principal::Or(v) => v.iter().any(|x| prin_http(x, headers)),
        Principal::Not(x) => prin_http(x, headers),
        _ => false,
    }
}

fn pred_http(p: &Predicate) -> bool {
    match p {
        Predicate::And(v) | Predicate::Or(v) => v.iter().any(pred_http),
        Predicate::Not(x) => pred_http(x),
        Predicate::Permission(x) => perm_http(x, true),
        Predicate::Principal(x) => prin_http(x, true),
    }
}

#[cfg(test)]
#[path = "network_rbac_tests.rs"]
mod tests;
