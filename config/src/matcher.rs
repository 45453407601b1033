//! Matchers shared by the router and the filters: strings, regexes, headers,
//! CIDR ranges and metadata values. Compiled once at load; matching allocates nothing.

use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::{ALL, Support};
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::route::v3 as route;
use envoy_types::pb::envoy::r#type::matcher::v3 as m;
use ipnet::IpNet;
use std::net::IpAddr;

/// Fields of the matcher messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.type.matcher.v3.StringMatcher",
        &[
            "exact",
            "prefix",
            "suffix",
            "safe_regex",
            "contains",
            "ignore_case",
        ],
    ),
    (
        "envoy.type.matcher.v3.RegexMatcher",
        &["google_re2", "regex"],
    ),
    (
        "envoy.type.matcher.v3.RegexMatcher.GoogleRE2",
        &["max_program_size"],
    ),
    ("envoy.type.matcher.v3.RegexMatchAndSubstitute", ALL),
    (
        "envoy.config.route.v3.HeaderMatcher",
        &[
            "name",
            "exact_match",
            "safe_regex_match",
            "range_match",
            "present_match",
            "prefix_match",
            "suffix_match",
            "contains_match",
            "string_match",
            "invert_match",
            "treat_missing_header_as_empty",
        ],
    ),
    ("envoy.config.core.v3.CidrRange", ALL),
    (
        "envoy.type.matcher.v3.MetadataMatcher",
        &["filter", "path", "value", "invert"],
    ),
    (
        "envoy.type.matcher.v3.MetadataMatcher.PathSegment",
        &["key"],
    ),
    (
        "envoy.type.matcher.v3.ValueMatcher",
        &[
            "null_match",
            "double_match",
            "string_match",
            "bool_match",
            "present_match",
            "list_match",
            "or_match",
        ],
    ),
    ("envoy.type.matcher.v3.ValueMatcher.NullMatch", ALL),
    ("envoy.type.matcher.v3.ListMatcher", &["one_of"]),
    ("envoy.type.matcher.v3.OrMatcher", &["value_matchers"]),
    ("envoy.type.matcher.v3.DoubleMatcher", ALL),
    ("envoy.type.matcher.v3.PathMatcher", &["path"]),
];

/// A compiled regular expression with RE2's full-match semantics.
#[derive(Debug, Clone)]
pub struct Regex {
    source: String,
    full: regex_automata::meta::Regex,
}

impl Regex {
    /// Compiles `pattern` (RE2 syntax). Envoy's RE2 and Rust's `regex` share the
    /// syntax courier needs and both guarantee linear-time matching.
    pub fn new(pattern: &str) -> Result<Self, String> {
        // Compiling is most of what loading a large route table costs, so only the
        // anchored form is built (rewrites compile their own unanchored regex), and
        // only the PikeVM: the DFAs, the one-pass and backtracking engines the
        // default builds would make compiling several times dearer, while the
        // paths and header values a route regex sees are short, so the PikeVM's
        // match speed is plenty. A full match is a yes/no question, so no capture
        // states are compiled either (only `is_match` is ever asked of it).
        // Matching stays linear-time.
        let config = regex_automata::meta::Config::new()
            .which_captures(regex_automata::nfa::thompson::WhichCaptures::None)
            .onepass(false)
            .backtrack(false)
            .dfa(false)
            .hybrid(false)
            .auto_prefilter(false);
        let anchored = format!("^(?:{pattern})$");
        let full = regex_automata::meta::Builder::new()
            .configure(config)
            .build(&anchored)
            .map_err(|e| {
                // The `regex` crate words syntax errors for people; ask it (only
                // on this failure path) for the message.
                match regex::Regex::new(&anchored) {
                    Err(nice) => short_regex_error(&nice),
                    Ok(_) => short_regex_error(&e),
                }
            })?;
        Ok(Self {
            source: pattern.to_string(),
            full,
        })
    }

    /// Compiles `pattern` unanchored (matches anywhere), for rewrites and substitutions.
    pub fn unanchored(pattern: &str) -> Result<regex::Regex, String> {
        regex::Regex::new(pattern).map_err(|e| short_regex_error(&e))
    }

