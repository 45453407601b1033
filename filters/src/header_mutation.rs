//! The `header_mutation` HTTP filter: ordered rules on the request headers
//! (in filter order) and the response headers (upstream's or a local reply's),
//! and [`apply`], which the connection manager's early header mutations share.

use crate::chain::{Decision, HttpFilter};
use crate::request::RequestState;
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::header_mutation::{HeaderMutationFilter, MutationRule};
use courier_config::route::headers::AppendAction;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use std::sync::Arc;

/// Applies `rules` to `headers`, in order, as Envoy's `HeaderMutations` does.
pub fn apply(rules: &[MutationRule], headers: &mut HeaderMap) {
    for rule in rules {
        match rule {
            MutationRule::Remove(name) => {
                headers.remove(name.as_str());
            }
            MutationRule::RemoveOnMatch(matcher) => {
                let doomed: Vec<HeaderName> = headers
                    .keys()
                    .filter(|k| matcher.matches(k.as_str()))
                    .cloned()
                    .collect();
                for name in doomed {
                    headers.remove(&name);
                }
            }
            MutationRule::Append {
                name,
                value,
                action,
                keep_empty_value,
            } => {
                if value.is_empty() && !keep_empty_value {
                    continue;
                }
                // Validated when the config was read.
                let (Ok(name), Ok(value)) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(value),
                ) else {
                    continue;
                };
                add(headers, name, value, *action);
            }
        }
    }
}

/// Adds `value` under `name` as `action` says (Envoy's `HeaderValueOption`),
/// for route-level header mutations and these rules alike.
pub fn add(headers: &mut HeaderMap, name: HeaderName, value: HeaderValue, action: AppendAction) {
    match action {
        AppendAction::AppendIfExistsOrAdd => {
            headers.append(name, value);
        }
        AppendAction::AddIfAbsent => {
            if !headers.contains_key(&name) {
                headers.insert(name, value);
            }
        }
        AppendAction::OverwriteIfExistsOrAdd => {
            headers.insert(name, value);
        }
        AppendAction::OverwriteIfExists => {
            if headers.contains_key(&name) {
                headers.insert(name, value);
            }
        }
    }
}

/// The filter over its config.
pub struct HeaderMutationHttpFilter {
    config: Arc<HeaderMutationFilter>,
}

impl HeaderMutationHttpFilter {
    /// A filter applying `config`.
    pub fn new(config: Arc<HeaderMutationFilter>) -> Self {
        Self { config }
    }
}

impl HttpFilter for HeaderMutationHttpFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        _per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        apply(&self.config.request, &mut req.head.headers);
        Decision::Continue
    }

    fn encode_headers(&self, _req: &RequestState<'_>, headers: &mut HeaderMap) {
        apply(&self.config.response, headers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_config::matcher::StringMatcher;

    fn append(name: &str, value: &str, action: AppendAction, keep: bool) -> MutationRule {
        MutationRule::Append {
            name: name.into(),
            value: value.into(),
            action,
            keep_empty_value: keep,
        }
    }

    #[test]
    fn rules_apply_in_order_with_each_append_action() {
        let mut h = HeaderMap::new();
        h.insert("a", HeaderValue::from_static("1"));
        h.insert("b", HeaderValue::from_static("1"));
        h.insert("gone-x", HeaderValue::from_static("1"));
        h.insert("keep", HeaderValue::from_static("1"));
        apply(
            &[
                append("a", "2", AppendAction::AppendIfExistsOrAdd, false),
                append("b", "2", AppendAction::OverwriteIfExistsOrAdd, false),
                append("c", "3", AppendAction::AddIfAbsent, false),
                append("a", "9", AppendAction::AddIfAbsent, false),
                append("d", "4", AppendAction::OverwriteIfExists, false),
                append("e", "", AppendAction::OverwriteIfExistsOrAdd, false),
                append("f", "", AppendAction::OverwriteIfExistsOrAdd, true),
                MutationRule::RemoveOnMatch(StringMatcher::exact("gone-x")),
                MutationRule::Remove("c".into()),
                append("c", "again", AppendAction::AppendIfExistsOrAdd, false),
            ],
            &mut h,
        );
        let all =
            |n: &str| -> Vec<&str> { h.get_all(n).iter().map(|v| v.to_str().unwrap()).collect() };
        assert_eq!(all("a"), ["1", "2"]);
        assert_eq!(all("b"), ["2"]);
        assert_eq!(all("c"), ["again"]);
        assert!(all("d").is_empty() && all("e").is_empty() && all("gone-x").is_empty());
        assert_eq!(all("f"), [""]);
        assert_eq!(all("keep"), ["1"]);
    }
}
