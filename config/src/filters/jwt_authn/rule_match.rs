//! A minimal `RouteMatch` for jwt_authn `rules`.
//!
//! The router's own `RouteMatch` translation lives in `crate::route`; this one is private to
//! jwt_authn so the filter could be written in parallel, and is meant to be swapped for the
//! router's once that exists. It implements the match kinds the router issue implements
//! (prefix, path, safe_regex, path_separated_prefix, case_sensitive, headers,
//! query_parameters, grpc) and refuses the others at their path.

use crate::ctx::Ctx;
use crate::matcher::{self, HeaderMatcher, Regex, StringMatcher};
use crate::path::Path;
use envoy_types::pb::envoy::config::route::v3 as pb;

/// A compiled jwt_authn rule match.
#[derive(Debug, Clone)]
pub struct RuleMatch {
    /// The path test.
    pub path: PathMatch,
    /// Prefix and exact path tests compare case-sensitively (default true; regexes are not
    /// affected).
    pub case_sensitive: bool,
    /// All must match.
    pub headers: Vec<HeaderMatcher>,
    /// All must match (first value of each parameter).
    pub query_parameters: Vec<QueryParameterMatch>,
    /// Only gRPC requests (`content-type` starting with `application/grpc`).
    pub grpc: bool,
}

/// How the path is tested.
#[derive(Debug, Clone)]
pub enum PathMatch {
    /// The `:path` (query included) starts with this.
    Prefix(String),
    /// The path without query equals this.
    Exact(String),
    /// The path without query fully matches.
    Regex(Regex),
    /// The path without query equals this or continues with `/`.
    PathSeparatedPrefix(String),
}

/// A query-parameter test.
#[derive(Debug, Clone)]
pub struct QueryParameterMatch {
    /// The parameter's name.
    pub name: String,
    /// `None`: the parameter is present; else its first value matches.
    pub value: Option<StringMatcher>,
}

impl RuleMatch {
    /// Whether a request matches. `path` is the `:path` with its query; `header` returns a
    /// request header's value (repeated headers joined with `,`), by lower-case name.
    pub fn matches<'a>(&self, path: &str, header: impl Fn(&str) -> Option<&'a str>) -> bool {
        let (bare, query) = match path.find(['?', '#']) {
            Some(i) if path.as_bytes()[i] == b'?' => (&path[..i], Some(&path[i + 1..])),
            Some(i) => (&path[..i], None),
            None => (path, None),
        };
        let eq = |a: &str, b: &str| {
            if self.case_sensitive {
                a == b
            } else {
                a.eq_ignore_ascii_case(b)
            }
        };
        let path_ok = match &self.path {
            PathMatch::Prefix(p) => {
                path.len() >= p.len() && path.is_char_boundary(p.len()) && eq(&path[..p.len()], p)
            }
            PathMatch::Exact(p) => eq(bare, p),
            PathMatch::Regex(re) => re.is_full_match(bare),
            PathMatch::PathSeparatedPrefix(p) => {
                bare.len() >= p.len()
                    && bare.is_char_boundary(p.len())
                    && eq(&bare[..p.len()], p)
                    && (bare.len() == p.len() || bare.as_bytes()[p.len()] == b'/')
            }
        };
        if !path_ok {
            return false;
        }
        if self.grpc && !header("content-type").is_some_and(|ct| ct.starts_with("application/grpc"))
        {
            return false;
        }
        if !self.headers.iter().all(|h| h.matches(header(&h.name))) {
            return false;
        }
        self.query_parameters.iter().all(|q| {
            let first = query.and_then(|qs| {
                qs.split('&').find_map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    (k == q.name).then_some(v)
                })
            });
            match (first, &q.value) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some(v), Some(sm)) => sm.matches(v),
            }
        })
    }
}

/// Compiles a rule's `RouteMatch`.
pub fn rule_match(m: &pb::RouteMatch, path: &Path<'_>, ctx: &mut Ctx) -> Option<RuleMatch> {
    use pb::route_match::PathSpecifier as P;
    let before = ctx.error_count();
    // Refuse what this matcher does not implement. The support walker may say the same
    // when the router does not implement it either.
    let unimplemented = [
        ("runtime_fraction", m.runtime_fraction.is_some()),
        ("cookies", !m.cookies.is_empty()),
        ("tls_context", m.tls_context.is_some()),
        ("dynamic_metadata", !m.dynamic_metadata.is_empty()),
        ("filter_state", !m.filter_state.is_empty()),
    ];
    for (field, set) in unimplemented {
        if set {
            ctx.unsupported(&path.field(field), field);
        }
    }
    let spec = match &m.path_specifier {
        Some(P::Prefix(p)) => Some(PathMatch::Prefix(p.clone())),
        Some(P::Path(p)) => Some(PathMatch::Exact(p.clone())),
        Some(P::SafeRegex(r)) => {
            matcher::regex(r, &path.field("safe_regex"), ctx).map(PathMatch::Regex)
        }
        Some(P::PathSeparatedPrefix(p)) => {
            let valid = !p.is_empty() && !p.contains(['?', '#']) && !p.ends_with('/');
            if valid {
                Some(PathMatch::PathSeparatedPrefix(p.clone()))
            } else {
                ctx.error(
                    &path.field("path_separated_prefix"),
                    "must be non-empty, without '?' or '#', and must not end with '/'",
                );
                None
            }
        }
        Some(P::ConnectMatcher(_)) => {
            ctx.unsupported(&path.field("connect_matcher"), "connect_matcher");
            None
        }
        Some(P::PathMatchPolicy(_)) => {
            ctx.unsupported(&path.field("path_match_policy"), "path_match_policy");
            None
        }
        None => {
            ctx.error(
                path,
                "one of prefix, path, safe_regex or path_separated_prefix is required",
            );
            None
        }
    };
    let hp = path.field("headers");
    let headers: Vec<HeaderMatcher> = m
        .headers
        .iter()
        .enumerate()
        .filter_map(|(i, h)| matcher::header_matcher(h, &hp.index(i), ctx))
        .collect();
    let qp = path.field("query_parameters");
    let mut query_parameters = Vec::with_capacity(m.query_parameters.len());
    for (i, q) in m.query_parameters.iter().enumerate() {
        if let Some(q) = query_parameter(q, &qp.index(i), ctx) {
            query_parameters.push(q);
        }
    }
    let path_match = spec?;
    (ctx.error_count() == before).then(|| RuleMatch {
        path: path_match,
        case_sensitive: m.case_sensitive.as_ref().is_none_or(|b| b.value),
        headers,
        query_parameters,
        grpc: m.grpc.is_some(),
    })
}

fn query_parameter(
    q: &pb::QueryParameterMatcher,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<QueryParameterMatch> {
    use pb::query_parameter_matcher::QueryParameterMatchSpecifier as S;
    if q.name.is_empty() || q.name.len() > 1024 {
        ctx.error(&path.field("name"), "must be 1 to 1024 bytes long");
        return None;
    }
    let value = match &q.query_parameter_match_specifier {
        Some(S::StringMatch(sm)) => Some(matcher::string_matcher(
            sm,
            &path.field("string_match"),
            ctx,
        )?),
        // Envoy: `present_match` (true or false) and no specifier both test presence.
        Some(S::PresentMatch(_)) | None => None,
    };
    Some(QueryParameterMatch {
        name: q.name.clone(),
        value,
    })
}
