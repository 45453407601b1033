//! Route matches: the path test plus header, query-parameter, gRPC and dynamic
//! metadata conditions, and the request view the router matches against.

use crate::core::MetadataMap;
use crate::ctx::Ctx;
use crate::matcher::{self, HeaderMatcher, MetadataMatcher, Regex, StringMatcher};
use crate::path::Path;
use envoy_types::pb::envoy::config::route::v3 as pb;
use std::borrow::Cow;

/// What the router needs of a request to pick a route.
pub trait RouteRequest {
    /// The `:path`, query string included.
    fn path(&self) -> &str;
    /// The `:method`.
    fn method(&self) -> &str;
    /// The value of header `name` (lower-case); repeated headers joined with `,`,
    /// as Envoy's header matchers see them. `None` when absent. Pseudo-headers other
    /// than `:path` and `:method` (`:authority`, `:scheme`) are asked for here too.
    fn header(&self, name: &str) -> Option<Cow<'_, str>>;
    /// Whether any value of header `name` passes `test`; `None` when absent.
    /// Envoy's route header matchers test each value of a repeated header on its
    /// own (`x-a: 1` and `x-a: 2` match `exact: "2"`, not `exact: "1,2"`). The
    /// default tests the one value [`RouteRequest::header`] gives.
    fn any_header_value(&self, name: &str, test: &mut dyn FnMut(&str) -> bool) -> Option<bool> {
        self.header(name).map(|v| test(&v))
    }
    /// The first value of query parameter `name` (not percent-decoded, as in Envoy),
    /// `Some("")` for a bare `?name`. The default parses [`RouteRequest::path`].
    fn query_param(&self, name: &str) -> Option<&str> {
        first_query_value(self.path(), name)
    }
    /// Request-scoped dynamic metadata (for `dynamic_metadata` matchers).
    fn dynamic_metadata(&self) -> Option<&MetadataMap> {
        None
    }
}

/// The first value of `name` in the query of `path` (`a=1&b&c=3`), without decoding.
pub fn first_query_value<'a>(path: &'a str, name: &str) -> Option<&'a str> {
    let query = path.split_once('?')?.1;
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v)
    })
}

/// The path without its query string and fragment (what `path`, `safe_regex` and
/// `path_separated_prefix` compare against).
pub fn path_without_query(path: &str) -> &str {
    let end = path.find(['?', '#']).unwrap_or(path.len());
    &path[..end]
}

/// How a route tests the path.
#[derive(Debug, Clone)]
pub enum PathMatch {
    /// `prefix`: the full `:path` (query included) starts with it.
    Prefix(String),
    /// `path`: the path without query equals it.
    Exact(String),
    /// `safe_regex`: the path without query fully matches (never case-folded).
    Regex(Regex),
    /// `path_separated_prefix`: the path without query equals it or continues with `/`.
    SeparatedPrefix(String),
}

/// A query-parameter condition.
#[derive(Debug, Clone)]
pub struct QueryParameterMatcher {
    /// Parameter name (case-sensitive).
    pub name: String,
    /// The test on the first value.
    pub test: QueryTest,
}

/// How a query parameter is tested.
#[derive(Debug, Clone)]
pub enum QueryTest {
    /// Present (`true`) or absent (`false`).
    Present(bool),
    /// Present with a first value that matches.
    Value(StringMatcher),
}

impl QueryParameterMatcher {
    /// Whether the parameter's first value (`None`: absent) passes.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match (&self.test, value) {
            (QueryTest::Present(want), v) => v.is_some() == *want,
            (QueryTest::Value(_), None) => false,
            (QueryTest::Value(sm), Some(v)) => sm.matches(v),
        }
    }
}

/// A compiled `RouteMatch`.
#[derive(Debug, Clone)]
pub struct RouteMatch {
    /// The path test. Its string is stored lower-cased when `case_sensitive` is false.
    pub path: PathMatch,
    /// Whether `prefix`, `path` and `path_separated_prefix` compare case-sensitively (default true).
    pub case_sensitive: bool,
    /// All must match.
    pub headers: Vec<HeaderMatcher>,
    /// All must match.
    pub query_parameters: Vec<QueryParameterMatcher>,
    /// Only gRPC requests (`content-type: application/grpc...`).
    pub grpc: bool,
    /// All must match the request's dynamic metadata.
    pub dynamic_metadata: Vec<MetadataMatcher>,
}