    /// Whether the whole of `s` matches.
    pub fn is_full_match(&self, s: &str) -> bool {
        self.full.is_match(s)
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

fn short_regex_error(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    let last = text
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or(&text)
        .trim();
    format!("invalid regex: {}", last.trim_start_matches("error: "))
}

/// Compiles a `RegexMatcher`.
pub fn regex(r: &m::RegexMatcher, path: &Path<'_>, ctx: &mut Ctx) -> Option<Regex> {
    match Regex::new(&r.regex) {
        Ok(re) => check_program_size(r, path, ctx).then_some(re),
        Err(e) => {
            ctx.error(&path.field("regex"), e);
            None
        }
    }
}

/// Envoy refuses (or warns of) a `RegexMatcher` whose RE2 program is over the
/// runtime's `re2.max_program_size.*` thresholds, or over the deprecated
/// `google_re2.max_program_size` when that is set. courier measures the program
/// RE2 would build ([`crate::re2_program`]) and does the same, so a config
/// loads in courier exactly when it loads in Envoy. Returns whether the regex
/// may be used.
pub fn check_program_size(r: &m::RegexMatcher, path: &Path<'_>, ctx: &mut Ctx) -> bool {
    // Deprecated in Envoy, still honoured by it: when set it replaces the
    // runtime thresholds for this regex.
    #[allow(deprecated)]
    let deprecated_max = r
        .engine_type
        .as_ref()
        .and_then(|m::regex_matcher::EngineType::GoogleRe2(g)| g.max_program_size.as_ref())
        .map(|w| w.value);
    match crate::re2_program::check(&r.regex, ctx.re2_limits(), deprecated_max) {
        crate::re2_program::Verdict::Fine => true,
        crate::re2_program::Verdict::Warn(message) => {
            tracing::warn!("{}: {message}", path.field("regex"));
            true
        }
        crate::re2_program::Verdict::Refuse(message) => {
            ctx.error(&path.field("regex"), message);
            false
        }
    }
}

/// How a `StringMatcher` compares.
#[derive(Debug, Clone)]
pub enum StringPattern {
    /// Equal to.
    Exact(String),
    /// Starts with.
    Prefix(String),
    /// Ends with.
    Suffix(String),
    /// Contains.
    Contains(String),
    /// Fully matches the regex.
    Regex(Regex),
}

/// A compiled `StringMatcher`.
#[derive(Debug, Clone)]
pub struct StringMatcher {
    /// The comparison.
    pub pattern: StringPattern,
    /// ASCII case-insensitive (not for regexes); patterns are stored lower-cased.
    pub ignore_case: bool,
}

impl StringMatcher {
    /// An exact matcher (used when translating the deprecated `exact_match` forms).
    pub fn exact(s: &str) -> Self {
        Self {
            pattern: StringPattern::Exact(s.to_string()),
            ignore_case: false,
        }
    }

    /// Whether `s` matches.
    pub fn matches(&self, s: &str) -> bool {
        match &self.pattern {
            StringPattern::Regex(re) => re.is_full_match(s),
            StringPattern::Exact(p) => {
                if self.ignore_case {
                    s.eq_ignore_ascii_case(p)
                } else {
                    s == p
                }
            }
            StringPattern::Prefix(p) => {
                s.len() >= p.len()
                    && s.is_char_boundary(p.len())
                    && eq(&s[..p.len()], p, self.ignore_case)
            }
            StringPattern::Suffix(p) => {
                s.len() >= p.len()
                    && s.is_char_boundary(s.len() - p.len())
                    && eq(&s[s.len() - p.len()..], p, self.ignore_case)
            }
            StringPattern::Contains(p) => {
                if self.ignore_case {
                    s.as_bytes()
                        .windows(p.len().max(1))
                        .any(|w| w.eq_ignore_ascii_case(p.as_bytes()))
                } else {
                    s.contains(p.as_str())
                }
            }
        }
    }
}

fn eq(a: &str, b: &str, ignore_case: bool) -> bool {
    if ignore_case {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

/// Compiles a `StringMatcher`.
pub fn string_matcher(
    sm: &m::StringMatcher,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<StringMatcher> {
    use m::string_matcher::MatchPattern as P;
    let lower = |s: &str| {
        if sm.ignore_case {
            s.to_ascii_lowercase()
        } else {
            s.to_string()
        }
    };
    let pattern = match &sm.match_pattern {
        Some(P::Exact(s)) => StringPattern::Exact(lower(s)),
        Some(P::Prefix(s)) if !s.is_empty() => StringPattern::Prefix(lower(s)),
        Some(P::Suffix(s)) if !s.is_empty() => StringPattern::Suffix(lower(s)),
        Some(P::Contains(s)) if !s.is_empty() => StringPattern::Contains(lower(s)),
        Some(P::Prefix(_)) => return empty(ctx, path, "prefix"),
        Some(P::Suffix(_)) => return empty(ctx, path, "suffix"),
        Some(P::Contains(_)) => return empty(ctx, path, "contains"),
        Some(P::SafeRegex(r)) => StringPattern::Regex(regex(r, &path.field("safe_regex"), ctx)?),
        Some(P::Custom(_)) => {
            ctx.unsupported(&path.field("custom"), "a custom string matcher");
            return None;
        }
        None => {
            ctx.error(
                path,
                "one of exact, prefix, suffix, contains or safe_regex is required",
            );
            return None;
        }
    };
    Some(StringMatcher {
        pattern,
        ignore_case: sm.ignore_case,
    })
}

fn empty<T>(ctx: &mut Ctx, path: &Path<'_>, field: &str) -> Option<T> {
    ctx.error(&path.field(field), "must not be empty");
    None
}

/// How a `HeaderMatcher` tests the header's value.
#[derive(Debug, Clone)]
pub enum HeaderTest {
    /// The header is present (or, with `false`, absent).
    Present(bool),
    /// The value matches.
    Value(StringMatcher),
    /// The value is an integer in `[start, end)`.
    Range(i64, i64),
}

/// A compiled `HeaderMatcher`.
#[derive(Debug, Clone)]
pub struct HeaderMatcher {
    /// Lower-cased header name (`:path`, `:authority` and the like included).
    pub name: String,
    /// The test.
    pub test: HeaderTest,
    /// Negates the result (but see [`HeaderMatcher::matches`] for missing headers).
    pub invert: bool,
    /// A missing header is matched as if it were present with an empty value.
    pub treat_missing_as_empty: bool,
}

impl HeaderMatcher {
    /// Whether the header's value matches. `value` is `None` when the header is
    /// absent; repeated headers are passed joined with `,`, as Envoy does.
    pub fn matches(&self, value: Option<&str>) -> bool {
        let value = match (value, self.treat_missing_as_empty) {
            (Some(v), _) => Some(v),
            (None, true) => Some(""),
            (None, false) => None,
        };
        match (&self.test, value) {
            (HeaderTest::Present(want), v) => (v.is_some() == *want) != self.invert,
            // Envoy: a value matcher never matches a missing header, even inverted.
            (_, None) => false,
            (_, Some(v)) => self.value_passes(v) != self.invert,
        }
    }

    /// Whether one present value passes the test, before `invert`.
    pub fn value_passes(&self, v: &str) -> bool {
        match &self.test {
            HeaderTest::Present(want) => *want,
            HeaderTest::Value(sm) => sm.matches(v),
            HeaderTest::Range(start, end) => {
                v.parse::<i64>().is_ok_and(|n| n >= *start && n < *end)
            }
        }
    }

    /// Envoy 1.40's route rule for a header that may be repeated: each value is
    /// tested on its own and the matcher passes when any value passes, then
    /// `invert` applies. `any` is whether any value passed [`Self::value_passes`],
    /// `None` when the header is absent.
    pub fn matches_any(&self, any: Option<bool>) -> bool {
        match any {
            None => self.matches(None),
            Some(any) => any != self.invert,
        }
    }
}

/// Compiles a `HeaderMatcher` (route match, RBAC, ext_authz allow lists).
pub fn header_matcher(
    hm: &route::HeaderMatcher,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<HeaderMatcher> {
    use route::header_matcher::HeaderMatchSpecifier as S;
    if hm.name.is_empty() {
        ctx.error(&path.field("name"), "must not be empty");
        return None;
    }
    let plain = |p: StringPattern| {
        HeaderTest::Value(StringMatcher {
            pattern: p,
            ignore_case: false,
        })
    };
    let test = match &hm.header_match_specifier {
        None => HeaderTest::Present(true),
        Some(S::PresentMatch(b)) => HeaderTest::Present(*b),
        Some(S::ExactMatch(s)) => plain(StringPattern::Exact(s.clone())),
        Some(S::PrefixMatch(s)) if !s.is_empty() => plain(StringPattern::Prefix(s.clone())),
        Some(S::SuffixMatch(s)) if !s.is_empty() => plain(StringPattern::Suffix(s.clone())),
        Some(S::ContainsMatch(s)) if !s.is_empty() => plain(StringPattern::Contains(s.clone())),
        Some(S::PrefixMatch(_)) => return empty(ctx, path, "prefix_match"),
        Some(S::SuffixMatch(_)) => return empty(ctx, path, "suffix_match"),
        Some(S::ContainsMatch(_)) => return empty(ctx, path, "contains_match"),
        Some(S::SafeRegexMatch(r)) => plain(StringPattern::Regex(regex(
            r,
            &path.field("safe_regex_match"),
            ctx,
        )?)),
        Some(S::RangeMatch(r)) => {
            if r.start >= r.end {
                ctx.error(&path.field("range_match"), "start must be below end");
                return None;
            }
            HeaderTest::Range(r.start, r.end)
        }
        Some(S::StringMatch(sm)) => {
            HeaderTest::Value(string_matcher(sm, &path.field("string_match"), ctx)?)
        }
    };
    Some(HeaderMatcher {
        name: hm.name.to_ascii_lowercase(),
        test,
        invert: hm.invert_match,
        treat_missing_as_empty: hm.treat_missing_header_as_empty,
    })
}

/// A compiled `CidrRange`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr(pub IpNet);

impl Cidr {
    /// Whether `ip` is inside the range (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.0.contains(&ip)
    }
}

/// Parses a `CidrRange` (`address_prefix` + `prefix_len`).
pub fn cidr(c: &core::CidrRange, path: &Path<'_>, ctx: &mut Ctx) -> Option<Cidr> {
    let Ok(ip) = c.address_prefix.parse::<IpAddr>() else {
        ctx.error(
            &path.field("address_prefix"),
            format!("\"{}\" is not an IP address", c.address_prefix),
        );
        return None;
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = c.prefix_len.as_ref().map_or(0, |l| l.value);
    if len > max {
        ctx.error(
            &path.field("prefix_len"),
            format!("{len} is longer than {max}"),
        );
        return None;
    }
    // Envoy masks the address to the prefix length rather than refusing host bits.
    IpNet::new(ip, len as u8).ok().map(|n| Cidr(n.trunc()))
}

/// A compiled `ValueMatcher` over JSON metadata values.
#[derive(Debug, Clone)]
pub enum ValueMatcher {
    /// The value is null (or absent from a list).
    Null,
    /// A number in a range or equal to a value.
    Double(DoubleTest),
    /// A string.
    String(StringMatcher),
    /// A boolean.
    Bool(bool),
    /// Present (any value).
    Present(bool),
    /// A list with at least one element matching.
    ListOneOf(Box<ValueMatcher>),
    /// Any of these.
    Or(Vec<ValueMatcher>),
}

/// A `DoubleMatcher`.
#[derive(Debug, Clone, Copy)]
pub enum DoubleTest {
    /// `[start, end)`.
    Range(f64, f64),
    /// Exactly equal.
    Exact(f64),
}

impl ValueMatcher {
    /// Whether `value` (absent = `None`) matches.
    pub fn matches(&self, value: Option<&serde_json::Value>) -> bool {
        use serde_json::Value as J;
        match self {
            ValueMatcher::Present(want) => value.is_some_and(|v| !v.is_null()) == *want,
            ValueMatcher::Null => value.is_none_or(J::is_null),
            ValueMatcher::Double(t) => value.and_then(J::as_f64).is_some_and(|n| match t {
                DoubleTest::Range(s, e) => n >= *s && n < *e,
                DoubleTest::Exact(x) => n == *x,
            }),
            ValueMatcher::String(sm) => value.and_then(J::as_str).is_some_and(|s| sm.matches(s)),
            ValueMatcher::Bool(b) => value.and_then(J::as_bool) == Some(*b),
            ValueMatcher::ListOneOf(inner) => value
                .and_then(J::as_array)
                .is_some_and(|items| items.iter().any(|i| inner.matches(Some(i)))),
            ValueMatcher::Or(ms) => ms.iter().any(|m| m.matches(value)),
        }
    }
}

/// Compiles a `ValueMatcher`.
pub fn value_matcher(vm: &m::ValueMatcher, path: &Path<'_>, ctx: &mut Ctx) -> Option<ValueMatcher> {
    use m::value_matcher::MatchPattern as P;
    Some(match &vm.match_pattern {
        Some(P::NullMatch(_)) => ValueMatcher::Null,
        Some(P::DoubleMatch(d)) => {
            use m::double_matcher::MatchPattern as D;
            match &d.match_pattern {
                Some(D::Range(r)) => ValueMatcher::Double(DoubleTest::Range(r.start, r.end)),
                Some(D::Exact(x)) => ValueMatcher::Double(DoubleTest::Exact(*x)),
                None => {
                    ctx.error(
                        &path.field("double_match"),
                        "one of range or exact is required",
                    );
                    return None;
                }
            }
        }
        Some(P::StringMatch(sm)) => {
            ValueMatcher::String(string_matcher(sm, &path.field("string_match"), ctx)?)
        }
        Some(P::BoolMatch(b)) => ValueMatcher::Bool(*b),
        Some(P::PresentMatch(b)) => ValueMatcher::Present(*b),
        Some(P::ListMatch(l)) => {
            let lp = path.field("list_match");
            let Some(m::list_matcher::MatchPattern::OneOf(inner)) = &l.match_pattern else {
                ctx.error(&lp, "one_of is required");
                return None;
            };
            ValueMatcher::ListOneOf(Box::new(value_matcher(inner, &lp.field("one_of"), ctx)?))
        }
        Some(P::OrMatch(o)) => {
            let op = path.field("or_match");
            let vp = op.field("value_matchers");
            if o.value_matchers.len() < 2 {
                ctx.error(&vp, "at least two matchers are required");
                return None;
            }
            let mut out = Vec::with_capacity(o.value_matchers.len());
            for (i, v) in o.value_matchers.iter().enumerate() {
                out.push(value_matcher(v, &vp.index(i), ctx)?);
            }
            ValueMatcher::Or(out)
        }
        None => {
            ctx.error(path, "a match pattern is required");
            return None;
        }
    })
}

/// A compiled `MetadataMatcher`: a value at `filter` / `path...` in dynamic or route metadata.
#[derive(Debug, Clone)]
pub struct MetadataMatcher {
    /// The metadata namespace (e.g. `envoy.filters.http.jwt_authn`).
    pub filter: String,
    /// Keys walked into the namespace's object.
    pub path: Vec<String>,
    /// The test on the value found.
    pub value: ValueMatcher,
    /// Negates the result.
    pub invert: bool,
}

impl MetadataMatcher {
    /// Whether the metadata matches.
    pub fn matches(&self, metadata: &crate::core::MetadataMap) -> bool {
        let mut current = metadata.get(&self.filter).and_then(|ns| {
            let (first, rest) = self.path.split_first()?;
            let mut v = ns.get(first)?;
            for key in rest {
                v = v.as_object()?.get(key)?;
            }
            Some(v)
        });
        if self.path.is_empty() {
            current = None;
        }
        self.value.matches(current) != self.invert
    }
}

/// Compiles a `MetadataMatcher`.
pub fn metadata_matcher(
    mm: &m::MetadataMatcher,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<MetadataMatcher> {
    if mm.filter.is_empty() {
        ctx.error(&path.field("filter"), "must not be empty");
    }
    if mm.path.is_empty() {
        ctx.error(&path.field("path"), "at least one path segment is required");
        return None;
    }
    let mut keys = Vec::with_capacity(mm.path.len());
    for (i, seg) in mm.path.iter().enumerate() {
        match &seg.segment {
            Some(m::metadata_matcher::path_segment::Segment::Key(k)) if !k.is_empty() => {
                keys.push(k.clone())
            }
            _ => ctx.error(
                &path.field("path").index(i).field("key"),
                "must not be empty",
            ),
        }
    }
    let Some(v) = mm.value.as_ref() else {
        ctx.error(&path.field("value"), "is required");
        return None;
    };
    let value = value_matcher(v, &path.field("value"), ctx)?;
    Some(MetadataMatcher {
        filter: mm.filter.clone(),
        path: keys,
        value,
        invert: mm.invert,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hm(name: &str, test: HeaderTest, invert: bool) -> HeaderMatcher {
        HeaderMatcher {
            name: name.into(),
            test,
            invert,
            treat_missing_as_empty: false,
        }
    }

    #[test]
    fn inverted_value_matcher_does_not_match_missing_header() {
        let m = hm("x", HeaderTest::Value(StringMatcher::exact("a")), true);
        assert!(!m.matches(None));
        assert!(m.matches(Some("b")));
        assert!(!m.matches(Some("a")));
        let absent = hm("x", HeaderTest::Present(false), false);
        assert!(absent.matches(None));
        assert!(!absent.matches(Some("")));
    }

    #[test]
    fn string_matcher_ignore_case_and_regex() {
        let m = StringMatcher {
            pattern: StringPattern::Prefix("/api".into()),
            ignore_case: true,
        };
        assert!(m.matches("/API/v1"));
        assert!(!m.matches("/ap"));
        let re = StringMatcher {
            pattern: StringPattern::Regex(Regex::new("/a+").unwrap()),
            ignore_case: false,
        };
        assert!(re.matches("/aaa"));
        assert!(!re.matches("/aaab"), "regex must match the whole string");
    }

    #[test]
    fn cidr_contains_mapped_v4() {
        let mut ctx = Ctx::new();
        let c = cidr(
            &core::CidrRange {
                address_prefix: "10.1.2.3".into(),
                prefix_len: Some(envoy_types::pb::google::protobuf::UInt32Value { value: 8 }),
            },
            &Path::ROOT,
            &mut ctx,
        )
        .unwrap();
        assert!(c.contains("10.200.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.0.0.1".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
    }
}
