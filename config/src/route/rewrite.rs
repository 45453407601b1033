//! `RegexMatchAndSubstitute`: a regex and an RE2-style substitution (`\1` groups),
//! compiled once into the `regex` crate's replacement syntax.

use crate::ctx::Ctx;
use crate::matcher;
use crate::path::Path;
use envoy_types::pb::envoy::r#type::matcher::v3 as m;

/// A compiled regex rewrite: every match of `pattern` is replaced by `substitution`.
#[derive(Debug, Clone)]
pub struct RegexRewrite {
    /// The pattern (matched anywhere, every occurrence replaced).
    pub pattern: regex::Regex,
    /// The substitution as written (`\1` refers to group 1).
    pub substitution: String,
    /// The substitution in the `regex` crate's syntax (`${1}`, `$$`).
    replacement: String,
}

/// Two rewrites are the same when their pattern and substitution are.
impl PartialEq for RegexRewrite {
    fn eq(&self, other: &Self) -> bool {
        self.pattern.as_str() == other.pattern.as_str() && self.substitution == other.substitution
    }
}

impl Eq for RegexRewrite {}

impl RegexRewrite {
    /// Replaces every match in `input` (RE2 `GlobalReplace`, as Envoy does).
    pub fn apply<'a>(&self, input: &'a str) -> std::borrow::Cow<'a, str> {
        self.pattern.replace_all(input, self.replacement.as_str())
    }
}

/// Converts an RE2 rewrite string (`\0`..`\9`, `\\`) to `regex` crate syntax,
/// checking group numbers against the pattern.
fn replacement(sub: &str, groups: usize) -> Result<String, String> {
    let mut out = String::with_capacity(sub.len() + 8);
    let mut chars = sub.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\\') => out.push('\\'),
                Some(d @ '0'..='9') => {
                    let n = d as usize - '0' as usize;
                    if n >= groups {
                        return Err(format!(
                            "refers to group \\{n}, but the pattern has {} group(s)",
                            groups.saturating_sub(1)
                        ));
                    }
                    out.push_str(&format!("${{{n}}}"));
                }
                Some(other) => {
                    return Err(format!(
                        "invalid escape \\{other} (use \\0..\\9 for groups, \\\\ for a backslash)"
                    ));
                }
                None => return Err("ends with a lone backslash".into()),
            },
            '$' => out.push_str("$$"),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Compiles a `RegexMatchAndSubstitute`.
pub(crate) fn regex_rewrite(
    r: &m::RegexMatchAndSubstitute,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<RegexRewrite> {
    let Some(p) = r.pattern.as_ref() else {
        ctx.error(&path.field("pattern"), "is required");
        return None;
    };
    let pattern = match matcher::Regex::unanchored(&p.regex) {
        Ok(re) if matcher::check_program_size(p, &path.field("pattern"), ctx) => re,
        Ok(_) => return None,
        Err(e) => {
            ctx.error(&path.field("pattern.regex"), e);
            return None;
        }
    };
    if !crate::route::headers::valid_name_chars(&r.substitution) {
        ctx.error(
            &path.field("substitution"),
            "must not contain NUL, CR or LF",
        );
        return None;
    }
    match replacement(&r.substitution, pattern.captures_len()) {
        Ok(replacement) => Some(RegexRewrite {
            pattern,
            substitution: r.substitution.clone(),
            replacement,
        }),
        Err(e) => {
            ctx.error(&path.field("substitution"), e);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rr(pattern: &str, sub: &str) -> Result<RegexRewrite, Vec<String>> {
        let mut ctx = Ctx::new();
        let r = regex_rewrite(
            &m::RegexMatchAndSubstitute {
                pattern: Some(m::RegexMatcher {
                    regex: pattern.into(),
                    ..Default::default()
                }),
                substitution: sub.into(),
            },
            &Path::ROOT,
            &mut ctx,
        );
        match ctx.finish(()) {
            Ok(()) => Ok(r.unwrap()),
            Err(e) => Err(e.errors.iter().map(ToString::to_string).collect()),
        }
    }

    #[test]
    fn groups_and_global_replace() {
        let r = rr("^/service/([^/]+)(/.*)$", "\\2/instance/\\1").unwrap();
        assert_eq!(r.apply("/service/foo/v1/api"), "/v1/api/instance/foo");
        let r = rr("o", "0$").unwrap();
        assert_eq!(r.apply("/foo/bar/boo"), "/f0$0$/bar/b0$0$");
        let r = rr("a", "\\\\").unwrap();
        assert_eq!(r.apply("xa"), "x\\");
    }

    #[test]
    fn bad_substitutions() {
        assert_eq!(
            rr("/(a)", "\\2").unwrap_err(),
            vec!["substitution: refers to group \\2, but the pattern has 1 group(s)"]
        );
        assert!(rr("/(a)", "\\q").unwrap_err()[0].starts_with("substitution: invalid escape \\q"));
        assert_eq!(rr("((", "x").unwrap_err().len(), 1);
    }
}
