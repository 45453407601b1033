//! The unified matcher's list form (`xds.type.matcher.v3.Matcher` with a
//! `matcher_list`), as the filters that take one read it (RBAC's `matcher`,
//! custom_response's `custom_response_matcher`): predicates in order, each
//! naming an action, and `on_no_match`. The `and` / `or` / `not` tree is walked
//! here; each filter reads its own single predicates and actions. Refused with
//! their path: `matcher_tree`, nested matchers and `keep_matching`.

use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::r#type::matcher::v3 as mpb;
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::xds::core::v3::TypedExtensionConfig;
use envoy_types::pb::xds::r#type::matcher::v3 as xpb;
use xpb::matcher::matcher_list::predicate;

/// A filter's compiled predicate tree: how `and`, `or` and `not` combine.
pub(crate) trait Tree: Sized {
    /// Every predicate matches.
    fn all(v: Vec<Self>) -> Self;
    /// Some predicate matches.
    fn any(v: Vec<Self>) -> Self;
    /// The predicate does not match.
    fn not(p: Self) -> Self;
}

/// A single predicate of the filter's reading.
pub(crate) type Single<T> = fn(&predicate::SinglePredicate, &Path<'_>, &mut Ctx) -> Option<T>;

/// An action of the filter's reading.
pub(crate) type Action<A> = fn(&TypedExtensionConfig, &Path<'_>, &mut Ctx) -> Option<A>;

/// A compiled matcher list.
pub(crate) struct Rules<T, A> {
    /// The predicates in order, each with its action.
    pub rules: Vec<(T, A)>,
    /// The action when no predicate matches.
    pub on_no_match: Option<A>,
}

/// Translates `m`; `None` when anything in it was refused.
pub(crate) fn translate<T: Tree, A>(
    m: &xpb::Matcher,
    path: &Path<'_>,
    ctx: &mut Ctx,
    single: Single<T>,
    action: Action<A>,
) -> Option<Rules<T, A>> {
    let before = ctx.error_count();
    let mut rules = Vec::new();
    match &m.matcher_type {
        Some(xpb::matcher::MatcherType::MatcherList(list)) => {
            let lp = path.field("matcher_list.matchers");
            if list.matchers.is_empty() {
                ctx.error(&lp, "needs at least one matcher");
            }
            for (i, fm) in list.matchers.iter().enumerate() {
                let fp = lp.index(i);
                let pred = match &fm.predicate {
                    Some(p) => tree(p, &fp.field("predicate"), ctx, single),
                    None => {
                        ctx.error(&fp.field("predicate"), "is required");
                        None
                    }
                };
                let act = match &fm.on_match {
                    Some(om) => on_match(om, &fp.field("on_match"), ctx, action),
                    None => {
                        ctx.error(&fp.field("on_match"), "is required");
                        None
                    }
                };
                if let (Some(p), Some(a)) = (pred, act) {
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
        .and_then(|om| on_match(om, &path.field("on_no_match"), ctx, action));
    (ctx.error_count() == before).then_some(Rules { rules, on_no_match })
}

fn on_match<A>(
    om: &xpb::matcher::OnMatch,
    path: &Path<'_>,
    ctx: &mut Ctx,
    action: Action<A>,
) -> Option<A> {
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

fn tree<T: Tree>(
    p: &xpb::matcher::matcher_list::Predicate,
    path: &Path<'_>,
    ctx: &mut Ctx,
    single: Single<T>,
) -> Option<T> {
    let list = |l: &predicate::PredicateList, path: &Path<'_>, ctx: &mut Ctx| {
        let lp = path.field("predicate");
        // Every member is read, so each refusal is reported.
        let out: Vec<T> = l
            .predicate
            .iter()
            .enumerate()
            .filter_map(|(i, p)| tree(p, &lp.index(i), ctx, single))
            .collect();
        (out.len() == l.predicate.len()).then_some(out)
    };
    match &p.match_type {
        Some(predicate::MatchType::SinglePredicate(s)) => {
            single(s, &path.field("single_predicate"), ctx)
        }
        Some(predicate::MatchType::OrMatcher(l)) => {
            list(l, &path.field("or_matcher"), ctx).map(T::any)
        }
        Some(predicate::MatchType::AndMatcher(l)) => {
            list(l, &path.field("and_matcher"), ctx).map(T::all)
        }
        Some(predicate::MatchType::NotMatcher(inner)) => {
            tree(inner, &path.field("not_matcher"), ctx, single).map(T::not)
        }
        None => {
            ctx.error(path, "needs a match type");
            None
        }
    }
}

/// An extension's `typed_config` and its type URL.
pub(crate) fn typed<'a>(
    t: &'a TypedExtensionConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<(&'a Any, String)> {
    match &t.typed_config {
        Some(any) => Some((any, any.type_url.clone())),
        None => {
            ctx.error(&path.field("typed_config"), "is required");
            None
        }
    }
}

/// An `xds.type.matcher.v3.StringMatcher` as Envoy's own (the same fields);
/// `custom` is refused.
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