impl RouteMatch {
    /// Whether `req` matches: the path test and every condition.
    pub fn matches<R: RouteRequest + ?Sized>(&self, req: &R) -> bool {
        self.path_matches(req.path()) && self.conditions_match(req)
    }

    /// The path test alone.
    pub fn path_matches(&self, full: &str) -> bool {
        let eq = |a: &str, b: &str| {
            if self.case_sensitive {
                a == b
            } else {
                a.eq_ignore_ascii_case(b)
            }
        };
        let starts = |s: &str, p: &str| {
            s.len() >= p.len() && s.is_char_boundary(p.len()) && eq(&s[..p.len()], p)
        };
        match &self.path {
            PathMatch::Prefix(p) => starts(full, p),
            PathMatch::Exact(p) => eq(path_without_query(full), p),
            PathMatch::Regex(re) => re.is_full_match(path_without_query(full)),
            PathMatch::SeparatedPrefix(p) => {
                let path = path_without_query(full);
                starts(path, p) && (path.len() == p.len() || path.as_bytes()[p.len()] == b'/')
            }
        }
    }

    /// The conditions besides the path (headers, query, gRPC, metadata).
    pub fn conditions_match<R: RouteRequest + ?Sized>(&self, req: &R) -> bool {
        if self.grpc && !req.header("content-type").is_some_and(|ct| is_grpc(&ct)) {
            return false;
        }
        if !self.headers.iter().all(|h| header_matches(h, req)) {
            return false;
        }
        if !self
            .query_parameters
            .iter()
            .all(|q| q.matches(req.query_param(&q.name)))
        {
            return false;
        }
        if !self.dynamic_metadata.is_empty() {
            let empty = MetadataMap::new();
            let md = req.dynamic_metadata().unwrap_or(&empty);
            if !self.dynamic_metadata.iter().all(|m| m.matches(md)) {
                return false;
            }
        }
        true
    }
}

/// One header condition; `:path` and `:method` come from the request line, other
/// headers are tested value by value.
pub(crate) fn header_matches<R: RouteRequest + ?Sized>(h: &HeaderMatcher, req: &R) -> bool {
    match h.name.as_str() {
        ":path" => h.matches(Some(req.path())),
        ":method" => h.matches(Some(req.method())),
        name => h.matches_any(req.any_header_value(name, &mut |v| h.value_passes(v))),
    }
}

/// Envoy's `isGrpcRequest`: `application/grpc`, optionally followed by `+...` or `;...`.
fn is_grpc(content_type: &str) -> bool {
    let Some(rest) = content_type
        .get(..16)
        .filter(|p| p.eq_ignore_ascii_case("application/grpc"))
        .map(|_| &content_type[16..])
    else {
        return false;
    };
    rest.is_empty() || rest.starts_with('+') || rest.starts_with(';')
}

