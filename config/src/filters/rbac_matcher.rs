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
use crate::matcher_list::{self, envoy_string_matcher, typed};
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
    let r = matcher_list::translate(m, path, ctx, single, action)?;
    Some(RbacMatcher {
        rules: r.rules,
        on_no_match: r.on_no_match,
    })
}

impl matcher_list::Tree for Predicate {
    fn all(v: Vec<Self>) -> Self {
        Predicate::And(v)
    }
    fn any(v: Vec<Self>) -> Self {
        Predicate::Or(v)
    }
    fn not(p: Self) -> Self {
        Predicate::Not(Box::new(p))
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
