//! The RBAC filter's unified-matcher form (`matcher` / `shadow_matcher`, an
//! `xds.type.matcher.v3.Matcher`), as Envoy Gateway emits it for its
//! authorization policies: a list of predicates, each naming an
//! `envoy.config.rbac.v3.Action`; the first that matches decides, then
//! `on_no_match`; with neither, the request is denied (Envoy's default).
//!
//! Predicates compile to the same trees as `rules` (envoy-reference 4.1), so one
//! evaluator serves both: `SourceIPInput` is the trusted client address
//! (`remote_ip`), `DirectSourceIPInput` the socket peer (`direct_remote_ip`),
//! `DestinationIPInput` / `DestinationPortInput` the local address,
//! `HttpRequestHeaderMatchInput` a request header (repeated ones joined with
//! `,`), `DynamicMetadataInput` with a `Metadata` input matcher a metadata
//! test, `HttpAttributesCelMatchInput` with a `CelMatcher` a CEL expression
//! over the request's attributes. Refused with their path: `matcher_tree`,
//! nested matchers, `keep_matching` and every other input or input matcher.

use super::rbac::{Permission, Principal, RbacAction, SourcedMetadata};
use crate::core;
use crate::ctx::Ctx;
use crate::matcher;
use crate::path::Path;
use envoy_types::pb::envoy::config::rbac::v3 as rbac_pb;
use envoy_types::pb::envoy::extensions::matching::common_inputs::network::v3 as inputs;
use envoy_types::pb::envoy::extensions::matching::input_matchers::{
    ip::v3 as ip_pb, metadata::v3 as md_pb,
};
use envoy_types::pb::envoy::r#type::matcher::v3 as mpb;
use envoy_types::pb::xds::core::v3::TypedExtensionConfig;
use envoy_types::pb::xds::r#type::matcher::v3 as xpb;
use xpb::matcher::matcher_list::predicate::{self, single_predicate};

/// A compiled RBAC matcher.
#[derive(Debug, Clone)]
pub struct RbacMatcher {
    /// The predicates in order, each with the action it names.
    pub rules: Vec<(Predicate, MatchedAction)>,
    /// The action when no predicate matches; none: denied.
    pub on_no_match: Option<MatchedAction>,
}

/// An `envoy.config.rbac.v3.Action`.
#[derive(Debug, Clone)]
pub struct MatchedAction {
    /// Its name: the effective policy id (`rbac_access_denied_matched_policy[<name>]`).
    pub name: String,
    /// What it does.
    pub action: RbacAction,
}

/// A compiled predicate.
#[derive(Debug, Clone)]
pub enum Predicate {
    /// All match.
    And(Vec<Predicate>),
    /// Any matches.
    Or(Vec<Predicate>),
    /// The inner one does not match.
    Not(Box<Predicate>),
    /// A test on what the request does.
    Permission(Permission),
    /// A test on who sends it.
    Principal(Principal),
}

/// Translates `matcher` (or `shadow_matcher`) of the RBAC filter.
pub fn translate(m: &xpb::Matcher, path: &Path<'_>, ctx: &mut Ctx) -> Option<RbacMatcher> {
    let before = ctx.error_count();
    let mut rules = Vec::new();
    match &m.matcher_type {
        Some(xpb::matcher::MatcherType::MatcherList(list)) => {
            let list_path = path.field("matcher_list");
            let lp = list_path.field("matchers");
            if list.matchers.is_empty() {
                ctx.error(&lp, "needs at least one matcher");
            }
            for (i, fm) in list.matchers.iter().enumerate() {
                let fp = lp.index(i);
                let pred = match &fm.predicate {
                    Some(p) => predicate(p, &fp.field("predicate"), ctx),
                    None => {
                        ctx.error(&fp.field("predicate"), "is required");
                        None
                    }
                };
                let action = match &fm.on_match {
                    Some(om) => on_match(om, &fp.field("on_match"), ctx),
                    None => {
                        ctx.error(&fp.field("on_match"), "is required");
                        None
                    }
                };
                if let (Some(p), Some(a)) = (pred, action) {
                    rules.push((p, a));
                }
            }
        }
        Some(xpb::matcher::MatcherType::MatcherTree(_)) => {
            ctx.unsupported(&path.field("matcher_tree"), "matcher_tree");
        }
        None => {}
    }
    let on_no_match = m
        .on_no_match
        .as_ref()
        .and_then(|om| on_match(om, &path.field("on_no_match"), ctx));
    (ctx.error_count() == before).then_some(RbacMatcher { rules, on_no_match })
}

fn on_match(om: &xpb::matcher::OnMatch, path: &Path<'_>, ctx: &mut Ctx) -> Option<MatchedAction> {
    if om.keep_matching {
        ctx.unsupported(&path.field("keep_matching"), "keep_matching");
        return None;
    }
    match &om.on_match {
        Some(xpb::matcher::on_match::OnMatch::Action(a)) => action(a, &path.field("action"), ctx),
        Some(xpb::matcher::on_match::OnMatch::Matcher(_)) => {
            ctx.unsupported(&path.field("matcher"), "nested matcher");
            None
        }
        None => {
            ctx.error(path, "needs an action");
            None
        }
    }
}

