//! The RBAC filter (`envoy.extensions.filters.http.rbac.v3`, `envoy.config.rbac.v3`),
//! compiled into trees of precompiled matchers.
//!
//! Implemented: `rules` and `shadow_rules` with every Permission and Principal kind of
//! envoy-reference 4.1 except the extension-typed ones, and their unified-matcher form
//! `matcher` / `shadow_matcher` ([`super::rbac_matcher`]), and a policy's CEL
//! `condition` / `checked_condition` (AND-ed with its permissions and principals).
//! Refused through the support table (so reported at their own path):
//! `cel_config`, `audit_logging_options`, and the
//! Permission kinds `matcher`, `uri_template` and Principal kinds `filter_state`, `custom`.

use crate::ctx::Ctx;
use crate::matcher::{self, Cidr, HeaderMatcher, MetadataMatcher, StringMatcher};
use crate::path::Path;
use envoy_types::pb::envoy::config::rbac::v3 as pb;
use envoy_types::pb::envoy::extensions::filters::http::rbac::v3 as filter_pb;
use envoy_types::pb::envoy::r#type::matcher::v3 as mpb;

/// A validated RBAC HTTP filter config.
#[derive(Debug, Clone)]
pub struct RbacFilter {
    /// The enforced engine; `None` = no enforcement (every request passes).
    pub rules: Option<RbacEngine>,
    /// Prefix of the enforced engine's stats (verbatim, as Envoy).
    pub rules_stat_prefix: String,
    /// The shadow engine: evaluated and reported, never enforced.
    pub shadow_rules: Option<RbacEngine>,
    /// Prefix of the shadow engine's stats and dynamic-metadata keys.
    pub shadow_rules_stat_prefix: String,
    /// Per-policy `policy.<name>.allowed|denied` counters.
    pub track_per_rule_stats: bool,
    /// The enforced engine in its unified-matcher form (`matcher`), instead of `rules`.
    pub matcher: Option<super::rbac_matcher::RbacMatcher>,
    /// The shadow engine in its unified-matcher form (`shadow_matcher`).
    pub shadow_matcher: Option<super::rbac_matcher::RbacMatcher>,
}

/// Per-route RBAC override (`RBACPerRoute`).
#[derive(Debug, Clone)]
pub struct RbacPerRoute {
    /// Replaces the filter's enforced and shadow config on the route; `None` disables RBAC there.
    pub rbac: Option<RbacFilter>,
}

/// What a matching policy means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RbacAction {
    /// Allow iff a policy matches.
    Allow,
    /// Allow iff no policy matches.
    Deny,
    /// Always allow; record whether a policy matched (access-log hint).
    Log,
}

/// One compiled `envoy.config.rbac.v3.RBAC`.
#[derive(Debug, Clone)]
pub struct RbacEngine {
    /// The action.
    pub action: RbacAction,
    /// Policies in lexicographic name order (Envoy evaluates them in that order and reports
    /// the first match).
    pub policies: Vec<RbacPolicy>,
    /// The policies indexed by their exact-match principals.
    pub index: super::rbac_index::PolicyIndex,
}

/// A named policy: matches when any permission AND any principal match.
#[derive(Debug, Clone)]
pub struct RbacPolicy {
    /// The policy's name (map key).
    pub name: String,
    /// OR-ed permissions (at least one).
    pub permissions: Vec<Permission>,
    /// OR-ed principals (at least one).
    pub principals: Vec<Principal>,
    /// A CEL condition that must also hold (`checked_condition`'s expression,
    /// else `condition`).
    pub condition: Option<crate::cel::Expr>,
}

/// Where a metadata matcher reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataSource {
    /// Request dynamic metadata (written by earlier filters, e.g. jwt_authn).
    Dynamic,
    /// The matched route's `metadata`.
    Route,
}

/// A metadata test and its source (`metadata` is `sourced_metadata` from DYNAMIC).
#[derive(Debug, Clone)]
pub struct SourcedMetadata {
    /// The source.
    pub source: MetadataSource,
    /// The matcher.
    pub matcher: MetadataMatcher,
}

/// A compiled `Permission` (what the request does).
#[derive(Debug, Clone)]
pub enum Permission {
    /// Always matches.
    Any,
    /// All match.
    And(Vec<Permission>),
    /// Any matches.
    Or(Vec<Permission>),
    /// The inner one does not match.
    Not(Box<Permission>),
    /// A request header (repeated headers joined with `,`).
    Header(HeaderMatcher),
    /// The path without query and fragment.
    UrlPath(StringMatcher),
    /// The local (destination) address.
    DestinationIp(Cidr),
    /// The local port.
    DestinationPort(u16),
    /// The local port in `[start, end)`.
    DestinationPortRange {
        /// First port in range.
        start: u32,
        /// One past the last port.
        end: u32,
    },
    /// Metadata.
    Metadata(SourcedMetadata),
    /// The TLS SNI (empty string when there is none).
    RequestedServerName(StringMatcher),
    /// The local port as text (the unified matcher's `DestinationPortInput`).
    DestinationPortText(StringMatcher),
    /// A CEL expression over the request's attributes (the unified matcher's
    /// `CelMatcher`): matches when it evaluates to `true`.
    Cel(crate::cel::Expr),
}

