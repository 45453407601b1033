//! Ordered header mutation rules (`envoy.config.common.mutation_rules.v3.HeaderMutation`):
//! the `header_mutation` HTTP filter's request and response mutations, and the
//! connection manager's `early_header_mutation_extensions`.

use crate::core;
use crate::ctx::Ctx;
use crate::matcher::{StringMatcher, string_matcher};
use crate::path::Path;
use crate::route::headers::{AppendAction, header_to_add};
use envoy_types::pb::envoy::config::common::mutation_rules::v3 as mr;
use envoy_types::pb::envoy::extensions::filters::http::header_mutation::v3 as pb;

/// One rule, applied in config order.
#[derive(Debug, Clone)]
pub enum MutationRule {
    /// `remove`: the header (lower-cased name) goes.
    Remove(String),
    /// `append`: a header value added as its `append_action` says.
    Append {
        /// Lower-cased name.
        name: String,
        /// The value (literal text: format commands are refused).
        value: String,
        /// What to do when the header exists.
        action: AppendAction,
        /// Add it even when the value is empty.
        keep_empty_value: bool,
    },
    /// `remove_on_match`: every header whose name matches goes.
    RemoveOnMatch(StringMatcher),
}

/// The `header_mutation` filter's config.
#[derive(Debug, Clone, Default)]
pub struct HeaderMutationFilter {
    /// `mutations.request_mutations`.
    pub request: Vec<MutationRule>,
    /// `mutations.response_mutations`.
    pub response: Vec<MutationRule>,
}

/// Translates a list of rules at `path`.
pub fn rules(list: &[mr::HeaderMutation], path: &Path<'_>, ctx: &mut Ctx) -> Vec<MutationRule> {
    use mr::header_mutation::Action;
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let p = path.index(i);
        match &m.action {
            Some(Action::Remove(name)) => {
                let rp = p.field("remove");
                if name.is_empty() {
                    ctx.error(&rp, "must not be empty");
                } else if !crate::route::headers::valid_name_chars(name) {
                    ctx.error(&rp, "must not contain NUL, CR or LF");
                } else if name.starts_with(':') {
                    ctx.unsupported(&rp, "removing a pseudo-header");
                } else {
                    out.push(MutationRule::Remove(name.to_ascii_lowercase()));
                }
            }
            Some(Action::Append(hvo)) => {
                let ap = p.field("append");
                let Some(h) = header_to_add(hvo, &ap, ctx) else {
                    continue;
                };
                // The format commands need the request's context, which the
                // filter does not have: only literal values are served.
                let Some(value) = h.value.literal() else {
                    let hp = ap.field("header");
                    ctx.unsupported(
                        &hp.field("value"),
                        "format commands in header_mutation values",
                    );
                    continue;
                };
                out.push(MutationRule::Append {
                    name: h.name,
                    value,
                    action: h.action,
                    keep_empty_value: h.keep_empty_value,
                });
            }
            Some(Action::RemoveOnMatch(r)) => {
                let rp = p.field("remove_on_match");
                let kp = rp.field("key_matcher");
                match &r.key_matcher {
                    Some(km) => {
                        if let Some(m) = string_matcher(km, &kp, ctx) {
                            out.push(MutationRule::RemoveOnMatch(m));
                        }
                    }
                    None => ctx.error(&kp, "is required"),
                }
            }
            None => ctx.error(&p, "one of remove, append or remove_on_match is required"),
        }
    }
    out
}

/// Translates the filter's `HeaderMutation`.
pub fn translate(
    m: &pb::HeaderMutation,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<HeaderMutationFilter> {
    if m.most_specific_header_mutations_wins {
        ctx.unsupported(
            &path.field("most_specific_header_mutations_wins"),
            "most_specific_header_mutations_wins",
        );
    }
    let Some(mu) = &m.mutations else {
        return Some(HeaderMutationFilter::default());
    };
    let mp = path.field("mutations");
    for (set, field) in [
        (
            !mu.query_parameter_mutations.is_empty(),
            "query_parameter_mutations",
        ),
        (
            !mu.request_trailers_mutations.is_empty(),
            "request_trailers_mutations",
        ),
        (
            !mu.response_trailers_mutations.is_empty(),
            "response_trailers_mutations",
        ),
    ] {
        if set {
            ctx.unsupported(&mp.field(field), field);
        }
    }
    Some(HeaderMutationFilter {
        request: rules(&mu.request_mutations, &mp.field("request_mutations"), ctx),
        response: rules(&mu.response_mutations, &mp.field("response_mutations"), ctx),
    })
}

/// Translates one `early_header_mutation_extensions` entry (only the
/// `header_mutation` extension is served).
pub fn early(
    ext: &envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Vec<MutationRule> {
    use envoy_types::pb::envoy::extensions::http::early_header_mutation::header_mutation::v3 as early_pb;
    let tp = path.field("typed_config");
    let Some(any) = &ext.typed_config else {
        ctx.error(&tp, "is required");
        return Vec::new();
    };
    if any.type_url != <early_pb::HeaderMutation as prost::Name>::type_url() {
        ctx.unsupported(&tp, format!("early header mutation extension {}", ext.name));
        return Vec::new();
    }
    match core::unpack::<early_pb::HeaderMutation>(any, &tp, ctx) {
        Some(m) => rules(&m.mutations, &tp.field("mutations"), ctx),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::MutationRule;
    use crate::filters::HttpFilterConfig;
    use crate::filters::test_util::{errors, filter};

    fn hm(mutations: &str) -> String {
        format!(
            "name: hm\ntyped_config:\n  '@type': type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation\n{mutations}"
        )
    }

    #[test]
    fn rules_keep_their_order_and_kinds() {
        let f = filter(&hm("  mutations:\n    request_mutations:\n    - remove: X-A\n    - append: {header: {key: X-B, value: v}, append_action: ADD_IF_ABSENT}\n    - remove_on_match: {key_matcher: {prefix: x-}}\n    response_mutations:\n    - remove: x-y\n")).unwrap();
        let HttpFilterConfig::HeaderMutation(c) = f.config else {
            panic!("not header_mutation");
        };
        assert!(matches!(&c.request[0], MutationRule::Remove(n) if n == "x-a"));
        assert!(
            matches!(&c.request[1], MutationRule::Append { name, value, .. } if name == "x-b" && value == "v")
        );
        assert!(matches!(&c.request[2], MutationRule::RemoveOnMatch(_)));
        assert_eq!(c.response.len(), 1);
    }

    #[test]
    fn what_courier_does_not_do_is_refused_with_its_path() {
        assert_eq!(
            errors(filter(&hm(
                "  most_specific_header_mutations_wins: true\n  mutations:\n    query_parameter_mutations: [{remove: q}]\n    request_mutations:\n    - append: {header: {key: x, value: '%REQ(y)%'}}\n    - remove: ':path'\n    - {}\n"
            ))),
            [
                "typed_config.most_specific_header_mutations_wins: most_specific_header_mutations_wins is not supported",
                "typed_config.mutations.query_parameter_mutations: query_parameter_mutations is not supported",
                "typed_config.mutations.request_mutations[0].append.header.value: format commands in header_mutation values is not supported",
                "typed_config.mutations.request_mutations[1].remove: removing a pseudo-header is not supported",
                "typed_config.mutations.request_mutations[2]: one of remove, append or remove_on_match is required",
            ]
        );
    }
}