pub(crate) fn typed<'a>(
    t: &'a TypedExtensionConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<(&'a envoy_types::pb::google::protobuf::Any, String)> {
    match &t.typed_config {
        Some(any) => Some((any, any.type_url.clone())),
        None => {
            ctx.error(&path.field("typed_config"), "is required");
            None
        }
    }
}

fn action(a: &TypedExtensionConfig, path: &Path<'_>, ctx: &mut Ctx) -> Option<MatchedAction> {
    let tp = path.field("typed_config");
    let (any, _) = typed(a, path, ctx)?;
    let act = core::unpack::<rbac_pb::Action>(any, &tp, ctx)?;
    let action = match rbac_pb::rbac::Action::try_from(act.action) {
        Ok(rbac_pb::rbac::Action::Allow) => RbacAction::Allow,
        Ok(rbac_pb::rbac::Action::Deny) => RbacAction::Deny,
        // Envoy's LOG in a matcher also toggles the shared access-log hint
        // for every request of the filter: not implemented.
        Ok(rbac_pb::rbac::Action::Log) => {
            ctx.unsupported(&tp.field("action"), "LOG in a matcher");
            return None;
        }
        Err(_) => {
            ctx.error(
                &tp.field("action"),
                format!("{} is not a defined action", act.action),
            );
            return None;
        }
    };
    Some(MatchedAction {
        name: act.name,
        action,
    })
}

fn predicate(
    p: &xpb::matcher::matcher_list::Predicate,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Predicate> {
    let list = |l: &predicate::PredicateList, path: &Path<'_>, ctx: &mut Ctx| {
        let lp = path.field("predicate");
        let out: Vec<Predicate> = l
            .predicate
            .iter()
            .enumerate()
            .filter_map(|(i, p)| predicate(p, &lp.index(i), ctx))
            .collect();
        (out.len() == l.predicate.len()).then_some(out)
    };
    match &p.match_type {
        Some(predicate::MatchType::SinglePredicate(s)) => {
            single(s, &path.field("single_predicate"), ctx)
        }
        Some(predicate::MatchType::OrMatcher(l)) => {
            list(l, &path.field("or_matcher"), ctx).map(Predicate::Or)
        }
        Some(predicate::MatchType::AndMatcher(l)) => {
            list(l, &path.field("and_matcher"), ctx).map(Predicate::And)
        }
        Some(predicate::MatchType::NotMatcher(inner)) => {
            predicate(inner, &path.field("not_matcher"), ctx).map(|p| Predicate::Not(Box::new(p)))
        }
        None => {
            ctx.error(path, "needs a match type");
            None
        }
    }
}

/// What a single predicate reads.
enum Input {
    SourceIp,
    DirectSourceIp,
    DestinationIp,
    DestinationPort,
    Header(String),
    DynamicMetadata(String, Vec<String>),
    HttpAttributes,
}