/// A compiled `Principal` (who sends the request).
#[derive(Debug, Clone)]
pub enum Principal {
    /// Always matches.
    Any,
    /// All match.
    And(Vec<Principal>),
    /// Any matches.
    Or(Vec<Principal>),
    /// The inner one does not match.
    Not(Box<Principal>),
    /// A TLS peer with a certificate; with a matcher, one of its URI SANs, DNS SANs or
    /// subject (in that order) must match.
    Authenticated(Option<StringMatcher>),
    /// The connection's peer (after PROXY protocol), deprecated `source_ip`.
    SourceIp(Cidr),
    /// The socket peer.
    DirectRemoteIp(Cidr),
    /// The trusted client address (XFF rules of the connection manager).
    RemoteIp(Cidr),
    /// A request header.
    Header(HeaderMatcher),
    /// The path without query and fragment.
    UrlPath(StringMatcher),
    /// Metadata.
    Metadata(SourcedMetadata),
}

/// Translates the RBAC filter config.
pub fn translate(r: &filter_pb::Rbac, path: &Path<'_>, ctx: &mut Ctx) -> Option<RbacFilter> {
    let before = ctx.error_count();
    let rules = r
        .rules
        .as_ref()
        .map(|e| engine(e, &path.field("rules"), ctx));
    let shadow_rules = r
        .shadow_rules
        .as_ref()
        .map(|e| engine(e, &path.field("shadow_rules"), ctx));
    let matcher = r
        .matcher
        .as_ref()
        .and_then(|m| super::rbac_matcher::translate(m, &path.field("matcher"), ctx));
    let shadow_matcher = r
        .shadow_matcher
        .as_ref()
        .and_then(|m| super::rbac_matcher::translate(m, &path.field("shadow_matcher"), ctx));
    // With both forms set, the matcher is the engine and the rules are
    // ignored, as Envoy does (it warns: "RBAC rules are ignored when matcher
    // is configured").
    let rules = if matcher.is_some() { None } else { rules };
    let shadow_rules = if shadow_matcher.is_some() {
        None
    } else {
        shadow_rules
    };
    if ctx.error_count() > before {
        return None;
    }
    Some(RbacFilter {
        rules,
        rules_stat_prefix: r.rules_stat_prefix.clone(),
        shadow_rules,
        shadow_rules_stat_prefix: r.shadow_rules_stat_prefix.clone(),
        track_per_rule_stats: r.track_per_rule_stats,
        matcher,
        shadow_matcher,
    })
}