/// Translates a `RouteMatch`. `None` when its path test cannot be built (errors
/// reported), or when it uses a kind the support walker already refused.
pub(crate) fn route_match(
    m: &pb::RouteMatch,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<RouteMatch> {
    use pb::route_match::PathSpecifier as P;
    let case_sensitive = m.case_sensitive.as_ref().is_none_or(|b| b.value);
    let fold = |s: &str| {
        if case_sensitive {
            s.to_string()
        } else {
            s.to_ascii_lowercase()
        }
    };
    let path_match = match &m.path_specifier {
        Some(P::Prefix(p)) => Some(PathMatch::Prefix(fold(p))),
        Some(P::Path(p)) => Some(PathMatch::Exact(fold(p))),
        Some(P::SafeRegex(r)) => {
            matcher::regex(r, &path.field("safe_regex"), ctx).map(PathMatch::Regex)
        }
        Some(P::PathSeparatedPrefix(p)) => {
            let pp = path.field("path_separated_prefix");
            if !p.starts_with('/') {
                ctx.error(&pp, "must start with '/'");
                None
            } else if p.contains(['?', '#']) {
                ctx.error(&pp, "must not contain '?' or '#'");
                None
            } else if p.ends_with('/') {
                ctx.error(&pp, "must not end with '/'");
                None
            } else {
                Some(PathMatch::SeparatedPrefix(fold(p)))
            }
        }
        // Refused by the support walker (connect_matcher, path_match_policy).
        Some(P::ConnectMatcher(_) | P::PathMatchPolicy(_)) => None,
        None => {
            ctx.error(
                path,
                "one of prefix, path, safe_regex or path_separated_prefix is required",
            );
            None
        }
    };
    let hp = path.field("headers");
    let mut headers = Vec::with_capacity(m.headers.len());
    for (i, h) in m.headers.iter().enumerate() {
        if let Some(h) = matcher::header_matcher(h, &hp.index(i), ctx) {
            headers.push(h);
        }
    }
    let qp = path.field("query_parameters");
    let mut query_parameters = Vec::with_capacity(m.query_parameters.len());
    for (i, q) in m.query_parameters.iter().enumerate() {
        if let Some(q) = query_parameter_matcher(q, &qp.index(i), ctx) {
            query_parameters.push(q);
        }
    }
    let mp = path.field("dynamic_metadata");
    let mut dynamic_metadata = Vec::with_capacity(m.dynamic_metadata.len());
    for (i, d) in m.dynamic_metadata.iter().enumerate() {
        if let Some(d) = matcher::metadata_matcher(d, &mp.index(i), ctx) {
            dynamic_metadata.push(d);
        }
    }
    Some(RouteMatch {
        path: path_match?,
        case_sensitive,
        headers,
        query_parameters,
        grpc: m.grpc.is_some(),
        dynamic_metadata,
    })
}

/// Compiles a `QueryParameterMatcher` (route match, rate-limit actions).
pub fn query_parameter_matcher(
    q: &pb::QueryParameterMatcher,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<QueryParameterMatcher> {
    use pb::query_parameter_matcher::QueryParameterMatchSpecifier as S;
    if q.name.is_empty() {
        ctx.error(&path.field("name"), "must not be empty");
        return None;
    }
    let test = match &q.query_parameter_match_specifier {
        None => QueryTest::Present(true),
        Some(S::PresentMatch(b)) => QueryTest::Present(*b),
        Some(S::StringMatch(sm)) => QueryTest::Value(matcher::string_matcher(
            sm,
            &path.field("string_match"),
            ctx,
        )?),
    };
    Some(QueryParameterMatcher {
        name: q.name.clone(),
        test,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values() {
        assert_eq!(first_query_value("/a?x=1&y&x=2", "x"), Some("1"));
        assert_eq!(first_query_value("/a?x=1&y&x=2", "y"), Some(""));
        assert_eq!(first_query_value("/a?x=1#y=2", "y"), None);
        assert_eq!(first_query_value("/a", "x"), None);
        assert_eq!(path_without_query("/a/b?c#d"), "/a/b");
        assert_eq!(path_without_query("/a/b#d?c"), "/a/b");
    }

    #[test]
    fn grpc_content_types() {
        assert!(is_grpc("application/grpc"));
        assert!(is_grpc("application/grpc+proto"));
        assert!(is_grpc("Application/GRPC;charset=x"));
        assert!(!is_grpc("application/grpc-web"));
        assert!(!is_grpc("application/json"));
    }

    #[test]
    fn path_separated_prefix_rules() {
        let mut ctx = Ctx::new();
        let mk = |p: &str| pb::RouteMatch {
            path_specifier: Some(pb::route_match::PathSpecifier::PathSeparatedPrefix(
                p.into(),
            )),
            ..Default::default()
        };
        for p in ["api", "/api/", "/a?b", "/"] {
            assert!(route_match(&mk(p), &Path::ROOT, &mut ctx).is_none(), "{p}");
        }
        let msgs: Vec<String> = ctx
            .finish(())
            .unwrap_err()
            .errors
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            msgs,
            vec![
                "path_separated_prefix: must start with '/'",
                "path_separated_prefix: must not end with '/'",
                "path_separated_prefix: must not contain '?' or '#'",
                "path_separated_prefix: must not end with '/'",
            ]
        );
    }
}