fn single(s: &predicate::SinglePredicate, path: &Path<'_>, ctx: &mut Ctx) -> Option<Predicate> {
    let ip = path.field("input");
    let Some(input_cfg) = &s.input else {
        ctx.error(&ip, "is required");
        return None;
    };
    let (any, type_url) = typed(input_cfg, &ip, ctx)?;
    let itp = ip.field("typed_config");
    let name = type_url.rsplit('/').next().unwrap_or("");
    let input = match name {
        "envoy.extensions.matching.common_inputs.network.v3.SourceIPInput" => Input::SourceIp,
        "envoy.extensions.matching.common_inputs.network.v3.DirectSourceIPInput" => {
            Input::DirectSourceIp
        }
        "envoy.extensions.matching.common_inputs.network.v3.DestinationIPInput" => {
            Input::DestinationIp
        }
        "envoy.extensions.matching.common_inputs.network.v3.DestinationPortInput" => {
            Input::DestinationPort
        }
        "envoy.type.matcher.v3.HttpRequestHeaderMatchInput" => {
            let h = core::unpack::<mpb::HttpRequestHeaderMatchInput>(any, &itp, ctx)?;
            Input::Header(h.header_name.to_ascii_lowercase())
        }
        "envoy.extensions.matching.common_inputs.network.v3.DynamicMetadataInput" => {
            let d = core::unpack::<inputs::DynamicMetadataInput>(any, &itp, ctx)?;
            let keys = d
                .path
                .iter()
                .filter_map(|s| {
                    s.segment.as_ref().map(|seg| match seg {
                        inputs::dynamic_metadata_input::path_segment::Segment::Key(k) => k.clone(),
                    })
                })
                .collect();
            Input::DynamicMetadata(d.filter, keys)
        }
        "xds.type.matcher.v3.HttpAttributesCelMatchInput" => Input::HttpAttributes,
        other => {
            ctx.unsupported(&itp, format!("matcher input {other}"));
            return None;
        }
    };
    match &s.matcher {
        Some(single_predicate::Matcher::ValueMatch(sm)) => {
            let vp = path.field("value_match");
            let sm = matcher::string_matcher(&envoy_string_matcher(sm, &vp, ctx)?, &vp, ctx)?;
            let pred = match input {
                Input::Header(name) => {
                    Predicate::Permission(Permission::Header(matcher::HeaderMatcher {
                        name,
                        test: matcher::HeaderTest::Value(sm),
                        invert: false,
                        treat_missing_as_empty: false,
                    }))
                }
                Input::DestinationPort => {
                    // The port as text, as Envoy's input gives it.
                    Predicate::Permission(Permission::DestinationPortText(sm))
                }
                _ => {
                    ctx.unsupported(&vp, "value_match on this input");
                    return None;
                }
            };
            Some(pred)
        }
        Some(single_predicate::Matcher::CustomMatch(cm)) => {
            let cp = path.field("custom_match");
            let (any, type_url) = typed(cm, &cp, ctx)?;
            let ctp = cp.field("typed_config");
            match (type_url.rsplit('/').next().unwrap_or(""), input) {
                ("envoy.extensions.matching.input_matchers.ip.v3.Ip", input) => {
                    let m = core::unpack::<ip_pb::Ip>(any, &ctp, ctx)?;
                    let rp = ctp.field("cidr_ranges");
                    let cidrs: Vec<_> = m
                        .cidr_ranges
                        .iter()
                        .enumerate()
                        .filter_map(|(i, c)| matcher::cidr(c, &rp.index(i), ctx))
                        .collect();
                    if cidrs.len() != m.cidr_ranges.len() {
                        return None;
                    }
                    let any_of = |f: fn(matcher::Cidr) -> Predicate| {
                        Some(Predicate::Or(cidrs.into_iter().map(f).collect()))
                    };
                    match input {
                        Input::SourceIp => any_of(|c| Predicate::Principal(Principal::RemoteIp(c))),
                        Input::DirectSourceIp => {
                            any_of(|c| Predicate::Principal(Principal::DirectRemoteIp(c)))
                        }
                        Input::DestinationIp => {
                            any_of(|c| Predicate::Permission(Permission::DestinationIp(c)))
                        }
                        _ => {
                            ctx.unsupported(
                                &ctp,
                                "an Ip matcher on an input that is not an address",
                            );
                            None
                        }
                    }
                }
                (
                    "envoy.extensions.matching.input_matchers.metadata.v3.Metadata",
                    Input::DynamicMetadata(filter, keys),
                ) => {
                    let m = core::unpack::<md_pb::Metadata>(any, &ctp, ctx)?;
                    let proto = mpb::MetadataMatcher {
                        filter,
                        path: keys
                            .into_iter()
                            .map(|k| mpb::metadata_matcher::PathSegment {
                                segment: Some(mpb::metadata_matcher::path_segment::Segment::Key(k)),
                            })
                            .collect(),
                        value: m.value,
                        invert: m.invert,
                    };
                    let mm = matcher::metadata_matcher(&proto, &ctp, ctx)?;
                    Some(Predicate::Permission(Permission::Metadata(
                        SourcedMetadata {
                            source: super::rbac::MetadataSource::Dynamic,
                            matcher: mm,
                        },
                    )))
                }
                ("xds.type.matcher.v3.CelMatcher", Input::HttpAttributes) => {
                    let m = core::unpack::<crate::cel::matcher_pb::CelMatcher>(any, &ctp, ctx)?;
                    let ep = ctp.field("expr_match");
                    let Some(e) = &m.expr_match else {
                        ctx.error(&ep, "is required");
                        return None;
                    };
                    let e = crate::cel::Expr::from_xds(e, &ep, ctx)?;
                    Some(Predicate::Permission(Permission::Cel(e)))
                }
                (other, _) => {
                    ctx.unsupported(&ctp, format!("input matcher {other} on this input"));
                    None
                }
            }
        }
        None => {
            ctx.error(path, "needs value_match or custom_match");
            None
        }
    }
}

/// An `xds.type.matcher.v3.StringMatcher` as the `envoy.type.matcher.v3` one
/// (the same fields); `custom` is refused.
pub(crate) fn envoy_string_matcher(
    sm: &xpb::StringMatcher,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<mpb::StringMatcher> {
    use mpb::string_matcher::MatchPattern as E;
    use xpb::string_matcher::MatchPattern as X;
    let pattern = match &sm.match_pattern {
        Some(X::Exact(s)) => E::Exact(s.clone()),
        Some(X::Prefix(s)) => E::Prefix(s.clone()),
        Some(X::Suffix(s)) => E::Suffix(s.clone()),
        Some(X::Contains(s)) => E::Contains(s.clone()),
        Some(X::SafeRegex(r)) => E::SafeRegex(mpb::RegexMatcher {
            regex: r.regex.clone(),
            ..Default::default()
        }),
        Some(X::Custom(_)) => {
            ctx.unsupported(&path.field("custom"), "custom");
            return None;
        }
        None => {
            ctx.error(path, "needs a match pattern");
            return None;
        }
    };
    Some(mpb::StringMatcher {
        ignore_case: sm.ignore_case,
        match_pattern: Some(pattern),
    })
}