/// Translates `RBACPerRoute`.
pub fn per_route(
    r: &filter_pb::RbacPerRoute,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<RbacPerRoute> {
    let rbac = match &r.rbac {
        None => None,
        Some(inner) => Some(translate(inner, &path.field("rbac"), ctx)?),
    };
    Some(RbacPerRoute { rbac })
}

fn engine(e: &pb::Rbac, path: &Path<'_>, ctx: &mut Ctx) -> RbacEngine {
    let action = match pb::rbac::Action::try_from(e.action) {
        Ok(pb::rbac::Action::Allow) => RbacAction::Allow,
        Ok(pb::rbac::Action::Deny) => RbacAction::Deny,
        Ok(pb::rbac::Action::Log) => RbacAction::Log,
        Err(_) => {
            ctx.error(
                &path.field("action"),
                format!("{} is not a defined action", e.action),
            );
            RbacAction::Allow
        }
    };
    let pp = path.field("policies");
    let mut names: Vec<&String> = e.policies.keys().collect();
    names.sort();
    let mut policies = Vec::with_capacity(names.len());
    for name in names {
        let Some(p) = e.policies.get(name) else {
            continue;
        };
        if let Some(p) = policy(name, p, &pp.key(name), ctx) {
            policies.push(p);
        }
    }
    let index = super::rbac_index::PolicyIndex::build(&policies);
    RbacEngine {
        action,
        policies,
        index,
    }
}

fn policy(name: &str, p: &pb::Policy, path: &Path<'_>, ctx: &mut Ctx) -> Option<RbacPolicy> {
    let before = ctx.error_count();
    let permp = path.field("permissions");
    if p.permissions.is_empty() {
        ctx.error(&permp, "at least one permission is required");
    }
    let permissions: Vec<Permission> = p
        .permissions
        .iter()
        .enumerate()
        .filter_map(|(i, x)| permission(x, &permp.index(i), ctx))
        .collect();
    let prinp = path.field("principals");
    if p.principals.is_empty() {
        ctx.error(&prinp, "at least one principal is required");
    }
    let principals: Vec<Principal> = p
        .principals
        .iter()
        .enumerate()
        .filter_map(|(i, x)| principal(x, &prinp.index(i), ctx))
        .collect();
    // Envoy: `checked_condition` when set, else `condition`.
    let condition = match (&p.checked_condition, &p.condition) {
        (Some(c), _) => {
            let cp = path.field("checked_condition");
            match &c.expr {
                Some(e) => crate::cel::Expr::from_legacy(e, &cp.field("expr"), ctx),
                None => {
                    ctx.error(&cp.field("expr"), "is required");
                    None
                }
            }
        }
        (None, Some(e)) => crate::cel::Expr::from_legacy(e, &path.field("condition"), ctx),
        (None, None) => None,
    };
    (ctx.error_count() == before).then(|| RbacPolicy {
        name: name.to_string(),
        permissions,
        principals,
        condition,
    })
}

fn permission(p: &pb::Permission, path: &Path<'_>, ctx: &mut Ctx) -> Option<Permission> {
    use pb::permission::Rule as R;
    Some(match p.rule.as_ref() {
        None => {
            ctx.error(path, "a permission rule is required (and_rules, or_rules, any, header, url_path, destination_ip, destination_port, destination_port_range, metadata, sourced_metadata, not_rule or requested_server_name)");
            return None;
        }
        Some(R::AndRules(s)) => Permission::And(permission_set(s, &path.field("and_rules"), ctx)?),
        Some(R::OrRules(s)) => Permission::Or(permission_set(s, &path.field("or_rules"), ctx)?),
        Some(R::Any(b)) => {
            any(*b, path, ctx)?;
            Permission::Any
        }
        Some(R::Header(h)) => {
            Permission::Header(matcher::header_matcher(h, &path.field("header"), ctx)?)
        }
        Some(R::UrlPath(pm)) => Permission::UrlPath(url_path(pm, &path.field("url_path"), ctx)?),
        Some(R::DestinationIp(c)) => {
            Permission::DestinationIp(cidr(c, &path.field("destination_ip"), ctx)?)
        }
        Some(R::DestinationPort(port)) => match u16::try_from(*port) {
            Ok(port) => Permission::DestinationPort(port),
            Err(_) => {
                ctx.error(
                    &path.field("destination_port"),
                    format!("{port} is not a port (0..=65535)"),
                );
                return None;
            }
        },
        Some(R::DestinationPortRange(r)) => {
            let rp = path.field("destination_port_range");
            // Envoy's PortRangeMatcher: both ends within [0, 65536], start < end.
            let bounds = 0..=65536;
            if !bounds.contains(&r.start) {
                ctx.error(
                    &rp.field("start"),
                    format!("{} is out of range 0..=65536", r.start),
                );
                return None;
            }
            if !bounds.contains(&r.end) {
                ctx.error(
                    &rp.field("end"),
                    format!("{} is out of range 0..=65536", r.end),
                );
                return None;
            }
            if r.start >= r.end {
                ctx.error(&rp, "start must be below end");
                return None;
            }
            Permission::DestinationPortRange {
                start: r.start as u32,
                end: r.end as u32,
            }
        }
        Some(R::Metadata(m)) => Permission::Metadata(SourcedMetadata {
            source: MetadataSource::Dynamic,
            matcher: matcher::metadata_matcher(m, &path.field("metadata"), ctx)?,
        }),
        Some(R::SourcedMetadata(s)) => {
            Permission::Metadata(sourced_metadata(s, &path.field("sourced_metadata"), ctx)?)
        }
        Some(R::NotRule(inner)) => {
            Permission::Not(Box::new(permission(inner, &path.field("not_rule"), ctx)?))
        }
        Some(R::RequestedServerName(sm)) => Permission::RequestedServerName(
            matcher::string_matcher(sm, &path.field("requested_server_name"), ctx)?,
        ),
        // Refused by the support table at their path.
        Some(R::Matcher(_) | R::UriTemplate(_)) => return None,
    })
}

fn permission_set(
    s: &pb::permission::Set,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Vec<Permission>> {
    let rp = path.field("rules");
    if s.rules.is_empty() {
        ctx.error(&rp, "at least one rule is required");
        return None;
    }
    let before = ctx.error_count();
    let out: Vec<Permission> = s
        .rules
        .iter()
        .enumerate()
        .filter_map(|(i, r)| permission(r, &rp.index(i), ctx))
        .collect();
    (ctx.error_count() == before && out.len() == s.rules.len()).then_some(out)
}

fn principal(p: &pb::Principal, path: &Path<'_>, ctx: &mut Ctx) -> Option<Principal> {
    use pb::principal::Identifier as I;
    Some(match p.identifier.as_ref() {
        None => {
            ctx.error(path, "a principal identifier is required (and_ids, or_ids, any, authenticated, source_ip, direct_remote_ip, remote_ip, header, url_path, metadata, sourced_metadata or not_id)");
            return None;
        }
        Some(I::AndIds(s)) => Principal::And(principal_set(s, &path.field("and_ids"), ctx)?),
        Some(I::OrIds(s)) => Principal::Or(principal_set(s, &path.field("or_ids"), ctx)?),
        Some(I::Any(b)) => {
            any(*b, path, ctx)?;
            Principal::Any
        }
        Some(I::Authenticated(a)) => Principal::Authenticated(match a.principal_name.as_ref() {
            None => None,
            Some(sm) => Some(matcher::string_matcher(
                sm,
                &path.field("authenticated.principal_name"),
                ctx,
            )?),
        }),
        Some(I::SourceIp(c)) => Principal::SourceIp(cidr(c, &path.field("source_ip"), ctx)?),
        Some(I::DirectRemoteIp(c)) => {
            Principal::DirectRemoteIp(cidr(c, &path.field("direct_remote_ip"), ctx)?)
        }
        Some(I::RemoteIp(c)) => Principal::RemoteIp(cidr(c, &path.field("remote_ip"), ctx)?),
        Some(I::Header(h)) => {
            Principal::Header(matcher::header_matcher(h, &path.field("header"), ctx)?)
        }
        Some(I::UrlPath(pm)) => Principal::UrlPath(url_path(pm, &path.field("url_path"), ctx)?),
        Some(I::Metadata(m)) => Principal::Metadata(SourcedMetadata {
            source: MetadataSource::Dynamic,
            matcher: matcher::metadata_matcher(m, &path.field("metadata"), ctx)?,
        }),
        Some(I::SourcedMetadata(s)) => {
            Principal::Metadata(sourced_metadata(s, &path.field("sourced_metadata"), ctx)?)
        }
        Some(I::NotId(inner)) => {
            Principal::Not(Box::new(principal(inner, &path.field("not_id"), ctx)?))
        }
        // Refused by the support table at their path.
        Some(I::FilterState(_) | I::Custom(_)) => return None,
    })
}

fn principal_set(s: &pb::principal::Set, path: &Path<'_>, ctx: &mut Ctx) -> Option<Vec<Principal>> {
    let ip = path.field("ids");
    if s.ids.is_empty() {
        ctx.error(&ip, "at least one principal is required");
        return None;
    }
    let before = ctx.error_count();
    let out: Vec<Principal> = s
        .ids
        .iter()
        .enumerate()
        .filter_map(|(i, p)| principal(p, &ip.index(i), ctx))
        .collect();
    (ctx.error_count() == before && out.len() == s.ids.len()).then_some(out)
}

/// A CIDR range. Host bits are masked, as Envoy does (`192.168.1.10/24` is
/// `192.168.1.0/24`; a missing `prefix_len` is 0, every address): `envoy --mode validate`
/// accepts such ranges, so courier accepts the same configs.
fn cidr(
    c: &envoy_types::pb::envoy::config::core::v3::CidrRange,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Cidr> {
    matcher::cidr(c, path, ctx)
}

fn any(b: bool, path: &Path<'_>, ctx: &mut Ctx) -> Option<()> {
    if b {
        Some(())
    } else {
        ctx.error(&path.field("any"), "must be true");
        None
    }
}

fn url_path(pm: &mpb::PathMatcher, path: &Path<'_>, ctx: &mut Ctx) -> Option<StringMatcher> {
    match pm.rule.as_ref() {
        Some(mpb::path_matcher::Rule::Path(sm)) => {
            matcher::string_matcher(sm, &path.field("path"), ctx)
        }
        None => {
            ctx.error(&path.field("path"), "is required");
            None
        }
    }
}

fn sourced_metadata(
    s: &pb::SourcedMetadata,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<SourcedMetadata> {
    let source = match pb::MetadataSource::try_from(s.metadata_source) {
        Ok(pb::MetadataSource::Dynamic) => MetadataSource::Dynamic,
        Ok(pb::MetadataSource::Route) => MetadataSource::Route,
        Err(_) => {
            ctx.error(
                &path.field("metadata_source"),
                format!("{} is not a defined metadata source", s.metadata_source),
            );
            return None;
        }
    };
    let mp = path.field("metadata_matcher");
    let Some(m) = s.metadata_matcher.as_ref() else {
        ctx.error(&mp, "is required");
        return None;
    };
    Some(SourcedMetadata {
        source,
        matcher: matcher::metadata_matcher(m, &mp, ctx)?,
    })
}

#[cfg(test)]
#[path = "rbac_tests.rs"]
mod tests;
